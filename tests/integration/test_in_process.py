"""An in-process run (tests/in_process.py) reports what ``python run_pipeline.py`` does in a fresh
interpreter: the same exit code and the same console, for a refused config and for one that passes."""

from __future__ import annotations

import subprocess
import sys

import pytest
from tests import in_process
from tests.conftest import ROOT

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "overrides, code",
    [
        (["validate_only=true", "training_loop.grpo.learnin_rate=1e-5", "model=3"], 2),
        (["validate_only=true", "experiment=smoke"], 0),
    ],
)
def test_an_in_process_run_prints_and_exits_as_a_fresh_interpreter(tmp_path, overrides, code):
    args = [f"hydra.run.dir={tmp_path / 'run'}", *overrides]
    fresh = subprocess.run(
        [sys.executable, str(ROOT / "run_pipeline.py"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    inside = in_process.run(args)
    assert fresh.returncode == inside.returncode == code, fresh.stderr[-3000:] + inside.stderr[-3000:]
    assert inside.stdout == fresh.stdout
    assert inside.stderr == fresh.stderr
