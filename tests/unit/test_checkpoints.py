"""Checkpoint completeness markers, resume discovery and the run fingerprint."""

from __future__ import annotations

import pytest

from rlvr.training.checkpoints import (
    MARKER,
    check_fingerprint,
    complete_checkpoints,
    latest_checkpoint,
    mark_complete,
    phase_of,
    write_fingerprint,
)


def make_ckpt(root, phase, step, complete=True):
    path = root / "checkpoints" / phase / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"x" * 10)
    if complete:
        mark_complete(path)
    return path


def test_incomplete_checkpoints_are_never_resumed(tmp_path):
    make_ckpt(tmp_path, "sft", 50)
    make_ckpt(tmp_path, "grpo", 2)
    make_ckpt(tmp_path, "grpo", 10)
    make_ckpt(tmp_path, "grpo", 12, complete=False)  # crashed mid-write
    assert [p.name for p in complete_checkpoints(tmp_path / "checkpoints" / "grpo")] == [
        "checkpoint-2",
        "checkpoint-10",
    ]  # numeric, not lexical, order
    assert latest_checkpoint(tmp_path) == ("grpo", tmp_path / "checkpoints" / "grpo" / "checkpoint-10")


def test_sft_checkpoint_found_when_no_grpo_one(tmp_path):
    make_ckpt(tmp_path, "sft", 50)
    assert latest_checkpoint(tmp_path)[0] == "sft"
    assert latest_checkpoint(tmp_path / "nothing") is None


def test_phase_of_rejects_incomplete_or_foreign_dirs(tmp_path):
    good = make_ckpt(tmp_path, "grpo", 4)
    assert phase_of(good) == "grpo"
    (good / MARKER).unlink()
    with pytest.raises(ValueError, match="incomplete"):
        phase_of(good)
    other = tmp_path / "somewhere"
    other.mkdir()
    with pytest.raises(ValueError, match="not a pipeline checkpoint"):
        phase_of(other)


def test_fingerprint_detects_changed_critical_settings(tmp_path):
    write_fingerprint(tmp_path, {"seed": 1, "data.task": "leg_counting"})
    assert check_fingerprint(tmp_path, {"seed": 1, "data.task": "leg_counting"}, False) == []
    diffs = check_fingerprint(tmp_path, {"seed": 2, "data.task": "leg_counting"}, False)
    assert diffs == ["seed: 1 -> 2"]
    assert check_fingerprint(tmp_path, {"seed": 2, "data.task": "leg_counting"}, True) == []
