"""A completed smoke run keeps no checkpoint by default (resume=auto has nothing left to do in it) and its
closing summary gives the run directory's size."""

from __future__ import annotations

import re

import pytest
from tests import in_process

pytestmark = pytest.mark.integration


def test_a_completed_run_keeps_no_checkpoint_by_default_and_says_how_big_it_is(tmp_path):
    cmd = [
        f"hydra.run.dir={tmp_path}",
        "experiment=smoke",
        "training_loop.sft.max_steps=2",
        "training_loop.sft.save_steps=1",
        "training_loop.grpo.max_steps=2",
        "training_loop.grpo.save_steps=1",
        "evaluation.every_n_steps=0",
        "data.eval_size=8",
    ]
    proc = in_process.run(cmd)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not (tmp_path / "checkpoints").exists()
    out = " ".join(proc.stdout.split())  # the console wraps long lines
    found = re.search(
        rf"run directory: {re.escape(str(tmp_path))} \((\d+\.\d) MB; (\d+) checkpoint dir\(s\) deleted "
        r"\(keep_checkpoints=none\)\)",
        out,
    )
    assert found, out[-2000:]
    # at least an SFT and a GRPO checkpoint went (TRL's save_total_limit decides how many were left)
    assert int(found.group(2)) >= 2, found.group(0)
    assert (tmp_path / "final" / "model.safetensors").is_file() and (tmp_path / "report.json").is_file()
