"""The real default model (SmolLM2-135M-Instruct) end to end: a short SFT + GRPO run through run_pipeline.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def test_default_model_short_run_learns_the_format(tmp_path):
    cmd = [
        sys.executable,
        str(ROOT / "run_pipeline.py"),
        f"hydra.run.dir={tmp_path}",
        "training_loop.sft.max_steps=30",
        "training_loop.grpo.max_steps=4",
        "evaluation.every_n_steps=0",
        "evaluation.max_examples=48",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=3600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    rows = {r["stage"]: r for r in report["accuracy"]}
    assert rows["base model"]["accuracy"] == 0.0  # measured: never uses the answer tags out of the box
    final = json.loads(next((tmp_path / "eval").glob("final_step*.json")).read_text())
    formatted = sum(a[0] is not None for a in (r["answers"] for r in final["samples"]))
    assert formatted >= 40  # after 30 SFT steps nearly every completion has an <answer> tag
    assert final["model"] == "SmolLM2-135M-Instruct"
    # The embedded default's GRPO stage says what the measured budget curve expects of it
    # (rlvr.training_loop.expectation), in the report and on the console.
    (note,) = report["notes"]
    assert note.startswith("GRPO stage (4 steps)") and "not expected to gain" in note
    assert f"Note: {note}" in (tmp_path / "report.md").read_text()
    assert "Note: GRPO stage (4 steps)" in proc.stdout
