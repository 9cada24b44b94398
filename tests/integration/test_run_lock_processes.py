"""The run directory lock against another real process holding it; the lock's own rules are unit
tests in tests/unit/test_run_lock.py."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from tests.conftest import ROOT

from rlvr.runtime.run_lock import LOCK_FILE, RunDirBusy, RunDirLock

pytestmark = pytest.mark.integration


HOLD = """
import sys, time
from pathlib import Path
from rlvr.runtime.run_lock import RunDirLock
lock = RunDirLock(Path(sys.argv[1])).acquire()
print("held", flush=True)
time.sleep(120)
"""


@pytest.fixture
def holder(tmp_path):
    """Another process holding ``tmp_path`` (killed at the end)."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("RANK", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout.readline().strip() == "held"
    yield proc
    proc.kill()
    proc.wait()


def test_a_second_process_is_refused_with_the_holder_and_nothing_is_touched(tmp_path, holder, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    record = (tmp_path / LOCK_FILE).read_bytes()
    with pytest.raises(RunDirBusy) as refused:
        RunDirLock(tmp_path).acquire()
    message = str(refused.value)
    started = json.loads(record)["started_at"]
    assert f"host {socket.gethostname()}, pid {holder.pid}, started {started}" in message
    assert "nothing was written" in message and "another hydra.run.dir" in message
    assert refused.value.exit_code == 73
    assert (tmp_path / LOCK_FILE).read_bytes() == record  # the holder's record is intact


def test_a_holder_that_died_is_named_and_its_directory_taken_over(tmp_path, holder, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    holder.send_signal(signal.SIGKILL)  # no chance to release
    holder.wait()
    lock = RunDirLock(tmp_path).acquire()
    try:
        assert f"pid {holder.pid}" in lock.taken_over() and "ended without releasing" in lock.taken_over()
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    finally:
        lock.release()
    assert (tmp_path / LOCK_FILE).read_text() == ""  # released cleanly: no holder to name next time
    again = RunDirLock(tmp_path).acquire()
    assert again.taken_over() is None
    again.release()


def test_the_other_ranks_of_a_launch_are_not_refused(tmp_path, holder, monkeypatch):
    """Rank 0 owns the directory for the whole launch: rank 1 must neither be refused nor write."""
    record = (tmp_path / LOCK_FILE).read_bytes()
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with RunDirLock(tmp_path):
        time.sleep(0)
    assert (tmp_path / LOCK_FILE).read_bytes() == record


def test_the_holders_record_is_printed_with_control_characters_escaped(tmp_path, holder, monkeypatch):
    """A record written by anyone who could write the run directory: no escape sequence or fake
    line reaches the console, whether the holder is alive (refusal) or gone (take-over)."""
    monkeypatch.delenv("RANK", raising=False)
    record = {"host": "\x1b[2J\x1b[Hnode\nrefused: fake line\r", "pid": "\x9b31m7", "started_at": "\x07now"}
    with open(tmp_path / LOCK_FILE, "r+") as f:  # flock is advisory: the holder keeps it
        f.truncate(0)
        f.write(json.dumps(record))
    with pytest.raises(RunDirBusy) as refused:
        RunDirLock(tmp_path).acquire()
    holder.kill()
    holder.wait()
    lock = RunDirLock(tmp_path).acquire()
    try:
        for shown in (str(refused.value), lock.taken_over()):
            assert not any(ch in shown for ch in "\x1b\n\r\x07\x9b"), repr(shown)
            assert (
                "host \\x1b[2J\\x1b[Hnode\\nrefused: fake line\\r, pid \\x9b31m7, started \\x07now" in shown
            )
    finally:
        lock.release()
