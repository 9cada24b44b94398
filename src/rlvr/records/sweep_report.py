"""Sweep report: one table (markdown, CSV, JSON) and a chart from a Hydra multirun directory.

``python -m rlvr.records.sweep_report outputs/multirun/<date>/<time>`` reads each point's own record:
the swept keys come from the sweep's ``multirun.yaml`` (the overrides with a sweep value such
as ``seed=1,2``) and each point's value for them from its ``config_resolved.yaml`` (so the table
does not depend on Hydra's ``.hydra/overrides.yaml``, which a run may disable); accuracies with
95% CIs, steps and wall time come from its ``report.json`` (for a point requeued and resumed, the
whole run's: every attempt's evaluations, steps and wall time, and the number of attempts); the GRPO
training reward (the mean of ``grpo/reward/mean`` over the logged steps with a 95% interval, and its
last value) comes from its ``metrics.jsonl``, so points whose held-out accuracies are all 0% can still
be told apart.

A results directory may come from elsewhere, so it is read as data (SECURITY.md "Sweep reports"):
YAML through :func:`rlvr.runtime.safe_yaml.load_data` (bounded size, no aliases, never interpolated), JSON
with a size bound. A point is COMPLETED only when its ``report.json`` belongs to the run its
``config_resolved.yaml`` records (the report's last attempt names the sha256 of that file and is the
last attempt in ``attempts.json``) and that attempt ended COMPLETED; otherwise it shows the status of
its last attempt (FAILED, RUNNING, KILLED, ...) without accuracies, and says why.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from hydra.core.override_parser.overrides_parser import OverridesParser
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

from rlvr.events import COMPLETED_STATUSES, COMPLETED_WITH_WARNINGS
from rlvr.records.run_history import ATTEMPTS, CONFIG_SHA256
from rlvr.runtime.charts import ChartFormatError, chart_format, save_chart
from rlvr.runtime.io import atomic_write_json, atomic_write_text
from rlvr.runtime.safe_json import JsonRefused, loads
from rlvr.runtime.safe_yaml import YamlRefused, load_data
from rlvr.runtime.secrets import redact_text

STAGES = ("base model", "after SFT", "final")
STATUSES = COMPLETED_STATUSES | {"FAILED", "RUNNING", "KILLED", "PREEMPTED", "INTERRUPTED"}
MAX_JSON_BYTES = 64 * 2**20
METRICS_TAIL_BYTES = 64 * 2**10
MAX_METRICS_LINE = 2**20  # a longer line in metrics.jsonl is not a step's scalars: skipped
REWARD = "grpo/reward/mean"


@dataclass
class SweepPoint:
    num: int
    status: str  # COMPLETED(_WITH_WARNINGS) | FAILED | RUNNING | KILLED | PREEMPTED | INTERRUPTED | UNKNOWN
    overrides: dict[str, Any]
    accuracy: dict[str, dict[str, float]] = field(
        default_factory=dict
    )  # stage -> accuracy, ci_low, ci_high, n
    steps: dict[str, int] = field(default_factory=dict)
    wall_seconds: float | None = None
    attempts: int | None = None  # processes the point took (a requeued, resumed point: more than 1)
    note: str | None = None  # why a report.json on disk is not shown
    # GRPO reward over the logged steps: mean, ci_low, ci_high (None with one step), last, steps
    train_reward: dict[str, float | None] | None = None
    # what the run did not learn (its report's warnings, rlvr.records.learning): status COMPLETED_WITH_WARNINGS
    warnings: list[str] = field(default_factory=list)


def swept_keys(multirun_yaml: Path) -> list[str]:
    """Keys the sweep varies: the task overrides whose value is a sweep (``a,b``, ``range()``, ``choice()``)."""
    data = load_data(multirun_yaml)
    task = ((data or {}).get("hydra") or {}).get("overrides", {}).get("task") or []
    if not isinstance(task, list) or not all(isinstance(t, str) for t in task):
        raise ValueError(f"{multirun_yaml}: hydra.overrides.task is not a list of overrides")
    parsed = OverridesParser.create().parse_overrides(task)
    return [o.get_key_element() for o in parsed if o.is_sweep_override()]


def _json(path: Path) -> Any:
    """A JSON file's content, or None when it is missing, too large or not JSON; :class:`JsonRefused`
    (the point is listed as unreadable, the others still shown) when it nests too deep to parse."""
    if not path.is_file() or path.stat().st_size > MAX_JSON_BYTES:
        return None
    raw = path.read_bytes()
    try:
        return loads(raw, path)
    except JsonRefused:
        raise
    except (ValueError, UnicodeDecodeError):
        return None


def _metrics_status(point_dir: Path) -> str:
    """FAILED when metrics.jsonl ends with a pipeline_end that is not COMPLETED, else RUNNING."""
    metrics = point_dir / "metrics.jsonl"
    if not metrics.is_file():
        return "RUNNING"
    with metrics.open("rb") as f:
        f.seek(max(0, metrics.stat().st_size - METRICS_TAIL_BYTES))
        lines = f.read().splitlines()
    try:
        last = loads(lines[-1], f"{metrics}, its last line") if lines else {}
    except JsonRefused:
        raise
    except ValueError:
        return "RUNNING"  # a line being written
    ended = isinstance(last, dict) and last.get("event") == "pipeline_end"
    if ended and last.get("status") not in COMPLETED_STATUSES:
        return "FAILED"
    return "RUNNING"


def train_reward(point_dir: Path) -> dict[str, float | None] | None:
    """The GRPO phase's ``grpo/reward/mean`` over the steps metrics.jsonl logged (every attempt's):
    their mean with its 95% interval (:func:`mean_interval`), the last one and how many; None when no
    GRPO step was logged."""
    metrics = point_dir / "metrics.jsonl"
    if not metrics.is_file():
        return None
    by_step: dict[int, float] = {}  # a resumed run logs a step again: the later value counts once
    with metrics.open("rb") as f:
        while line := f.readline(MAX_METRICS_LINE):
            try:
                record = loads(line, metrics)
                value = record["metrics"][REWARD]
                step = int(record["step"])
            except (ValueError, KeyError, TypeError, JsonRefused):
                continue  # another event, a line being written or cut at the bound, a line nested too deep
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                by_step[step] = float(value)
    if not by_step:
        return None
    values = [by_step[s] for s in sorted(by_step)]
    low, high = mean_interval(values)
    mean = sum(values) / len(values)
    return {"mean": mean, "ci_low": low, "ci_high": high, "last": values[-1], "steps": len(values)}


def mean_interval(values: list[float], z: float = 1.96) -> tuple[float | None, float | None]:
    """The 95% normal-approximation interval of the mean of ``values`` (the sample standard deviation
    over sqrt(n), as the paired change's Wald interval, rlvr.evaluation.metrics); (None, None) for a
    single value. The logged steps of one run are a trajectory, not independent draws: the interval
    says how precisely the logged steps pin their mean, not that another seed would land inside it.

    >>> [round(v, 3) for v in mean_interval([-0.5, 0.0, 0.5])]
    [-0.566, 0.566]
    """
    n = len(values)
    if n < 2:
        return None, None
    mean = sum(values) / n
    half = z * math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)
    return mean - half, mean + half


def _status(point_dir: Path) -> tuple[str, dict[str, Any] | None, str | None]:
    """(status, the report when it belongs to this point's run and that run completed, why not).
    A run recorded as completed whose report cannot be tied to it is UNKNOWN, never COMPLETED."""
    status, report, note = _tied_report(point_dir)
    if status in COMPLETED_STATUSES and report is None:
        return "UNKNOWN", None, note or "attempts.json says COMPLETED but there is no report.json"
    return status, report, note


def _tied_report(point_dir: Path) -> tuple[str, dict[str, Any] | None, str | None]:
    attempts = _json(point_dir / ATTEMPTS)
    last = (
        attempts[-1] if isinstance(attempts, list) and attempts and isinstance(attempts[-1], dict) else None
    )
    status = (last.get("status") if last else None) or _metrics_status(point_dir)
    status = status if status in STATUSES else "UNKNOWN"
    report_path = point_dir / "report.json"
    if not report_path.is_file():
        return status, None, None
    report = _json(report_path)
    ran = report.get("attempts") if isinstance(report, dict) else None
    final = ran[-1] if isinstance(ran, list) and ran and isinstance(ran[-1], dict) else {}
    config = point_dir / "config_resolved.yaml"
    config_hash = hashlib.sha256(config.read_bytes()).hexdigest() if config.is_file() else None
    if final.get(CONFIG_SHA256) is None:
        return (
            status,
            None,
            "report.json does not name the config it was made with (older rlvr, or not a report)",
        )
    if final.get(CONFIG_SHA256) != config_hash:
        return (
            status,
            None,
            "report.json belongs to another run than config_resolved.yaml (a relaunch into this directory)",
        )
    if last is None or (last.get("attempt"), last.get("started_at")) != (
        final.get("attempt"),
        final.get("started_at"),
    ):
        return status, None, "report.json is not from the last attempt recorded in attempts.json"
    if status not in COMPLETED_STATUSES:
        return status, None, f"the run's last attempt ended {status}"
    return status, report, None


def _point_value(point_dir: Path, key: str) -> Any:
    """The point's value for ``key`` in its config record, read as data (never interpolated)."""
    resolved = point_dir / "config_resolved.yaml"
    if not resolved.is_file():
        return None
    # Group choices (``model=tiny``) are not config keys; they show as None rather than a guess.
    value: Any = load_data(resolved)
    for part in key.lstrip("+~").split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value if isinstance(value, (str, int, float, bool)) or value is None else json.dumps(value)


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"not a number: {value!r}")
    return value


def _fill(point: SweepPoint, report: dict[str, Any]) -> None:
    point.accuracy = {
        str(row["stage"]): {k: _number(row[k]) for k in ("accuracy", "ci_low", "ci_high", "n")}
        for row in report["accuracy"]
    }
    point.steps = {str(k): int(_number(v)) for k, v in dict(report["steps"]).items()}
    point.wall_seconds = _number(report["wall_seconds"])
    point.attempts = len(report.get("attempts", [])) or None
    warnings = report.get("warnings", [])
    if not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        raise TypeError("warnings is not a list of text")
    point.warnings = warnings
    if warnings:  # the report's warnings make the status (an older attempts.json may say COMPLETED)
        point.status = COMPLETED_WITH_WARNINGS


def collect(sweep_dir: Path) -> list[SweepPoint]:
    multirun_yaml = sweep_dir / "multirun.yaml"
    if not multirun_yaml.is_file():
        raise FileNotFoundError(f"{sweep_dir} has no multirun.yaml: not a Hydra multirun directory")
    keys = swept_keys(multirun_yaml)
    points = []
    for point_dir in sorted(
        (p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name)
    ):
        try:
            status, report, note = _status(point_dir)
            overrides = {k: _point_value(point_dir, k) for k in keys}
        except (YamlRefused, JsonRefused) as exc:  # this point is listed as unreadable, the others reported
            overrides, report, status, note = dict.fromkeys(keys), None, "UNKNOWN", f"unreadable: {exc}"
        point = SweepPoint(num=int(point_dir.name), status=status, overrides=overrides, note=note)
        point.train_reward = train_reward(point_dir)
        if report is not None:
            try:
                _fill(point, report)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                point.accuracy, point.steps, point.wall_seconds, point.attempts = {}, {}, None, None
                point.warnings = []
                point.status, point.note = "UNKNOWN", f"report.json is malformed ({type(exc).__name__})"
        points.append(point)
    return points


def _rows(points: list[SweepPoint]) -> list[dict[str, Any]]:
    rows = []
    for p in points:
        row: dict[str, Any] = {"point": p.num, "status": p.status, **p.overrides}
        for stage in STAGES:
            acc = p.accuracy.get(stage)
            # Percent, as the console, report.md and the benchmark print accuracies.
            row[f"{stage} acc"] = f"{acc['accuracy']:.1%}" if acc else None
            row[f"{stage} 95% CI"] = f"{acc['ci_low']:.1%} - {acc['ci_high']:.1%}" if acc else None
        reward = p.train_reward
        row["GRPO reward mean (last)"] = f"{reward['mean']:.3f} ({reward['last']:.3f})" if reward else None
        low, high = (reward["ci_low"], reward["ci_high"]) if reward else (None, None)
        # over the logged steps (mean_interval); a single step has none
        row["GRPO reward 95% CI"] = f"[{low:.3f}, {high:.3f}]" if low is not None else None
        row["steps"] = " + ".join(f"{k} {v}" for k, v in p.steps.items()) or None
        row["wall s"] = p.wall_seconds
        row["attempts"] = p.attempts
        row["warnings"] = "; ".join(p.warnings) or None
        rows.append(row)
    return rows


def _md_cell(value: Any) -> str:
    """A value as one markdown table cell: a ``|`` or a line break in it cannot add cells or rows."""
    text = "" if value is None else (f"{value:.4g}" if isinstance(value, float) else str(value))
    return " ".join(text.replace("|", "\\|").split())


def to_markdown(points: list[SweepPoint]) -> str:
    rows = _rows(points)
    if not rows:
        return "(no sweep points yet)\n"
    header = list(rows[0])
    lines = ["| " + " | ".join(_md_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join(_md_cell(v) for v in row.values()) + " |")
    notes = [f"- point {p.num}: {_md_cell(p.note)}" for p in points if p.note]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


# OWASP CSV injection: a cell starting with one of these is run as a formula by spreadsheets.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> Any:
    """A value safe for a spreadsheet: numbers stay numbers (``-0.5``, ``1e-05``); any other text
    starting with ``= + - @``, a tab or a carriage return is prefixed with ``'`` so it stays text."""
    if not isinstance(value, str) or not value.startswith(_FORMULA_START):
        return value
    try:
        float(value)
    except ValueError:
        return "'" + value
    return value


def to_csv(points: list[SweepPoint]) -> str:
    rows = _rows(points)
    buf = io.StringIO()
    if rows:
        for row, point in zip(rows, points, strict=True):
            row["note"] = point.note
        header = list(rows[0])
        writer = csv.writer(buf)
        writer.writerow([csv_cell(h) for h in header])
        writer.writerows([[csv_cell(row[h]) for h in header] for row in rows])
    return buf.getvalue()


def short_keys(keys: list[str]) -> dict[str, str]:
    """Each swept key by its shortest dotted tail that no other key shares: the chart's labels stay
    short, its axis label names the full keys.

    >>> short_keys(["seed", "training_loop.grpo.learning_rate", "training_loop.sft.learning_rate"])
    {'seed': 'seed', 'training_loop.grpo.learning_rate': 'grpo.learning_rate', 'training_loop.sft.learning_rate': 'sft.learning_rate'}
    """
    out = {}
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            tail = ".".join(parts[-n:])
            if not any(other != key and (other == tail or other.endswith("." + tail)) for other in keys):
                break
        out[key] = tail
    return out


def chart(points: list[SweepPoint]) -> Figure:
    """Accuracy per completed point and stage, with 95% CIs. Each point's label gives its swept values
    under short key names, one per line and upright; the axis label names the full keys; the figure
    widens with the longest label, so labels neither overlap nor leave the figure."""
    done = [p for p in points if p.status in COMPLETED_STATUSES]
    keys = list(dict.fromkeys(k for p in done for k in p.overrides))
    short = short_keys(keys)
    labels = ["\n".join(f"{short[k]}={v}" for k, v in p.overrides.items()) or str(p.num) for p in done]
    longest = max((len(line) for label in labels for line in label.splitlines()), default=0)
    per_point = max(1.2, 0.075 * longest + 0.3)  # inches: a character of 8-point text is ~0.07 in
    fig = Figure(figsize=(max(5, per_point * len(done) + 2), 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    width = 0.8 / len(STAGES)
    for i, stage in enumerate(STAGES):
        xs: list[float] = []
        ys: list[float] = []
        err: list[list[float]] = [[], []]
        for j, p in enumerate(done):
            acc = p.accuracy.get(stage)
            if acc:
                xs.append(j + (i - 1) * width)
                ys.append(acc["accuracy"])
                err[0].append(acc["accuracy"] - acc["ci_low"])
                err[1].append(acc["ci_high"] - acc["accuracy"])
        bars = ax.bar(xs, ys, width, yerr=err, capsize=3, label=stage)
        color = bars.patches[0].get_facecolor() if bars.patches else None
        zero = [x for x, y in zip(xs, ys, strict=True) if y == 0.0]  # a 0% bar has no height: a stub shows it
        ax.hlines([0.0] * len(zero), [x - width / 2 for x in zero], [x + width / 2 for x in zero],
                  colors=[color] * len(zero), linewidth=4, zorder=4, clip_on=False)  # fmt: skip
    ax.set_xticks(range(len(done)), labels, fontsize=8)
    renamed = [f"{v} = {k}" for k, v in short.items() if v != k]
    ax.set_xlabel("point" + (f" ({'; '.join(renamed)})" if renamed else ""), fontsize=8, wrap=True)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylabel("held-out accuracy (95% CI)")
    # Bars start at 0%; the top follows the highest interval, so a 2% point is not a sliver of 100%.
    tops = [a["ci_high"] for p in done for a in p.accuracy.values()]
    ax.set_ylim(0, min(1.0, max([0.1, *tops]) * 1.1))
    handles = _reward_markers(ax, done)
    # Above the axes, not inside: a legend inside covers bars or diamonds of one of the two axes.
    fig.legend(
        handles=ax.get_legend_handles_labels()[0] + handles, fontsize=8, loc="outside upper center", ncols=2
    )
    ax.set_title("Sweep: accuracy per point")
    return fig


def _reward_markers(ax: Any, done: list[SweepPoint]) -> list[Any]:
    """The GRPO training reward (mean over its steps, with the table's 95% interval) of each point as a
    diamond on a right-hand axis: points whose accuracies are all 0% differ there. The axis spans the
    rewards and their intervals, negative ones included, and always 0 (dotted when inside)."""
    rewards = [(j, p.train_reward) for j, p in enumerate(done) if p.train_reward]
    if not rewards:
        return []
    xs = [j for j, _ in rewards]
    ys = [cast(float, r["mean"]) for _, r in rewards]  # a mean is always there; only the interval may not be
    # [2, N]: below and above each mean; 0 where a single step gives no interval
    err = [
        [0.0 if r["ci_low"] is None else y - r["ci_low"] for (_, r), y in zip(rewards, ys, strict=True)],
        [0.0 if r["ci_high"] is None else r["ci_high"] - y for (_, r), y in zip(rewards, ys, strict=True)],
    ]
    right = ax.twinx()
    drawn = right.errorbar(
        xs,
        ys,
        yerr=err,
        fmt="D",
        color="tab:purple",
        capsize=3,
        label="GRPO reward (mean over steps, 95% CI)",
    )
    right.set_ylabel("GRPO training reward (mean, 95% CI)")
    low = min(y - e for y, e in zip(ys, err[0], strict=True))
    high = max(y + e for y, e in zip(ys, err[1], strict=True))
    pad = 0.08 * (max(high, 0.0) - min(low, 0.0) or 1.0)
    right.set_ylim(min(low, 0.0) - pad, max(high, 0.0) + pad)
    if low < 0.0:  # the left axis's 0% is no longer the reward's 0: mark where it is
        right.axhline(0.0, color="tab:purple", linestyle=":", linewidth=0.8)
    return [drawn]


def plot(points: list[SweepPoint], path: Path) -> Path:
    """The chart, in the format of ``path``'s suffix (PNG, SVG or PDF; rlvr.runtime.charts)."""
    return save_chart(chart(points), path, dpi=120)


def write_sweep_report(
    sweep_dir: Path, out_dir: Path | None = None, chart_name: str = "sweep_report.png"
) -> list[Path]:
    """The table (markdown, CSV, JSON) and the chart, named ``chart_name`` (its suffix: PNG, SVG or PDF)."""
    out_dir = out_dir or sweep_dir
    chart_format(chart_name, "--chart")  # before any file is written
    points = collect(sweep_dir)
    written = [
        atomic_write_text(out_dir / "sweep_report.md", to_markdown(points)),
        atomic_write_text(out_dir / "sweep_report.csv", to_csv(points)),
        atomic_write_json(out_dir / "sweep_report.json", [asdict(p) for p in points], default=str),
        plot(points, out_dir / chart_name),
    ]
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, help="a Hydra multirun directory (holds multirun.yaml)")
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: the sweep dir)")
    parser.add_argument(
        "--chart",
        default="sweep_report.png",
        help="the chart's file name in --out; its suffix picks the format: .png, .svg or .pdf",
    )
    args = parser.parse_args(argv)
    try:
        written = write_sweep_report(args.sweep_dir, args.out, args.chart)
    except YamlRefused as exc:
        raise SystemExit(f"refused: {redact_text(str(exc))}") from None
    except ChartFormatError as exc:
        parser.error(str(exc))
    for path in written:
        print(redact_text(str(path)))
    print(redact_text(to_markdown(collect(args.sweep_dir))))


if __name__ == "__main__":
    main()
