"""Charts of benchmark results, and the ``rlvr-plot`` command that redraws them from report files.

Per-task chart: one bar per model with its 95% Wilson interval and value label. Summary chart:
bars grouped by task plus an "average" group. When the file holds paired comparisons (two models or
more on the same questions), a second panel under the bars draws each pair's difference B - A in
points with its 95% interval: the claim "B beats A" is read there, not from two overlapping
Wilson intervals. ``--rename`` applies to the bars, the panel and the printed paired table alike.
Drawing uses Figure + the Agg canvas directly
(no pyplot), so it needs no display, keeps no global figure registry and does not change the
backend of a caller's interactive session.

    python -m rlvr.benchmark.plot outputs/2025-01-01/12-00-00/results_gsm8k.json \\
        --rename Qwen/Qwen2.5-0.5B-Instruct=Qwen-0.5B --title "GSM8K" --output gsm8k.png

A results file is data from elsewhere: every accuracy (and interval bound) must be a number in
[0, 1], and a chart draws at most :data:`MAX_MODELS` models and :data:`MAX_TASKS` tasks (a file
with tens of thousands took minutes and GBs); ``--only NAME`` picks the models or tasks to draw.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

from rlvr.benchmark.results import KIND_ALL_TASKS, KIND_TASK, paired_markdown
from rlvr.issues import suggest
from rlvr.runtime.charts import ChartFormatError, chart_format, save_chart
from rlvr.runtime.safe_json import JsonRefused, loads

AVERAGE_LABEL = "average"
# Bars beyond these no longer read as a chart (and drawing cost grows with their product).
MAX_MODELS = 40
MAX_TASKS = 40
MAX_PAIRS = 40  # rows of the paired-difference panel; the printed paired table lists every pair
# A results file holds summaries, not per-sample records: 64 MiB is far above any real one.
MAX_REPORT_BYTES = 64 * 2**20
ReportKind = Literal["task", "all_tasks"]


class ReportError(ValueError):
    """A report file or a rename mapping that cannot be plotted; the message says which and why."""


@dataclass(frozen=True)
class ModelScore:
    """One bar: a model's accuracy in [0, 1] and, when known, its confidence interval."""

    label: str
    accuracy: float
    ci_low: float | None = None
    ci_high: float | None = None
    n: int | None = None  # questions it was measured on
    # Its answers are degenerate (one answer to every question, or far fewer values than the gold
    # answers: the report's ``answers.degenerate``): the bar is hatched and the chart says why.
    degenerate: bool = False


DEGENERATE_HATCH = "///"
DEGENERATE_NOTE = (
    "hatched: degenerate outputs (one answer to every question, or far fewer values than the gold "
    "answers): its accuracy is a frequency, not skill; see the report's warnings"
)


def _mark_degenerate(
    ax: Any, xs: np.ndarray, acc: np.ndarray, width: float, scores: Sequence[ModelScore]
) -> bool:
    """Hatch the bars of degenerate cells over their colour (a reader sees it without the warnings);
    whether any was."""
    marked = [i for i, s in enumerate(scores) if s.degenerate]
    if marked:
        ax.bar(
            xs[marked], acc[marked], width=width, fill=False, hatch=DEGENERATE_HATCH,
            edgecolor="black", linewidth=0.0, zorder=3,
        )  # fmt: skip
    return bool(marked)


def _degenerate_note(ax: Any) -> None:
    from matplotlib.patches import Patch

    handles, labels = ax.get_legend_handles_labels()
    handles.append(Patch(facecolor="white", edgecolor="black", hatch=DEGENERATE_HATCH))
    labels.append("degenerate outputs")
    ax.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    ax.text(0.0, 1.02, DEGENERATE_NOTE, transform=ax.transAxes, fontsize=7, va="bottom", wrap=True)


@dataclass(frozen=True)
class PairedDiff:
    """One pair of models on one task's questions: ``delta`` = accuracy of B - accuracy of A, in
    [-1, 1], with its 95% interval and the McNemar p (rlvr.evaluation.metrics.PairedChange)."""

    label: str  # "B - A", or "task: B - A" on the summary chart
    delta: float
    ci_low: float
    ci_high: float
    p_value: float | None = None  # None for per-question means of samples (no McNemar)


def n_text(scores: Sequence[ModelScore]) -> str | None:
    """``n=50`` (one count) or ``n=20-50`` for the bars of one group; None when no count is known.

    >>> n_text([ModelScore("a", 0.5, n=50), ModelScore("b", 0.1, n=20)])
    'n=20-50'
    """
    ns = sorted({s.n for s in scores if s.n is not None})
    if not ns:
        return None
    return f"n={ns[0]}" if len(ns) == 1 else f"n={ns[0]}-{ns[-1]}"


def _color(i: int) -> tuple[float, float, float, float]:
    palette = matplotlib.colormaps["tab10" if i < 10 else "tab20"]
    return palette(i % palette.N)


def _yerr(scores: Sequence[ModelScore]) -> np.ndarray:
    """Asymmetric error bars in percent, shape [2, N]; 0 where the interval is unknown."""
    lower = [0.0 if s.ci_low is None else max(0.0, s.accuracy - s.ci_low) for s in scores]
    upper = [0.0 if s.ci_high is None else max(0.0, s.ci_high - s.accuracy) for s in scores]
    return np.array([lower, upper]) * 100.0


def _error_bars(
    ax: Any,
    x: np.ndarray,
    acc: np.ndarray,
    yerr: np.ndarray,
    scores: Sequence[ModelScore],
    *,
    elinewidth: float,
    capsize: float,
) -> None:
    # Only bars with a known interval get one: a zero-length bar would read as "no uncertainty".
    known = np.array([s.ci_low is not None and s.ci_high is not None for s in scores], dtype=bool)
    if known.any():
        ax.errorbar(
            x[known],
            acc[known],
            yerr=yerr[:, known],
            fmt="none",
            ecolor="black",
            elinewidth=elinewidth,
            capsize=capsize,
            zorder=3,
        )


def _zero_bars(ax: Any, xs: np.ndarray, acc: np.ndarray, width: float, colors: Sequence[Any]) -> None:
    """A 0% bar has no height: a thick stub on the axis in its colour shows it was measured."""
    for x, value, color in zip(xs, acc, colors, strict=True):
        if value == 0.0:
            ax.hlines(0.0, x - width / 2, x + width / 2, colors=[color], linewidth=4, zorder=4, clip_on=False)


def _tick_style(labels: Sequence[str], count: int) -> dict[str, Any]:
    # Hub ids are long; tilt them instead of letting neighbours overlap.
    longest = max((len(line) for label in labels for line in label.splitlines()), default=0)
    if count > 6 or longest > 14:
        return {"rotation": 25, "ha": "right", "rotation_mode": "anchor"}
    return {}


def _y_top(tops: np.ndarray) -> float:
    # Leave room for the value labels above the error bars; never claim more than ~100%.
    highest = float(np.nanmax(tops)) if tops.size else 0.0
    return max(10.0, min(112.0, highest * 1.12 + 4.0))


def _new_figure(width: float, height: float, paired: Sequence[PairedDiff] = ()) -> tuple[Figure, Any]:
    """A figure and its bar axes; with ``paired`` rows, a second panel under the bars for them
    (``fig.axes[1]``), as tall as its rows need."""
    panel = (
        0.32 * min(len(paired), MAX_PAIRS) + 1.4 if paired else 0.0
    )  # inches: a row, plus the axis and its title
    # A panel's labels name two models each: wider than a bar's label.
    fig = Figure(figsize=(max(width, 7.0) if paired else width, height + panel), layout="constrained")
    FigureCanvasAgg(fig)
    if not paired:
        return fig, fig.add_subplot()
    bars, diffs = fig.subplots(2, 1, height_ratios=[height, panel])
    draw_paired(diffs, paired)
    return fig, bars


def draw_paired(ax: Any, paired: Sequence[PairedDiff]) -> None:
    """Each pair's B - A in points with its 95% interval, top to bottom in the given order, around a
    line at 0: an interval that crosses it is no evidence of a difference. At most
    :data:`MAX_PAIRS` rows; the panel's title says how many more the printed table holds."""
    total = len(paired)
    paired = paired[:MAX_PAIRS]
    if total > len(paired):
        ax.set_title(f"first {len(paired)} of {total} pairs (--only picks models; the printed table lists all)",
                     fontsize=8)  # fmt: skip
    ys = np.arange(len(paired))[::-1]  # the first pair on top
    delta = np.array([d.delta for d in paired]) * 100.0  # [P]
    xerr = np.array([[d.delta - d.ci_low for d in paired], [d.ci_high - d.delta for d in paired]]) * 100.0
    ax.errorbar(delta, ys, xerr=xerr, fmt="o", color="black", ecolor="black", capsize=3, zorder=3)
    ax.axvline(0.0, color="grey", linestyle="--", linewidth=0.8)
    for y, d in zip(ys, paired, strict=True):
        p = "" if d.p_value is None else f" (p={d.p_value:.2g})"
        ax.annotate(f"{d.delta * 100:+.1f}{p}", (d.delta * 100, y), xytext=(0, 5), textcoords="offset points",
                    ha="center", va="bottom", fontsize=8)  # fmt: skip
    # The axis spans every interval and 0, with room for the labels above the points.
    low = min(0.0, min(d.ci_low for d in paired) * 100.0)
    high = max(0.0, max(d.ci_high for d in paired) * 100.0)
    pad = 0.08 * ((high - low) or 10.0)
    ax.set_xlim(low - pad, high + pad)
    ax.set_ylim(-0.6, len(paired) - 0.2)
    ax.set_yticks(ys, [d.label for d in paired], fontsize=8)
    ax.set_ylabel("pair (B - A)", fontsize=9)
    ax.set_xlabel(
        "B - A, accuracy points (95% CI)\npaired on the same questions; p: exact McNemar", fontsize=9
    )
    ax.grid(axis="x", alpha=0.3, zorder=0)


def draw_comparison(
    scores: Sequence[ModelScore],
    *,
    title: str,
    xlabel: str | None = None,
    paired: Sequence[PairedDiff] = (),
) -> Figure:
    """Bar per model (in the given order) with 95% CI error bars and percentage labels; with
    ``paired``, a panel of the pairs' differences under the bars (:func:`draw_paired`)."""
    # Each bar's n under its name, unless the x label gives the one n of all of them.
    uniform = xlabel is not None and "n = " in xlabel
    labels = [s.label if uniform or s.n is None else f"{s.label}\nn={s.n}" for s in scores]
    fig, ax = _new_figure(max(5.0, 1.0 * len(scores) + 2.5), 4.8, paired)
    x = np.arange(len(scores))
    acc = np.array([s.accuracy for s in scores], dtype=float) * 100.0  # [N]
    yerr = _yerr(scores)  # [2, N]
    colors = [_color(i) for i in range(len(scores))]
    ax.bar(x, acc, width=0.6, color=colors, zorder=2)
    _zero_bars(ax, x, acc, 0.6, colors)
    degenerate = _mark_degenerate(ax, x, acc, 0.6, scores)
    _error_bars(ax, x, acc, yerr, scores, elinewidth=1.0, capsize=4.0)
    for xi, top, value in zip(x, acc + yerr[1], acc, strict=True):
        ax.annotate(
            f"{value:.1f}%",
            (xi, top),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=9,
        )
    ax.set_xticks(x, labels, **_tick_style(labels, len(labels)))
    ax.set_ylim(0.0, _y_top(acc + yerr[1]))
    ax.yaxis.set_major_formatter(PercentFormatter(100.0))
    ax.set_ylabel("Accuracy (95% CI)")
    ax.set_xlabel(f"model ({xlabel})" if xlabel else "model")
    ax.grid(axis="y", alpha=0.3, zorder=0)
    ax.set_title(title, pad=18 if degenerate else None)
    if degenerate:
        _degenerate_note(ax)
    return fig


def draw_summary(
    tasks: Mapping[str, Sequence[ModelScore]],
    average: Mapping[str, float],
    *,
    title: str,
    average_label: str = AVERAGE_LABEL,
    average_ci: Mapping[str, tuple[float, float]] | None = None,
    paired: Sequence[PairedDiff] = (),
) -> Figure:
    """Bars grouped by task (one colour per model, legend on the right) plus an average group, whose
    bars carry ``average_ci`` (model -> 95% interval; rlvr.benchmark.results writes a bootstrap over
    questions, rlvr.evaluation.metrics.average_interval) where it is given; with ``paired``, a panel
    of the pairs' differences per task under the bars (:func:`draw_paired`)."""
    average_ci = average_ci or {}
    groups = [*tasks, average_label]
    models: list[str] = []
    for scores in tasks.values():
        models.extend(s.label for s in scores if s.label not in models)
    models.extend(m for m in average if m not in models)

    n_models = max(1, len(models))
    width = 0.8 / n_models
    fig, ax = _new_figure(max(6.0, len(groups) * (0.45 * n_models + 0.6) + 3.0), 5.0, paired)
    small = n_models > 3
    tops: list[float] = []
    degenerate = False
    for j, model in enumerate(models):
        bars: list[tuple[int, ModelScore]] = [
            (g, s) for g, scores in enumerate(tasks.values()) for s in scores if s.label == model
        ]
        if model in average:
            bars.append(
                (len(groups) - 1, ModelScore(model, average[model], *average_ci.get(model, (None, None))))
            )
        if not bars:
            continue
        xs = np.array([g for g, _ in bars], dtype=float) + (j - (n_models - 1) / 2) * width
        acc = np.array([s.accuracy for _, s in bars]) * 100.0
        yerr = _yerr([s for _, s in bars])
        ax.bar(xs, acc, width=width * 0.92, color=_color(j), label=model, zorder=2)
        _zero_bars(ax, xs, acc, width * 0.92, [_color(j)] * len(xs))
        degenerate |= _mark_degenerate(ax, xs, acc, width * 0.92, [s for _, s in bars])
        _error_bars(ax, xs, acc, yerr, [s for _, s in bars], elinewidth=0.8, capsize=2.0)
        for xi, top, value in zip(xs, acc + yerr[1], acc, strict=True):
            ax.annotate(
                f"{value:.0f}" if small else f"{value:.1f}%",
                (xi, top),
                xytext=(0, 2),
                textcoords="offset points",
                ha="center",
                va="bottom",
                fontsize=7 if small else 8,
                rotation=90 if small else 0,
            )
        tops.extend(acc + yerr[1])
    # Set the average apart: it is derived from the groups to its left, not another task.
    ax.axvline(len(groups) - 1.5, color="grey", linestyle="--", linewidth=0.8)
    counts = [n_text(scores) for scores in tasks.values()]
    names = [f"{g}\n{n}" if n else g for g, n in zip(groups, [*counts, None], strict=True)]
    ax.set_xticks(np.arange(len(groups)), names, **_tick_style(names, len(names)))
    ax.set_ylim(0.0, _y_top(np.array(tops)) + (8.0 if small else 0.0))
    ax.yaxis.set_major_formatter(PercentFormatter(100.0))
    ax.set_ylabel("Accuracy (95% CI)")
    ax.set_xlabel("task (n: questions per model), and the average over tasks")
    ax.grid(axis="y", alpha=0.3, zorder=0)
    ax.set_title(title, pad=18 if degenerate else None)
    if models:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    if degenerate:
        _degenerate_note(ax)
    return fig


def save_figure(fig: Figure, path: str | os.PathLike[str], dpi: int = 120) -> Path:
    """Save in the format of ``path``'s suffix (PNG, SVG or PDF; rlvr.runtime.charts), atomically."""
    return save_chart(fig, path, dpi)


# --- reading report files --------------------------------------------------------------------


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return None
    return float(value)


def _share(value: Any) -> float | None:
    """A number in [0, 1] (an accuracy or an interval bound), else None."""
    number = _number(value)
    return number if number is not None and 0.0 <= number <= 1.0 else None


def _selected(names: Any, only: Collection[str]) -> list[str]:
    """The names to draw: those in ``only`` when it names any of them, else all."""
    names = list(names)
    picked = [n for n in names if n in only]
    return picked or names


def _too_many(count: int, limit: int, what: str, where: str) -> str | None:
    if count <= limit:
        return None
    return (
        f"{where}: {count} {what} to draw, at most {limit} in one chart; pick them with "
        f"--only NAME (repeatable), e.g. --only <first {what[:-1]}> --only <second {what[:-1]}>"
    )


def _model_scores(
    models: Any, where: str, rename: Mapping[str, str], errors: list[str], only: Collection[str] = ()
) -> list[ModelScore]:
    if not isinstance(models, dict) or not models:
        errors.append(f"{where}: expected a non-empty object of model -> results, got {models!r:.80}")
        return []
    names = _selected(models, only)
    too_many = _too_many(len(names), MAX_MODELS, "models", where)
    if too_many:
        errors.append(too_many)
        return []
    scores = []
    for model in names:
        entry = models[model]
        acc = _share(entry.get("accuracy")) if isinstance(entry, dict) else None
        if acc is None:
            errors.append(f"{where}[{model!r}]: needs an 'accuracy' in [0, 1], got {entry!r:.80}")
            continue
        lo, hi = (_number(entry.get(k)) for k in ("ci_low", "ci_high"))
        if (lo is not None and not 0.0 <= lo <= acc) or (hi is not None and not acc <= hi <= 1.0):
            errors.append(
                f"{where}[{model!r}]: needs 0 <= ci_low <= accuracy <= ci_high <= 1, got {lo}, {acc}, {hi}"
            )
            continue
        n = entry.get("n")
        n = n if isinstance(n, int) and not isinstance(n, bool) else None
        answers = entry.get("answers")
        degenerate = isinstance(answers, dict) and bool(answers.get("degenerate"))
        scores.append(ModelScore(rename.get(model, model), acc, lo, hi, n, degenerate))
    return scores


def detect_kind(report: Any, source: str = "report") -> ReportKind:
    """Kind of a report ("task" or "all_tasks"): its ``kind`` field, or for files without one, its structure."""
    if not isinstance(report, dict):
        raise ReportError(f"{source}: expected a JSON object, got {type(report).__name__}")
    kind = report.get("kind")
    if kind in (KIND_TASK, KIND_ALL_TASKS):
        return KIND_TASK if kind == KIND_TASK else KIND_ALL_TASKS
    if kind is not None:
        raise ReportError(f"{source}: unknown kind {kind!r}; expected {KIND_TASK!r} or {KIND_ALL_TASKS!r}")
    if isinstance(report.get("tasks"), dict):
        return KIND_ALL_TASKS
    if isinstance(report.get("models"), dict):
        return KIND_TASK
    raise ReportError(
        f"{source}: not a results file: no 'kind' field, and neither a 'tasks' object (all tasks) "
        f"nor a 'models' object (one task); top-level keys are {sorted(report)}"
    )


def _check(errors: list[str], source: str) -> None:
    if errors:
        raise ReportError("\n".join(f"{source}: {e}" for e in errors))


def task_chart(
    report: Mapping[str, Any],
    *,
    title: str | None = None,
    rename: Mapping[str, str] | None = None,
    source: str = "report",
    only: Collection[str] = (),
) -> Figure:
    """Figure for a single-task report (validated; errors name ``source``); ``only``: the models to
    draw (all when it names none of them)."""
    rename = rename or {}
    errors: list[str] = []
    scores = _model_scores(report.get("models"), "models", rename, errors, only)
    _check(errors, source)
    task = str(report.get("task", ""))
    ns = {report["models"][m].get("n") for m in _selected(report["models"], only)}
    xlabel = f"n = {ns.pop()} questions each" if len(ns) == 1 and None not in ns else None
    paired = _paired_diffs({task: report}, rename, only, errors, with_task=False)
    _check(errors, source)
    default = f"{rename.get(task, task)}: accuracy (pass@1)" if task else "Accuracy (pass@1)"
    return draw_comparison(scores, title=title or default, xlabel=xlabel, paired=paired)


def all_tasks_chart(
    report: Mapping[str, Any],
    *,
    title: str | None = None,
    rename: Mapping[str, str] | None = None,
    source: str = "report",
    only: Collection[str] = (),
) -> Figure:
    """Figure for a multi-task report; the average is recomputed when the file lacks one. ``only``:
    the models and tasks to draw (all models, or all tasks, when it names none of them)."""
    rename = rename or {}
    errors: list[str] = []
    tasks_in = report.get("tasks")
    if not isinstance(tasks_in, dict) or not tasks_in:
        errors.append(
            f"'tasks': expected a non-empty object of task -> {{'models': ...}}, got {tasks_in!r:.80}"
        )
        tasks_in = {}
    picked = _selected(tasks_in, only)
    too_many = _too_many(len(picked), MAX_TASKS, "tasks", "'tasks'")
    if too_many:
        errors.append(too_many)
        picked = []
    tasks: dict[str, list[ModelScore]] = {}
    for task in picked:
        entry = tasks_in[task]
        models = entry.get("models") if isinstance(entry, dict) else None
        tasks[rename.get(task, task)] = _model_scores(models, f"tasks[{task!r}].models", rename, errors, only)
    drawn = {s.label for scores in tasks.values() for s in scores}
    average_in = report.get("average")
    average: dict[str, float] = {}
    if average_in is None:
        per_model: dict[str, list[float]] = {}
        for scores in tasks.values():
            for s in scores:
                per_model.setdefault(s.label, []).append(s.accuracy)
        average = {m: sum(v) / len(v) for m, v in per_model.items()}
    elif isinstance(average_in, dict):
        for model, value in average_in.items():
            if _share(value) is None:
                errors.append(f"average[{model!r}]: expected a number in [0, 1], got {value!r:.80}")
            elif rename.get(model, model) in drawn or not only:
                average[rename.get(model, model)] = float(value)
        too_many = _too_many(len(average), MAX_MODELS, "models", "'average'")
        if too_many:
            errors.append(too_many)
    else:
        errors.append(f"'average': expected an object of model -> accuracy, got {average_in!r:.80}")
    average_ci = _average_ci(report.get("average_ci"), average, rename, errors)
    paired = _paired_diffs({t: tasks_in[t] for t in picked}, rename, only, errors, with_task=True)
    _check(errors, source)
    return draw_summary(
        tasks,
        average,
        title=title or "Accuracy across tasks",
        average_label=rename.get(AVERAGE_LABEL, AVERAGE_LABEL),
        average_ci=average_ci,
        paired=paired,
    )


def _paired_diffs(
    tasks: Mapping[str, Any],
    rename: Mapping[str, str],
    only: Collection[str],
    errors: list[str],
    *,
    with_task: bool,
) -> list[PairedDiff]:
    """The ``paired`` rows (rlvr.benchmark.results.paired_comparisons) of ``tasks`` between models
    that are drawn, renamed; a row with a ``note`` (measured on different questions) has no
    difference to draw and stays in the printed table only. A file without rows (one model, older
    rlvr) gives none."""
    out = []
    for task, entry in tasks.items():
        rows = entry.get("paired", []) if isinstance(entry, dict) else []
        where = f"tasks[{task!r}].paired" if with_task else "paired"
        if not isinstance(rows, list):
            errors.append(f"{where}: expected a list of pairs, got {rows!r:.80}")
            continue
        models = entry.get("models")
        drawn = set(_selected(models, only)) if isinstance(models, dict) else set()
        for i, row in enumerate(rows):
            if not isinstance(row, dict):
                errors.append(f"{where}[{i}]: expected an object, got {row!r:.80}")
                continue
            a, b = row.get("a"), row.get("b")
            if "note" in row or not isinstance(a, str) or not isinstance(b, str) or not {a, b} <= drawn:
                continue
            delta, lo, hi = (_number(row.get(k)) for k in ("delta", "ci_low", "ci_high"))
            if delta is None or lo is None or hi is None or not -1.0 <= lo <= delta <= hi <= 1.0:
                errors.append(
                    f"{where}[{i}] ({a} vs {b}): needs -1 <= ci_low <= delta <= ci_high <= 1, got {lo}, {delta}, {hi}"
                )
                continue
            p_value = _share(row.get("p_value")) if row.get("binary", True) else None
            label = f"{rename.get(b, b)} - {rename.get(a, a)}"
            out.append(
                PairedDiff(
                    f"{rename.get(task, task)}: {label}" if with_task else label, delta, lo, hi, p_value
                )
            )
    return out


def renamed_paired(report: Mapping[str, Any], rename: Mapping[str, str]) -> dict[str, Any]:
    """An all-tasks report's tasks and their paired rows under ``rename``, for the printed paired
    table: the same names as the chart. The report itself is not changed.

    >>> renamed_paired({"tasks": {"t": {"paired": [{"a": "x", "b": "y"}]}}}, {"x": "X", "t": "T"})
    {'tasks': {'T': {'paired': [{'a': 'X', 'b': 'y'}]}}}
    """

    def row(r: Any) -> Any:
        if not isinstance(r, dict):
            return r
        return {**r, **{k: rename.get(r[k], r[k]) for k in ("a", "b") if isinstance(r.get(k), str)}}

    tasks = report.get("tasks", {})
    return {
        "tasks": {
            rename.get(t, t): {"paired": [row(r) for r in e.get("paired", [])] if isinstance(e, dict) else e}
            for t, e in tasks.items()
        }
    }


def _average_ci(
    found: Any, average: Mapping[str, float], rename: Mapping[str, str], errors: list[str]
) -> dict[str, tuple[float, float]]:
    """The average bars' intervals of a report (``average_ci``: model -> ci_low, ci_high); a file
    without them (older rlvr) draws the average without an interval."""
    if found is None:
        return {}
    if not isinstance(found, dict):
        errors.append(f"'average_ci': expected an object of model -> {{ci_low, ci_high}}, got {found!r:.80}")
        return {}
    out = {}
    for model, entry in found.items():
        label = rename.get(model, model)
        if label not in average:
            continue
        lo, hi = (_share(entry.get(k)) if isinstance(entry, dict) else None for k in ("ci_low", "ci_high"))
        if lo is None or hi is None or not lo <= average[label] <= hi:
            errors.append(
                f"average_ci[{model!r}]: needs 0 <= ci_low <= average <= ci_high <= 1, got {entry!r:.80}"
            )
            continue
        out[label] = (lo, hi)
    return out


def load_report(path: str | os.PathLike[str]) -> tuple[ReportKind, dict[str, Any]]:
    """Read a results file and detect its kind; ReportError names the file and the problem."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_REPORT_BYTES:
            raise ReportError(
                f"{path}: {path.stat().st_size} bytes, more than a results file holds (at most "
                f"{MAX_REPORT_BYTES}); split it by task"
            )
        report = loads(path.read_text(encoding="utf-8"), path)
    except JsonRefused as e:
        raise ReportError(str(e)) from None
    except FileNotFoundError:
        raise ReportError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ReportError(f"{path}: cannot read ({e})") from e
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not valid JSON ({e})") from e
    return detect_kind(report, str(path)), report


def plot_file(
    path: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    title: str | None = None,
    rename: Mapping[str, str] | None = None,
    only: Collection[str] = (),
) -> Path:
    """Detect the kind of the results file at ``path`` and draw it to ``output``."""
    kind, report = load_report(path)
    chart = task_chart if kind == KIND_TASK else all_tasks_chart
    return save_figure(chart(report, title=title, rename=rename, source=str(path), only=only), output)


def draw_files(paths: Sequence[Path]) -> list[Path]:
    """Each results file drawn as ``rlvr-plot`` draws it by default: a PNG beside it, same name. A
    file that cannot be drawn (too many models) is left out with a message: its results stay."""
    drawn = []
    for path in paths:
        try:
            drawn.append(plot_file(path, path.with_suffix(".png")))
        except ReportError as exc:
            print(f"not drawn: {exc}", file=sys.stderr)
    return drawn


def names_in(kind: ReportKind, report: Mapping[str, Any]) -> set[str]:
    """Every name a rename can apply to in a report: its models and tasks (and the average group)."""

    def keys(value: Any) -> set[str]:
        return set(value) if isinstance(value, dict) else set()

    if kind == KIND_TASK:
        return keys(report.get("models")) | {str(report.get("task", ""))}
    tasks = report.get("tasks")
    tasks = tasks if isinstance(tasks, dict) else {}
    models = set().union(*(keys(entry.get("models")) for entry in tasks.values() if isinstance(entry, dict)))
    return set(tasks) | models | keys(report.get("average")) | {AVERAGE_LABEL}


def _unknown_names(
    flag: str, olds: Sequence[str], loaded: Sequence[tuple[ReportKind, dict[str, Any]]]
) -> list[str]:
    known = set().union(*(names_in(kind, report) for kind, report in loaded))
    return [
        f"{flag} {old}: no model or task named {old!r} in the given files "
        f"({suggest(old, known)}); known names: {sorted(known)}"
        for old in olds
        if old not in known
    ]


def parse_renames(pairs: Sequence[str], rename_file: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """OLD=NEW pairs over an optional JSON ``{"old": "new"}`` file; pairs win over the file."""
    mapping: dict[str, str] = {}
    if rename_file is not None:
        try:
            data = loads(Path(rename_file).read_text(encoding="utf-8"), f"--rename-file {rename_file}")
        except JsonRefused as e:
            raise ReportError(str(e)) from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ReportError(f"--rename-file {rename_file}: cannot read a JSON object from it ({e})") from e
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            raise ReportError(
                f'--rename-file {rename_file}: expected a JSON object of strings, {{"old": "new"}}'
            )
        mapping.update(data)
    for pair in pairs:
        old, sep, new = pair.partition("=")
        if not sep or not old or not new:
            raise ReportError(
                f"--rename {pair!r}: expected OLD=NEW with both sides non-empty, e.g. --rename org/model-7b=Model-7B"
            )
        mapping[old] = new
    return mapping


def _outputs(files: Sequence[Path], output: Path | None, fmt: str | None = None) -> list[Path]:
    suffix = "." + (fmt or "png")
    if output is None:
        return [f.with_suffix(suffix) for f in files]
    if len(files) == 1:
        try:
            chart_format(output, "--output")
        except ChartFormatError as e:
            raise ReportError(str(e)) from None
        return [output]
    if output.suffix.lower() in (".png", ".svg", ".pdf"):
        raise ReportError(
            f"--output {output} names one chart but {len(files)} files were given; pass a directory "
            "(and --format for SVG or PDF), or omit --output to write each chart next to its input"
        )
    outs = [output / f"{f.stem}{suffix}" for f in files]
    if len(set(outs)) != len(outs):
        raise ReportError(
            f"--output {output}: several inputs share a file name; omit --output to write each next to its input"
        )
    return outs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rlvr-plot",
        description="Draw benchmark results files (per-task or all-tasks JSON) as bar charts (PNG, SVG or "
        "PDF), and print the paired comparison of each pair of models that the files hold.",
    )
    parser.add_argument(
        "files", nargs="+", type=Path, help="results_<task>.json or results_all_tasks.json of a benchmark"
    )
    parser.add_argument("--title", help="chart title (default: derived from the file)")
    parser.add_argument(
        "--rename", action="append", default=[], metavar="OLD=NEW", help="relabel a model or task; repeatable"
    )
    parser.add_argument("--rename-file", type=Path, help='JSON object {"old": "new"}; --rename entries win')
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help=f"draw only this model or task; repeatable (a chart holds at most {MAX_MODELS} models, {MAX_TASKS} tasks)",
    )
    parser.add_argument(
        "--output",
        "-o",
        type=Path,
        help="chart path for one input, its suffix picks the format (.png, .svg or .pdf); a directory "
        "for several (default: next to each input, .png)",
    )
    parser.add_argument(
        "--format",
        choices=("png", "svg", "pdf"),
        help="format of the charts written next to their inputs or into an --output directory (default: png)",
    )
    args = parser.parse_args(argv)
    try:
        rename = parse_renames(args.rename, args.rename_file)
        outputs = _outputs(args.files, args.output, args.format)
        # Read and check every input before drawing any, so all problems are reported at once.
        loaded, errors = [], []
        for path in args.files:
            try:
                loaded.append(load_report(path))
            except ReportError as e:
                errors.append(str(e))
        errors += _unknown_names("--rename", [pair.partition("=")[0] for pair in args.rename], loaded)
        errors += _unknown_names("--only", args.only, loaded)
        if errors:
            raise ReportError("\n".join(errors))
        figures = []
        for path, (kind, report) in zip(args.files, loaded, strict=True):
            chart = task_chart if kind == KIND_TASK else all_tasks_chart
            try:
                figures.append(
                    chart(report, title=args.title, rename=rename, source=str(path), only=args.only)
                )
            except ReportError as e:
                errors.append(str(e))
        if errors:
            raise ReportError("\n".join(errors))
    except ReportError as e:
        parser.error(str(e))
    for fig, out in zip(figures, outputs, strict=True):
        print(save_figure(fig, out))
    for path, (kind, report) in zip(args.files, loaded, strict=True):
        as_all = report if kind == KIND_ALL_TASKS else {"tasks": {str(report.get("task", "")): report}}
        try:
            table = paired_markdown(renamed_paired(as_all, rename))
        except (AttributeError, KeyError, TypeError, ValueError) as e:  # data from elsewhere
            table = f"{path}: its paired comparisons are malformed ({type(e).__name__}: {e}); not shown\n"
        if table:
            print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
