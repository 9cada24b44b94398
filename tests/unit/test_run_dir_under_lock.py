"""The run-directory rules hold under the lock, every time (issue 55, finding 4): two runs race for one
directory. Run A passes the config gate while the directory is empty; run B then takes the lock, runs to
its end and releases it; only then does A take the lock. A must not run inside B's finished directory
(it overwrote B's fingerprint, attempts and report, and mixed both runs in metrics.jsonl), whatever
the checkpoints (the default ``keep_checkpoints=none`` leaves none, so "the checkpoints changed" saw
nothing). Deterministic: the gate and the app's lock step are called in the race's order, no sleeps."""

from __future__ import annotations

import json

import pytest
from tests.conftest import compose_config

from rlvr import app
from rlvr.config import gate
from rlvr.events import RunResult
from rlvr.issues import ConfigValidationError
from rlvr.pipeline import Run
from rlvr.runtime.io import RUN_RECORDS
from rlvr.training_loop.checkpoints import write_fingerprint
from rlvr.training_loop.resume import fingerprint


@pytest.fixture
def runs(monkeypatch):
    """The runs the app ran (rlvr.pipeline.Run); each one leaves what a completed run with
    ``keep_checkpoints=none`` leaves: its settings fingerprint, a COMPLETED attempt, its metrics and
    its report, and no checkpoint."""
    ran: list[Run] = []

    def run(self):
        ran.append(self)
        write_fingerprint(self.run_dir, fingerprint(self.cfg))
        (self.run_dir / "attempts.json").write_text(
            json.dumps([{"attempt": 1, "status": "COMPLETED", "ended_at": "2026-11-29T10:00:00"}])
        )
        (self.run_dir / "metrics.jsonl").write_text('{"event": "pipeline_end", "status": "COMPLETED"}\n')
        (self.run_dir / "report.json").write_text(json.dumps({"status": "COMPLETED", "seed": self.cfg.seed}))
        return RunResult(status="COMPLETED", run_dir=self.run_dir)

    monkeypatch.setattr(Run, "run", run)
    return ran


def _race(tmp_path, first: list[str], second: list[str], runs):
    """B (``first``) and A (``second``) both pass the gate in the empty directory; B takes the lock and
    completes; A's lock step comes after. Returns A's gate result and B's records as B left them."""
    run = tmp_path / "run"
    b = gate.check(compose_config(["experiment=smoke", *first]), run)
    a = gate.check(compose_config(["experiment=smoke", *second]), run)  # empty still: it passes
    app.train(b)
    assert len(runs) == 1 and runs[0].run_dir == run
    left = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name in RUN_RECORDS}
    assert set(left) >= {"run_fingerprint.json", "attempts.json", "metrics.jsonl", "report.json"}
    return run, a, left


def _unchanged(run, left) -> None:
    assert {name: (run / name).read_bytes() for name in left} == left


def test_a_fresh_run_that_passed_the_gate_in_an_empty_dir_is_refused_in_the_run_that_finished_there(
    tmp_path, runs
):
    """Mutation: app.train without judge_run_dir_under_lock (the old re-check only when the checkpoints
    changed) -> A runs (a second Run) and rewrites B's records -> red."""
    run, a, left = _race(tmp_path, ["seed=1"], ["seed=2"], runs)
    try:
        with pytest.raises(ConfigValidationError) as err:
            app.train(a)
    finally:
        a.close()
    [issue] = err.value.issues
    assert issue.key == "hydra.run.dir" and issue.value == str(run)
    assert "holds another run" in issue.problem and "after the config check" in issue.problem
    assert "choose a new hydra.run.dir" in issue.fix
    assert len(runs) == 1  # A never ran
    _unchanged(run, left)


def test_resume_auto_with_other_settings_is_refused_in_the_run_that_finished_there(tmp_path, runs):
    """A ``resume=auto`` run that found an empty directory at the gate (a fresh start) must not
    continue a run of other settings that finished there before it held the lock (the fingerprint
    rule). Mutation: no re-judging under the lock -> A says "nothing to resume" about B's run -> red."""
    run, a, left = _race(tmp_path, ["seed=1"], ["seed=2", "resume=auto"], runs)
    try:
        with pytest.raises(ConfigValidationError) as err:
            app.train(a)
    finally:
        a.close()
    [issue] = err.value.issues
    assert issue.key == "hydra.run.dir" and "seed: 1 -> 2" in issue.problem
    assert "after the config check" in issue.problem
    assert len(runs) == 1
    _unchanged(run, left)


def test_resume_auto_with_the_same_settings_finds_the_finished_run_and_changes_nothing(
    tmp_path, runs, capsys
):
    """The same settings under ``resume=auto``: the run that finished meanwhile is this run, and there is
    nothing left to do (the finished-run rule, under the lock)."""
    run, a, left = _race(tmp_path, ["seed=1"], ["seed=1", "resume=auto"], runs)
    assert app.train(a) is None
    assert "nothing to resume" in capsys.readouterr().out
    assert len(runs) == 1
    _unchanged(run, left)
