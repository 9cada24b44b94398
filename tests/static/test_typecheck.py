"""mypy over src/rlvr with pyproject.toml's [tool.mypy], so `make test` (and CI, which runs it) fails on a
type error as `make lint` does. mypy comes from the hashed tools lock (`make tools`, run by `make test`)."""

from __future__ import annotations

import subprocess

import pytest
from tests.conftest import ROOT

MYPY = ROOT / ".venv-tools" / "bin" / "mypy"


def test_src_type_checks():
    if not MYPY.exists():
        pytest.fail(f"{MYPY} is missing: run `make tools` (make test does) to install mypy")
    proc = subprocess.run([str(MYPY)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"mypy found type errors (make lint shows them):\n{proc.stdout[-6000:]}"
    assert "no issues found" in proc.stdout
