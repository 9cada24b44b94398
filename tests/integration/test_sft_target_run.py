"""``training_loop.sft.target`` through the real entry point with the tiny model: ``worked`` with too
little room for the working is refused at the preflight, before the baseline evaluation has spent its
minutes; ``auto`` with room trains on workings and says so on the console and in provenance.json."""

from __future__ import annotations

import json

import pytest
from tests import in_process

pytestmark = pytest.mark.integration

# The smoke run without the evaluations and the GRPO phase this file does not test.
QUIET = [
    "experiment=smoke",
    "evaluation.sampled=null",
    "evaluation.every_n_steps=0",
    "training_loop.grpo.enabled=false",
]


def test_worked_without_room_for_the_working_is_refused_before_the_baseline_evaluation(tmp_path):
    """The smoke config's 12-token completions cannot hold a worked solution. Mutation: the
    orchestrator's preflight not asking the loop (see_data) -> the baseline evaluation runs first -> red."""
    run = in_process.run([f"hydra.run.dir={tmp_path}", *QUIET, "training_loop.sft.target=worked"])
    assert run.returncode == 2, run.stdout[-3000:] + run.stderr[-3000:]
    text = run.stdout + run.stderr
    assert "training_loop.sft.target='worked'" in text, text[-3000:]
    assert "more than training_loop.grpo.max_completion_length=12" in text
    assert "Fix: set training_loop.grpo.max_completion_length=" in text
    assert "baseline_eval" not in run.stdout and not (tmp_path / "eval").exists()


def test_auto_with_room_trains_on_workings_and_says_so(tmp_path):
    args = [*QUIET, "training_loop.sft.target=auto", "training_loop.grpo.max_completion_length=96"]
    # the evaluations keep the smoke run's short budget: the tiny random model never closes a tag
    run = in_process.run(
        [f"hydra.run.dir={tmp_path}", *args, "evaluation.max_new_tokens=12", "evaluation.baseline=false"]
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    said = json.loads((tmp_path / "provenance.json").read_text())["hardware"]["sft_target"]
    assert said.startswith("SFT trains on worked solutions: ") and "training_loop.sft.target=auto" in said
    assert said in run.stdout
