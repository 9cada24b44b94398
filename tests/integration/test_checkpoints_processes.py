"""A second SIGTERM ends the process at once: signals to a process of its own; the checkpoint rules
are unit tests in tests/unit/test_checkpoints.py."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


SECOND_SIGNAL = """
import os, signal, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from tests.unit.test_checkpoints import _library_loop
from rlvr.training_loop.checkpoints import PreemptionGuard
with PreemptionGuard() as guard:
    _library_loop()  # the first request: recorded
    print("first recorded", guard.requested, flush=True)
    _library_loop()  # the second, outside training: the process ends of it, whatever the library does
    print("survived a second SIGTERM", flush=True)
"""


def test_a_second_sigterm_outside_training_ends_the_process_at_once():
    import signal
    import subprocess
    import sys

    from tests.conftest import ROOT

    proc = subprocess.run(
        [sys.executable, "-c", SECOND_SIGNAL, str(ROOT / "src"), str(ROOT)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.stdout.splitlines() == ["first recorded True"], proc.stdout + proc.stderr
    assert proc.returncode == -signal.SIGTERM, proc.stderr


SECOND_LAUNCHER_SIGNAL = """
import sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from tests.unit.test_checkpoints import _library_loop
from rlvr.runtime.distributed import LauncherStop
with LauncherStop() as stop:
    _library_loop()  # the first request: recorded
    print("first recorded", stop.requested, flush=True)
    _library_loop()  # the second: the process ends of it, whatever the library does
    print("survived a second SIGTERM", flush=True)
"""


def test_a_second_launcher_sigterm_ends_the_process_at_once():
    """Mutation: a second SIGTERM only recorded in ``LauncherStop._handle`` -> red (the process survives)."""
    import signal
    import subprocess
    import sys

    from tests.conftest import ROOT

    proc = subprocess.run(
        [sys.executable, "-c", SECOND_LAUNCHER_SIGNAL, str(ROOT / "src"), str(ROOT)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.stdout.splitlines() == ["first recorded True"], proc.stdout + proc.stderr
    assert proc.returncode == -signal.SIGTERM, proc.stderr
