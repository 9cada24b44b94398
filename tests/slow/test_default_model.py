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


def test_a_model_that_games_a_length_reward_sounds_the_reward_hacking_alarm(tmp_path):
    """A planted reward hack on the real model: GRPO with no warm start (it never answers in tags, so the
    verifier's term stays 0) and a strong brevity term. Measured 2026-11-28 (AVX512-BF16 EPYC): in 5
    steps its completions shrank from 16 tokens to 1 (empty answers), the length term rose from -0.88
    to 0.0 and the run ended COMPLETED_WITH_WARNINGS with the alarm naming the length term."""
    cmd = [
        sys.executable,
        str(ROOT / "run_pipeline.py"),
        f"hydra.run.dir={tmp_path}",
        "training_loop=grpo",
        "+reward/terms@reward.terms.length=length",
        "reward.terms.length.weight=1.0",
        "reward.terms.length.free_chars=0",
        "reward.terms.length.scale_chars=48",
        "training_loop.grpo.max_steps=9",
        "training_loop.grpo.learning_rate=1e-4",
        "training_loop.grpo.per_device_train_batch_size=32",
        "training_loop.grpo.gradient_accumulation_steps=1",
        "data.train_size=512",
        "data.eval_size=32",
        "evaluation.sampled=null",
        "strict=true",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=3600)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]  # strict: warnings exit 3
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["status"] == "COMPLETED_WITH_WARNINGS"
    alarms = [w for w in report["warnings"] if w.startswith("Reward-hacking alarm")]
    assert len(alarms) == 1 and "(length +" in alarms[0] and "reward.terms.length.weight" in alarms[0]
    rows = [json.loads(line) for line in (tmp_path / "completions.jsonl").read_text().splitlines()]
    last = [r for r in rows if r["source"] == "grpo" and r["step"] == 9]
    assert last and sum(len(r["completion"]) for r in last) / len(last) < 10  # what the alarm points at
