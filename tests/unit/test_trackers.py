"""W&B's documented default: offline unless WANDB_API_KEY is set (conf/observers/with_wandb.yaml)."""

from __future__ import annotations

import dataclasses
import json

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


def _rows() -> list[ev.CompletionRow]:
    return [
        ev.CompletionRow(
            prompt=f"user: {n} + 1?",
            completion=f"<answer>{n + 1}</answer>",
            task="basic_arithmetic",
            reference=str(n + 1),
            answer=str(n + 1),
            rewards={"correctness": 1.0, "format": 1.0 - n},
            score=1.0 + 0.2 * (1.0 - n),
            correct=True,
        )
        for n in range(2)
    ]


def _tables(run_dir) -> dict[str, dict]:
    """The tables an offline W&B run wrote, by their key (``completions/grpo`` ...)."""
    [offline] = (run_dir / "wandb").glob("offline-run-*")
    media = offline / "files" / "media" / "table"
    return {
        str(p.relative_to(media)).rsplit("_", 2)[0]: json.loads(p.read_text())
        for p in media.rglob("*.table.json")
    }


def test_the_wandb_observer_logs_each_completions_event_as_a_table_offline(tmp_path, monkeypatch):
    """A real offline wandb run: a table per source, a row per completion, a column per reward term."""
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    observer = shipped_wandb_observer()
    observer.on_pipeline_start(ev.PipelineStart(tmp_path, {"seed": 1}))
    try:
        observer.on_completions(ev.Completions("grpo", 3, _rows()))
        observer.on_completions(
            ev.Completions("eval/final", 7, [dataclasses.replace(_rows()[0], rewards={})])
        )
    finally:
        observer.close()
    tables = _tables(tmp_path)
    assert set(tables) == {"completions/grpo", "completions/eval/final"}
    grpo = tables["completions/grpo"]
    assert grpo["columns"] == [
        "step", "task", "prompt", "completion", "answer", "reference",
        "reward/correctness", "reward/format", "score", "correct",
    ]  # fmt: skip
    assert grpo["data"] == [
        [3, "basic_arithmetic", "user: 0 + 1?", "<answer>1</answer>", "1", "1", 1.0, 1.0, 1.2, True],
        [3, "basic_arithmetic", "user: 1 + 1?", "<answer>2</answer>", "2", "2", 1.0, 0.0, 1.0, True],
    ]
    assert tables["completions/eval/final"]["data"][0][0] == 7


def test_tensorboard_names_each_tag_phase_slash_metric_once(tmp_path):
    """A step's metrics carry their phase already (rft/loss): the tag is that name, not rft/rft/loss."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from rlvr.observers.trackers import TensorBoardObserver
    from rlvr.training_loop.callbacks import namespaced

    observer = TensorBoardObserver(log_dir="tensorboard")
    observer.on_pipeline_start(ev.PipelineStart(tmp_path, {}))
    for phase in ("rft", "grpo"):
        metrics = namespaced(phase, {"loss": 0.5, "rewards/format/mean": 0.25})
        observer.on_train_step(ev.TrainStep(phase, 1, 2, metrics))
    observer.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert set(events.Tags()["scalars"]) == {
        "rft/loss", "rft/reward/format/mean", "grpo/loss", "grpo/reward/format/mean",
    }  # fmt: skip
    assert [e.value for e in events.Scalars("rft/loss")] == [0.5]
