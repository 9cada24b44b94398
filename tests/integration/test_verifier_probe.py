"""The screened-task list is checked against the verifiers themselves, not against itself.

Every reasoning-gym verifier is run directly (in a throwaway, time-limited process) on answers
that create a file if evaluated as code; the tasks whose verifier executed one must be exactly
the tasks rlvr.verifier.screen screens. A reasoning-gym release with a new eval()ing verifier
therefore fails here until the screen covers it.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tests.conftest import ROOT

from rlvr.verifier.screen import SCREENS, screen_answer

pytestmark = pytest.mark.integration  # every verifier in a process of its own

PROBE = ROOT / "tests" / "tools" / "probe_verifiers.py"
# Meta-tasks that have no entry of their own with default parameters (composite mixes other tasks).
UNPROBED = {"composite"}


def test_the_tasks_whose_verifiers_execute_answers_are_exactly_the_screened_ones(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(PROBE), str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    status = json.loads(proc.stdout.rsplit("PROBE ", 1)[1])
    executed = {task for task, s in status.items() if s == "executed"}
    assert executed == set(SCREENS), f"executes answers but unscreened: {executed - set(SCREENS)}"
    assert {task for task, s in status.items() if s.startswith("no entry")} == UNPROBED
    assert [task for task, s in status.items() if s == "timeout"] == []  # a hang could hide an eval
    assert len(status) > 90  # really every task
    # and the screen refuses the very answers that executed
    for task in executed:
        assert screen_answer(task, f"open({str(tmp_path / task)!r}, 'w')") is not None
