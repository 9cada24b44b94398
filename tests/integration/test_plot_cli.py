"""`python -m rlvr.benchmark.plot` as a command; the plots are unit tests in tests/unit/test_plot.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests.unit.test_plot import TASK_REPORT, assert_png, write

pytestmark = pytest.mark.integration


def test_module_entry_point(tmp_path: Path) -> None:
    src = write(tmp_path / "r.json", TASK_REPORT)
    proc = subprocess.run(
        [sys.executable, "-m", "rlvr.benchmark.plot", str(src), "--output", str(tmp_path / "o.png")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert_png(tmp_path / "o.png")
