"""The wheel-parts script as a command (pack, check, join); its functions are unit tests in
tests/unit/test_wheel_parts.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests.unit.test_wheel_parts import ROOT, wheels  # noqa: F401 (wheels: a fixture)

pytestmark = pytest.mark.integration


def test_cli_pack_check_join(wheels: Path, tmp_path: Path):  # noqa: F811 (the fixture)
    script = str(ROOT / "scripts" / "wheel_parts.py")
    parts, out = tmp_path / "parts", tmp_path / "out"
    run = [sys.executable, script]
    subprocess.run([*run, "pack", str(wheels), str(parts), "--part-size", "4kB"], check=True)
    assert all(p.stat().st_size <= 4000 for p in parts.glob("wheels.tar.part-*"))
    subprocess.run([*run, "check", str(parts)], check=True)
    subprocess.run([*run, "join", str(parts), str(out)], check=True)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in wheels.iterdir())
    (parts / "wheels.tar.part-ab").unlink()
    res = subprocess.run([*run, "join", str(parts), str(tmp_path / "out2")], capture_output=True, text=True)
    assert res.returncode == 1
    assert "wheels.tar.part-ab: missing" in res.stderr
