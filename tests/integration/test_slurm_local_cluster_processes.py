"""local_cluster.sh signals no bystander process that a planted pid file names; the script's other
checks are in tests/unit/test_slurm_local_cluster.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
from tests.unit.test_slurm_local_cluster import script

pytestmark = pytest.mark.integration


@pytest.fixture
def ours(tmp_path):
    """A folder as the script makes it: this user's, mode 0700."""
    folder = tmp_path / "cluster"
    folder.mkdir(mode=0o700)
    return folder


def test_a_refused_run_signals_no_process_its_pid_files_name(ours):
    """`run` stops what it started on any exit, a refusal too: the pid files of a folder that failed
    the check are not read. Two guards hold it, each alone enough: `run` checks the folder before it
    arms its stop, and stop reads pid files only of a checked folder. Mutation: both removed, the
    process a planted pid file named (its command line naming the folder, as the script checks) was
    killed."""
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(ours)])
    try:
        for name in ("munged", "slurmctld", "slurmd"):
            (ours / f"{name}.pid").write_text(f"{bystander.pid}\n")
        ours.chmod(0o755)
        out = script(ours, "run", "true")
        assert out.returncode == 1 and "stopped" not in out.stderr, out.stderr
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
