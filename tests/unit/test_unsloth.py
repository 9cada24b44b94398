"""The unsloth model component (rlvr.model.UnslothModel): config -> unsloth's two calls, and its refusals.

unsloth needs a CUDA GPU, so the translation is tested up to the call with a stand-in ``unsloth``
module put into ``sys.modules`` that records the keywords it is given. Whether the locked unsloth
takes those keywords is not the stand-in's business: tests/unit/test_gpu_libraries.py reads the GPU
lock's unsloth wheel and checks every call and keyword the component builds against its source.
The refusal without CUDA runs for real on this machine.
"""

from __future__ import annotations

import importlib.machinery
import json
import shlex
import sys
import types

import pytest
from hydra.utils import instantiate
from tests.conftest import SIGNAL, compose_config

from rlvr.config.gate import check
from rlvr.config.validation import check_targets
from rlvr.issues import ConfigValidationError
from rlvr.model import UnslothModel
from rlvr.pipeline.wiring import runtime_args

QWEN = "Qwen/Qwen2.5-1.5B-Instruct"


class _Tokenizer:
    pad_token = None
    eos_token = "<|im_end|>"


class StandIn:
    """What the component asked unsloth to do; returns markers instead of models."""

    def __init__(self):
        self.calls: list[tuple[str, dict]] = []
        stand_in = self

        class FastLanguageModel:
            @staticmethod
            def from_pretrained(**kwargs):
                stand_in.calls.append(("from_pretrained", kwargs))
                return "base-model", _Tokenizer()

            @staticmethod
            def get_peft_model(model, **kwargs):
                stand_in.calls.append(("get_peft_model", {"model": model, **kwargs}))
                return "peft-model"

        self.module = types.ModuleType("unsloth")
        self.module.__spec__ = importlib.machinery.ModuleSpec("unsloth", None)  # find_spec() sees it
        self.module.FastLanguageModel = FastLanguageModel

    def call(self, name: str) -> dict:
        [kwargs] = [k for n, k in self.calls if n == name]
        return kwargs


@pytest.fixture
def unsloth_on_a_gpu(monkeypatch):
    """A machine with CUDA and unsloth installed, as far as the component can tell."""
    from rlvr.model import unsloth as component

    stand_in = StandIn()
    monkeypatch.setitem(sys.modules, "unsloth", stand_in.module)
    monkeypatch.setattr(component, "_cuda_available", lambda: True)
    return stand_in


def _component(*overrides: str) -> UnslothModel:
    cfg = compose_config(["model=unsloth_qwen2_5_1_5b", *overrides])
    assert check_targets(cfg, runtime_args(cfg)) == []
    return instantiate(cfg.model, _convert_="all")


def test_committed_config_becomes_unsloths_two_calls(unsloth_on_a_gpu):
    model = _component("seed=7")
    assert model.validate() == []
    loaded = model.load()
    pre = unsloth_on_a_gpu.call("from_pretrained")
    assert pre["model_name"] == QWEN
    assert pre["max_seq_length"] == 2048
    assert pre["load_in_4bit"] is True and pre["load_in_8bit"] is False
    assert pre["dtype"] is None  # unsloth picks bf16 / fp16 for the GPU
    assert pre["full_finetuning"] is False and pre["trust_remote_code"] is False
    assert pre["use_gradient_checkpointing"] == "unsloth" and pre["random_state"] == 7
    peft = unsloth_on_a_gpu.call("get_peft_model")
    assert peft["model"] == "base-model"
    assert (peft["r"], peft["lora_alpha"], peft["lora_dropout"], peft["bias"]) == (16, 16, 0.0, "none")
    assert peft["target_modules"] == [
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    ]
    assert peft["use_gradient_checkpointing"] == "unsloth" and peft["random_state"] == 7
    assert peft["max_seq_length"] == 2048
    assert loaded.model == "peft-model" and loaded.quantization == "4bit" and loaded.name == QWEN
    assert loaded.tokenizer.pad_token == "<|im_end|>"


def test_overrides_reach_the_calls(unsloth_on_a_gpu):
    import torch

    model = _component(
        "model.dtype=bfloat16",
        "model.max_seq_length=4096",
        "model.use_gradient_checkpointing=true",
        "model.lora.r=64",
        "+model.lora.use_rslora=true",
    )
    assert model.validate() == []
    model.load()
    pre, peft = unsloth_on_a_gpu.call("from_pretrained"), unsloth_on_a_gpu.call("get_peft_model")
    assert pre["dtype"] is torch.bfloat16 and pre["max_seq_length"] == 4096
    assert pre["use_gradient_checkpointing"] is True and peft["use_gradient_checkpointing"] is True
    assert peft["r"] == 64 and peft["use_rslora"] is True


def test_no_lora_is_a_full_fine_tune_in_16_bit(unsloth_on_a_gpu):
    model = _component("model.lora=null", "model.load_in_4bit=false")
    assert model.validate() == []
    model.load()
    assert unsloth_on_a_gpu.call("from_pretrained")["full_finetuning"] is True
    assert [name for name, _ in unsloth_on_a_gpu.calls] == ["from_pretrained"]


def test_an_adapter_directory_is_loaded_by_unsloth_not_wrapped_again(unsloth_on_a_gpu, tmp_path):
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": QWEN}))
    (tmp_path / "adapter_model.safetensors").write_bytes(b"")
    model = _component(f"model.name_or_path={tmp_path}")
    assert model.validate() == []
    model.load()
    pre = unsloth_on_a_gpu.call("from_pretrained")
    assert pre["model_name"] == str(tmp_path) and pre["full_finetuning"] is False
    assert [name for name, _ in unsloth_on_a_gpu.calls] == ["from_pretrained"]


@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        (["model.load_in_8bit=true"], "model.load_in_8bit", "load_in_4bit is also true"),
        (["model.lora=null"], "model.lora", "cannot train a 4bit base"),
        (["+model.lora.random_state=1"], "model.lora", "set by the component"),
        (["+model.lora.rank=8"], "model.lora", "not LoRA arguments"),
    ],
)
def test_bad_values_are_refused_with_key_and_fix(unsloth_on_a_gpu, overrides, key, words):
    issues = _component(*overrides).validate()
    assert [i.key for i in issues] == [key], issues
    assert words in issues[0].problem and issues[0].fix


@pytest.mark.parametrize(
    ("override", "words", "fix"),
    [
        (
            "model.use_gradient_checkpointing=offload",
            "expects Literal['unsloth'] | bool",
            "a value of that type",
        ),
        (
            "model.dtype=float64",
            "must be 'bfloat16' or 'float16'",
            "set model.dtype to 'bfloat16' or 'float16'",
        ),
        ("model.max_seq_length=0", "must be > 0", "the prompt budget + max_completion_length"),
    ],
)
def test_values_outside_the_signature_are_refused_with_key_and_fix(override, words, fix):
    """Rules UnslothModel's signature declares, bound by the gate before anything is built."""
    cfg = compose_config(["model=unsloth_qwen2_5_1_5b", override])
    issues = check_targets(cfg, runtime_args(cfg))
    assert [i.key for i in issues] == [override.partition("=")[0]], issues
    assert words in issues[0].problem and fix in issues[0].fix, issues


def _no_cuda():
    import torch

    if torch.cuda.is_available():
        pytest.skip("machine has a GPU")


def test_without_cuda_the_config_is_refused_before_anything_loads(tmp_path, monkeypatch):
    _no_cuda()
    monkeypatch.delitem(sys.modules, "unsloth", raising=False)
    import transformers

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_loading)
    with pytest.raises(ConfigValidationError) as info:
        check(compose_config(["model=unsloth_qwen2_5_1_5b"]), tmp_path)
    [issue] = [i for i in info.value.issues if i.key == "model"]
    assert issue.value == "rlvr.model.unsloth.UnslothModel"
    assert "CUDA GPU" in issue.problem and "no GPU is visible" in issue.problem
    assert "model=hf model.name_or_path=Qwen/Qwen2.5-1.5B-Instruct model.quantization=4bit" in issue.fix
    assert "unsloth" not in sys.modules  # nothing of unsloth was imported, let alone loaded


def test_the_suggested_hf_equivalent_is_a_valid_config(tmp_path):
    _no_cuda()
    [issue] = [i for i in _component().validate() if i.key == "model"]
    overrides = shlex.split(issue.fix.split(": ", 1)[1])
    cfg = compose_config(overrides)
    assert check_targets(cfg, runtime_args(cfg)) == []
    hf = instantiate(cfg.model, _convert_="all")
    assert type(hf).__name__ == "HFModel" and hf.validate() == []
    assert (hf.name_or_path, hf.quantization, hf.gradient_checkpointing) == (QWEN, "4bit", True)
    assert hf.lora["r"] == 16 and hf.lora["target_modules"][-1] == "down_proj"


def test_load_without_cuda_refuses_too():
    """The benchmark reaches load() for a model spec; it refuses the same way."""
    _no_cuda()
    with pytest.raises(ConfigValidationError, match="CUDA GPU"):
        _component().load()


def test_memory_check_reads_the_unsloth_component(monkeypatch):
    from types import SimpleNamespace

    import trl

    from rlvr.model import memory
    from rlvr.training_loop import TrainingLoop

    model = _component()
    args = trl.GRPOConfig(output_dir="unused", use_cpu=True, bf16=False, per_device_train_batch_size=8)
    plan = memory.plan_of(model, args, 1)
    assert (plan.quantization, plan.lora_r, len(plan.lora_targets)) == ("4bit", 16, 7)
    assert plan.dtype == "bfloat16" and plan.activation_checkpointing
    loop = TrainingLoop(
        sft={},
        rft={"enabled": False},
        grpo={"per_device_train_batch_size": 8, "num_generations": 8, "max_completion_length": 256},
        signal=SIGNAL,
        seed=0,
        device="auto",
        precision="auto",
        prompt=None,
        rewards=None,
    )
    # The estimate is for a CUDA device; TRL's config is built for this CPU-only machine.
    loop.hardware = SimpleNamespace(device="cuda", trainer_args=lambda: {"use_cpu": True, "bf16": False})
    monkeypatch.setattr(memory, "device_memory_gb", lambda device: 8.0)
    assert memory.run_checks(model, loop) == ([], [])  # QLoRA 1.5B fits an 8 GB GPU
    monkeypatch.setattr(memory, "device_memory_gb", lambda device: 2.0)
    [refusal], _ = memory.run_checks(model, loop)
    assert "does not fit" in refusal.problem and "1.54B" in refusal.problem


def test_benchmark_refuses_an_unsloth_model_at_validation_without_cuda(tmp_path):
    """The model node composed into the benchmark's config, built as the benchmark builds it."""
    _no_cuda()
    from rlvr.pipeline.wiring import build

    cfg = compose_config(
        ["+model@benchmark.models.qlora=unsloth_qwen2_5_1_5b", f"benchmark.output_dir={tmp_path}"],
        config_name="benchmark",
    )
    [issue] = build("benchmark", cfg.benchmark, {}).validate()
    assert issue.key == "benchmark.models.qlora" and "CUDA GPU" in issue.problem
