"""Planning a rental through the real entry point: ``validate_only=true runtime.memory.target=<card>``
says whether the run fits that card, with the estimate and its terms, fit or not (issue 46, item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests import in_process

pytestmark = pytest.mark.integration

SEVEN_B = ("model=shape", "model.architecture=qwen2_5_7b")
QLORA = ("model.quantization=4bit", "model.lora={r: 16}", "model.gradient_checkpointing=true")


def validate(tmp_path: Path, *overrides: str):
    cmd = ["validate_only=true",
           f"hydra.run.dir={tmp_path / 'run'}", *overrides]  # fmt: skip
    proc = in_process.run(cmd)
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc


def test_a_7b_qlora_run_fits_an_l4_and_is_told_so_with_its_estimate(tmp_path):
    """Mutation: the gate printing the verdict only on a refusal (no ``summary`` line) -> red."""
    proc = validate(tmp_path, *SEVEN_B, *QLORA, "runtime.memory.target=L4-24GB")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "memory check: fits on the L4-24GB (22.03 GB as PyTorch reports it): estimated peak" in out
    assert "terms (GB): weights 7.4" in out and "7.62B parameters" in out
    assert "basis: extrapolated (4.9x the largest shape measured)" in out
    assert out.index("memory check") < out.index("configuration OK")


def test_a_7b_full_fine_tune_does_not_fit_an_h100_and_an_unknown_card_is_named_with_the_rest(tmp_path):
    """Mutation: the gate dropping card_of's issues (the unknown name falls back to this machine) -> red."""
    proc = validate(tmp_path / "full", *SEVEN_B, "runtime.memory.target=H100-80GB")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "model='(memory)': does not fit: estimated peak" in proc.stderr
    assert "on the H100-80GB (79.18 GB as PyTorch reports it)" in proc.stderr
    assert "optimizer state 28.4" in proc.stderr and "basis: extrapolated" in proc.stderr
    proc = validate(tmp_path / "unknown", "runtime.memory.target=H100", "training_loop.grpo.max_steps=-3")
    assert proc.returncode == 2 and "2 configuration problem(s)" in proc.stderr, proc.stderr[-3000:]
    assert "runtime.memory.target='H100': not a known card nor a size in GB" in proc.stderr
    assert "did you mean 'H100-80GB'?" in proc.stderr and "RTX4090-24GB" in proc.stderr
