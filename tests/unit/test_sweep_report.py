"""Sweep report from a synthetic multirun directory: overrides, accuracies, statuses, files."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from pathlib import Path

from omegaconf import OmegaConf

from rlvr.sweep_report import collect, main, to_csv, to_markdown


def _acc(stage: str, acc: float) -> dict:
    return {"stage": stage, "step": 0, "accuracy": acc, "ci_low": acc - 0.1, "ci_high": acc + 0.1, "n": 50}


def complete(point: Path, final: float, status: str = "COMPLETED") -> dict:
    """What a finished run leaves: its attempt (naming the config record it ran under) in
    attempts.json and, copied, in report.json."""
    attempt = {
        "attempt": 1,
        "started_at": "2026-01-01T00:00:00+00:00",
        "status": status,
        "seconds": 30.5,
        "config_sha256": hashlib.sha256((point / "config_resolved.yaml").read_bytes()).hexdigest(),
    }
    (point / "attempts.json").write_text(json.dumps([attempt]))
    report = {
        "accuracy": [_acc("base model", 0.0), _acc("after SFT", 0.5), _acc("final", final)],
        "steps": {"sft": 4, "grpo": 2},
        "wall_seconds": 30.5,
        "attempts": [{**attempt, "status": "COMPLETED"}],
    }
    (point / "report.json").write_text(json.dumps(report))
    return attempt


def make_sweep(root: Path) -> Path:
    OmegaConf.save(
        {
            "hydra": {
                "overrides": {
                    "task": ["experiment=smoke", "seed=1,2,3", "training_loop.grpo.learning_rate=1e-5,2e-5"]
                }
            }
        },
        root / "multirun.yaml",
    )
    for num, (seed, lr) in enumerate([(1, 1e-5), (2, 1e-5), (3, 2e-5)]):
        point = root / str(num)
        point.mkdir()
        # No .hydra/overrides.yaml on purpose: values must come from the point's own config record.
        OmegaConf.save(
            {"seed": seed, "training_loop": {"grpo": {"learning_rate": lr}}}, point / "config_resolved.yaml"
        )
    complete(root / "0", final=0.6)
    (root / "1" / "metrics.jsonl").write_text(
        json.dumps({"event": "pipeline_start"})
        + "\n"
        + json.dumps({"event": "pipeline_end", "status": "FAILED"})
        + "\n"
    )
    (root / "2" / "metrics.jsonl").write_text(json.dumps({"event": "pipeline_start"}) + "\n")
    return root


def test_points_carry_their_own_overrides_and_status(tmp_path):
    points = collect(make_sweep(tmp_path))
    assert [p.status for p in points] == ["COMPLETED", "FAILED", "RUNNING"]
    assert [p.overrides for p in points] == [
        {"seed": 1, "training_loop.grpo.learning_rate": 1e-5},
        {"seed": 2, "training_loop.grpo.learning_rate": 1e-5},
        {"seed": 3, "training_loop.grpo.learning_rate": 2e-5},
    ]
    assert points[0].accuracy["final"]["accuracy"] == 0.6
    assert points[0].steps == {"sft": 4, "grpo": 2}
    assert points[1].accuracy == {}


def test_table_formats(tmp_path):
    points = collect(make_sweep(tmp_path))
    md = to_markdown(points)
    assert (
        "| 0 | COMPLETED | 1 | 1e-05 | 0 | [-0.100, 0.100] | 0.5 | [0.400, 0.600] | 0.6 | [0.500, 0.700] | sft 4 + grpo 2 | 30.5 |"
        in md
    )
    assert "| 1 | FAILED | 2 |" in md and "| 2 | RUNNING | 3 |" in md
    rows = list(csv.DictReader(io.StringIO(to_csv(points))))
    assert (
        rows[0]["final acc"] == "0.6" and rows[0]["steps"] == "sft 4 + grpo 2" and rows[0]["wall s"] == "30.5"
    )
    assert rows[2]["status"] == "RUNNING" and rows[2]["final acc"] == ""


def test_command_writes_table_json_and_chart(tmp_path, capsys):
    (tmp_path / "sweep").mkdir()
    sweep = make_sweep(tmp_path / "sweep")
    main([str(sweep), "--out", str(tmp_path / "out")])
    out = tmp_path / "out"
    assert json.loads((out / "sweep_report.json").read_text())[1]["status"] == "FAILED"
    assert (out / "sweep_report.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "sweep_report.md").read_text() == to_markdown(collect(sweep))
    assert "COMPLETED" in capsys.readouterr().out
