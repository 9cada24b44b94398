"""The config gate hands the app what it built (rlvr.config.gate.GateResult): the app runs those very
components from the resume point the gate resolved. Nothing is built twice and no checkpoint is read
twice, unless another process of the run changed its checkpoints between the gate and the lock."""

from __future__ import annotations

import pytest
from tests.conftest import compose_config
from tests.unit.test_checkpoints import make_ckpt

from rlvr import app
from rlvr.config import gate
from rlvr.events import RunResult
from rlvr.issues import ConfigIssue, ConfigValidationError
from rlvr.pipeline import Run
from rlvr.training_loop import resume as resume_module
from rlvr.training_loop.checkpoints import write_fingerprint


@pytest.fixture
def ran(monkeypatch):
    """The run the app made (rlvr.pipeline.Run), recorded instead of run."""
    seen: dict = {}

    def run(self):
        seen["run"] = self
        return RunResult(status="COMPLETED", run_dir=self.run_dir)

    monkeypatch.setattr(Run, "run", run)
    return seen


def test_the_app_runs_the_components_the_gate_built(tmp_path, ran):
    """Mutation: the app builds its own (the old second build) -> red."""
    checked = gate.check(compose_config(["experiment=smoke"]), tmp_path / "run")
    try:
        app.train(checked)
    finally:
        checked.close()
    c = ran["run"]
    built = checked.components
    assert c.data is built["data"] and c.model is built["model"] and c.verifier is built["verifier"]
    assert c.training_loop is built["training_loop"] and c.reward is built["reward"]
    assert c.observers == {k.split(".", 1)[1]: v for k, v in built.items() if k.startswith("observers.")}
    assert c.observers  # the default config has observers: the comparison above is not of two empties


def test_the_resume_point_is_the_gates_unless_checkpoints_changed_before_the_lock(tmp_path, ran, monkeypatch):
    """The gate resolves ``resume`` once (and reads the checkpoint then); the app uses it. A checkpoint
    another process of the run saved in between is found again under the lock. Mutations: the app
    resolving every time -> red on the call count; never -> red on the newer checkpoint."""
    cfg = compose_config(["experiment=smoke", "resume=auto"])
    run = tmp_path / "run"
    write_fingerprint(run, resume_module.fingerprint(gate.checked_config(cfg)))  # as a run records it
    first = make_ckpt(run, "sft", 2)
    calls: list = []
    real = resume_module.resolve_resume
    monkeypatch.setattr(resume_module, "resolve_resume", lambda *a, **k: calls.append(a) or real(*a, **k))

    checked = gate.check(cfg, run)
    assert checked.resume == ("sft", first) and len(calls) == 1
    app.train(checked)
    assert ran["run"].resume == ("sft", first) and len(calls) == 1

    checked = gate.check(cfg, run)
    newer = make_ckpt(run, "sft", 4)  # saved after the gate looked
    app.train(checked)
    assert ran["run"].resume == ("sft", newer) and len(calls) == 3


def test_the_held_command_line_issues_are_reported_with_the_rest_and_nothing_stays_open(
    tmp_path, monkeypatch
):
    """``held`` (what the check before Hydra left off the command line) refuses a config that is
    otherwise fine, in the same report as the config's own problems; the verifier workers the gate
    started are stopped. Mutations: ``held`` dropped in check(), or no close on a refusal -> red."""
    closed: list = []
    real = gate.close_components
    monkeypatch.setattr(gate, "close_components", lambda c: closed.extend(c) or real(c))
    held = [ConfigIssue("sed", "1", "the config has no key 'sed'", "did you mean 'seed'?")]
    with pytest.raises(ConfigValidationError) as err:
        gate.check(compose_config(["experiment=smoke"]), tmp_path / "a", held=held)
    assert [i.key for i in err.value.issues] == ["sed"]
    assert "verifier" in closed
    with pytest.raises(ConfigValidationError) as err:
        gate.check(compose_config(["experiment=smoke", "data.eval_size=0"]), tmp_path / "b", held=held)
    assert [i.key for i in err.value.issues] == ["sed", "data.eval_size"]
