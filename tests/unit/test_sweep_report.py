"""Sweep report from a synthetic multirun directory: overrides, accuracies, statuses, files."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import time
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from rlvr.records.sweep_report import chart, collect, main, to_csv, to_markdown


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
        "| 0 | COMPLETED | 1 | 1e-05 | 0.0% | -10.0% - 10.0% | 50.0% | 40.0% - 60.0% | 60.0% | 50.0% - 70.0% "
        "|  |  | sft 4 + grpo 2 | 30.5 |" in md
    )
    assert "| 1 | FAILED | 2 |" in md and "| 2 | RUNNING | 3 |" in md
    rows = list(csv.DictReader(io.StringIO(to_csv(points))))
    assert (
        rows[0]["final acc"] == "60.0%"
        and rows[0]["steps"] == "sft 4 + grpo 2"
        and rows[0]["wall s"] == "30.5"
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


def test_chart_labels_do_not_overlap_and_the_axis_is_in_percent(tmp_path):
    """Points whose labels name long keys (a learning rate under training_loop.grpo) side by side."""
    sweep = make_sweep(tmp_path)
    for num in (1, 2):
        complete(sweep / str(num), final=0.5)
    fig = chart(collect(sweep))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels()]
    assert len(boxes) == 3
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    assert all(fig.bbox.contains(b.x0, b.y0) and fig.bbox.contains(b.x1, b.y1) for b in boxes)
    assert ax.yaxis.get_major_formatter().format_data(0.5) == "50%"
    # Short, upright labels: the bars keep most of the figure's height.
    assert [t.get_text() for t in ax.get_xticklabels()][0] == "seed=1\nlearning_rate=1e-05"
    assert all(t.get_rotation() == 0 for t in ax.get_xticklabels())
    assert ax.get_xlabel() == "point (learning_rate = training_loop.grpo.learning_rate)"
    label_height = max(b.height for b in boxes)
    assert ax.get_window_extent(renderer).height > 4 * label_height, (
        ax.get_window_extent(renderer),
        label_height,
    )


# -- a results directory from elsewhere is data ------------------------------------------------------
SECRET = "sweep-secret-4f1c0a"


@pytest.mark.parametrize(
    "written",
    ["${oc.env:RLVR_TEST_SWEEP}", "${oc.env:'RLVR_TEST_SWEEP'}", "x-${oc.env:${name}}", "${oc.select:name}"],
)
def test_a_points_config_is_read_as_data_never_interpolated(tmp_path, monkeypatch, capsys, written):
    monkeypatch.setenv("RLVR_TEST_SWEEP", SECRET)
    (tmp_path / "sweep").mkdir()
    sweep = make_sweep(tmp_path / "sweep")
    record = {"name": "RLVR_TEST_SWEEP", "seed": written, "training_loop": {"grpo": {"learning_rate": 1e-5}}}
    (sweep / "1" / "config_resolved.yaml").write_text(yaml.safe_dump(record))
    main([str(sweep), "--out", str(tmp_path / "out")])
    assert collect(sweep)[1].overrides["seed"] == written  # shown as written
    outputs = capsys.readouterr().out + "".join(p.read_text() for p in (tmp_path / "out").glob("*.[cjm]*"))
    assert SECRET not in outputs


@pytest.mark.parametrize("target", ["multirun.yaml", "1/config_resolved.yaml"])
@pytest.mark.parametrize("depth", [2, 5, 9])
def test_yaml_aliases_in_a_results_directory_are_refused_quickly(tmp_path, target, depth):
    sweep = make_sweep(tmp_path)
    (sweep / target).write_text(alias_bomb(depth))
    start = time.perf_counter()
    if target == "multirun.yaml":
        with pytest.raises(SystemExit, match="aliases"):
            main([str(sweep)])
    else:
        points = collect(sweep)  # the other points are still reported
        assert points[1].status == "UNKNOWN" and "aliases" in points[1].note
        assert points[0].status == "COMPLETED"
    assert time.perf_counter() - start < 5  # a guard, not a benchmark: unbounded, depth 9 runs for hours


def alias_bomb(depth: int) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, depth + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "value",
    ['=HYPERLINK("http://x","y")', "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1:A2)", "\t=1+1", "\r=1+1", "=1+1"],
)
def test_csv_cells_that_a_spreadsheet_would_run_are_neutralised(tmp_path, value):
    sweep = make_sweep(tmp_path)
    (sweep / "1" / "config_resolved.yaml").write_text(
        yaml.safe_dump({"seed": value, "training_loop": {"grpo": {"learning_rate": -0.5}}})
    )
    rows = list(csv.DictReader(io.StringIO(to_csv(collect(sweep)))))
    assert rows[1]["seed"] == "'" + value
    assert rows[1]["training_loop.grpo.learning_rate"] == "-0.5" and rows[0]["final acc"] == "60.0%"
    assert to_markdown(collect(sweep)).count("\n|") == 4  # a header, a rule and three rows: no new row


def relaunch(point: Path, value: float) -> None:
    """The sweep is relaunched into the same directory with a new value: the point writes its new
    config record, then dies."""
    OmegaConf.save(
        {"seed": 1, "training_loop": {"grpo": {"learning_rate": value}}}, point / "config_resolved.yaml"
    )


def test_a_relaunched_point_that_died_does_not_show_the_old_runs_accuracy(tmp_path):
    sweep = make_sweep(tmp_path)
    old = json.loads((sweep / "0" / "attempts.json").read_text())
    relaunch(sweep / "0", 3e-5)
    new = {**old[0], "started_at": "2026-02-01T00:00:00+00:00", "status": "FAILED"}
    new["config_sha256"] = hashlib.sha256((sweep / "0" / "config_resolved.yaml").read_bytes()).hexdigest()
    (sweep / "0" / "attempts.json").write_text(json.dumps([new]))
    point = collect(sweep)[0]
    assert (point.status, point.accuracy, point.overrides["training_loop.grpo.learning_rate"]) == (
        "FAILED",
        {},
        3e-5,
    )
    assert "another run" in point.note


@pytest.mark.parametrize(
    "case", ["config rewritten", "a later attempt failed", "no config hash", "forged status"]
)
def test_completed_needs_the_report_and_the_config_of_one_run_that_completed(tmp_path, case):
    sweep = make_sweep(tmp_path)
    point = sweep / "0"
    attempts = json.loads((point / "attempts.json").read_text())
    report = json.loads((point / "report.json").read_text())
    if case == "config rewritten":  # killed between writing the config record and its attempt entry
        relaunch(point, 3e-5)
    elif case == "a later attempt failed":  # same value, fresh run that died
        (point / "attempts.json").write_text(
            json.dumps([{**attempts[0], "attempt": 1, "started_at": "later", "status": "FAILED"}])
        )
    elif case == "no config hash":
        del report["attempts"][-1]["config_sha256"]
        (point / "report.json").write_text(json.dumps(report))
    else:  # the attempts file says COMPLETED, but for another attempt than the report's
        (point / "attempts.json").write_text(json.dumps([{**attempts[0], "started_at": "later"}]))
    (result,) = [p for p in collect(sweep) if p.num == 0]
    assert result.status != "COMPLETED"
    assert result.accuracy == {} and result.note


def test_markdown_cells_cannot_forge_rows_or_cells(tmp_path):
    sweep = make_sweep(tmp_path)
    forged = "2\n| 9 | COMPLETED | 1 | 1e-05 | 0 | x | 0.99 | x | 0.99 |"
    (sweep / "1" / "config_resolved.yaml").write_text(yaml.safe_dump({"seed": forged}))
    lines = to_markdown(collect(sweep)).splitlines()
    assert [line.split(" | ")[:2] for line in lines[2:5]] == [
        ["| 0", "COMPLETED"],
        ["| 1", "FAILED"],
        ["| 2", "RUNNING"],
    ]
    assert len(lines[3].replace("\\|", "").split("|")) == len(lines[0].split("|"))  # no extra cells


def log_rewards(point: Path, rewards: list[float], first_step: int = 1) -> None:
    """GRPO steps as the file observer logs them (with other events and metrics around them)."""
    lines = [
        {"event": "pipeline_start"},
        {"event": "train_step", "phase": "sft", "step": 1, "metrics": {"sft/loss": 2.0}},
    ]
    lines += [
        {
            "event": "train_step",
            "phase": "grpo",
            "step": first_step + i,
            "metrics": {"grpo/loss": 0.0, "grpo/reward/mean": r},
        }
        for i, r in enumerate(rewards)
    ]
    with (point / "metrics.jsonl").open("a") as f:
        f.write("".join(json.dumps(line) + "\n" for line in lines))


def test_points_that_all_score_zero_are_told_apart_by_their_training_reward(tmp_path):
    sweep = make_sweep(tmp_path)
    for num, final in ((1, 0.0), (2, 0.0)):
        complete(sweep / str(num), final=final)
    complete(sweep / "0", final=0.0)
    log_rewards(sweep / "0", [0.0, 0.0])
    log_rewards(sweep / "1", [0.1, 0.3, 0.5])
    log_rewards(sweep / "1", [0.9], first_step=3)  # a resumed attempt logs step 3 again: counted once
    points = collect(sweep)
    # 0.1, 0.3, 0.9: sd 0.416, over sqrt(3), times 1.96 = 0.471 either side of 0.433
    assert [p.train_reward for p in points] == [
        {"mean": 0.0, "ci_low": 0.0, "ci_high": 0.0, "last": 0.0, "steps": 2},
        {
            "mean": pytest.approx(1.3 / 3),
            "ci_low": pytest.approx(-0.0378, abs=1e-4),
            "ci_high": pytest.approx(0.9045, abs=1e-4),
            "last": 0.9,
            "steps": 3,
        },
        None,
    ]
    md = to_markdown(points)
    assert "| GRPO reward mean (last) | GRPO reward 95% CI |" in md.splitlines()[0]
    assert "| 0.000 (0.000) | [0.000, 0.000] | sft 4 + grpo 2 |" in md
    assert "| 0.433 (0.900) | [-0.038, 0.904] | sft 4 + grpo 2 |" in md
    rows = list(csv.DictReader(io.StringIO(to_csv(points))))
    assert [r["GRPO reward mean (last)"] for r in rows] == ["0.000 (0.000)", "0.433 (0.900)", ""]
    assert [r["GRPO reward 95% CI"] for r in rows] == ["[0.000, 0.000]", "[-0.038, 0.904]", ""]
    # the chart: a diamond per point with a reward, on its own axis, with the table's interval
    fig = chart(points)
    (diamonds,) = [line for line in fig.axes[1].lines if line.get_marker() == "D"]
    assert list(diamonds.get_xdata()) == [0, 1] and list(diamonds.get_ydata()) == [
        0.0,
        pytest.approx(1.3 / 3),
    ]
    assert fig.axes[1].get_ylabel() == "GRPO training reward (mean, 95% CI)"
    (bars,) = fig.axes[1].collections  # the error bars: from each interval's low to its high
    assert [tuple(map(float, seg[:, 1])) for seg in bars.get_segments()] == [
        (0.0, 0.0),
        (pytest.approx(-0.0378, abs=1e-4), pytest.approx(0.9045, abs=1e-4)),
    ]


def test_the_reward_axis_shows_negative_rewards_and_their_intervals(tmp_path):
    """Issue 56 item 3: the reward axis was fixed at 0-1, so a point whose GRPO reward was negative
    (a brevity penalty, a negative reward term) drew its diamond below the frame, unseen."""
    sweep = make_sweep(tmp_path)
    for num in (0, 1):
        complete(sweep / str(num), final=0.02)
    log_rewards(sweep / "0", [-0.9, -0.7, -0.5])
    log_rewards(sweep / "1", [0.2, 0.4])
    points = collect(sweep)
    fig = chart(points)
    right = fig.axes[1]
    low, high = right.get_ylim()
    lowest = min(p.train_reward["ci_low"] for p in points if p.train_reward)
    assert lowest < -0.9 and low < lowest and high > 0.4  # every diamond and whole interval inside
    assert any(line.get_linestyle() == ":" and list(line.get_ydata()) == [0.0, 0.0] for line in right.lines)
    # the accuracy axis follows the data too: a 2% final with a +-10 point interval is not a sliver
    assert fig.axes[0].get_ylim() == (0.0, pytest.approx(0.6 * 1.1))
    assert fig.axes[0].get_xlabel().startswith("point") and fig.axes[0].get_ylabel()
    fig.savefig(tmp_path / "negative.png")


@pytest.mark.parametrize(("name", "magic"), [("s.pdf", b"%PDF"), ("s.svg", b"<?xml"), ("s.png", b"\x89PNG")])
def test_the_chart_is_written_in_the_format_its_name_asks_for(tmp_path, name, magic):
    sweep = make_sweep(tmp_path)
    main([str(sweep), "--chart", name])
    assert (sweep / name).read_bytes().startswith(magic)


def test_an_unsupported_chart_suffix_is_refused_before_anything_is_written(tmp_path, capsys):
    sweep = make_sweep(tmp_path)
    with pytest.raises(SystemExit):
        main([str(sweep), "--chart", "s.jpeg"])
    assert (
        "--chart s.jpeg: suffix '.jpeg' is not a chart format; use .png, .svg or .pdf"
        in capsys.readouterr().err
    )
    assert not (sweep / "sweep_report.md").exists()
