"""One owner per run directory (rlvr.runtime.run_lock, SECURITY.md "Run directory ownership"): a second process
is refused with the holder's host, pid and start time; a holder that died is named by the next owner;
the ranks of one launch other than rank 0 neither take nor check the lock."""

from __future__ import annotations

import os

import pytest

from rlvr.runtime.run_lock import LOCK_FILE, RunDirBusy, RunDirLock


def test_one_process_two_runs_in_turn(tmp_path, monkeypatch):
    """A multirun's jobs in one process, each in its own directory, and again in the same one."""
    monkeypatch.delenv("RANK", raising=False)
    with (
        RunDirLock(tmp_path / "a"),
        RunDirLock(tmp_path / "b"),
        pytest.raises(RunDirBusy, match=f"pid {os.getpid()}"),
    ):
        RunDirLock(tmp_path / "a").acquire()
    with RunDirLock(tmp_path / "a") as lock:
        assert lock.taken_over() is None


def test_a_lock_file_planted_as_a_link_is_refused_and_not_followed(tmp_path, monkeypatch):
    from rlvr.issues import ConfigValidationError

    monkeypatch.delenv("RANK", raising=False)
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / LOCK_FILE).symlink_to(target)
    with pytest.raises(ConfigValidationError, match="is a link, not a plain file"):
        RunDirLock(tmp_path / "run").acquire()
    assert target.read_text() == "keep"


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_lock_file_that_is_a_fifo_or_a_folder_is_refused_in_one_message(tmp_path, monkeypatch, kind):
    """Not a traceback (an lseek on a FIFO, EISDIR), and never a wait on a pipe nobody writes."""
    import threading

    from rlvr.issues import ConfigValidationError

    monkeypatch.delenv("RANK", raising=False)
    path = tmp_path / LOCK_FILE
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    outcome = []

    def take():
        try:
            RunDirLock(tmp_path).acquire()
        except BaseException as exc:  # noqa: BLE001 - the test reads what came out
            outcome.append(exc)

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "blocked on the lock file"
    assert len(outcome) == 1 and isinstance(outcome[0], ConfigValidationError), outcome
    message = str(outcome[0])
    assert str(path) in message and ("FIFO" if kind == "fifo" else "a folder") in message
    assert "rm -r" in message and "another hydra.run.dir" in message
