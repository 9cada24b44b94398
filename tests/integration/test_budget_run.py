"""``budget_minutes`` through the real entry point with the tiny model: the run times its phases, plans
fewer steps than configured, trains exactly the planned steps and reports planned against actual; a run
resuming its checkpoint reuses the recorded plan; a budget its fixed costs overrun is refused before
training. The configured steps are far more than a minute holds on any machine, so a plan must scale."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tests import in_process

pytestmark = pytest.mark.integration

# Far more steps than a minute holds; no in-training, baseline or sampled evaluation (their scaling is
# tests/unit/test_budget.py's), so the minute goes to the phases; every checkpoint kept for the resume.
OVERRIDES = [
    "experiment=smoke",
    "training_loop.sft.max_steps=20000",
    "training_loop.grpo.max_steps=2000",
    "evaluation.every_n_steps=0",
    "evaluation.baseline=false",
    "evaluation.sampled=null",
    "keep_checkpoints=all",
    "budget_minutes=1",
]


def events(run_dir: Path, kind: str) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == kind]


@pytest.fixture(scope="module")
def budget_run(tmp_path_factory) -> tuple[Path, in_process.Run]:
    run_dir = tmp_path_factory.mktemp("budget")
    run = in_process.run([f"hydra.run.dir={run_dir}", *OVERRIDES])
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run_dir, run


def test_a_budget_run_says_its_plan_before_training_and_trains_the_planned_steps(budget_run):
    run_dir, run = budget_run
    plan = json.loads((run_dir / "budget_plan.json").read_text())
    planned = {name: p["steps"] for name, p in plan["phases"].items()}
    assert 1 <= planned["sft"] < 20000 and 1 <= planned["grpo"] < 2000, planned
    assert plan["changes"]["training_loop.sft.max_steps"] == [20000, planned["sft"]]
    assert plan["predicted_seconds"] <= 60 * (1 - plan["margin"])
    # said before the first training step, with the configured and planned steps of each phase
    said = run.stdout.index("budget plan (1 min")
    assert said < run.stdout.index("▶ train")
    assert f"sft: 20000 -> {planned['sft']} steps" in run.stdout
    # trained exactly that: every step's event carries the planned total; the calibration's steps
    # left no event, no checkpoint and no folder in the run
    steps = events(run_dir, "train_step")
    for phase in ("sft", "grpo"):
        mine = [e for e in steps if e["phase"] == phase]
        assert [e["step"] for e in mine] == list(range(1, planned[phase] + 1))
        assert {e["max_steps"] for e in mine} == {planned[phase]}
    assert not list(run_dir.glob(".budget-calibration-*"))
    report = json.loads((run_dir / "report.json").read_text())
    assert report["steps"] == planned
    provenance = json.loads((run_dir / "provenance.json").read_text())
    assert provenance["budget_plan"] == plan


def test_a_budget_run_reports_planned_against_actual(budget_run):
    run_dir, run = budget_run
    record = json.loads((run_dir / "report.json").read_text())["budget"]
    rows = {r["part"].split(" (")[0]: r for r in record["rows"]}
    total = rows["total, to the report"]
    assert total["planned_s"] > 0 and total["actual_s"] > 0
    assert rows["sft"]["actual_s"] > 0 and rows["grpo"]["actual_s"] > 0
    report_md = (run_dir / "report.md").read_text()
    assert "Time budget: 1 min" in report_md and re.search(
        r"\| total, to the report \| [\d.]+ min", report_md
    )
    assert "budget 1 min, planned -> actual:" in run.stdout
    assert re.search(r"total, to the report: [\d.]+ min -> [\d.]+ min", run.stdout)


def test_a_run_resuming_a_budgeted_checkpoint_reuses_its_plan(budget_run, tmp_path):
    """From the budget run's first GRPO checkpoint, in a new directory, with the same command: the
    plan is read, not made again (no timing), and GRPO ends at the planned step. Mutation: prepare
    ignores ``resume`` (plans anew: it times again, and GRPO runs to the new plan's steps) -> red."""
    run_dir, _ = budget_run
    plan = json.loads((run_dir / "budget_plan.json").read_text())
    checkpoints = sorted(
        (run_dir / "checkpoints" / "grpo").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1])
    )
    assert checkpoints, "the budget run kept no GRPO checkpoint"
    first = checkpoints[0]
    resumed = in_process.run([f"hydra.run.dir={tmp_path}", *OVERRIDES, f"resume={first}"])
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert "not planned again" in resumed.stdout and "timing a few steps" not in resumed.stdout
    assert json.loads((tmp_path / "budget_plan.json").read_text()) == plan
    grpo = [e for e in events(tmp_path, "train_step") if e["phase"] == "grpo"]
    assert grpo[-1]["step"] == plan["phases"]["grpo"]["steps"]
    assert {e["max_steps"] for e in grpo} == {plan["phases"]["grpo"]["steps"]}


def test_a_budget_the_fixed_costs_overrun_is_refused_before_training(tmp_path):
    run = in_process.run([f"hydra.run.dir={tmp_path}", *OVERRIDES, "budget_minutes=0.05"])
    assert run.returncode == 2, run.stdout[-3000:] + run.stderr[-3000:]
    text = run.stdout + run.stderr
    assert "budget_minutes=0.05" in text and "does not fit" in text and "nothing was trained" in text
    assert not events(tmp_path, "train_step") and not (tmp_path / "checkpoints").exists()
