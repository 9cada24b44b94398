"""A stop signal during the final prune, sent to a process of its own; the orchestrator's rules are
unit tests in tests/unit/test_orchestrator.py."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration


STOPPED_DURING_PRUNE = """
import os, signal, sys
from pathlib import Path
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import rlvr.pipeline.orchestrator as orchestration
from tests.unit.test_orchestrator import FakeLoop, make_run
prune = orchestration.finish_run_dir

def stopped_midway(run_dir, keep):  # the scheduler's SIGTERM, twice, while checkpoints are deleted
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGTERM)
    return prune(run_dir, keep)

orchestration.finish_run_dir = stopped_midway
print(make_run(Path(sys.argv[3]), FakeLoop(), {}).run().status, flush=True)
"""


def test_a_stop_during_the_final_prune_leaves_a_completed_run(tmp_path):
    """Once every stage is done the run has completed: a SIGTERM while its checkpoints are deleted
    neither makes it PREEMPTED (resume=auto would train a phase again) nor kills it before its record."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    proc = subprocess.run(
        [sys.executable, "-c", STOPPED_DURING_PRUNE, str(ROOT / "src"), str(ROOT), str(tmp_path)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.split() == ["COMPLETED"], proc.stdout + proc.stderr[-3000:]
    attempts = json.loads((tmp_path / "attempts.json").read_text())
    assert attempts[-1]["status"] == "COMPLETED"
    assert "the run has completed" in proc.stderr
