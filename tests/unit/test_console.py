"""The console observer's lines, from events only (no model)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from tests.conftest import make_eval_result

from rlvr import events as ev
from rlvr.issues import ConfigIssue, ConfigValidationError
from rlvr.observers.console import ConsoleObserver


@pytest.fixture
def console(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps at the terminal's width
    return ConsoleObserver(log_every=100)


def evaluate(observer: ConsoleObserver, label: str, step: int, correct: int) -> None:
    """An evaluation generated now: the schedule opens its bar, advances it per question, closes it."""
    bar = observer.progress(f"eval {label}", 4, "question")
    bar.advance(4)
    bar.close()
    observer.on_evaluation(make_eval_result(label, step, correct, n=4))


def run_events(observer: ConsoleObserver) -> None:
    """A run with SFT (4 steps) and GRPO (4 steps), evaluated in training at each phase's step 2."""
    evaluate(observer, "baseline", 0, 1)
    observer.on_train_step(ev.TrainStep("sft", 1, 4, {}))
    evaluate(observer, "sft", 2, 1)
    observer.on_phase_end(ev.PhaseEnd("sft", 4, 4, 1.0))
    observer.on_evaluation(make_eval_result("after_sft", 4, 2, n=4))  # the run's total: 4; reused
    observer.on_train_step(ev.TrainStep("grpo", 1, 4, {}))
    observer.on_warning(ev.RunWarning("no reward variance", step=1))
    evaluate(observer, "grpo", 2, 3)
    observer.on_phase_end(ev.PhaseEnd("grpo", 4, 4, 1.0))
    evaluate(observer, "final", 8, 3)  # the run's total: 4 + 4


def test_an_evaluation_s_step_is_the_one_its_file_and_the_report_give(console, capsys):
    """eval/final_step8.json and report.md's "| final | 8 |": the console says step 8 as well, and how
    it splits into the phases; in-training evaluations and warnings count within their phase."""
    run_events(console)
    lines = capsys.readouterr().out
    assert "eval baseline step 0: accuracy 25.0%" in lines
    assert "eval sft step 2:" in lines
    assert "eval after_sft step 4 (sft 4): accuracy 50.0%" in lines
    assert "warning (grpo step 1): no reward variance" in lines
    assert "eval grpo step 2:" in lines
    assert "eval final step 8 (sft 4 + grpo 4):" in lines
    assert "grpo step 4" not in lines  # the final evaluation is not given a second number

    evaluations = [make_eval_result(label, step, 1, n=4) for label, step in (("grpo", 2), ("final", 8))]
    result = ev.RunResult("COMPLETED", Path("run"), evaluations=evaluations)
    console.on_pipeline_end(ev.PipelineEnd("COMPLETED", 1.0, result))
    table = capsys.readouterr().out
    assert "│ grpo  │ 2 " in table and "│ final │ 8 (sft 4 + grpo 4) " in table


def test_a_stage_evaluation_of_phases_this_process_did_not_see_says_what_it_counts(console, capsys):
    """A resumed run: SFT ended in an earlier attempt, so the total cannot be split into phases here."""
    console.on_phase_end(ev.PhaseEnd("grpo", 4, 4, 1.0))
    console.on_evaluation(make_eval_result("final", 8, 1, n=4))
    assert "eval final step 8 (all phases):" in capsys.readouterr().out


class Clock:
    """time.monotonic for the console module: advanced by hand."""

    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_off_a_terminal_progress_is_plain_lines_with_rate_and_eta(console, capsys, monkeypatch, caplog):
    """stdout captured (a pipe, a CI log, nohup): no bar can redraw, so each shown step says its step
    time and ETA, and an evaluation says what it waits for and how long it took. The run's log file
    (rlvr.progress) gets every step, the console every log_every-th."""
    clock = Clock()
    monkeypatch.setattr("rlvr.observers.console.time.monotonic", clock)
    console.log_every = 2
    assert not console.live and console.console.soft_wrap
    caplog.set_level("INFO", logger="rlvr.progress")
    for step in range(1, 5):
        console.on_train_step(ev.TrainStep("grpo", step, 10, {"grpo/step_seconds": 2.0, "grpo/loss": 0.5}))
        clock.now += 3.0
    bar = console.progress("eval final", 8, "question")
    clock.now += 16.0
    bar.advance(8)
    bar.close()
    console.on_evaluation(make_eval_result("final", 10, 2, n=8))
    out = capsys.readouterr().out.splitlines()
    expected = out.pop(0)  # said once the second step is timed (test below)
    assert expected.startswith("expected time: grpo 3.0 s/step on this machine"), expected
    assert out == [
        "  grpo step 2/10  3.0 s/step  ETA 0:24  grpo/loss=0.5",
        "  grpo step 4/10  3.0 s/step  ETA 0:18  grpo/loss=0.5",
        "  eval final: 8 questions...",
        "  eval final step 10 (all phases): accuracy 25.0% (95% CI 7.1%-59.1%, n=8) in 0:16, 2.0 s/question",
    ]
    logged = [r.getMessage() for r in caplog.records if r.name == "rlvr.progress"]
    assert logged[0] == "grpo step 1/10  2.0 s/step  ETA 0:18  grpo/loss=0.5"  # its own time: no interval yet
    assert len([m for m in logged if m.startswith("grpo step")]) == 4


def test_a_resumed_phase_s_bar_starts_at_its_checkpoint(console):
    console.on_train_step(ev.TrainStep("grpo", 7, 10, {}))
    assert console._bars["grpo"].done == 7


def test_on_a_terminal_rich_draws_each_phase_and_evaluation_with_rate_and_eta(monkeypatch):
    observer = ConsoleObserver(log_every=100)
    observer.console = Console(file=io.StringIO(), force_terminal=True, force_interactive=True, width=160)
    assert observer.live
    observer.on_train_step(ev.TrainStep("sft", 1, 4, {}))
    observer.on_train_step(ev.TrainStep("sft", 2, 4, {}))
    bar = observer.progress("eval sft", 16, "question")
    bar.advance(3)
    observer._progress.refresh()
    drawn = observer.console.file.getvalue()
    assert "sft steps" in drawn and "2/4" in drawn and "eval sft" in drawn and "3/16" in drawn
    assert drawn.count("ETA") >= 2
    assert "questions..." not in drawn  # no plain line where a bar is drawn
    observer.close()


def test_an_rft_evaluation_in_training_counts_within_the_rft_phase(console, capsys):
    """The console reads the phase names from rlvr.stages: an RFT round's evaluation is an in-training one."""
    console.on_evaluation(make_eval_result("rft", 3, 1, n=4))
    out = capsys.readouterr().out
    assert "eval rft step 3:" in out and "all phases" not in out  # a stage label would split its step


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


def test_each_phase_says_its_expected_time_once_its_first_steps_are_timed(console, capsys, monkeypatch):
    """Issue 56 item 9: the ETA was only in the step lines (every log_every-th step, or a transient
    bar); a line of its own says it early, whatever log_every is, before an hour is committed. The
    first step (warm-up) is not timed; a phase that ends at its second step has nothing left to say."""
    import re

    clock = Clock()
    monkeypatch.setattr("rlvr.observers.console.time.monotonic", clock)
    for step, seconds in ((1, 30.0), (2, 4.0), (3, 4.0)):  # a slow first step, then 4 s a step
        clock.now += seconds  # each step's event comes at its end
        console.on_train_step(ev.TrainStep("sft", step, 640, {"sft/loss": 1.0}))
    for step in (1, 2):
        clock.now += 9.0
        console.on_train_step(ev.TrainStep("grpo", step, 2, {}))
    out = [line for line in capsys.readouterr().out.splitlines() if line.startswith("expected time")]
    assert len(out) == 1, out  # once for SFT (log_every=100 prints no step line); none for the ended GRPO
    assert re.fullmatch(
        r"expected time: sft 4\.0 s/step on this machine \(timed after its first step\), 638 more steps: "
        r"about 42:32, ending near \d\d:\d\d",
        out[0],
    ), out[0]
