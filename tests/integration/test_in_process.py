"""An in-process run (tests/in_process.py) reports what ``python run_pipeline.py`` does in a fresh
interpreter: the same exit code and the same console."""

from __future__ import annotations

import subprocess
import sys

import pytest
from tests import in_process
from tests.conftest import ROOT

pytestmark = pytest.mark.integration


def test_an_in_process_run_prints_and_exits_as_a_fresh_interpreter(tmp_path):
    """A refused config: exit 2, the problems on stderr, the memory check on stdout (one case:
    each fresh interpreter costs the suite ~20 s of imports)."""
    args = [f"hydra.run.dir={tmp_path / 'run'}", "validate_only=true", "training_loop.grpo.learnin_rate=1e-5"]
    fresh = subprocess.run(
        [sys.executable, str(ROOT / "run_pipeline.py"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    inside = in_process.run(args)
    assert fresh.returncode == inside.returncode == 2, fresh.stderr[-3000:] + inside.stderr[-3000:]
    assert "did you mean 'learning_rate'?" in inside.stderr and inside.stdout
    assert inside.stdout == fresh.stdout
    assert inside.stderr == fresh.stderr
