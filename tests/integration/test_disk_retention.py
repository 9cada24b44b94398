"""A completed smoke run keeps only the checkpoint resume=auto needs and prints the run dir's size."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from tests.conftest import ROOT

pytestmark = pytest.mark.integration


def test_completed_run_keeps_last_checkpoint_only(tmp_path):
    cmd = [
        sys.executable,
        str(ROOT / "run_pipeline.py"),
        f"hydra.run.dir={tmp_path}",
        "experiment=smoke",
        "training_loop.sft.max_steps=2",
        "training_loop.sft.save_steps=1",
        "training_loop.grpo.max_steps=2",
        "training_loop.grpo.save_steps=1",
        "evaluation.every_n_steps=0",
        "data.eval_size=8",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    left = sorted(
        p.relative_to(tmp_path).as_posix() for p in (tmp_path / "checkpoints").glob("*/checkpoint-*")
    )
    assert left == ["checkpoints/grpo/checkpoint-2"]
    assert f"run directory {tmp_path}: " in proc.stdout, proc.stdout[-2000:]
    line = next(x for x in proc.stdout.splitlines() if "keep_checkpoints" in x)
    # at least the SFT checkpoint and GRPO checkpoint-1 went (TRL decides which SFT steps it saves)
    deleted = int(re.search(r"(\d+) checkpoint dir\(s\) deleted \(keep_checkpoints=last\)$", line).group(1))
    assert deleted >= 2, line
    assert re.search(r": \d+\.\d MB", line), line
    assert (tmp_path / "final" / "model.safetensors").is_file()
