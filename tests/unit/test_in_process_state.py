"""tests/in_process.py puts the test process back as it found it, and names what it could not."""

from __future__ import annotations

import logging
import os
import signal
import sys

import pytest
import torch
from tests import in_process


def test_what_a_run_changes_is_put_back():
    before = in_process._State.record()
    threads, handler = torch.get_num_threads(), signal.getsignal(signal.SIGUSR2)
    logger = logging.getLogger("rlvr.progress")
    # what the entry and the app do to a process: redact_console, Hydra's logging, a phase's handler
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (closed below)
    os.environ["RLVR_TEST_IN_PROCESS"] = "1"
    signal.signal(signal.SIGUSR2, lambda *_: None)
    logger.propagate = False
    logger.addHandler(logging.FileHandler(os.devnull))
    torch.set_num_threads(threads + 1)
    logging.captureWarnings(True)
    opened = sys.stdout
    before.restore()  # its own check passes: nothing left
    opened.close()
    assert "RLVR_TEST_IN_PROCESS" not in os.environ and signal.getsignal(signal.SIGUSR2) is handler
    assert logger.propagate and not logger.handlers and torch.get_num_threads() == threads


def test_a_change_left_behind_is_named():
    before = in_process._State.record()
    handler = signal.getsignal(signal.SIGUSR2)
    signal.signal(signal.SIGUSR2, lambda *_: None)
    os.environ["RLVR_TEST_IN_PROCESS"] = "1"
    try:
        with pytest.raises(AssertionError, match="left this process changed") as raised:
            before.check()
        assert "'signals'" in str(raised.value) and "RLVR_TEST_IN_PROCESS" in str(raised.value)
    finally:
        signal.signal(signal.SIGUSR2, handler)
        del os.environ["RLVR_TEST_IN_PROCESS"]
    before.check()


def test_a_command_line_that_is_not_the_entry_points_is_refused():
    with pytest.raises(ValueError, match="not a command line of run_pipeline.py"):
        in_process.run_command(["python", "benchmarks/learning.py"])


def test_a_pythonpath_folder_that_shadows_an_imported_module_is_refused(tmp_path):
    """A fresh interpreter would import the folder's ``json``; this process already holds the real one."""
    (tmp_path / "json.py").write_text("")
    path = list(sys.path)
    with pytest.raises(RuntimeError, match=r"shadows imported modules \['json'\]"):
        in_process._python_path(str(tmp_path))
    assert sys.path == path


def test_a_child_the_run_left_is_named_and_one_that_ended_is_not():
    import subprocess

    earlier = subprocess.Popen(["sleep", "60"])
    before = in_process._State.record()
    earlier.kill()
    earlier.wait()
    before.check()  # a child that ended meanwhile (the test's own process) is no leak
    left = subprocess.Popen(["sleep", "60"])
    try:
        with pytest.raises(AssertionError, match=rf"'child processes': \['{left.pid} sleep 60'\]"):
            before.check()
    finally:
        left.kill()
        left.wait()
