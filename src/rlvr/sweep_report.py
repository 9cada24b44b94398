"""Sweep report: one table (markdown, CSV, JSON) and a chart from a Hydra multirun directory.

``python -m rlvr.sweep_report outputs/multirun/<date>/<time>`` reads each point's own record:
the swept keys come from the sweep's ``multirun.yaml`` (the overrides with a sweep value such
as ``seed=1,2``) and each point's value for them from its ``config_resolved.yaml`` (so the table
does not depend on Hydra's ``.hydra/overrides.yaml``, which a run may disable); accuracies with
95% CIs, steps and wall time come from its ``report.json`` (for a point requeued and resumed, the
whole run's: every attempt's evaluations, steps and wall time, and the number of attempts). A point without ``report.json`` is
listed as FAILED (its ``metrics.jsonl`` ends with a FAILED event) or RUNNING.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from rlvr.io import atomic_write_json, atomic_write_text

STAGES = ("base model", "after SFT", "final")


@dataclass
class SweepPoint:
    num: int
    status: str  # COMPLETED | FAILED | RUNNING
    overrides: dict[str, Any]
    accuracy: dict[str, dict[str, float]] = field(
        default_factory=dict
    )  # stage -> accuracy, ci_low, ci_high, n
    steps: dict[str, int] = field(default_factory=dict)
    wall_seconds: float | None = None
    attempts: int | None = None  # processes the point took (a requeued, resumed point: more than 1)


def swept_keys(multirun_yaml: Path) -> list[str]:
    """Keys the sweep varies: the task overrides whose value is a sweep (``a,b``, ``range()``, ``choice()``)."""
    task = OmegaConf.load(multirun_yaml).hydra.overrides.task
    parsed = OverridesParser.create().parse_overrides(list(task))
    return [o.get_key_element() for o in parsed if o.is_sweep_override()]


def _status(point_dir: Path) -> str:
    if (point_dir / "report.json").is_file():
        return "COMPLETED"
    metrics = point_dir / "metrics.jsonl"
    if metrics.is_file():
        lines = metrics.read_text().splitlines()
        if lines:
            try:
                last = json.loads(lines[-1])
            except json.JSONDecodeError:
                return "RUNNING"  # a line being written
            if last.get("event") == "pipeline_end" and last.get("status") != "COMPLETED":
                return "FAILED"
    return "RUNNING"


def _point_value(point_dir: Path, key: str) -> Any:
    resolved = point_dir / "config_resolved.yaml"
    if not resolved.is_file():
        return None
    # Group choices (``model=tiny``) are not config keys; they show as None rather than a guess.
    return OmegaConf.select(OmegaConf.load(resolved), key.lstrip("+~"), default=None)


def collect(sweep_dir: Path) -> list[SweepPoint]:
    multirun_yaml = sweep_dir / "multirun.yaml"
    if not multirun_yaml.is_file():
        raise FileNotFoundError(f"{sweep_dir} has no multirun.yaml: not a Hydra multirun directory")
    keys = swept_keys(multirun_yaml)
    points = []
    for point_dir in sorted(
        (p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()), key=lambda p: int(p.name)
    ):
        point = SweepPoint(
            num=int(point_dir.name),
            status=_status(point_dir),
            overrides={k: _point_value(point_dir, k) for k in keys},
        )
        if point.status == "COMPLETED":
            report = json.loads((point_dir / "report.json").read_text())
            point.accuracy = {
                row["stage"]: {k: row[k] for k in ("accuracy", "ci_low", "ci_high", "n")}
                for row in report["accuracy"]
            }
            point.steps = dict(report["steps"])
            point.wall_seconds = report["wall_seconds"]
            point.attempts = len(report.get("attempts", [])) or None
        points.append(point)
    return points


def _rows(points: list[SweepPoint]) -> list[dict[str, Any]]:
    rows = []
    for p in points:
        row: dict[str, Any] = {"point": p.num, "status": p.status, **p.overrides}
        for stage in STAGES:
            acc = p.accuracy.get(stage)
            row[f"{stage} acc"] = acc["accuracy"] if acc else None
            row[f"{stage} 95% CI"] = f"[{acc['ci_low']:.3f}, {acc['ci_high']:.3f}]" if acc else None
        row["steps"] = " + ".join(f"{k} {v}" for k, v in p.steps.items()) or None
        row["wall s"] = p.wall_seconds
        row["attempts"] = p.attempts
        rows.append(row)
    return rows


def to_markdown(points: list[SweepPoint]) -> str:
    rows = _rows(points)
    if not rows:
        return "(no sweep points yet)\n"
    header = list(rows[0])
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = ["" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v)) for v in row.values()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def to_csv(points: list[SweepPoint]) -> str:
    rows = _rows(points)
    buf = io.StringIO()
    if rows:
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return buf.getvalue()


def plot(points: list[SweepPoint], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [p for p in points if p.status == "COMPLETED"]
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(done) + 2), 4))
    width = 0.8 / len(STAGES)
    for i, stage in enumerate(STAGES):
        xs, ys, err = [], [], [[], []]
        for j, p in enumerate(done):
            acc = p.accuracy.get(stage)
            if acc:
                xs.append(j + (i - 1) * width)
                ys.append(acc["accuracy"])
                err[0].append(acc["accuracy"] - acc["ci_low"])
                err[1].append(acc["ci_high"] - acc["accuracy"])
        ax.bar(xs, ys, width, yerr=err, capsize=3, label=stage)
    ax.set_xticks(range(len(done)))
    ax.set_xticklabels(
        ["\n".join(f"{k}={v}" for k, v in p.overrides.items()) or str(p.num) for p in done], fontsize=8
    )
    ax.set_ylabel("held-out accuracy (95% CI)")
    ax.set_ylim(0, 1)
    ax.legend()
    ax.set_title("Sweep: accuracy per point")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_sweep_report(sweep_dir: Path, out_dir: Path | None = None) -> list[Path]:
    out_dir = out_dir or sweep_dir
    points = collect(sweep_dir)
    written = [
        atomic_write_text(out_dir / "sweep_report.md", to_markdown(points)),
        atomic_write_text(out_dir / "sweep_report.csv", to_csv(points)),
        atomic_write_json(out_dir / "sweep_report.json", [asdict(p) for p in points], default=str),
        plot(points, out_dir / "sweep_report.png"),
    ]
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path, help="a Hydra multirun directory (holds multirun.yaml)")
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: the sweep dir)")
    args = parser.parse_args(argv)
    for path in write_sweep_report(args.sweep_dir, args.out):
        print(path)
    print(to_markdown(collect(args.sweep_dir)))


if __name__ == "__main__":
    main()
