"""Every GPU-only library the product calls, checked against the release requirements/gpu.txt locks.

A stand-in that repeats the product's own call proves nothing about the library. So each product
call into unsloth, deepspeed, accelerate's DeepSpeed/FSDP launch, bitsandbytes (through
transformers) and TRL's vLLM options is read from the product's source with ast, and checked
against the locked release's own source (tests/locked_source.py: the installed files where the CPU
venv has the GPU lock's version, else the lock's file downloaded by hash by `make gpu-sources`).
Nothing needing CUDA is imported. Where the library runs on this CPU (bitsandbytes 4-bit and 8-bit,
accelerate's launch and plugins, deepspeed with gloo where installed) it runs for real.
flash-attn is not checked: the product never asks for it (no attn_implementation anywhere in src/
or conf/), and it is in neither lock.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from tests.conftest import ROOT, compose_config
from tests.locked_source import Found, Source, archive, installed, locked_release, parameters

SRC = ROOT / "src" / "rlvr"


# -- the product's side: its calls, read from its source ----------------------------------------------
@dataclass
class Call:
    callee: str  # as the library names it: unsloth.FastLanguageModel.from_pretrained
    positional: int
    keywords: list[str]
    spread: list[str]  # methods whose returned dict is passed with ** (self.from_pretrained_kwargs())
    where: str


def _chain(expr: ast.expr) -> str | None:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        head = _chain(expr.value)
        return f"{head}.{expr.attr}" if head else None
    return None


def product_calls(path: Path, library: str, text: str | None = None) -> list[Call]:
    """Every call ``path`` makes into ``library`` (through ``import library`` or ``from library...``)."""
    tree = ast.parse(text if text is not None else path.read_text())
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == library:
                    bound[alias.asname or library] = alias.name if alias.asname else library
        elif (
            isinstance(node, ast.ImportFrom)
            and not node.level
            and (node.module or "").split(".")[0] == library
        ):
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and (chain := _chain(node.func)) and chain.split(".")[0] in bound:
            head, _, rest = chain.partition(".")
            spread = [
                k.value.func.attr
                for k in node.keywords
                if k.arg is None and isinstance(k.value, ast.Call) and isinstance(k.value.func, ast.Attribute)
            ]
            calls.append(
                Call(
                    ".".join(filter(None, [bound[head], rest])),
                    len(node.args),
                    [k.arg for k in node.keywords if k.arg],
                    spread,
                    f"{path.relative_to(ROOT)}:{node.lineno}",
                )
            )
    return calls


def unaccepted(source: Source, found: Found, positional: int, keywords: list[str]) -> list[str]:
    """What of a call the locked function does not take; keywords it leaves to ``**kwargs`` are
    followed into the calls that pass that ``**kwargs`` on (unsloth's wrappers do)."""
    if isinstance(found.node, ast.ClassDef):
        found = source.member(found, "__init__")
    names, varargs, varkw = parameters(found)
    where = f"{source.label}: {found.module}.{found.node.name}"
    problems = []
    if positional > len(names) and not varargs:
        problems.append(f"{where} takes {len(names)} positional arguments, the product passes {positional}")
    missing = [k for k in keywords if k not in names]
    if not missing:
        return problems
    if not varkw:
        return [*problems, f"{where} has no parameter {missing} (its parameters: {names})"]
    kwarg = found.node.args.kwarg.arg
    onward = [
        call
        for call in ast.walk(found.node)
        if isinstance(call, ast.Call)
        and any(
            k.arg is None and isinstance(k.value, ast.Name) and k.value.id == kwarg for k in call.keywords
        )
    ]
    if not onward:
        return [*problems, f"{where} leaves {missing} to **{kwarg} and passes it nowhere"]
    for call in onward:
        try:
            callee = source.resolve_expr(found.module, call.func)
        except LookupError:  # a builtin (dict(..., **kwargs)) or another package: no parameter names it
            problems.append(
                f"{where} does not name {missing}: its **{kwarg} goes on to {ast.unparse(call.func)}()"
            )
            continue
        problems += unaccepted(source, callee, 0, missing)
    return problems


# -- unsloth (+ unsloth_zoo): the lock's wheels ---------------------------------------------------------
UNSLOTH_PY = SRC / "model" / "unsloth.py"


def unsloth() -> Source:
    # unsloth/__init__.py defines an Apple-MLX FastLanguageModel under `if _IS_MLX:`; GPUs take the else.
    return archive("unsloth", frozenset({"_IS_MLX"}))


def _component(*overrides: str):
    from hydra.utils import instantiate

    return instantiate(compose_config(["model=unsloth_qwen2_5_1_5b", *overrides]).model, _convert_="all")


def unsloth_problems(calls: list[Call], component) -> list[str]:
    source, problems = unsloth(), []
    for call in calls:
        try:
            found = source.resolve(call.callee)
        except LookupError as exc:
            problems.append(f"{call.where}: {call.callee}: {exc}")
            continue
        keywords = call.keywords + [k for method in call.spread for k in getattr(component, method)()]
        problems += [f"{call.where}: {p}" for p in unaccepted(source, found, call.positional, keywords)]
    return problems


def test_every_unsloth_call_and_keyword_of_the_component_is_in_the_locked_unsloth():
    """The component's two calls, with every keyword it builds for the committed config and for
    overrides that add keywords, exist in the GPU lock's unsloth wheel: from_pretrained names them
    all; get_peft_model forwards *args/**kwargs to FastLlamaModel.get_peft_model, which names them."""
    calls = product_calls(UNSLOTH_PY, "unsloth")
    assert {c.callee for c in calls} >= {
        "unsloth.FastLanguageModel.from_pretrained",
        "unsloth.FastLanguageModel.get_peft_model",
    }, calls
    assert all(c.spread for c in calls), calls  # the keywords come from the component's own methods
    for component in (
        _component("seed=7"),
        _component("+model.lora.use_rslora=true", "model.dtype=bfloat16"),
    ):
        assert unsloth_problems(calls, component) == []


def test_a_keyword_the_locked_unsloth_does_not_take_is_caught():
    """The check itself: a renamed keyword in the product's call, or in the dict it spreads, is red."""
    renamed = UNSLOTH_PY.read_text().replace(
        "get_peft_model(model, **self.peft_kwargs())", "get_peft_model(model, rank=16, **self.peft_kwargs())"
    )
    problems = unsloth_problems(product_calls(UNSLOTH_PY, "unsloth", renamed), _component())
    assert any("unsloth.models.llama.get_peft_model does not name ['rank']" in p for p in problems), problems
    component = _component()
    component.from_pretrained_kwargs = lambda: {"model_name": "x", "load_in_4bits": True}
    problems = unsloth_problems(product_calls(UNSLOTH_PY, "unsloth"), component)
    assert problems and all("from_pretrained" in p and "['load_in_4bits']" in p for p in problems), problems


def test_unsloth_hands_lora_keys_it_does_not_name_on_to_peft():
    """model.lora may hold any peft.LoraConfig field (the component validates against LoraConfig):
    the locked get_peft_model builds ``arguments = dict(..., **kwargs)`` and calls LoraConfig(**arguments)."""
    source = unsloth()
    found = source.resolve("unsloth.models.llama.FastLlamaModel.get_peft_model")
    kwarg = found.node.args.kwarg.arg
    spread = {
        node.targets[0].id
        for node in ast.walk(found.node)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and _chain(node.value.func) == "dict"
        and any(
            k.arg is None and isinstance(k.value, ast.Name) and k.value.id == kwarg
            for k in node.value.keywords
        )
    }
    into_lora = [
        node
        for node in ast.walk(found.node)
        if isinstance(node, ast.Call)
        and _chain(node.func) == "LoraConfig"
        and any(
            k.arg is None and isinstance(k.value, ast.Name) and k.value.id in spread for k in node.keywords
        )
    ]
    assert spread and into_lora, "unsloth's get_peft_model no longer passes extra keywords to LoraConfig"


def test_unsloths_imports_from_unsloth_zoo_exist_in_the_locked_unsloth_zoo():
    """The two wheels are locked together: every name unsloth's loader imports from unsloth_zoo (on
    the path from_pretrained / get_peft_model take) is defined in the locked unsloth_zoo. Imports
    inside a ``try`` are left out: unsloth guards those for older unsloth_zoo releases (three of
    them name what unsloth_zoo 2026.10.7 does not have, and fall back)."""
    source, zoo = unsloth(), archive("unsloth-zoo")
    missing, checked = [], 0
    for module in ("unsloth.models.loader", "unsloth.models.llama", "unsloth.models._utils"):
        tree = source.module(module)
        guarded = {
            id(n) for t in ast.walk(tree) if isinstance(t, ast.Try) for s in t.body for n in ast.walk(s)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and not node.level
                and (node.module or "").startswith("unsloth_zoo")
                and id(node) not in guarded
            ):
                for alias in node.names:
                    if alias.name == "*":
                        continue
                    checked += 1
                    try:
                        if not zoo.has_module(f"{node.module}.{alias.name}"):
                            zoo.lookup(node.module, alias.name)
                    except LookupError as exc:
                        missing.append(f"{module} line {node.lineno}: {exc}")
    assert checked > 10 and missing == []


# -- deepspeed: the lock's sdist, and a real run with gloo where it is installed -------------------------
DISTRIBUTED_PY = SRC / "runtime" / "distributed.py"


def deepspeed_problems(text: str | None = None) -> list[str]:
    source, problems = locked_release("deepspeed"), []
    calls = product_calls(DISTRIBUTED_PY, "deepspeed", text)
    assert calls, "distributed.py calls nothing of deepspeed any more: update this test"
    for call in calls:
        try:
            problems += unaccepted(source, source.resolve(call.callee), call.positional, call.keywords)
        except LookupError as exc:
            problems.append(f"{call.where}: {exc}")
    # What the product tells a ZeRO-3-partitioned parameter by: hasattr(p, "<name>") in distributed.py.
    tree = ast.parse(text if text is not None else DISTRIBUTED_PY.read_text())
    marks = {
        node.args[1].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and _chain(node.func) == "hasattr"
        and isinstance(node.args[1], ast.Constant)
    }
    assert marks
    partition = source.module("deepspeed.runtime.zero.partition_parameters")
    stored = {
        node.attr
        for node in ast.walk(partition)
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
    }
    problems += [f"deepspeed's zero.Init never sets .{m} on a parameter" for m in sorted(marks - stored)]
    return problems


def test_every_deepspeed_call_of_the_product_is_in_the_locked_deepspeed():
    """deepspeed.zero.GatheredParameters(params, modifier_rank=None) and the ``ds_id`` mark that
    distributed.py tells partitioned parameters by, in the GPU lock's deepspeed sdist."""
    assert deepspeed_problems() == []
    text = DISTRIBUTED_PY.read_text()
    [problem] = deepspeed_problems(text.replace("modifier_rank=None", "modifier_ranks=None"))
    assert "has no parameter ['modifier_ranks']" in problem
    [problem] = deepspeed_problems(text.replace('hasattr(p, "ds_id")', 'hasattr(p, "ds_idx")'))
    assert ".ds_idx" in problem


# -- accelerate: our launch files through accelerate's own launcher and plugins (runs on CPU) ------------
ACCELERATE_FILES = sorted((ROOT / "infrastructure" / "accelerate").glob("*.yaml"))


def launch_env(config_file: Path) -> dict[str, str]:
    """The environment `accelerate launch --config_file <file>` gives each process (accelerate's code)."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_deepspeed_cmd_env, prepare_multi_gpu_env

    args = launch_command_parser().parse_args(["--config_file", str(config_file), "run_pipeline.py"])
    args, defaults, _ = _validate_launch_command(args)
    if args.use_deepspeed:
        args.deepspeed_fields_from_accelerate_config = ",".join(defaults.deepspeed_config)
        return prepare_deepspeed_cmd_env(args)[1]
    return prepare_multi_gpu_env(args)


@pytest.mark.parametrize("path", ACCELERATE_FILES, ids=lambda p: p.stem)
def test_accelerate_launch_reads_every_key_of_our_files_and_sets_the_flags_the_product_reads(
    path, monkeypatch
):
    """Every deepspeed_config / fsdp_config key is an option of the locked accelerate's launcher (it
    copies unknown keys onto its args silently), and the launch sets the flag that
    rlvr.runtime.distributed._LAUNCH_FLAGS reads for the file's strategy; the plugins built from that
    environment are what the product's gathers rely on (ZeRO-3's 16-bit gather on save; FSDP's full
    state dict on rank 0)."""
    from accelerate.commands.launch import launch_command_parser

    from rlvr.runtime.distributed import _LAUNCH_FLAGS

    installed("accelerate")
    settings = yaml.safe_load(path.read_text())
    options = vars(launch_command_parser().parse_args(["run_pipeline.py"]))
    for section, prefix in (("deepspeed_config", ""), ("fsdp_config", "fsdp_")):
        for key in settings.get(section, {}):
            option = key if key.startswith(prefix) else prefix + key
            assert option in options, f"{path.name}: {section}.{key} is no option of accelerate launch"
    env = launch_env(path)
    strategy = settings["distributed_type"]
    assert {f for f in _LAUNCH_FLAGS.values() if env.get(f) == "true"} == (
        {_LAUNCH_FLAGS[strategy]} if strategy in _LAUNCH_FLAGS else set()
    )
    for name, value in env.items():
        if name.startswith(("ACCELERATE_", "FSDP_")):
            monkeypatch.setenv(name, value)
    if strategy == "DEEPSPEED":
        from accelerate.utils import DeepSpeedPlugin

        zero = DeepSpeedPlugin().deepspeed_config["zero_optimization"]
        assert zero["stage"] == settings["deepspeed_config"]["zero_stage"]
        if (
            zero["stage"] == 3
        ):  # rlvr.runtime.distributed validates the flag; accelerate's get_state_dict needs this
            assert zero["stage3_gather_16bit_weights_on_model_save"] is True
    if strategy == "FSDP":
        from accelerate.utils import FullyShardedDataParallelPlugin

        plugin = FullyShardedDataParallelPlugin()
        assert plugin.fsdp_version == 2 and plugin.state_dict_type.name == "FULL_STATE_DICT"
        assert plugin.state_dict_config.rank0_only and plugin.state_dict_config.offload_to_cpu


def test_the_trainer_attributes_distributed_py_walks_exist_in_the_locked_libraries():
    """``trainer.accelerator.get_state_dict(trainer.model_wrapped)`` and ``trainer.accelerator.device``:
    transformers' Trainer sets each first attribute, accelerate's Accelerator has each second one."""
    chains = {
        tuple(chain.split(".")[1:])
        for node in ast.walk(ast.parse(DISTRIBUTED_PY.read_text()))
        if isinstance(node, ast.Attribute) and (chain := _chain(node)) and chain.startswith("trainer.")
    }
    assert ("accelerator", "get_state_dict") in chains and ("model_wrapped",) in chains
    transformers, accelerate = installed("transformers"), installed("accelerate")
    trainer = transformers.resolve("transformers.trainer.Trainer")
    stored = {
        node.attr
        for node in ast.walk(trainer.node)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and _chain(node.value) == "self"
    }
    accelerator = accelerate.resolve("accelerate.accelerator.Accelerator")
    for chain in chains:
        assert chain[0] in stored, f"transformers' Trainer never sets self.{chain[0]}"
        if chain[0] == "accelerator" and len(chain) > 1:
            accelerate.member(accelerator, chain[1])  # raises LookupError naming what is missing
    names, _, _ = parameters(accelerate.member(accelerator, "get_state_dict"))
    assert names[0] == "model"


# -- bitsandbytes: the product's quantised loading, run for real on the CPU ------------------------------
LOADER_PY = SRC / "model" / "loader.py"


def test_the_bitsandbytes_config_keywords_are_parameters_of_the_locked_transformers():
    """BitsAndBytesConfig takes **kwargs and only logs unused ones, so a renamed keyword would pass
    silently at run time: each keyword loader.py passes must be one of its named parameters."""
    source = installed("transformers")
    [call] = [c for c in product_calls(LOADER_PY, "transformers") if c.callee.endswith("BitsAndBytesConfig")]
    assert {"load_in_4bit", "bnb_4bit_quant_type"} <= set(call.keywords)
    found = source.resolve("transformers.utils.quantization_config.BitsAndBytesConfig")
    names, _, _ = parameters(source.member(found, "__init__"))
    assert [k for k in call.keywords if k not in names] == []


class _BitsandbytesOps:
    """Records the bitsandbytes operators (torch.ops.bitsandbytes.*) dispatched inside it."""

    def __enter__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        ops = self.ops = set()

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if func.namespace == "bitsandbytes":
                    ops.add(func._schema.name.split("::")[1])
                return func(*args, **(kwargs or {}))

        self._mode = Mode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)


def kernels(source: Source, backend: str) -> set[str]:
    """The operators ``bitsandbytes/backends/<backend>/ops.py`` registers a kernel for on its device."""
    registered = set()
    for node in ast.walk(source.module(f"bitsandbytes.backends.{backend}.ops")):
        if isinstance(node, ast.Call) and _chain(node.func) == "register_kernel" and len(node.args) == 2:
            op, device = (a.value if isinstance(a, ast.Constant) else None for a in node.args)
            if device in (backend, "default") and isinstance(op, str):
                registered.add(op.split("::")[1].split(".")[0])
    return registered


@pytest.mark.parametrize(
    ("quantization", "layer", "recorded"),
    # Which forward takes the GPU's route on a CPU: 4-bit in training (in eval mode, on a CPU with
    # AVX512-BF16, bitsandbytes 0.50 repacks the weight for a CPU-only kernel and un-nests its
    # statistics); 8-bit in eval mode (in training a CPU/XPU takes MatMul8bitFp, dequantise + torch
    # matmul, where a GPU takes MatMul8bitLt's int8 kernels: bitsandbytes/autograd/_functions.py).
    [("4bit", "Linear4bit", "train"), ("8bit", "Linear8bitLt", "eval")],
)
def test_qlora_runs_on_the_cpu_through_operators_that_have_cuda_kernels(quantization, layer, recorded):
    """The product's quantised LoRA path (HFModel.load: BitsAndBytesConfig, prepare_model_for_kbit_training,
    get_peft_model) loads and trains on the CPU with the locked bitsandbytes, and every bitsandbytes
    operator of the forward that takes the GPU's route here has a CUDA kernel (or a
    device-independent default) in the same release."""
    import torch
    from tests.conftest import tiny_model

    bnb = installed("bitsandbytes")
    model = tiny_model(quantization=quantization, lora={"r": 4, "target_modules": ["q_proj", "v_proj"]})
    loaded = model.load()
    base = loaded.model.base_model.model.model.layers[0].self_attn.q_proj.base_layer
    assert type(base).__name__ == layer
    if quantization == "4bit":
        assert base.weight.quant_state.nested  # bnb_4bit_use_double_quant reached bitsandbytes
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    loaded.model.train()
    with _BitsandbytesOps() as step:  # a training step, for real
        loaded.model(input_ids=ids, labels=ids).loss.backward()
    grads = [p.grad for n, p in loaded.model.named_parameters() if "lora_" in n]
    assert grads and all(g is not None for g in grads) and any(g.abs().max() > 0 for g in grads)
    seen = step
    if recorded == "eval":
        loaded.model.eval()
        with torch.no_grad(), _BitsandbytesOps() as seen:
            loaded.model(input_ids=ids)
    assert seen.ops, "no bitsandbytes operator ran"
    cuda = kernels(bnb, "cuda") | kernels(bnb, "default")
    assert sorted(seen.ops - cuda) == [], f"ran on CPU without a CUDA kernel in {bnb.label}"


def test_the_cuda_kernel_table_is_read_from_the_source():
    """The check above is not vacuous: the registrations are found, and a CPU-only one is not CUDA."""
    bnb = installed("bitsandbytes")
    cuda = kernels(bnb, "cuda")
    assert {"quantize_4bit", "dequantize_4bit", "gemv_4bit", "int8_vectorwise_quant"} <= cuda
    assert "int8_mixed_scaled_mm" not in cuda and "int8_mixed_scaled_mm" in kernels(bnb, "default")


# -- TRL's vLLM options as conf/rollout/ sets them --------------------------------------------------------
ROLLOUTS = sorted((ROOT / "conf" / "rollout").glob("*.yaml"))


def _trl_reads(source: Source) -> set[str]:
    """Attributes that TRL's GRPO trainer and vLLM generation read."""
    read = set()
    for module in ("trl.trainer.grpo_trainer", "trl.generation.vllm_generation"):
        if source.has_module(module):
            read |= {
                n.attr
                for n in ast.walk(source.module(module))
                if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load)
            }
    return read


def _mode_values(source: Source) -> set[str]:
    """The vllm_mode values TRL's code compares against."""
    values = set()
    for module in ("trl.trainer.grpo_trainer", "trl.generation.vllm_generation"):
        if not source.has_module(module):
            continue
        for node in ast.walk(source.module(module)):
            # GRPOTrainer: self.vllm_mode == ...; VLLMGeneration(mode=args.vllm_mode): self.mode == ...
            if isinstance(node, ast.Compare) and (_chain(node.left) or "").split(".")[-1] in (
                "vllm_mode",
                "mode",
            ):
                values |= {c.value for c in node.comparators if isinstance(c, ast.Constant)}
                values |= {
                    e.value
                    for c in node.comparators
                    if isinstance(c, ast.Tuple | ast.List | ast.Set)
                    for e in c.elts
                    if isinstance(e, ast.Constant)
                }
    return values


@pytest.mark.parametrize("path", ROLLOUTS, ids=lambda p: p.stem)
def test_rollout_options_are_fields_of_the_locked_grpo_config_that_trl_reads(path, tmp_path):
    """Each key of conf/rollout/<option>.yaml is a GRPOConfig field of the locked TRL that its GRPO
    trainer or vLLM generation reads; vllm_mode is one of the values TRL's code compares against;
    the memory share is in vLLM's (0, 1]; TRL's own GRPOConfig accepts the whole set."""
    from trl import GRPOConfig

    source = locked_release("trl")
    fields = yaml.safe_load(path.read_text())
    config = source.resolve("trl.trainer.grpo_config.GRPOConfig")
    declared = {n.target.id for n in config.node.body if isinstance(n, ast.AnnAssign)}
    assert sorted(set(fields) - declared) == [], f"not GRPOConfig fields of {source.label}"
    assert sorted(set(fields) - _trl_reads(source)) == [], f"fields {source.label}'s GRPO code never reads"
    if "vllm_mode" in fields:
        assert fields["vllm_mode"] in _mode_values(source)
    if "vllm_gpu_memory_utilization" in fields:
        assert 0 < fields["vllm_gpu_memory_utilization"] <= 1
    if "vllm_tensor_parallel_size" in fields:
        assert fields["vllm_tensor_parallel_size"] >= 1
    GRPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, **fields)


def test_the_vllm_mode_the_product_assumes_by_default_is_trls_default():
    """loop.py reads ``grpo.get("vllm_mode", <default>)`` for a rollout that names no mode: that
    default must be the locked GRPOConfig's."""
    source = locked_release("trl")
    config = source.resolve("trl.trainer.grpo_config.GRPOConfig")
    [field] = [n for n in config.node.body if isinstance(n, ast.AnnAssign) and n.target.id == "vllm_mode"]
    default = next(k.value.value for k in field.value.keywords if k.arg == "default")
    assumed = {
        node.args[1].value
        for node in ast.walk(ast.parse((SRC / "training_loop" / "loop.py").read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and len(node.args) == 2
        and node.args[0].value == "vllm_mode"
    }
    assert assumed == {default}
    assert {"server", "colocate"} <= _mode_values(source)
