"""The end-of-run report: table rows, JSON, markdown and plot, from events only (no model)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from tests.conftest import make_eval_result

from rlvr import events as ev
from rlvr.records.report import report_rows, write_report


def result(label: str, step: int, correct: int, n: int = 200) -> ev.EvalResult:
    return make_eval_result(label, step, correct, n)


EVALS = [
    result("baseline", 0, 0),
    result("sft", 40, 30),
    result("after_sft", 80, 61),
    result("grpo", 40, 100),
    result("final", 160, 130),
]


def test_rows_are_the_stages_in_order_with_their_intervals():
    rows = report_rows(EVALS)
    assert [r["stage"] for r in rows] == ["base model", "after SFT", "final"]
    assert [r["accuracy"] for r in rows] == [0.0, 0.305, 0.65]
    base = rows[0]
    assert base["ci_low"] == 0.0 and 0.018 < base["ci_high"] < 0.02  # Wilson upper bound for 0/200
    assert all(r["ci_low"] <= r["accuracy"] <= r["ci_high"] for r in rows)


def test_write_report_files(tmp_path):
    outcome = SimpleNamespace(
        steps={"sft": 80, "grpo": 80},
        seconds={"sft": 420.0, "grpo": 600.0},
        history=[{"step": s, "sft/loss": 1.0 / s} for s in range(1, 81)]
        + [{"step": s, "grpo/reward/mean": s / 100} for s in range(1, 81)],
    )
    meta = {"model": "m", "tasks": ["basic_arithmetic"]}
    files = write_report(tmp_path, EVALS, outcome, meta, seconds=1200.0)
    report = json.loads((tmp_path / "report.json").read_text())
    assert [r["stage"] for r in report["accuracy"]] == ["base model", "after SFT", "final"]
    assert [(e["label"], e["step"]) for e in report["in_training"]] == [("sft", 40), ("grpo", 40)]
    assert report["train_seconds"] == {"sft": 420.0, "grpo": 600.0} and report["wall_seconds"] == 1200.0
    md = (tmp_path / "report.md").read_text()
    assert "| after SFT | 80 | 30.5% |" in md and "| final | 160 | 65.0% |" in md
    assert "SFT 80 steps in 7.0 min, GRPO 80 steps in 10.0 min" in md and "20.0 min" in md
    png = tmp_path / "training.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(files.values()) >= {str(tmp_path / "report.md"), str(png)}


def test_the_report_says_that_lora_was_used_and_how(tmp_path):
    outcome = SimpleNamespace(steps={"sft": 2, "grpo": 4}, seconds={}, history=[])
    meta = {"model": "tiny", "tasks": ["leg_counting"]}
    write_report(tmp_path, EVALS, outcome, meta, seconds=1.0)
    assert "LoRA" not in (tmp_path / "report.md").read_text()  # full weights: nothing to say
    assert "lora" not in json.loads((tmp_path / "report.json").read_text())

    final = tmp_path / "final"
    final.mkdir()
    adapter = {
        "r": 8,
        "lora_alpha": 16,
        "target_modules": ["v_proj", "q_proj"],
        "base_model_name_or_path": "b",
    }
    (final / "adapter_config.json").write_text(json.dumps(adapter))  # what PEFT writes (trimmed)
    (final / "rlvr_quantization.json").write_text(json.dumps({"quantization": "4bit"}))
    write_report(tmp_path, EVALS, outcome, meta, seconds=1.0)
    md = (tmp_path / "report.md").read_text()
    assert (
        "Trained with LoRA (rank 8, alpha 16, on q_proj, v_proj) on a 4bit base (b); final/ holds the "
        "adapter only, not merged into the base weights." in md
    )
    assert json.loads((tmp_path / "report.json").read_text())["lora"] == {
        "r": 8,
        "alpha": 16,
        "target_modules": ["q_proj", "v_proj"],
        "base": "b",
        "quantization": "4bit",
        "merged": False,
    }


def test_report_states_each_stages_paired_change(tmp_path):
    """make_eval_result marks the first `correct` questions right, so SFT flips 61 questions to right
    (none back) and GRPO 69 more: the paired numbers follow from that, not from two Wilson intervals."""
    outcome = SimpleNamespace(steps={"sft": 80, "grpo": 80}, seconds={}, history=[])
    write_report(tmp_path, EVALS, outcome, {"model": "m", "tasks": ["t"]}, seconds=1.0)
    report = json.loads((tmp_path / "report.json").read_text())
    by_stage = {c["stage"]: c for c in report["paired_changes"]}
    assert list(by_stage) == ["SFT", "GRPO", "whole run"]
    assert (by_stage["SFT"]["wrong_to_right"], by_stage["SFT"]["right_to_wrong"]) == (61, 0)
    assert round(by_stage["GRPO"]["delta"], 3) == 0.345 and by_stage["GRPO"]["wrong_to_right"] == 69
    assert by_stage["whole run"]["ci_low"] > 0.5
    md = (tmp_path / "report.md").read_text()
    assert "- GRPO: +34.5 points" in md and "69 wrong->right" in md


def test_a_stage_that_hurts_is_reported_as_a_loss(tmp_path):
    evals = [result("after_sft", 80, 128), result("final", 96, 118)]
    outcome = SimpleNamespace(steps={"sft": 80, "grpo": 16}, seconds={}, history=[])
    write_report(tmp_path, evals, outcome, {"model": "m", "tasks": ["t"]}, seconds=1.0)
    (grpo,) = json.loads((tmp_path / "report.json").read_text())["paired_changes"]
    assert grpo["stage"] == "GRPO" and grpo["delta"] == -0.05 and grpo["ci_high"] < 0
    assert grpo["right_to_wrong"] == 10 and grpo["p_value"] < 0.01


def test_stages_over_different_questions_are_not_paired(tmp_path):
    evals = [result("after_sft", 80, 100, n=200), result("final", 96, 100, n=150)]  # eval size changed
    outcome = SimpleNamespace(steps={"sft": 80, "grpo": 16}, seconds={}, history=[])
    write_report(tmp_path, evals, outcome, {"model": "m", "tasks": ["t"]}, seconds=1.0)
    assert json.loads((tmp_path / "report.json").read_text())["paired_changes"] == []


def sampled_result(label: str, step: int, right_per_question: list[int], k: int = 4) -> ev.EvalResult:
    """k samples per question, the first ``right_per_question[i]`` of question i right."""
    from rlvr.evaluation.results import Evaluation, SampleRecord

    samples = [
        SampleRecord(
            i,
            "t",
            f"q{i}",
            "1",
            ["c"] * k,
            ["1"] * r + ["0"] * (k - r),
            [1.0] * r + [0.0] * (k - r),
            ["ok"] * k,
        )
        for i, r in enumerate(right_per_question)
    ]
    return ev.EvalResult(label, step, Evaluation(samples, ks=[1, k], seconds=1.0, samples_per_second=1.0))


def test_sampled_stage_evaluations_are_paired_apart_from_the_greedy_table(tmp_path):
    """GRPO's start and end sampled at T (evaluation.sampled): the pairing uses each question's share
    of right samples, so 100 questions going from 1/4 to 2/4 right is +25 points although no
    question flips completely; the greedy table, curve and in-training list do not show them."""
    evals = [
        *EVALS[:3],
        sampled_result("after_sft_sampled", 80, [1] * 100),
        *EVALS[3:],
        sampled_result("final_sampled", 160, [2] * 100),
    ]
    outcome = SimpleNamespace(steps={"sft": 80, "grpo": 80}, seconds={}, history=[])
    write_report(tmp_path, evals, outcome, {"model": "m", "tasks": ["t"]}, seconds=1.0)
    report = json.loads((tmp_path / "report.json").read_text())
    assert [r["stage"] for r in report["accuracy"]] == ["base model", "after SFT", "final"]
    assert [e["label"] for e in report["in_training"]] == ["sft", "grpo"]
    assert [e["label"] for e in report["sampled"]] == ["after_sft_sampled", "final_sampled"]
    sampled = report["paired_changes"][-1]
    assert sampled["stage"] == "GRPO, sampled at the training temperature"
    assert sampled["delta"] == 0.25 and sampled["ci_low"] == sampled["ci_high"] == 0.25
    assert sampled["right_to_wrong"] == sampled["wrong_to_right"] == 0
    md = (tmp_path / "report.md").read_text()
    assert "- after SFT (step 80, n=100): pass@1 25.0%, pass@4 100.0%" in md
    assert "- final (step 160, n=100): pass@1 50.0%" in md
    assert "- GRPO, sampled at the training temperature: +25.0 points" in md


def test_training_png_gives_each_phase_its_panel_and_marks_the_boundary_and_sampled_pass_at_1():
    """SFT loss and GRPO reward on their own axes (their units differ), the held-out evaluations over
    the run's steps with a line where GRPO starts, an in-training GRPO evaluation placed after SFT, and
    the sampled pass@1 beside the greedy accuracy."""
    from rlvr.records.report import training_figure

    history = [{"step": s, "sft/loss": 1.0 / s} for s in range(1, 81)] + [
        {"step": s, "grpo/reward/mean": s / 100} for s in range(1, 81)
    ]
    sampled = [
        sampled_result("after_sft_sampled", 80, [1, 2, 0, 4]),
        sampled_result("final_sampled", 160, [4, 4, 1, 4]),
    ]
    fig = training_figure(history, EVALS, sampled, {"sft": 80, "grpo": 80})
    sft, grpo, acc = fig.axes
    assert (sft.get_title(), sft.get_xlabel()) == ("SFT training loss", "SFT step")
    assert (grpo.get_title(), grpo.get_xlabel()) == ("GRPO training reward", "GRPO step")
    assert list(grpo.lines[0].get_xdata()) == list(range(1, 81))  # GRPO's own steps, not after SFT's
    boundaries = [line.get_xdata()[0] for line in acc.lines if line.get_linestyle() == ":"]
    assert boundaries == [80]
    assert {t.get_text() for t in acc.texts} == {"SFT", "GRPO"}
    greedy = next(c for c in acc.containers)  # the error bar container
    assert list(greedy.lines[0].get_xdata()) == [0, 40, 80, 120, 160]  # grpo step 40 sits at 80 + 40
    (pass_at_1,) = [line for line in acc.lines if line.get_label().startswith("sampled pass@1")]
    assert list(pass_at_1.get_xdata()) == [80, 160]
    assert list(pass_at_1.get_ydata()) == [100 * 7 / 16, 100 * 13 / 16]  # in %, as the report says


def test_training_png_labels_every_axis_and_gives_accuracy_in_percent():
    from rlvr.records.report import training_figure

    history = [{"step": s, "sft/loss": 1.0 / s} for s in range(1, 81)] + [
        {"step": s, "grpo/reward/mean": s / 100} for s in range(1, 81)
    ]
    fig = training_figure(history, EVALS, [], {"sft": 80, "grpo": 80})
    sft, grpo, acc = fig.axes
    assert [ax.get_ylabel() for ax in fig.axes] == [
        "training loss",
        "mean reward per completion",
        "held-out accuracy (%)",
    ]
    greedy = acc.containers[0]
    assert list(greedy.lines[0].get_ydata()) == [0.0, 15.0, 30.5, 50.0, 65.0]  # the report's 30.5%, not 0.305
    assert acc.get_ylim() == (-3, 103)
    assert acc.yaxis.get_major_formatter()(50, 0) == "50%"


def axis_share(ax, x0: float, x1: float) -> float:
    """The part of the axis's drawn width between run steps x0 and x1."""
    (a, _), (b, _) = ax.transData.transform([(x0, 0), (x1, 0)])
    return (b - a) / ax.get_window_extent().width


def test_phases_take_the_run_axis_in_proportion_to_their_steps_and_a_short_one_is_not_squeezed():
    from rlvr.records.report import training_figure

    even = training_figure([], EVALS, [], {"sft": 80, "grpo": 80}).axes[0]
    assert axis_share(even, 0, 80) == pytest.approx(axis_share(even, 80, 160), rel=1e-6)
    uneven = training_figure([], EVALS, [], {"sft": 300, "grpo": 100}).axes[0]
    assert axis_share(uneven, 0, 300) == pytest.approx(3 * axis_share(uneven, 300, 400), rel=1e-6)
    # 10 GRPO steps after 500 SFT steps: 2% of the run, drawn over a quarter of the axis, not at its edge
    short = training_figure(
        [], [result("baseline", 0, 0), result("final", 510, 9)], [], {"sft": 500, "grpo": 10}
    )
    ax = short.axes[0]
    assert axis_share(ax, 500, 510) == pytest.approx(0.25 / 1.06, rel=1e-3)
    assert axis_share(ax, 0, 500) == pytest.approx(0.75 / 1.06, rel=1e-3)
    assert {500.0, 510.0} <= set(ax.get_xticks())  # the ticks stay real run steps


def test_training_chart_is_written_in_the_suffixs_format(tmp_path):
    from rlvr.records.report import _plot

    for name, magic in (("t.png", b"\x89PNG"), ("t.svg", b"<?xml"), ("t.pdf", b"%PDF")):
        _plot([], EVALS, [], {"sft": 80, "grpo": 80}, tmp_path / name)
        assert (tmp_path / name).read_bytes().startswith(magic)
    with pytest.raises(
        ValueError, match=r"t.gif: suffix '.gif' is not a chart format; use .png, .svg or .pdf"
    ):
        _plot([], EVALS, [], {"sft": 80, "grpo": 80}, tmp_path / "t.gif")
