"""Numbers that cannot fool their reader (issue 56 item 1, issue 55 finding 9): a model that gives one
answer to every question, or far fewer answers than the gold answers have, and a run whose verifier
never rewarded anything, are warnings wherever a result is read (report.json, report.md, the console,
the sweep table, the benchmark's reports and table); a stage gain that is only a constant answer's
frequency among the gold answers is flagged as such. All on synthetic per-question records."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

from rich.console import Console
from tests.unit.test_benchmark_results import make_cell
from tests.unit.test_sweep_report import make_sweep

from rlvr import events as ev
from rlvr.benchmark.results import build_reports, paired_markdown
from rlvr.benchmark.runner import results_table
from rlvr.evaluation.results import Evaluation, SampleRecord, answer_spread, constant_gain, paired
from rlvr.observers.console import ConsoleObserver
from rlvr.records.learning import (
    degenerate_warnings,
    end_status,
    learning_warnings,
    run_warnings,
    stage_changes,
    verifier_silent,
)
from rlvr.records.report import write_report
from rlvr.records.run_history import RunHistory
from rlvr.records.sweep_report import collect, to_markdown

# 64 gcd-like gold answers: 12 are 1, 20 are 2, the rest spread over 9 other values (11 in all).
GOLD = ["1"] * 12 + ["2"] * 20 + [str(v) for v in (3, 4, 5, 6, 7, 8, 9, 12, 15) for _ in range(3)] + ["6"] * 5


def evaluation(answers: list[str | None], gold: list[str] = GOLD) -> Evaluation:
    """Greedy records: one answer per question, scored 1.0 when it is the gold answer."""
    samples = [
        SampleRecord(i, "gcd", f"q{i}", g, [f"<answer>{a}</answer>"], [a], [float(a == g)], ["ok"])
        for i, (a, g) in enumerate(zip(answers, gold, strict=True))
    ]
    return Evaluation(samples, ks=[1], seconds=1.0, samples_per_second=1.0)


def result(label: str, step: int, answers: list[str | None]) -> ev.EvalResult:
    return ev.EvalResult(label, step, evaluation(answers))


def cycle(values: list[str], n: int = len(GOLD)) -> list[str]:
    return [values[i % len(values)] for i in range(n)]


UNANSWERED = [None] * len(GOLD)  # the base model: no answer in the format, 0%
ALL_ONE, ALL_TWO = ["1"] * len(GOLD), ["2"] * len(GOLD)
# a model that tries: right on 40 questions, wrong but varied on the others
HEALTHY = [g if i % 8 < 5 else str(int(g) + 1) for i, g in enumerate(GOLD)]


def test_one_answer_to_every_question_is_degenerate_and_no_answer_at_all_is_not():
    spread = answer_spread(evaluation(ALL_ONE))
    assert (spread.constant, spread.top, spread.top_gold, spread.distinct, spread.gold_distinct) == (
        True, "1", 12, 1, 11,
    )  # fmt: skip
    (warning,) = degenerate_warnings([result("final", 8, ALL_ONE)])
    assert warning.startswith(
        "Degenerate outputs final (step 8): every one of its 64 answers is `1`, where the gold answers "
        "take 11 values; `1` is the gold answer of 12 of 64 questions (18.8%)"
    )
    assert "Fix: " in warning and "data.train_size" in warning
    # no answer in the format (the base model) is no collapse; nor is a handful of equal answers
    assert degenerate_warnings([result("baseline", 0, UNANSWERED)]) == []
    assert degenerate_warnings([result("final", 8, ["2"] * 7 + [None] * 57)]) == []
    # the same answer where the gold answers are all that answer: nothing wrong with it
    assert answer_spread(evaluation(["yes"] * 10, ["yes"] * 10)).problem() is None
    # in-training evaluations are not the reported result: only the stage evaluations are read
    assert degenerate_warnings([result("grpo", 4, ALL_ONE)]) == []


def test_answers_far_less_varied_than_the_gold_answers_are_degenerate():
    two = answer_spread(evaluation(cycle(["1", "2"])))  # 2 values where the gold has 11: 0.18 < 0.25
    assert two.low_diversity and not two.constant and round(two.ratio, 2) == 0.18
    (warning,) = degenerate_warnings([result("after_sft", 20, cycle(["1", "2"]))])
    assert "its 64 answers take 2 values where the gold answers take 11 (ratio 0.18 < 0.25" in warning
    assert "at most 32 of 64 answered questions" in warning  # the 12 ones and 20 twos
    # three values of eleven (0.27) is above the floor; a model that tries is far above it
    assert answer_spread(evaluation(cycle(["1", "2", "3"]))).problem() is None
    assert answer_spread(evaluation(HEALTHY)).ratio == 1.0
    assert degenerate_warnings([result("final", 8, HEALTHY)]) == []


def test_a_gain_that_is_a_constant_answers_frequency_is_flagged_as_such(tmp_path):
    evals = [
        result("baseline", 0, UNANSWERED),
        result("after_sft", 20, ALL_ONE),
        result("final", 24, ALL_TWO),
    ]
    changes = {c.stage: c for c in stage_changes(evals)}
    assert changes["SFT"].change.delta * 64 == 12 and changes["whole run"].change.delta * 64 == 20
    warnings = degenerate_warnings(evals)
    sft = next(w for w in warnings if w.startswith("SFT: "))
    assert sft.endswith(
        "+18.8 points is the frequency of a constant answer among the gold answers, not learning: after "
        "it, every answer is `1`, the gold answer of 12 of 64 questions (18.8%)"
    )
    assert "McNemar p=0.000488" in sft  # the significant-looking gain the issue saw
    grpo = next(w for w in warnings if w.startswith("GRPO: "))
    assert "+12.5 points is the frequency" in grpo and "before it, every answer is `1`" in grpo
    assert any(w.startswith("whole run: ") and "`2`, the gold answer of 20 of 64" in w for w in warnings)
    # the same gain made of right answers to varied questions is no constant's frequency
    right12 = [g if i < 12 else None for i, g in enumerate(["1", "2", "3", "4"] * 16)]
    before = evaluation(UNANSWERED, ["1", "2", "3", "4"] * 16)
    after = evaluation(right12, ["1", "2", "3", "4"] * 16)
    assert constant_gain(before, after, paired(before, after)) is None

    # report.json, report.md and the console flag the gain where it is read
    history = RunHistory()
    outcome = SimpleNamespace(
        steps={"sft": 20, "grpo": 4}, seconds={"sft": 1.0, "grpo": 1.0}, history=[], stopped={}
    )
    found = run_warnings(outcome, history, evals)
    meta = {"model": "m", "tasks": ["gcd"], "status": end_status(found), "warnings": found, "notes": found}
    write_report(tmp_path, evals, outcome, meta, seconds=1.0, history=history)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["status"] == ev.COMPLETED_WITH_WARNINGS and report["warnings"] == found
    by_stage = {c["stage"]: c for c in report["paired_changes"]}
    assert by_stage["SFT"]["degenerate"].startswith("+18.8 points is the frequency of a constant answer")
    assert report["accuracy"][1]["answers"]["degenerate"].startswith("every one of its 64 answers is `1`")
    md = (tmp_path / "report.md").read_text()
    assert "- SFT: +18.8 points" in md and "**Degenerate**: +18.8 points is the frequency" in md
    assert "- Degenerate outputs after SFT (step 20): every one of its 64 answers is `1`" in md
    result_ = ev.RunResult(
        ev.COMPLETED_WITH_WARNINGS, tmp_path, evals, stage_changes(evals), notes=found, warnings=found
    )
    observer = ConsoleObserver(log_every=5)
    observer.console = Console(file=io.StringIO(), width=1000, highlight=False)
    observer.on_pipeline_end(ev.PipelineEnd(ev.COMPLETED_WITH_WARNINGS, 60.0, result_))
    out = observer.console.file.getvalue()
    assert "SFT: +18.8 points" in out and "Degenerate: +18.8 points is the frequency of a constant" in out
    assert "Warning: Degenerate outputs final (step 24): every one of its 64 answers is `2`" in out


def test_the_sweep_table_shows_a_collapsed_point_as_completed_with_warnings(tmp_path):
    sweep = make_sweep(tmp_path)
    found = degenerate_warnings([result("final", 8, ALL_TWO)])
    report = json.loads((sweep / "0" / "report.json").read_text())
    (sweep / "0" / "report.json").write_text(json.dumps({**report, "warnings": found}))
    point = collect(sweep)[0]
    assert point.status == ev.COMPLETED_WITH_WARNINGS and point.warnings == found
    assert "| 0 | COMPLETED_WITH_WARNINGS |" in to_markdown([point])
    assert "every one of its 64 answers is `2`" in to_markdown([point])


# -- learned nothing, per term (issue 55 finding 9) ---------------------------------------------------
def grpo_rows(correctness: list[float], format_: list[float]) -> list[dict]:
    """GRPO steps where the format term gives half the groups reward variance."""
    return [
        {
            "step": i + 1,
            "grpo/reward/correctness/mean": c,
            "grpo/reward/format/mean": f,
            "grpo/reward/zero_std_groups_frac": 0.5,
        }
        for i, (c, f) in enumerate(zip(correctness, format_, strict=True))
    ]


def test_a_verifier_term_at_zero_every_step_is_a_warning_though_format_gave_variance():
    rows = grpo_rows([0.0] * 6, [0.1, 0.3, 0.2, 0.5, 0.4, 0.6])
    assert learning_warnings({"grpo": 6}, rows, {}) == []  # the no-variance check cannot see it
    (warning,) = verifier_silent({"grpo": 6}, rows, "correctness", [])
    assert warning.startswith("GRPO's verifier term correctness was 0 at every one of its 6 logged steps")
    assert "training_loop.sft.enabled=true" in warning
    # one step with a verified completion: it learned from the verifier, no warning
    assert verifier_silent({"grpo": 6}, grpo_rows([0, 0, 0.125, 0, 0, 0], [0.5] * 6), "correctness", []) == []
    # no verifier term, or GRPO trained no step (said by the 0-step warning): nothing to say here
    assert verifier_silent({"grpo": 6}, rows, None, []) == []
    assert verifier_silent({"grpo": 0}, rows, "correctness", []) == []
    # every group flat too: the no-variance warning says it, once
    flat = [{**r, "grpo/reward/zero_std_groups_frac": 1.0} for r in rows]
    assert len(learning_warnings({"grpo": 6}, flat, {})) == 1
    assert verifier_silent({"grpo": 6}, flat, "correctness", []) == []


def test_zero_accuracy_at_every_evaluation_is_a_warning_and_it_reaches_the_runs_status():
    zero = [result("baseline", 0, UNANSWERED), result("final", 6, [str(int(g) + 1) for g in GOLD])]
    (warning,) = verifier_silent({"grpo": 6}, [], "correctness", zero)
    assert warning.startswith(
        "Held-out accuracy was 0% at every one of the run's 2 evaluations (baseline, final)"
    )
    assert verifier_silent({"grpo": 6}, [], "correctness", [*zero, result("after_sft", 3, HEALTHY)]) == []
    assert verifier_silent({"grpo": 0}, [], "correctness", zero) == []  # trained nothing: said elsewhere
    # through run_warnings, with the run's reward set: both facts, and the run ends with warnings
    terms = {"correctness": SimpleNamespace(weight=1.0), "format": SimpleNamespace(weight=0.2)}
    reward = SimpleNamespace(terms=terms, success_term=lambda: "correctness")
    outcome = SimpleNamespace(steps={"grpo": 6}, history=grpo_rows([0.0] * 6, [0.5] * 6), stopped={})
    found = run_warnings(outcome, RunHistory(), zero, reward)
    assert [w[:22] for w in found] == ["GRPO's verifier term c", "Held-out accuracy was "]
    assert end_status(found) == ev.COMPLETED_WITH_WARNINGS


# -- the benchmark --------------------------------------------------------------------------------------
def constant_cell(model: str, answer: str) -> object:
    """A benchmark cell whose 16 answers are all ``answer`` (gold 1..4, four times)."""
    cell = make_cell(model, scores=[[0.0]] * 16)
    for i, s in enumerate(cell.evaluation.samples):
        s.reference = str(i % 4 + 1)
        s.answers, s.scores = [answer], [float(answer == s.reference)]
    cell.evaluation = Evaluation(cell.evaluation.samples, ks=[1], seconds=1.0, samples_per_second=1.0)
    return cell


def test_the_benchmark_reports_and_table_flag_a_degenerate_cell():
    healthy = make_cell("a", scores=[[0.0]] * 16)
    for i, s in enumerate(healthy.evaluation.samples):
        s.reference, s.answers = str(i % 4 + 1), [str(i % 4 + 2)]
    healthy.evaluation = Evaluation(healthy.evaluation.samples, ks=[1], seconds=1.0, samples_per_second=1.0)
    collapsed = constant_cell("b", "1")
    _, all_report = build_reports([healthy, collapsed], "20260101_000000")
    (warning,) = all_report["warnings"]
    assert warning.startswith("Degenerate outputs: b on basic_arithmetic: every one of its 16 answers is `1`")
    models = all_report["tasks"]["basic_arithmetic"]["models"]
    assert models["a"]["answers"]["degenerate"] is None and models["b"]["answers"]["constant"] is True
    (pair,) = all_report["tasks"]["basic_arithmetic"]["paired"]
    assert pair["degenerate"].startswith("+25.0 points is the frequency of a constant answer")
    md = paired_markdown(all_report)
    assert "Degenerate outputs (a difference they make is no evidence of skill):" in md
    assert f"- {warning}" in md and "- basic_arithmetic, b - a: +25.0 points is the frequency" in md
    console = Console(file=io.StringIO(), width=300)
    console.print(results_table([healthy, collapsed]))
    table = console.file.getvalue()
    assert "25.0% [10%-49%] n=16~" in table and "0.0% [0%-19%] n=16 " in table


def test_one_task_of_a_mixture_that_collapsed_is_a_warning_the_whole_would_hide():
    """Measured 2026-11-29 (SmolLM2-135M, prompts=working_out, a 3-task mixture after 160 SFT steps):
    every letter_counting answer was `1` (the gold answer of 33 of 50 questions: 66%) while the
    arithmetic and leg-counting answers varied, so the 150 answers together took many values and no
    warning was given. Each task of a mixture is judged on its own."""
    varied = [str(v) for v in range(50)]  # another task: right or wrong, its answers vary
    letter_gold = ["1"] * 33 + ["2"] * 9 + ["3"] * 6 + ["4"] * 2
    samples = [
        SampleRecord(i, "basic_arithmetic", f"a{i}", str(i % 7), ["c"], [a], [float(a == str(i % 7))], ["ok"])
        for i, a in enumerate(varied)
    ] + [
        SampleRecord(50 + i, "letter_counting", f"l{i}", g, ["c"], ["1"], [float(g == "1")], ["ok"])
        for i, g in enumerate(letter_gold)
    ]
    mixed = Evaluation(samples, ks=[1], seconds=1.0, samples_per_second=1.0)
    assert answer_spread(mixed).problem() is None  # the whole: 50 distinct answers, nothing to see
    (warning,) = degenerate_warnings([ev.EvalResult("final", 164, mixed)])
    assert warning.startswith(
        "Degenerate outputs final (step 164) on task letter_counting: every one of its 50"
    )
    assert "`1` is the gold answer of 33 of 50 questions (66.0%)" in warning
    # one task only: the whole is that task, said once, with no task named
    (single,) = degenerate_warnings([ev.EvalResult("final", 164, Evaluation(samples[50:], [1], 1.0, 1.0))])
    assert " on task " not in single
