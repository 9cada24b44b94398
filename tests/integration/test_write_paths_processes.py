"""A run started on a full disk, as a process (its console and exit code); the write-path rules are
unit tests in tests/unit/test_write_paths.py."""

from __future__ import annotations

import pytest
from tests.conftest import ROOT
from tests.unit.test_write_paths import SCRIPT

pytestmark = pytest.mark.integration


def test_a_full_disk_at_start_is_one_message(tmp_path):
    """A run started on a full disk printed 165 lines (a "--- Logging error ---" traceback per log
    record, then Hydra's traceback of the lock's ENOSPC) around the one that mattered. Played on a real
    full 1 MB tmpfs (skipped where mounting is not allowed). Mutation: ``writable_issue`` not calling
    ``full_disk_issue`` (returning None) -> red (exit 1, tracebacks)."""
    import subprocess
    import sys

    disk = tmp_path / "small_disk"
    disk.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode()[-200:]}")
    try:
        with (disk / "filler").open("wb") as filler, pytest.raises(OSError):
            while True:
                filler.write(b"\0" * 65536)
                filler.flush()
        run_dir = disk / "run"
        done = subprocess.run(
            [sys.executable, str(SCRIPT), f"hydra.run.dir={run_dir}", "experiment=smoke"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        subprocess.run(["umount", str(disk)], check=True)
    output = done.stdout + done.stderr
    assert done.returncode == 2, output[-3000:]
    assert "hydra.run.dir=" in output and "is full (0 KiB free" in output and "Fix: free space" in output
    assert len(output.strip().splitlines()) <= 3 and "Traceback" not in output, output[-3000:]
