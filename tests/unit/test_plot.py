"""Unit tests for rlvr.benchmark.plot: charts from synthetic result files and the rlvr-plot CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread

from rlvr.benchmark.plot import (
    ModelScore,
    ReportError,
    all_tasks_chart,
    detect_kind,
    draw_comparison,
    main,
    task_chart,
)


def entry(acc: float, n: int = 50) -> dict[str, Any]:
    return {
        "n": n,
        "correct": acc * n,
        "accuracy": acc,
        "ci_low": max(0.0, acc - 0.1),
        "ci_high": min(1.0, acc + 0.1),
    }


TASK_REPORT = {
    "kind": "task",
    "format_version": 1,
    "task": "gsm8k",
    "timestamp": "20250101_000000",
    "prompt_hash": "p1",
    "models": {"org/model-a": entry(0.42), "org/model-b": entry(0.1)},
}
ALL_REPORT = {
    "kind": "all_tasks",
    "format_version": 1,
    "timestamp": "20250101_000000",
    "tasks": {
        "gsm8k": {"prompt_hash": "p1", "models": {"org/model-a": entry(0.42), "org/model-b": entry(0.1)}},
        "leg_counting": {
            "prompt_hash": "p1",
            "models": {"org/model-a": entry(0.8), "org/model-b": entry(0.3)},
        },
    },
    "average": {"org/model-a": 0.61, "org/model-b": 0.2},
}


def write(path: Path, obj: Any) -> Path:
    path.write_text(json.dumps(obj) if not isinstance(obj, str) else obj)
    return path


def tick_labels(fig: Figure) -> list[str]:
    return [t.get_text() for t in fig.axes[0].get_xticklabels()]


def legend_labels(fig: Figure) -> list[str]:
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def bar_heights(fig: Figure) -> list[float]:
    return [round(p.get_height(), 6) for p in fig.axes[0].patches]


def assert_png(path: Path) -> None:
    assert path.is_file() and path.stat().st_size > 1000
    image = imread(path)
    assert image.ndim == 3 and image.shape[2] in (3, 4)
    assert image.shape[0] >= 300 and image.shape[1] >= 400
    assert image.std() > 0  # not a blank canvas


def test_task_chart_bars_labels_and_rename() -> None:
    fig = task_chart(TASK_REPORT, rename={"org/model-a": "A"})
    assert tick_labels(fig) == ["A", "org/model-b"]
    assert bar_heights(fig) == [42.0, 10.0]
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert texts == ["42.0%", "10.0%"]
    assert fig.axes[0].get_title() == "gsm8k: accuracy (pass@1)"
    assert fig.axes[0].get_xlabel() == "model (n = 50 questions each)"
    assert task_chart(TASK_REPORT, title="Mine").axes[0].get_title() == "Mine"


def test_all_tasks_chart_groups_average_and_rename() -> None:
    fig = all_tasks_chart(ALL_REPORT, rename={"org/model-b": "B", "gsm8k": "GSM8K"})
    assert tick_labels(fig) == ["GSM8K\nn=50", "leg_counting\nn=50", "average"]  # n under each task
    assert legend_labels(fig) == ["org/model-a", "B"]
    # Bars are drawn model by model: a's three groups, then b's.
    assert bar_heights(fig) == [42.0, 80.0, 61.0, 10.0, 30.0, 20.0]


def test_all_tasks_chart_recomputes_missing_average_and_handles_missing_cells() -> None:
    report = {
        "tasks": {
            "t1": {"models": {"a": entry(0.5), "b": entry(0.1)}},
            "t2": {"models": {"a": entry(0.7)}},
        }
    }
    fig = all_tasks_chart(report)
    assert legend_labels(fig) == ["a", "b"]
    assert bar_heights(fig) == [50.0, 70.0, 60.0, 10.0, 10.0]


def stubs(fig: Figure) -> list[Any]:
    """The thick marks on the axis that stand for 0% bars (error bars are thinner)."""
    return [c for c in fig.axes[0].collections if c.get_linewidth()[0] == 4]


def test_a_zero_bar_is_drawn_and_each_bar_gives_its_n_where_they_differ() -> None:
    """0% has no bar height: a stub in the bar's colour on the axis shows the model was measured."""
    report = {**TASK_REPORT, "models": {"org/model-a": entry(0.42, n=50), "org/model-b": entry(0.0, n=20)}}
    fig = task_chart(report)
    assert tick_labels(fig) == ["org/model-a\nn=50", "org/model-b\nn=20"]
    assert fig.axes[0].get_xlabel() == "model"  # no single n to name: each bar gives its own
    (stub,) = stubs(fig)
    (segment,) = stub.get_segments()
    assert segment[:, 1].tolist() == [0.0, 0.0] and segment[:, 0].tolist() == [0.7, 1.3]  # bar 1's width
    summary = all_tasks_chart({"tasks": {"t": {"models": {"a": entry(0.0, n=8), "b": entry(0.5, n=10)}}}})
    assert tick_labels(summary)[0] == "t\nn=8-10"
    # Model a (left of each group's centre) on task t and in the average: both 0%.
    assert [c.get_segments()[0][:, 0].max() < g for g, c in enumerate(stubs(summary))] == [True, True]


def test_draw_comparison_without_intervals() -> None:
    fig = draw_comparison([ModelScore("x", 0.0), ModelScore("y", 1.0)], title="t")
    assert bar_heights(fig) == [0.0, 100.0]
    assert fig.axes[0].get_ylim()[1] > 100.0  # room for the label above a 100% bar


def test_detect_kind_by_field_and_structure() -> None:
    assert detect_kind(TASK_REPORT) == "task"
    assert detect_kind(ALL_REPORT) == "all_tasks"
    assert detect_kind({"models": {"a": entry(0.1)}}) == "task"
    assert detect_kind({"tasks": {}}) == "all_tasks"
    with pytest.raises(ReportError, match="f.json: unknown kind 'cell'"):
        detect_kind({"kind": "cell"}, "f.json")
    with pytest.raises(ReportError, match=r"not a results file.*top-level keys are \['foo'\]"):
        detect_kind({"foo": 1})
    with pytest.raises(ReportError, match="expected a JSON object, got list"):
        detect_kind([1, 2])


def test_cli_single_task_file_writes_png_next_to_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write(tmp_path / "results_gsm8k_20250101_000000.json", TASK_REPORT)
    assert main([str(src)]) == 0
    out = tmp_path / "results_gsm8k_20250101_000000.png"
    assert_png(out)
    assert capsys.readouterr().out.strip() == str(out)


def test_cli_output_title_and_renames(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through main(): the figure the command itself drew carries the title and the renames."""
    from rlvr.benchmark import plot

    drawn = []
    real_save = plot.save_figure
    monkeypatch.setattr(plot, "save_figure", lambda fig, out: drawn.append(fig) or real_save(fig, out))
    src = write(tmp_path / "all.json", ALL_REPORT)
    mapping = write(tmp_path / "names.json", {"org/model-a": "from-file", "org/model-b": "B"})
    out = tmp_path / "charts" / "summary.png"
    args = [
        str(src),
        "--title",
        "T",
        "--rename-file",
        str(mapping),
        "--rename",
        "org/model-a=A=1",
        "-o",
        str(out),
    ]
    assert main(args) == 0
    assert_png(out)
    [fig] = drawn
    assert legend_labels(fig) == ["A=1", "B"]  # --rename wins over the file; split at the first '='
    assert fig.axes[0].get_title() == "T"


def test_cli_several_files(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", TASK_REPORT)
    b = write(tmp_path / "b.json", {k: v for k, v in ALL_REPORT.items() if k != "kind"})
    assert main([str(a), str(b)]) == 0
    assert_png(tmp_path / "a.png")
    assert_png(tmp_path / "b.png")
    assert main([str(a), str(b), "--output", str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.png", "b.png"]


def run_failing(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_cli_reports_every_bad_file_by_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write(tmp_path / "good.json", TASK_REPORT)
    broken = write(tmp_path / "broken.json", "{not json")
    no_acc = write(tmp_path / "no_acc.json", {"kind": "task", "models": {"m": {"n": 3}}})
    err = run_failing([str(good), str(broken), str(no_acc), str(tmp_path / "missing.json")], capsys)
    assert f"{broken}: not valid JSON" in err
    assert f"{tmp_path / 'missing.json'}: no such file" in err
    err = run_failing([str(good), str(no_acc)], capsys)
    assert f"{no_acc}: models['m']: needs an 'accuracy' in [0, 1]" in err
    assert not (tmp_path / "good.png").exists()  # nothing drawn when any input is bad
    err = run_failing([str(write(tmp_path / "x.json", {"rows": []}))], capsys)
    assert "x.json: not a results file" in err


def test_cli_rejects_bad_rename_and_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = write(tmp_path / "r.json", TASK_REPORT)
    assert "--rename 'model-a': expected OLD=NEW" in run_failing([str(src), "--rename", "model-a"], capsys)
    assert "expected OLD=NEW" in run_failing([str(src), "--rename", "a="], capsys)
    bad_map = write(tmp_path / "m.json", ["a", "b"])
    assert f"--rename-file {bad_map}" in run_failing([str(src), "--rename-file", str(bad_map)], capsys)
    err = run_failing([str(src), str(src), "--output", str(tmp_path / "one.png")], capsys)
    assert "names one chart but 2 files were given" in err


def test_cli_refuses_a_rename_of_a_name_no_file_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write(tmp_path / "r.json", ALL_REPORT)
    err = run_failing([str(src), "--rename", "org/model-c=C", "--rename", "gsm8k=GSM8K"], capsys)
    assert "no model or task named 'org/model-c'" in err and "'org/model-a'" in err and "'gsm8k'" in err
    assert "named 'gsm8k'" not in err  # a task is a known name too
    assert not (tmp_path / "r.png").exists()


@pytest.mark.parametrize(
    ("name", "magic"), [("chart.png", b"\x89PNG"), ("chart.svg", b"<?xml"), ("chart.PDF", b"%PDF")]
)
def test_cli_writes_the_format_the_output_suffix_names(tmp_path: Path, name: str, magic: bytes) -> None:
    src = write(tmp_path / "r.json", ALL_REPORT)
    assert main([str(src), "--output", str(tmp_path / name)]) == 0
    assert (tmp_path / name).read_bytes().startswith(magic)


def test_cli_format_for_several_files_into_a_directory(tmp_path: Path) -> None:
    a, b = write(tmp_path / "a.json", TASK_REPORT), write(tmp_path / "b.json", ALL_REPORT)
    assert main([str(a), str(b), "--output", str(tmp_path / "out"), "--format", "svg"]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.svg", "b.svg"]
    assert (tmp_path / "out" / "a.svg").read_bytes().startswith(b"<?xml")


def test_cli_refuses_an_unsupported_suffix_by_value_and_names_the_allowed_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = write(tmp_path / "r.json", TASK_REPORT)
    err = run_failing([str(src), "--output", str(tmp_path / "chart.jpg")], capsys)
    assert (
        f"--output {tmp_path / 'chart.jpg'}: suffix '.jpg' is not a chart format; use .png, .svg or .pdf"
        in err
    )
    assert not (tmp_path / "chart.jpg").exists()


def test_the_average_bar_carries_the_reports_interval() -> None:
    report = {
        **ALL_REPORT,
        "average_ci": {
            "org/model-a": {"ci_low": 0.5, "ci_high": 0.7},
            "org/model-b": {"ci_low": 0.12, "ci_high": 0.29},
        },
    }
    fig = all_tasks_chart(report)
    (ax,) = fig.axes
    # one errorbar per model; the average group is x == 2 (after the two tasks)
    segments = [seg for c in ax.containers if hasattr(c, "lines") for seg in c.lines[2][0].get_segments()]
    average = sorted((round(s[0][1], 6), round(s[1][1], 6)) for s in segments if s[0][0] > 1.5)
    assert average == [(12.0, 29.0), (50.0, 70.0)]


def test_an_average_interval_that_does_not_hold_the_average_is_refused() -> None:
    report = {**ALL_REPORT, "average_ci": {"org/model-a": {"ci_low": 0.7, "ci_high": 0.8}}}
    with pytest.raises(ReportError, match=r"average_ci\['org/model-a'\]: needs 0 <= ci_low <= average"):
        all_tasks_chart(report)


def test_cli_prints_the_paired_comparisons_of_a_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pair = {"a": "org/model-a", "b": "org/model-b", "n": 50, "before": 0.42, "after": 0.1, "delta": -0.32}
    pair |= {"ci_low": -0.45, "ci_high": -0.19, "right_to_wrong": 17, "wrong_to_right": 1}
    pair |= {"p_value": 0.000137, "binary": True}
    report = {**TASK_REPORT, "paired": [pair]}
    main([str(write(tmp_path / "r.json", report)), "--output", str(tmp_path / "c.png")])
    out = capsys.readouterr().out
    assert (
        "| gsm8k | org/model-a | org/model-b | 42.0% | 10.0% | -32.0 | [-45.0, -19.0] | 17 | 1 | 0.000137 | 50 |"
        in out
    )


def pair(a: str, b: str, delta: float, low: float, high: float, p: float = 0.01) -> dict[str, Any]:
    """A paired row as rlvr.benchmark.results.paired_comparisons writes it."""
    return {"a": a, "b": b, "n": 50, "before": 0.5, "after": 0.5 + delta, "delta": delta, "ci_low": low,
            "ci_high": high, "right_to_wrong": 3, "wrong_to_right": 9, "p_value": p, "binary": True}  # fmt: skip


def test_every_axis_of_both_charts_has_a_title() -> None:
    """Issue 56 item 9: the benchmark chart's x axis had no title."""
    for fig in (task_chart(TASK_REPORT), all_tasks_chart(ALL_REPORT)):
        assert fig.axes[0].get_xlabel() and fig.axes[0].get_ylabel() == "Accuracy (95% CI)"
    assert all_tasks_chart(ALL_REPORT).axes[0].get_xlabel().startswith("task")


def test_the_charts_draw_the_paired_differences_renamed_and_with_their_intervals(tmp_path: Path) -> None:
    """Issue 56 items 3 and 9: the chart showed two overlapping Wilson intervals, never the paired
    difference that decides whether one model beats the other; a panel under the bars draws it."""
    report = {**ALL_REPORT, "tasks": {**ALL_REPORT["tasks"]}}
    report["tasks"]["gsm8k"] = {
        **report["tasks"]["gsm8k"],
        "paired": [pair("org/model-a", "org/model-b", -0.32, -0.45, -0.19)],
    }
    report["tasks"]["leg_counting"] = {
        **report["tasks"]["leg_counting"],
        "paired": [
            pair("org/model-a", "org/model-b", 0.06, -0.04, 0.16, p=0.3),
            {"a": "org/model-a", "b": "x", "note": "not paired: ..."},
        ],
    }
    fig = all_tasks_chart(report, rename={"org/model-b": "B", "gsm8k": "GSM8K"})
    bars, panel = fig.axes
    assert [t.get_text() for t in panel.get_yticklabels()] == [
        "GSM8K: B - org/model-a",
        "leg_counting: B - org/model-a",
    ]
    (points,) = [line for line in panel.lines if line.get_marker() == "o"]
    assert list(points.get_xdata()) == [pytest.approx(-32.0), pytest.approx(6.0)]
    (intervals,) = panel.collections
    assert sorted(tuple(round(float(x), 6) for x in seg[:, 0]) for seg in intervals.get_segments()) == [
        (-45.0, -19.0),
        (-4.0, 16.0),
    ]
    low, high = panel.get_xlim()
    assert low < -45.0 and high > 16.0  # every interval inside, and 0 (its line) too
    assert any(list(line.get_xdata()) == [0.0, 0.0] for line in panel.lines)
    assert panel.get_xlabel().startswith("B - A, accuracy points (95% CI)")
    assert [t.get_text() for t in panel.texts] == ["-32.0 (p=0.01)", "+6.0 (p=0.3)"]
    # one task: the same panel, without the task in the labels
    single = task_chart(
        {**TASK_REPORT, "paired": [pair("org/model-a", "org/model-b", -0.32, -0.45, -0.19)]},
        rename={"org/model-a": "A"},
    )
    assert [t.get_text() for t in single.axes[1].get_yticklabels()] == ["org/model-b - A"]
    # --only that leaves one model out leaves its pairs out; a file without pairs has no panel
    assert len(all_tasks_chart(report, only=["org/model-a"]).axes) == 1
    assert len(task_chart(TASK_REPORT).axes) == 1
    fig.savefig(tmp_path / "paired.png")
    assert_png(tmp_path / "paired.png")


def test_a_paired_row_whose_interval_does_not_hold_its_difference_is_refused() -> None:
    report = {**TASK_REPORT, "paired": [pair("org/model-a", "org/model-b", 0.5, -0.1, 0.1)]}
    with pytest.raises(
        ReportError, match=r"paired\[0\] \(org/model-a vs org/model-b\): needs -1 <= ci_low <= delta"
    ):
        task_chart(report)


def test_rename_renames_the_printed_paired_table_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 56 item 9: --rename relabelled the chart but the paired table kept the old names."""
    report = {**TASK_REPORT, "paired": [pair("org/model-a", "org/model-b", -0.32, -0.45, -0.19)]}
    src = write(tmp_path / "r.json", report)
    main(
        [
            str(src),
            "--output",
            str(tmp_path / "c.png"),
            "--rename",
            "org/model-a=A",
            "--rename",
            "gsm8k=GSM8K",
        ]
    )
    out = capsys.readouterr().out
    assert "| GSM8K | A | org/model-b | 50.0% | 18.0% | -32.0 | [-45.0, -19.0] |" in out
    assert "org/model-a" not in out and "| gsm8k |" not in out
    assert json.loads(src.read_text()) == report  # the file is read, never rewritten


def hatched(fig: Figure) -> list[float]:
    """The heights of the bars drawn hatched (degenerate cells), in drawing order."""
    return [round(p.get_height(), 6) for p in fig.axes[0].patches if p.get_hatch()]


def test_a_degenerate_cell_is_hatched_on_both_charts_and_the_chart_says_why() -> None:
    """Measured 2026-11-29: both trained models answered `1` to every letter_counting question, which
    scored 46% (its share of the gold answers); the tables warned, the chart drew a 46% bar like any
    other. A cell whose report entry says its answers are degenerate is hatched, with a note."""
    collapsed = {**entry(0.46), "answers": {"degenerate": "every one of its 50 answers is `1`"}}
    report = json.loads(json.dumps(ALL_REPORT))
    report["tasks"]["leg_counting"]["models"]["org/model-b"] = collapsed
    fig = all_tasks_chart(report)
    assert hatched(fig) == [46.0]  # that cell only, not its model's other bars nor the average
    assert "degenerate outputs" in legend_labels(fig)
    assert any("its accuracy is a frequency, not skill" in t.get_text() for t in fig.axes[0].texts)
    one = task_chart({**TASK_REPORT, "models": {"org/model-a": entry(0.42), "org/model-b": collapsed}})
    assert hatched(one) == [46.0]
    # a healthy report: nothing hatched, no note
    plain = all_tasks_chart(ALL_REPORT)
    assert hatched(plain) == [] and "degenerate outputs" not in legend_labels(plain)
    assert not any("frequency" in t.get_text() for t in plain.axes[0].texts)
