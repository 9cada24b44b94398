"""Which device a run uses and in which precision it trains, chosen from the machine unless pinned.

``device: auto`` is CUDA when a GPU is visible, else the CPU. ``precision: auto`` is bf16 on GPUs
that support it (fp16 on older ones) and, on a CPU, bf16 only where the CPU has native bf16 matrix
instructions (AVX512-BF16 or AMX, as oneDNN reports them); fp32 everywhere else.

Why the CPU check matters: TRL's SFTConfig and GRPOConfig default to ``bf16=True``. On a CPU
without bf16 instructions, torch falls back to a scalar bf16 matmul, an order of magnitude slower
than fp32; with AMX or AVX512-BF16, bf16 is the faster (benchmarks/precision.md).
"""

from __future__ import annotations

import functools
import re
import typing
from dataclasses import dataclass
from typing import Any, Literal

from rlvr.issues import ConfigIssue

# The choices, as the types a component's signature declares (the config gate checks them).
Device = Literal["auto", "cpu", "cuda"]
Precision = Literal["auto", "bf16", "fp16", "fp32"]
DEVICES: tuple[str, ...] = typing.get_args(Device)
PRECISIONS: tuple[str, ...] = typing.get_args(Precision)


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


@functools.cache
def cpu_native_bf16() -> bool:
    """True when oneDNN has a native bf16 matmul on this CPU (AVX512-BF16 or AMX)."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch without oneDNN: no fast bf16 path either
        return False


def cuda_bf16() -> bool:
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def cuda_peak_gb() -> dict[str, float | None]:
    """This process's peak CUDA memory so far, in GB (2**30 bytes): what torch's caching allocator
    handed to tensors (``max_memory_allocated``) and what it held from the driver
    (``max_memory_reserved``, the figure an out-of-memory error compares). None on a run that never
    used CUDA (nothing is initialised for asking)."""
    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {"cuda_peak_allocated_gb": None, "cuda_peak_reserved_gb": None}
    return {
        "cuda_peak_allocated_gb": round(torch.cuda.max_memory_allocated() / 1024**3, 3),
        "cuda_peak_reserved_gb": round(torch.cuda.max_memory_reserved() / 1024**3, 3),
    }


@dataclass(frozen=True)
class Hardware:
    """The resolved choice, with the reason recorded in the run's provenance."""

    device: str
    precision: str
    reason: str

    def trainer_args(self) -> dict[str, bool]:
        """The ``transformers.TrainingArguments`` fields that carry this choice."""
        return {
            "use_cpu": self.device == "cpu",
            "bf16": self.precision == "bf16",
            "fp16": self.precision == "fp16",
        }

    @property
    def torch_dtype_name(self) -> str:
        """The compute dtype for this precision (e.g. for bitsandbytes' 4-bit compute)."""
        return {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[self.precision]

    def record(self) -> dict[str, str]:
        return {"device": self.device, "precision": self.precision, "reason": self.reason}


def resolve_device(requested: str = "auto") -> str:
    if requested == "auto":
        return "cuda" if cuda_available() else "cpu"
    return requested


def resolve(device: str = "auto", precision: str = "auto") -> Hardware:
    """The device and training precision for ``device``/``precision`` settings on this machine."""
    dev = resolve_device(device)
    if precision != "auto":
        return Hardware(dev, precision, "pinned by training_loop.precision")
    if dev == "cuda":
        if cuda_bf16():
            return Hardware(dev, "bf16", "auto: this GPU supports bf16")
        return Hardware(dev, "fp16", "auto: this GPU has no bf16, so fp16 mixed precision")
    if cpu_native_bf16():
        return Hardware(dev, "bf16", "auto: this CPU has native bf16 matmul (AVX512-BF16/AMX)")
    return Hardware(dev, "fp32", "auto: this CPU has no native bf16 matmul (bf16 would run ~100x slower)")


def validate(device: str, precision: str, key: str = "training_loop") -> list[ConfigIssue]:
    """Refusals for settings this machine cannot honour (checked before anything loads); a device or
    precision that is none of the choices is the type's (:data:`Device`, :data:`Precision`)."""
    found = []
    if device == "cuda" and not cuda_available():
        found.append(
            ConfigIssue(
                f"{key}.device",
                device,
                "no CUDA GPU is visible (torch.cuda.is_available() is False)",
                f"set {key}.device=auto (or cpu) on this machine",
            )
        )
    elif precision == "fp16" and resolve_device(device) == "cpu":
        found.append(
            ConfigIssue(
                f"{key}.precision",
                precision,
                "fp16 mixed precision needs a CUDA GPU",
                f"set {key}.precision=auto (fp32, or bf16 on CPUs with native bf16)",
            )
        )
    return found


def warnings(device: str, precision: str, key: str = "training_loop") -> list[str]:
    """Settings that run but cost a lot here: the user pinned them, so they are kept, and said."""
    if precision == "bf16" and resolve_device(device) == "cpu" and not cpu_native_bf16():
        return [
            f"{key}.precision=bf16 on a CPU without native bf16 matmul: training runs about 100x "
            f"slower than fp32 here (benchmarks/precision.md); set {key}.precision=auto for fp32"
        ]
    return []


# -- settings that differ by machine kind: ${rlvr.fp32_cpu:<on an fp32 CPU>,<elsewhere>} --------------
FP32_CPU_RESOLVER = "rlvr.fp32_cpu"
_FP32_CPU_VALUE = re.compile(r"^\$\{\s*" + re.escape(FP32_CPU_RESOLVER) + r"\s*:(.*)\}$", re.S)


def trains_fp32_on_cpu(cfg: Any) -> bool:
    """Whether the run ``cfg`` describes trains in fp32 on a CPU: its ``training_loop.device`` /
    ``precision`` resolved on this machine (:func:`resolve`). A value that is none of the choices
    counts as no (the config gate names it)."""
    from omegaconf import OmegaConf

    device = OmegaConf.select(cfg, "training_loop.device", default="auto")
    precision = OmegaConf.select(cfg, "training_loop.precision", default="auto")
    if device not in DEVICES or precision not in PRECISIONS:
        return False
    chosen = resolve(device, precision)
    return chosen.device == "cpu" and chosen.precision == "fp32"


def fp32_cpu_value(on_fp32_cpu: Any, elsewhere: Any, *, _root_: Any) -> Any:
    """The resolver ``${rlvr.fp32_cpu:A,B}``: A where the run trains in fp32 on a CPU (no native bf16
    matmul, so ``precision: auto`` picks fp32 there; or precision pinned to fp32 on a CPU), else B.
    The default run is lighter there (conf/training_loop/sft_grpo.yaml, benchmarks/cpu_fp32.md); a
    key set on the command line or in an experiment file replaces the whole expression. Pure: it
    returns one of its two arguments as written, reading only the config and this machine's CPU."""
    return on_fp32_cpu if trains_fp32_on_cpu(_root_) else elsewhere


def register_resolvers() -> None:
    """Register ``rlvr.fp32_cpu`` (idempotent)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(FP32_CPU_RESOLVER):
        OmegaConf.register_new_resolver(FP32_CPU_RESOLVER, fp32_cpu_value)


def fp32_cpu_settings(raw: Any, resolved: Any, path: str = "") -> list[str]:
    """The keys whose value ``${rlvr.fp32_cpu:...}`` chose, as ``key=value (the expression)``; empty
    where the run does not train in fp32 on a CPU (every such key then has its other value, the one
    the config shows). ``raw``: the composed config as a container, unresolved; ``resolved``: the
    same resolved."""
    found: list[str] = []
    if isinstance(raw, dict) and isinstance(resolved, dict):
        for key, value in raw.items():
            sub = f"{path}.{key}" if path else str(key)
            found += fp32_cpu_settings(value, resolved.get(key), sub)
    elif isinstance(raw, list) and isinstance(resolved, list):
        for i, (value, done) in enumerate(zip(raw, resolved, strict=False)):
            found += fp32_cpu_settings(value, done, f"{path}[{i}]")
    elif isinstance(raw, str) and _FP32_CPU_VALUE.match(raw.strip()):
        found.append(f"{path}={resolved} ({raw.strip()})")
    return found


def fp32_cpu_choices(composed: Any, resolved: Any) -> list[str]:
    """:func:`fp32_cpu_settings` of a composed config and its resolved copy (DictConfigs): empty unless
    the run trains in fp32 on a CPU."""
    from omegaconf import OmegaConf

    if not trains_fp32_on_cpu(resolved):
        return []
    raw = OmegaConf.to_container(composed, resolve=False)
    return fp32_cpu_settings(raw, OmegaConf.to_container(resolved))
