"""The GRPO stage's note: what the measured budget curve says a stage of this size does.

It is printed for the runs the measurement covers (the embedded model, its task, a GRPO stage no
larger than the largest budget measured), and for no other run: a note on a model or budget that
nobody measured would be a claim without evidence.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from hydra.utils import instantiate
from rich.console import Console
from tests.conftest import loop_collaborators, make_eval_result

from rlvr import events as ev
from rlvr.observers.console import ConsoleObserver
from rlvr.records.report import write_report
from rlvr.training_loop.expectation import MEASURED_STEPS, grpo_stage_note


def note_for(compose_cfg, overrides: list[str], tasks=("basic_arithmetic",)) -> str | None:
    cfg = compose_cfg(overrides)
    model = instantiate(cfg.model)
    loop = instantiate(cfg.training_loop, **loop_collaborators())
    return grpo_stage_note(model, list(tasks), loop.grpo_phase)


def test_the_embedded_default_gets_the_note_with_its_grpo_budget(compose_cfg):
    note = note_for(compose_cfg, [])
    steps = compose_cfg([]).training_loop.grpo.max_steps  # 8 where the run trains in fp32 on a CPU, else 16
    assert note is not None and steps in (8, 16)
    assert f"GRPO stage ({steps} steps)" in note and "not expected to gain" in note
    assert "benchmarks/grpo_budget.md" in note


@pytest.mark.parametrize(
    ("overrides", "tasks"),
    [
        (["model=hf", "model.name_or_path=/models/any"], ("basic_arithmetic",)),  # not measured
        (["model=tiny"], ("basic_arithmetic",)),
        (["model=gemma3_270m"], ("basic_arithmetic",)),  # another embedded model: not measured
        ([], ("leg_counting",)),  # another task
        ([], ("basic_arithmetic", "leg_counting")),  # a mixture
        ([f"training_loop.grpo.max_steps={MEASURED_STEPS + 1}"], ("basic_arithmetic",)),  # beyond the curve
        (["training_loop.grpo.enabled=false"], ("basic_arithmetic",)),  # no GRPO stage
        (["training_loop.grpo.max_steps=0"], ("basic_arithmetic",)),
    ],
)
def test_no_note_where_nothing_was_measured(compose_cfg, overrides, tasks):
    assert note_for(compose_cfg, overrides, tasks) is None


def test_the_largest_measured_budget_still_gets_the_note(compose_cfg):
    assert note_for(compose_cfg, [f"training_loop.grpo.max_steps={MEASURED_STEPS}"]) is not None


def test_console_and_report_print_the_note_beside_the_stage_changes(tmp_path):
    evaluations = [make_eval_result("baseline", 0, 50, 200), make_eval_result("final", 7, 80, 200)]
    note = "GRPO stage (16 steps): not expected to gain."
    result = ev.RunResult("COMPLETED", Path("run"), evaluations, notes=[note])
    observer = ConsoleObserver(log_every=5)
    observer.console = Console(file=io.StringIO(), width=200, highlight=False)
    observer.on_pipeline_end(ev.PipelineEnd("COMPLETED", 60.0, result))
    assert f"Note: {note}" in observer.console.file.getvalue()

    outcome = SimpleNamespace(steps={"grpo": 16}, seconds={}, history=[])
    write_report(tmp_path, evaluations, outcome, {"model": "m", "tasks": ["t"], "notes": [note]}, seconds=1.0)
    assert f"Note: {note}" in (tmp_path / "report.md").read_text()
    assert json.loads((tmp_path / "report.json").read_text())["notes"] == [note]
