"""The unsloth model component: ``FastLanguageModel.from_pretrained`` + its own ``get_peft_model``.

unsloth patches the model's attention, MLP and LoRA layers with its Triton kernels and brings its
own activation checkpointing (``use_gradient_checkpointing="unsloth"`` offloads checkpoints to CPU
RAM), so it is a loader of its own, not a flag on :class:`rlvr.model.loader.HFModel`. Its kernels need a
CUDA GPU: without one the config is refused at validation, before anything is imported or loaded,
with the equivalent ``model=hf`` settings to use instead. The config keys are unsloth's own
argument names (unsloth 2026.10: ``unsloth/models/loader.py``, ``unsloth/models/llama.py``), and
:meth:`UnslothModel.from_pretrained_kwargs` / :meth:`UnslothModel.peft_kwargs` build the two calls
without touching a GPU, so the translation is testable here.
"""

from __future__ import annotations

import importlib.util
from typing import Annotated, Any, Literal

from pydantic import Field

from rlvr.issues import ConfigIssue, ConfigValidationError
from rlvr.model.loader import LoadedModel, adapter_base, name_or_path_issues, pickled_adapter_issue

"""unsloth's ``dtype``: None lets it pick (bf16 where the GPU supports it, else fp16)."""

"""``use_gradient_checkpointing``: "unsloth" (its offloading variant), True (PyTorch's), False."""

# Set by this component, so they may not appear again inside model.lora.
_OWN_KEYS = {"use_gradient_checkpointing", "random_state", "max_seq_length", "task_type"}


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


class UnslothModel:
    """A causal LM loaded and (optionally) LoRA-wrapped by unsloth; CUDA only.

    Args:
        name_or_path: hub id or local directory; a LoRA adapter directory loads on its base with the
            adapter trainable (unsloth reads ``adapter_config.json`` itself).
        max_seq_length: longest prompt + completion unsloth prepares RoPE and its kernels for.
        dtype: None (unsloth picks bf16 or fp16 for the GPU), "bfloat16" or "float16".
        load_in_4bit: bitsandbytes NF4 base (with ``lora``: QLoRA).
        load_in_8bit: bitsandbytes int8 base; exclusive with ``load_in_4bit``.
        trust_remote_code: run the repository's own modelling code; off unless you trust it.
        lora: arguments of ``FastLanguageModel.get_peft_model`` (r, lora_alpha, lora_dropout,
            target_modules, bias, use_rslora, ...); None = full fine-tune (``full_finetuning=True``).
        use_gradient_checkpointing: "unsloth", true or false (passed to both calls).
        random_state: seed of the LoRA initialisation.
    """

    def __init__(
        self,
        name_or_path: str,
        max_seq_length: Annotated[
            int, Field(gt=0, description="at least the prompt budget + max_completion_length, e.g. 2048")
        ],
        dtype: Literal["bfloat16", "float16"] | None,
        load_in_4bit: bool,
        load_in_8bit: bool,
        trust_remote_code: bool,
        lora: dict[str, Any] | None,
        use_gradient_checkpointing: Literal["unsloth"] | bool,
        random_state: int,
    ):
        self.name_or_path = str(name_or_path)
        self.max_seq_length = max_seq_length
        self.dtype = dtype
        self.load_in_4bit = load_in_4bit
        self.load_in_8bit = load_in_8bit
        self.trust_remote_code = trust_remote_code
        self.lora = dict(lora) if lora else None
        self.use_gradient_checkpointing = use_gradient_checkpointing
        self.random_state = random_state

    # What the memory check's estimate and the run record read from any model component.
    @property
    def quantization(self) -> str | None:
        return "4bit" if self.load_in_4bit else "8bit" if self.load_in_8bit else None

    @property
    def gradient_checkpointing(self) -> bool:
        return self.use_gradient_checkpointing is not False

    def model_path(self) -> str:
        return self.name_or_path

    def hf_equivalent(self) -> str:
        """The overrides that load the same model through transformers + PEFT (runs on a CPU)."""
        parts = [f"model=hf model.name_or_path={self.name_or_path}"]
        if self.quantization:
            parts.append(f"model.quantization={self.quantization}")
        if self.lora:
            lora = ", ".join(f"{k}: {v}" for k, v in self.lora.items()).replace("'", "")
            parts.append(f"'model.lora={{{lora}}}'")
        if self.gradient_checkpointing:
            parts.append("model.gradient_checkpointing=true")
        return " ".join(parts)

    def validate(self) -> list[ConfigIssue]:
        return self._argument_issues() + self._lora_issues() + self._path_issues() + self.machine_issues()

    def _argument_issues(self) -> list[ConfigIssue]:
        """One quantisation (dtype, checkpointing and sequence length are the signature's)."""
        issues = []
        if self.load_in_4bit and self.load_in_8bit:
            issues.append(
                ConfigIssue(
                    "model.load_in_8bit", True, "load_in_4bit is also true", "set one of them to false"
                )
            )
        return issues

    def _lora_issues(self) -> list[ConfigIssue]:
        """model.lora: required for a quantised base; only peft's LoRA arguments the component leaves open."""
        issues = []
        if self.lora is None and self.quantization:
            issues.append(
                ConfigIssue(
                    "model.lora",
                    None,
                    f"a full fine-tune cannot train a {self.quantization} base",
                    "add a LoRA adapter (model.lora={r: 16, ...}) or set load_in_4bit/load_in_8bit=false",
                )
            )
        if self.lora is not None:
            from peft import LoraConfig

            own = sorted(set(self.lora) & _OWN_KEYS)
            if own:
                issues.append(
                    ConfigIssue(
                        "model.lora",
                        own,
                        "set by the component itself",
                        "remove them from model.lora; set model.use_gradient_checkpointing / "
                        "model.random_state / model.max_seq_length instead",
                    )
                )
            # get_peft_model hands these on to peft's LoraConfig, so peft's field names are the valid ones
            unknown = sorted(set(self.lora) - set(LoraConfig.__dataclass_fields__) - _OWN_KEYS)
            if unknown:
                issues.append(
                    ConfigIssue(
                        "model.lora", unknown, "not LoRA arguments", "see peft.LoraConfig for the valid names"
                    )
                )
        return issues

    def _path_issues(self) -> list[ConfigIssue]:
        """model.name_or_path: no pickled adapter, and a local path that exists."""
        return name_or_path_issues(self.name_or_path, use_safetensors=True)

    def machine_issues(self) -> list[ConfigIssue]:
        """Refusals of this machine (no CUDA, unsloth not installed), checked without importing unsloth."""
        if not _cuda_available():
            return [
                ConfigIssue(
                    "model",
                    "rlvr.model.unsloth.UnslothModel",
                    "unsloth runs only on a CUDA GPU (its Triton kernels and bitsandbytes paths need one) "
                    "and no GPU is visible",
                    f"on this machine load the same model through transformers + PEFT: {self.hf_equivalent()}",
                )
            ]
        if importlib.util.find_spec("unsloth") is None:
            return [
                ConfigIssue(
                    "model",
                    "rlvr.model.unsloth.UnslothModel",
                    "needs the 'unsloth' package, which is not installed",
                    "install the GPU lock: make setup GPU=1",
                )
            ]
        return []

    # -- the two unsloth calls, built without a GPU --------------------------------------------------
    def from_pretrained_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``FastLanguageModel.from_pretrained``."""
        dtype = None
        if self.dtype is not None:
            import torch

            dtype = getattr(torch, self.dtype)
        return {
            "model_name": self.name_or_path,
            "max_seq_length": self.max_seq_length,
            "dtype": dtype,
            "load_in_4bit": self.load_in_4bit,
            "load_in_8bit": self.load_in_8bit,
            # unsloth's default is LoRA-only loading; without an adapter (new or loaded) every weight trains
            "full_finetuning": self.lora is None and adapter_base(self.name_or_path) is None,
            "trust_remote_code": self.trust_remote_code,
            "use_gradient_checkpointing": self.use_gradient_checkpointing,
            "random_state": self.random_state,
        }

    def peft_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``FastLanguageModel.get_peft_model`` (besides the model)."""
        assert self.lora is not None
        return {
            **self.lora,
            "use_gradient_checkpointing": self.use_gradient_checkpointing,
            "random_state": self.random_state,
            "max_seq_length": self.max_seq_length,
        }

    def load(self) -> LoadedModel:
        # load() is also reached without validate() (benchmark specs): refuse the same way.
        refusals = self.machine_issues()
        pickled = pickled_adapter_issue(self.name_or_path, use_safetensors=True)
        if refusals or pickled:
            raise ConfigValidationError([*refusals, *([pickled] if pickled else [])])
        from unsloth import FastLanguageModel  # lazy: a CUDA-only dependency

        model, tokenizer = FastLanguageModel.from_pretrained(**self.from_pretrained_kwargs())
        # An adapter directory comes back as a trainable PeftModel already; wrap only a base model.
        if self.lora is not None and adapter_base(self.name_or_path) is None:
            model = FastLanguageModel.get_peft_model(model, **self.peft_kwargs())
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        return LoadedModel(
            model=model, tokenizer=tokenizer, name=self.name_or_path, quantization=self.quantization
        )
