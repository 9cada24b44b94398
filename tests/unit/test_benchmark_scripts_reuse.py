"""The benchmark scripts (benchmarks/*.py) reuse a finished run folder only when it ran the settings
they would run (SECURITY.md "Benchmark"): a folder holding another run's report is refused, so its
numbers are never printed under these settings' name."""

from __future__ import annotations

import json
import sys

import pytest
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))  # the scripts import each other as siblings
from learning import finished  # noqa: E402


def _run_folder(path, overrides):
    path.mkdir()
    (path / "report.json").write_text("{}")
    (path / "provenance.json").write_text(json.dumps({"overrides": overrides}))
    return path


def test_a_finished_run_of_the_same_settings_is_reused(tmp_path):
    run = _run_folder(tmp_path / "run", ["seed=1", "training_loop.grpo.max_steps=8"])
    assert finished(run, ["seed=1", "training_loop.grpo.max_steps=8"]) is True
    assert finished(tmp_path / "absent", ["seed=1"]) is False


@pytest.mark.parametrize("recorded", [["seed=2", "training_loop.grpo.max_steps=8"], None])
def test_a_folder_holding_another_runs_report_is_refused(tmp_path, recorded):
    run = _run_folder(tmp_path / "run", recorded)
    with pytest.raises(SystemExit) as exc:
        finished(run, ["seed=1", "training_loop.grpo.max_steps=8"])
    assert str(run) in str(exc.value) and "delete that folder" in str(exc.value)


def test_a_run_stopped_on_purpose_is_reused_by_its_step_records_only_under_its_settings(tmp_path):
    """benchmarks/rl_where_it_wins.py stops each arm past its budgets, so the run writes no report.json:
    its metrics.jsonl marks it as trained, under the same settings rule."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "provenance.json").write_text(json.dumps({"overrides": ["seed=1"]}))
    assert finished(run, ["seed=1"], record="metrics.jsonl") is False  # no step ran yet
    (run / "metrics.jsonl").write_text("{}\n")
    assert finished(run, ["seed=1"], record="metrics.jsonl") is True
    assert finished(run, ["seed=1"]) is False  # no report.json: not a finished run
    with pytest.raises(SystemExit):
        finished(run, ["seed=2"], record="metrics.jsonl")


def test_cpu_fp32_refuses_a_call_that_would_measure_nothing(capsys):
    """benchmarks/cpu_fp32.py --no-anatomy without --run-dir exited 0 having printed nothing (a 3-second
    "measurement" on 2026-12-02): it now says what to add."""
    import cpu_fp32

    with pytest.raises(SystemExit) as exc:
        cpu_fp32.main(["--no-anatomy"])
    assert exc.value.code == 2
    assert "--run-dir" in capsys.readouterr().err
