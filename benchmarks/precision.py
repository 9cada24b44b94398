"""bf16 against fp32 on this machine: one matmul and one training step of the default model.

    .venv/bin/python benchmarks/precision.py            # prints a markdown table

Why: TRL's SFTConfig/GRPOConfig default to bf16 autocast. Whether that is 2x faster or 100x slower
depends on the CPU (native bf16 matmul through oneDNN: AVX512-BF16 or AMX), which is what
``training_loop.precision: auto`` checks (rlvr.runtime.hardware). Results: benchmarks/precision.md.
"""

from __future__ import annotations

import contextlib
import platform
import time
from pathlib import Path

import torch

from rlvr.model.embedded import ensure_default_model
from rlvr.runtime import hardware


def cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def matmul_seconds(dtype: torch.dtype, repeats: int = 5) -> float:
    a, b = torch.randn(768, 576, dtype=dtype), torch.randn(576, 1536, dtype=dtype)
    a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return (time.perf_counter() - start) / repeats


def step_seconds(autocast_bf16: bool, steps: int = 2, batch: int = 16, tokens: int = 48) -> float:
    """Seconds of the last of ``steps`` AdamW steps (fp32 weights; bf16 autocast as TRL does it)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(ensure_default_model(), dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    x = torch.randint(0, 1000, (batch, tokens))
    seconds = 0.0
    for _ in range(steps):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast_bf16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        seconds = time.perf_counter() - start
    return seconds


def main() -> None:
    print(f"CPU: {cpu_name()}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    print(f"native bf16 matmul (oneDNN): {hardware.cpu_native_bf16()}")
    print(f"precision=auto chooses: {hardware.resolve().precision}\n")
    mm32, mm16 = matmul_seconds(torch.float32), matmul_seconds(torch.bfloat16)
    st32, st16 = step_seconds(False), step_seconds(True)
    print("| measurement | fp32 | bf16 | bf16 / fp32 |")
    print("|---|---|---|---|")
    print(f"| matmul 768x576 @ 576x1536 | {mm32 * 1e3:.1f} ms | {mm16 * 1e3:.1f} ms | {mm16 / mm32:.1f}x |")
    print(f"| SmolLM2-135M step, 16 x 48 tokens, AdamW | {st32:.2f} s | {st16:.2f} s | {st16 / st32:.1f}x |")


if __name__ == "__main__":
    main()
