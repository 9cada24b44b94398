"""W&B's documented default: offline unless WANDB_API_KEY is set (conf/observers/with_wandb.yaml)."""

from __future__ import annotations

import pytest
from hydra.utils import instantiate
from tests.conftest import compose_config

from rlvr import events as ev


def shipped_wandb_observer():
    cfg = compose_config(["observers=with_wandb"])
    return instantiate(cfg.observers.wandb, _convert_="all")


def test_default_without_a_key_runs_offline_for_real(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    observer = shipped_wandb_observer()
    assert observer.mode == "auto"
    observer.on_pipeline_start(ev.PipelineStart(tmp_path, {"seed": 1}))
    try:
        assert observer._run.settings.mode == "offline"
    finally:
        observer.close()
    assert list((tmp_path / "wandb").glob("offline-run-*"))


def test_default_with_a_key_goes_online(tmp_path, monkeypatch):
    """The online call itself is not made here (no network): what wandb.init is asked for is checked."""
    import wandb

    monkeypatch.setenv("WANDB_API_KEY", "fake-key-never-sent-0000")
    asked = {}
    monkeypatch.setattr(wandb, "init", lambda **kw: asked.update(kw))
    observer = shipped_wandb_observer()
    observer.on_pipeline_start(ev.PipelineStart(tmp_path, {"seed": 1}))
    assert asked["mode"] == "online"
    assert asked["settings"].x_disable_meta  # no argv/machine metadata in the run files


@pytest.mark.parametrize("mode", ["offline", "online"])
def test_an_explicit_mode_wins_over_the_key(monkeypatch, mode):
    monkeypatch.setenv("WANDB_API_KEY", "fake-key-never-sent-0000")
    observer = shipped_wandb_observer()
    observer.mode = mode
    assert observer.resolved_mode() == mode
