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
import typing
from dataclasses import dataclass
from typing import Literal

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
