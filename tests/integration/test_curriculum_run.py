"""A curriculum run through run_pipeline.py with the tiny model: the level moves with the success rate
(the random model never answers right, so from level 3 it steps down to 0), the questions follow it,
the difficulty reaches metrics.jsonl and the report, evaluation stays on fixed levels, and a run killed
after a checkpoint and resumed with resume=auto continues at the level the uninterrupted run had."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from tests import in_process
from tests.conftest import ROOT
from tests.integration.test_resume import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.long]  # a minute or more: make test-long, CI

BASE = [
    "keep_checkpoints=last",  # the curriculum state of the last checkpoint is read below
    "experiment=smoke",
    "data=curriculum",
    "data.train_size=64",
    "data.eval_size=16",
    "data.start_levels.basic_arithmetic.num_terms=3",
    "data.start_levels.basic_arithmetic.num_digits=3",
    "data.window=1",  # one decision per GRPO step (steps_per_generation is 1)
    "data.eval_levels=[0]",
    "training_loop.sft.max_steps=2",
    "training_loop.sft.save_strategy=no",
    "training_loop.grpo.max_steps=4",
    "training_loop.grpo.save_steps=2",
    "training_loop.grpo.save_total_limit=3",
    "evaluation.every_n_steps=0",
    "observers=default",
]


def cmd(run_dir: Path, *overrides: str) -> list[str]:
    return [sys.executable, str(ROOT / "run_pipeline.py"), f"hydra.run.dir={run_dir}", *BASE, *overrides]


def grpo_steps(run_dir: Path) -> dict[int, dict]:
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["event"] == "train_step" and r["phase"] == "grpo" and "grpo/curriculum/level" in r["metrics"]:
            out[r["step"]] = r["metrics"]
    return out


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("curriculum")
    proc = in_process.run_command(cmd(run_dir))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return run_dir


def test_level_follows_success_and_is_logged_and_reported(full):
    steps = grpo_steps(full)
    assert sorted(steps) == [1, 2, 3, 4]
    # success 0 < lower_at every step: one level down per step, both attributes, from 3 to 0
    assert [steps[s]["grpo/curriculum/level"] for s in (1, 2, 3, 4)] == [3.0, 2.0, 1.0, 0.0]
    assert [steps[s]["grpo/curriculum/level/num_digits"] for s in (1, 2, 3, 4)] == [3.0, 2.0, 1.0, 0.0]
    assert all(steps[s]["grpo/curriculum/success"] == 0.0 for s in steps)
    # the questions really got easier: prompt tokens per step (num_tokens counts prompt + completion)
    tokens = {
        s: steps[s]["grpo/num_tokens"] - steps.get(s - 1, {}).get("grpo/num_tokens", 0.0) for s in steps
    }
    completions = 8 * steps[1]["grpo/completions/mean_length"]  # 8 completions of a fixed length
    prompt_tokens = [tokens[s] - completions for s in (1, 2, 3, 4)]
    assert prompt_tokens[0] > prompt_tokens[3], prompt_tokens

    report = json.loads((full / "report.json").read_text())
    assert [c["level"] for c in report["curriculum"]] == [3.0, 2.0, 1.0, 0.0]
    assert "Curriculum: level 3 at GRPO step 1, 0 at step 4" in (full / "report.md").read_text()
    width, _ = struct.unpack(">II", (full / "training.png").read_bytes()[16:24])
    # A panel per training phase, the accuracy panel and the difficulty panel, 550 px each.
    assert width == 550 * (len(report["steps"]) + 2), (width, report["steps"])
    # evaluation on fixed levels: the headline at the starting level, and set/level_0, each with a CI
    groups = {g["group"]: g for g in report["groups"]}
    assert "set/level_0" in groups and groups["set/level_0"]["final"]["n"] == 16
    assert {r["stage"] for r in report["accuracy"]} >= {"base model", "final"}
    state = json.loads((full / "checkpoints" / "grpo" / "checkpoint-4" / "curriculum_state.json").read_text())
    assert state["levels"] == {"num_terms": 0, "num_digits": 0}
    # the final model's manifest lists the pools of the four levels trained at
    manifest = json.loads((full / "final" / "data_manifest.json").read_text())
    trained = manifest["task_params"]["basic_arithmetic"]["curriculum"]["levels_trained"]
    assert [t["levels"]["num_terms"] for t in trained] == [3, 2, 1, 0]


def test_killed_curriculum_run_resumes_at_the_same_level(full, tmp_path):
    run_dir = tmp_path / "killed"
    proc = subprocess.Popen(
        cmd(run_dir), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    checkpoint = run_dir / "checkpoints" / "grpo" / "checkpoint-2"
    wait_for((checkpoint / "COMPLETE").exists, proc, interval=0.01)  # steps 3-4 and the end race the poll
    proc.kill()  # SIGKILL: no chance to clean up
    proc.wait()
    assert not (run_dir / "final").exists()
    saved = json.loads((checkpoint / "curriculum_state.json").read_text())
    assert saved["levels"] == {"num_terms": 1, "num_digits": 1}  # decided after step 2, for step 3

    resumed = in_process.run_command(cmd(run_dir, "resume=auto"))
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    second = max(i for i, e in enumerate(events) if e["event"] == "pipeline_start")
    first = next(e for e in events[second:] if e["event"] == "train_step")
    assert (first["phase"], first["step"]) == ("grpo", 3)
    uninterrupted, again = grpo_steps(full), grpo_steps(run_dir)
    for step in (3, 4):  # same level, same questions (same prompt tokens), same rewards
        for key in (
            "grpo/curriculum/level",
            "grpo/curriculum/level/num_terms",
            "grpo/num_tokens",
            "grpo/reward/mean",
        ):
            assert again[step][key] == pytest.approx(uninterrupted[step][key], abs=1e-6), (step, key)
    # the resumed run's manifest also covers the levels trained before the kill
    assert json.loads((run_dir / "final" / "data_manifest.json").read_text()) == json.loads(
        (full / "final" / "data_manifest.json").read_text()
    )
