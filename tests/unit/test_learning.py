"""A run says what it learned (issue 45): a phase with no step, an RFT phase that kept no sample, a
GRPO phase with no reward variance in any group are warnings in report.json, report.md, the console
summary and the sweep report, and the run ends COMPLETED_WITH_WARNINGS."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from types import SimpleNamespace

from rich.console import Console
from tests.conftest import make_eval_result
from tests.unit.test_sweep_report import make_sweep

from rlvr import events as ev
from rlvr.events import COMPLETED_WITH_WARNINGS
from rlvr.observers.console import ConsoleObserver
from rlvr.records.learning import end_status, learning_warnings, run_warnings
from rlvr.records.report import write_report
from rlvr.records.run_history import RunHistory
from rlvr.records.sweep_report import chart, collect, to_csv, to_markdown

FLAT = [{"step": s, "grpo/reward/zero_std_groups_frac": 1.0} for s in (1, 2, 3)]


def test_a_phase_with_no_step_is_a_warning_and_its_own_reason_replaces_the_generic_one():
    found = learning_warnings({"sft": 0, "rft": 0, "grpo": 3}, [], {"rft": "RFT stopped at step 0 of 8: ..."})
    assert found == [
        "RFT stopped at step 0 of 8: ...",
        "SFT trained 0 steps: the model after it is the model it was given. Check training_loop.sft "
        "(max_steps, data)",
    ]
    assert learning_warnings({"sft": 4, "grpo": 3}, [], {}) == [] and end_status([]) == "COMPLETED"
    assert end_status(found) == COMPLETED_WITH_WARNINGS


def test_grpo_with_no_reward_variance_at_any_step_is_a_warning_and_one_step_with_signal_is_not():
    (flat,) = learning_warnings({"grpo": 3}, FLAT, {})
    assert flat.startswith("GRPO had no reward variance in any group at any of its 3 logged steps")
    assert "training_loop.sft.enabled=true" in flat  # the fix names the keys
    # TRL's own share, when the reward set does not log the pipeline's, arrives under the same name
    # (rlvr.training_loop.callbacks.TRL_NAMES); its TRL name is no metric of the pipeline
    trl = [{"step": s, "grpo/frac_reward_zero_std": 1.0} for s in (1, 2)]
    assert learning_warnings({"grpo": 2}, trl, {}) == []
    some_signal = [*FLAT, {"step": 4, "grpo/reward/zero_std_groups_frac": 0.5}]
    assert learning_warnings({"grpo": 4}, some_signal, {}) == []
    assert learning_warnings({"grpo": 4}, [{"step": 1, "grpo/loss": 0.0}], {}) == []  # nothing logged
    # a resumed run: the flat steps of its earlier attempts count with this attempt's
    history = RunHistory(attempts=[{"phases": {"grpo": {"steps": 3, "seconds": 1.0}}}], history=FLAT)
    outcome = SimpleNamespace(steps={"grpo": 4}, history=[FLAT[0] | {"step": 4}], stopped={})
    assert "at any of its 4 logged steps" in run_warnings(outcome, history)[0]


def test_the_report_opens_with_the_status_and_the_warnings(tmp_path):
    warning = "GRPO had no reward variance in any group at any of its 3 logged steps: ..."
    outcome = SimpleNamespace(steps={"grpo": 3}, seconds={"grpo": 6.0}, history=FLAT)
    meta = {
        "model": "m",
        "tasks": ["t"],
        "status": COMPLETED_WITH_WARNINGS,
        "warnings": [warning],
        "notes": [warning, "an expectation note"],
    }
    write_report(tmp_path, [make_eval_result("final", 3, 1, 10)], outcome, meta, seconds=6.0)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["status"] == COMPLETED_WITH_WARNINGS and report["warnings"] == [warning]
    assert report["notes"] == [warning, "an expectation note"]
    md = (tmp_path / "report.md").read_text()
    assert md.split("\n")[2:5] == [
        f"**{COMPLETED_WITH_WARNINGS}**: what the run did not learn:",
        "",
        f"- {warning}",
    ]
    assert md.count(warning) == 1 and "Note: an expectation note" in md


def test_the_console_summary_says_warning_and_the_status():
    warning = "RFT stopped at step 0 of 8: round 0 kept none of its 32 samples (none was verified)."
    result = ev.RunResult(COMPLETED_WITH_WARNINGS, Path("run"), notes=[warning, "a note"], warnings=[warning])
    observer = ConsoleObserver(log_every=5)
    observer.console = Console(file=io.StringIO(), width=300, highlight=False)
    observer.on_pipeline_end(ev.PipelineEnd(COMPLETED_WITH_WARNINGS, 60.0, result))
    out = observer.console.file.getvalue()
    assert f"Warning: {warning}" in out and "Note: a note" in out
    assert "pipeline COMPLETED_WITH_WARNINGS in 1.0 min" in out


def test_the_sweep_report_shows_a_points_warnings_in_its_status_and_a_column(tmp_path):
    sweep = make_sweep(tmp_path)
    report = json.loads((sweep / "0" / "report.json").read_text())
    warning = "GRPO had no reward variance | in any group"
    (sweep / "0" / "report.json").write_text(json.dumps({**report, "warnings": [warning]}))
    # a point whose pipeline_end says COMPLETED_WITH_WARNINGS before its attempts.json: not FAILED
    (sweep / "2" / "metrics.jsonl").write_text(
        json.dumps({"event": "pipeline_end", "status": COMPLETED_WITH_WARNINGS}) + "\n"
    )
    points = collect(sweep)
    assert [p.status for p in points] == [COMPLETED_WITH_WARNINGS, "FAILED", "RUNNING"]
    assert points[0].warnings == [warning] and points[0].accuracy["final"]["accuracy"] == 0.6
    md = to_markdown(points)
    assert md.splitlines()[0].endswith("| attempts | warnings |")
    assert "| 0 | COMPLETED_WITH_WARNINGS |" in md and md.splitlines()[2].endswith(
        "| GRPO had no reward variance \\| in any group |"
    )
    rows = list(csv.DictReader(io.StringIO(to_csv(points))))
    assert rows[0]["warnings"] == warning and rows[1]["warnings"] == ""
    assert len(chart(points).axes[0].get_xticks()) == 1  # still charted with the completed points


# -- the reward-hacking alarm ---------------------------------------------------------------------
WEIGHTS = {"correctness": 1.0, "format": 0.2}


def grpo_rows(correctness: list[float], format_: list[float]) -> list[dict]:
    return [
        {"step": i + 1, "grpo/reward/correctness/mean": c, "grpo/reward/format/mean": f}
        for i, (c, f) in enumerate(zip(correctness, format_, strict=True))
    ]


def held_out(before: int, after: int, n: int = 200) -> ev.StageChange:
    from rlvr.records.learning import stage_changes

    evals = [make_eval_result("after_sft", 2, before, n), make_eval_result("final", 12, after, n)]
    (change,) = [c for c in stage_changes(evals) if c.stage == "GRPO"]
    return change


def test_a_shaping_term_that_rises_while_the_verifier_does_not_sounds_the_alarm():
    from rlvr.records.learning import reward_hacking

    flat = [0.3, 0.32, 0.28] * 4  # correctness: no trend over 12 steps
    gamed = [0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0]  # format learned
    (alarm,) = reward_hacking(grpo_rows(flat, gamed), WEIGHTS, "correctness", None)
    assert alarm.startswith("Reward-hacking alarm: from the first to the last third of GRPO's 12 logged")
    assert "format +0.145" in alarm and "reward.terms.format.weight" in alarm  # 0.2 x (0.9125 - 0.1875)
    # the verifier rose with it: a model that learned the format and the task, no alarm
    learning = [0.2, 0.22, 0.25, 0.3, 0.3, 0.35, 0.4, 0.42, 0.45, 0.5, 0.5, 0.55]
    assert reward_hacking(grpo_rows(learning, gamed), WEIGHTS, "correctness", None) == []
    # a noisy shaping term with no trend (its rise within two standard errors): no alarm
    noisy = [0.0, 1.0, 0.0, 0.5, 0.5, 0.5, 0.5, 0.5, 1.0, 0.0, 1.0, 1.0]  # +0.075 weighted, SE 0.069
    assert reward_hacking(grpo_rows(flat, noisy), WEIGHTS, "correctness", None) == []
    # thirds of fewer than 3 steps: too short to tell a trend, no alarm
    assert reward_hacking(grpo_rows(flat[:8], gamed[:8]), WEIGHTS, "correctness", None) == []
    # no verifier term (a run rewarded by format only): nothing to compare with
    assert reward_hacking(grpo_rows(flat, gamed), {"format": 1.0}, None, None) == []


def test_training_correctness_up_while_held_out_accuracy_falls_sounds_the_alarm():
    from rlvr.records.learning import reward_hacking

    rising = [0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75]
    fmt = [1.0] * 12
    (alarm,) = reward_hacking(grpo_rows(rising, fmt), WEIGHTS, "correctness", held_out(100, 70))
    assert "rose +40.0 points" in alarm and "fell 15.0 points" in alarm  # 0.675 - 0.275
    assert "after_sft 50.0% -> final 35.0%" in alarm and "data.train_size" in alarm
    # a fall whose interval reaches 0 is not shown to be one: no alarm
    assert reward_hacking(grpo_rows(rising, fmt), WEIGHTS, "correctness", held_out(10, 8)) == []
    # held-out fell but training correctness did not rise: the model got worse, not hacked
    flat = [0.3, 0.32, 0.28] * 4
    assert reward_hacking(grpo_rows(flat, fmt), WEIGHTS, "correctness", held_out(100, 70)) == []


def sampled_change(before: int, after: int, n: int = 200) -> ev.StageChange:
    from rlvr.records.learning import SAMPLED_GRPO_STAGE, stage_changes

    evals = [
        make_eval_result("after_sft_sampled", 2, before, n),
        make_eval_result("final_sampled", 12, after, n),
    ]
    (change,) = [c for c in stage_changes(evals) if c.stage == SAMPLED_GRPO_STAGE]
    return change


def test_the_held_out_fall_is_read_at_the_training_temperature_where_the_run_sampled():
    """Measured 2026-12-03 (seed 43, the worked default): training correctness +8.8 points, greedy
    96.0% -> 92.5% (CI [-6.0, -1.0]), sampled 87.0% -> 88.4%: GRPO's gain carried to new questions
    at the temperature it trained at, so no reward-hacking alarm (the paired changes show the fall)."""
    from rlvr.records.learning import reward_hacking

    rising = [0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75]
    rows, fmt = grpo_rows(rising, [1.0] * 12), WEIGHTS
    assert reward_hacking(rows, fmt, "correctness", held_out(100, 70), sampled_change(60, 70)) == []
    # the sampled measure fell too (or did not rise): the greedy fall is the alarm
    (alarm,) = reward_hacking(rows, fmt, "correctness", held_out(100, 70), sampled_change(60, 60))
    assert "after_sft 50.0% -> final 35.0%" in alarm
    # a sampled fall with its interval below 0 is the alarm, named by its own labels, greedy flat or not
    (alarm,) = reward_hacking(rows, fmt, "correctness", held_out(100, 100), sampled_change(100, 60))
    assert "after_sft_sampled 50.0% -> final_sampled 30.0%" in alarm and "fell 20.0 points" in alarm
    # neither fell: no alarm
    assert reward_hacking(rows, fmt, "correctness", held_out(100, 100), sampled_change(60, 60)) == []
    # a run's warnings read both from its evaluations
    outcome = SimpleNamespace(steps={"sft": 10, "grpo": 12}, history=rows, stopped={})
    reward = SimpleNamespace(
        terms={n: SimpleNamespace(weight=w) for n, w in WEIGHTS.items()}, success_term=lambda: "correctness"
    )
    greedy = [make_eval_result("after_sft", 10, 100), make_eval_result("final", 22, 70)]
    sampled = [make_eval_result("after_sft_sampled", 10, 60), make_eval_result("final_sampled", 22, 70)]
    empty = RunHistory(attempts=[], history=[])
    assert run_warnings(outcome, empty, greedy + sampled, reward) == []
    (alarm,) = run_warnings(outcome, empty, greedy, reward)
    assert "after_sft 50.0% -> final 35.0%" in alarm


def test_the_alarm_reaches_the_runs_warnings_with_its_reward_set_and_evaluations():
    rising = [0.2 + 0.05 * i for i in range(12)]
    history = RunHistory(attempts=[], history=[])
    outcome = SimpleNamespace(steps={"grpo": 12}, history=grpo_rows(rising, [1.0] * 12), stopped={})
    terms = {n: SimpleNamespace(weight=w) for n, w in WEIGHTS.items()}
    reward = SimpleNamespace(terms=terms, success_term=lambda: "correctness")
    evals = [make_eval_result("baseline", 0, 100), make_eval_result("final", 12, 70)]
    # GRPO the only phase: the whole run's change is GRPO's
    (alarm,) = run_warnings(outcome, history, evals, reward)
    assert "baseline 50.0% -> final 35.0%" in alarm
    # with SFT before it, only GRPO's own change counts (none here: no after_sft evaluation)
    outcome.steps = {"sft": 4, "grpo": 12}
    assert run_warnings(outcome, history, evals, reward) == []
    assert run_warnings(outcome, history, [*evals, make_eval_result("after_sft", 4, 100)], reward)
