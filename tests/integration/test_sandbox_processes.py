"""Verifier workers die with their parent: a parent process of its own is killed; the sandbox's
rules are unit tests in tests/unit/test_sandbox.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from tests.unit.test_sandbox import entry_running, wait_gone

pytestmark = pytest.mark.integration


def test_workers_die_with_their_parent(tmp_path):
    """A parent killed with SIGKILL runs no cleanup; its workers, even a hung one, must go too."""
    script = textwrap.dedent(
        f"""
        import json, os, sys, threading, time
        sys.path[:0] = {sys.path!r}
        from rlvr.verifier import ScoreRequest, VerifierPool
        pool = VerifierPool(num_workers=2, timeout_s=600, memory_limit_mb=1024, max_answer_chars=2048,
                            failure_reward=0.0)
        hang = ScoreRequest("bitwise_arithmetic", "1", json.loads({json.dumps(entry_running("9**9**9**9"))!r}))
        quick = ScoreRequest("bitwise_arithmetic", "1", json.loads({json.dumps(entry_running("1"))!r}))
        pool.score([quick] * 8)  # workers up
        threading.Thread(target=pool.score, args=([hang, hang],), daemon=True).start()
        time.sleep(1)
        print(json.dumps(pool.worker_pids), flush=True)
        os.kill(os.getpid(), 9)
        """
    )
    # stderr to a file, not a pipe: a surviving worker inherits it and would hold a pipe open.
    with open(tmp_path / "stderr", "w") as stderr:
        result = subprocess.run(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=60
        )
    assert result.stdout.strip(), (tmp_path / "stderr").read_text()
    pids = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(pids) == 2
    survivors = wait_gone(pids, 20)  # a loaded 2-core machine (the hung workers spin) took over 5 s once
    for pid in survivors:  # don't leave hung processes behind when the guarantee is broken
        os.kill(pid, signal.SIGKILL)
    assert survivors == []
