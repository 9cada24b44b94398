"""rlvr.runtime.io: atomic writes that never go through a symlink planted in the directory written to."""

from __future__ import annotations

import json

import pytest

from rlvr.runtime.io import SymlinkRefused, atomic_write_json, atomic_write_text


def test_writes_atomically_and_leaves_no_temp_file(tmp_path):
    path = atomic_write_json(tmp_path / "a" / "x.json", {"k": 1})
    assert json.loads(path.read_text()) == {"k": 1}
    assert [p.name for p in path.parent.iterdir()] == ["x.json"]


def test_planted_file_link_is_refused_and_target_untouched(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    run = tmp_path / "run"
    run.mkdir()
    (run / "report.md").symlink_to(victim)
    with pytest.raises(SymlinkRefused, match="symbolic link"):
        atomic_write_text(run / "report.md", "overwritten", root=run)
    assert victim.read_text() == "precious"


def test_planted_directory_link_below_root_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "eval").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(SymlinkRefused):
        atomic_write_json(run / "eval" / "final.json", {}, root=run)
    assert list(elsewhere.iterdir()) == []


def test_links_above_root_are_the_users_choice(tmp_path):
    real = tmp_path / "disk"
    real.mkdir()
    (tmp_path / "outputs").symlink_to(real, target_is_directory=True)
    run = tmp_path / "outputs" / "run"
    atomic_write_text(run / "ok.txt", "fine", root=run)
    assert (real / "run" / "ok.txt").read_text() == "fine"


def test_a_hard_link_in_the_run_directory_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    """A file written in place (metrics.jsonl appended, run.lock rewritten; the gate's tree check for
    the log Hydra appends to and the checkpoint files libraries rewrite) with another name outside
    the run directory is refused; the outside file is unchanged and its content never shown."""
    from rlvr import events as ev
    from rlvr.issues import ConfigValidationError
    from rlvr.observers import JsonlObserver
    from rlvr.runtime.io import HardLinkRefused, refuse_symlinks_in
    from rlvr.runtime.run_lock import LOCK_FILE, RunDirLock

    monkeypatch.delenv("RANK", raising=False)
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"PRECIOUS\x1b[2J")
    run = tmp_path / "run"
    (run / "sub").mkdir(parents=True)
    for name in ("metrics.jsonl", LOCK_FILE, "sub/trainer_state.json"):
        (run / name).hardlink_to(outside)
        with pytest.raises(HardLinkRefused, match="is a hard link"):
            refuse_symlinks_in(run)
        if name == "metrics.jsonl":
            observer = JsonlObserver(path="metrics.jsonl", completions_path="completions.jsonl")
            with pytest.raises(HardLinkRefused, match=f"{run / name} is a hard link"):
                observer.on_pipeline_start(ev.PipelineStart(run, {}))
        if name == LOCK_FILE:
            with pytest.raises(ConfigValidationError, match="run.lock is a hard link") as refused:
                RunDirLock(run).acquire()
            assert "PRECIOUS" not in str(refused.value)
        (run / name).unlink()
    assert outside.read_bytes() == b"PRECIOUS\x1b[2J"
    refuse_symlinks_in(run)  # one name each: nothing to refuse
