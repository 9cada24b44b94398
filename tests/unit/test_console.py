"""The console observer's lines, from events only (no model)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conftest import make_eval_result

from rlvr import events as ev
from rlvr.config.errors import ConfigIssue, ConfigValidationError
from rlvr.observers.console import ConsoleObserver


@pytest.fixture
def console(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps at the terminal's width
    return ConsoleObserver(log_every=100)


def run_events(observer: ConsoleObserver) -> None:
    """A run with SFT (4 steps) and GRPO (4 steps), evaluated in training at each phase's step 2."""
    observer.on_evaluation(make_eval_result("baseline", 0, 1, n=4))
    observer.on_train_step(ev.TrainStep("sft", 1, 4, {}))
    observer.on_evaluation(make_eval_result("sft", 2, 1, n=4))
    observer.on_phase_end(ev.PhaseEnd("sft", 4, 4, 1.0))
    observer.on_evaluation(make_eval_result("after_sft", 4, 2, n=4))  # the run's total: 4
    observer.on_train_step(ev.TrainStep("grpo", 1, 4, {}))
    observer.on_warning(ev.Warning_("no reward variance", step=1))
    observer.on_evaluation(make_eval_result("grpo", 2, 3, n=4))
    observer.on_phase_end(ev.PhaseEnd("grpo", 4, 4, 1.0))
    observer.on_evaluation(make_eval_result("final", 8, 3, n=4))  # the run's total: 4 + 4


def test_every_step_the_console_shows_counts_within_its_phase(console, capsys):
    run_events(console)
    lines = capsys.readouterr().out
    assert "eval [baseline] before training: accuracy 25.0%" in lines
    assert "eval [sft] sft step 2:" in lines
    assert "eval [after_sft] sft step 4:" in lines
    assert "warning (grpo step 1): no reward variance" in lines
    assert "eval [grpo] grpo step 2:" in lines
    assert "eval [final] grpo step 4:" in lines  # not "step 8" beside "grpo step 2"
    assert "step 8" not in lines

    evaluations = [make_eval_result(label, step, 1, n=4) for label, step in (("grpo", 2), ("final", 8))]
    result = ev.RunResult("COMPLETED", Path("run"), evaluations=evaluations)
    console.on_pipeline_end(ev.PipelineEnd("COMPLETED", 1.0, result))
    table = capsys.readouterr().out
    assert "grpo step 2" in table and "grpo step 4" in table and " 8 " not in table


def test_a_stage_evaluation_of_phases_this_process_did_not_see_says_what_it_counts(console, capsys):
    """A resumed run: SFT ended in an earlier attempt, so the total cannot be split into phases here."""
    console.on_phase_end(ev.PhaseEnd("grpo", 4, 4, 1.0))
    console.on_evaluation(make_eval_result("final", 8, 1, n=4))
    assert "eval [final] step 8 of all phases:" in capsys.readouterr().out


def test_an_rft_evaluation_in_training_counts_within_the_rft_phase(console, capsys):
    """The console reads the phase names from rlvr.stages: an RFT round's evaluation is an in-training one."""
    console.on_evaluation(make_eval_result("rft", 3, 1, n=4))
    assert "eval [rft] rft step 3:" in capsys.readouterr().out


def test_ctrl_c_and_a_configuration_problem_are_one_plain_line_each(console, capsys):
    console.on_train_step(ev.TrainStep("grpo", 3, 200, {}))
    console.on_error(ev.ErrorEvent("train", KeyboardInterrupt()))
    problem = ConfigValidationError([ConfigIssue("data.train_size", 64, "too large", "lower it")])
    console.on_error(ev.ErrorEvent("data", problem))
    assert capsys.readouterr().out.splitlines() == [
        "stopped by Ctrl-C in train at grpo step 3/200",
        "error in data: 1 configuration problem(s):",
        "  - data.train_size=64: too large. Fix: lower it",
    ]
