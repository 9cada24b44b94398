"""What the console shows when a run stops early, through the real entry point with the tiny model:
a configuration problem found while running prints its message only (the traceback goes to the run's
log file), and Ctrl-C prints where the run stopped and how to go on, and exits with 130."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests import in_process
from tests.conftest import ROOT
from tests.data_fixtures import gsm8k_rows, write_jsonl

from rlvr.training_loop.checkpoints import MARKER

pytestmark = pytest.mark.integration


def command(run_dir: Path, *overrides: str) -> list[str]:
    return [
        sys.executable,
        str(ROOT / "run_pipeline.py"),
        f"hydra.run.dir={run_dir}",
        "experiment=smoke",
        *overrides,
    ]


def log_file(run_dir: Path) -> str:
    return next(run_dir.glob("*.log")).read_text()


def test_a_problem_found_while_loading_data_prints_its_message_and_no_traceback(tmp_path):
    """train_size above a file's train side: the gate reads the split sizes the file gives (issue 45,
    before any training stage) and says so once, with no traceback."""
    path = write_jsonl(tmp_path / "small.jsonl", gsm8k_rows(20))
    run_dir = tmp_path / "run"
    proc = in_process.run_command(
        command(run_dir, "data=gsm8k", f"data.path={path}", "data.train_size=64", "data.eval_size=4")
    )
    console = proc.stdout + proc.stderr
    assert proc.returncode == 2, console[-3000:]
    assert "data.train_size=64" in console and "Fix: lower data.train_size" in console
    assert console.count("configuration problem(s)") == 1, console  # said once
    assert "Traceback" not in console and "HYDRA_FULL_ERROR" not in console, console


def interrupt_after(run_dir: Path, line: str, *overrides: str, ready: Path | None = None) -> tuple[int, str]:
    """Start a run, send SIGINT to its process group (as Ctrl-C in a terminal does) once the console
    shows ``line`` (and file ``ready`` exists); return the exit code and the whole console."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        command(run_dir, *overrides), cwd=ROOT, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        # as from a terminal: pytest-xdist's workers ignore SIGINT, and a child inherits that (Python
        # then installs no KeyboardInterrupt handler and the run would go on)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    seen: list[str] = []
    deadline = time.time() + 400
    try:
        for text in proc.stdout:
            seen.append(text)
            if line in text:
                while ready is not None and not ready.exists():
                    assert time.time() < deadline and proc.poll() is None, "".join(seen)
                    time.sleep(0.05)
                os.killpg(proc.pid, signal.SIGINT)
                break
            assert time.time() < deadline, "".join(seen)
        seen.append(proc.stdout.read())
        return proc.wait(timeout=120), "".join(seen)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_ctrl_c_after_a_checkpoint_says_where_it_stopped_and_how_to_resume(tmp_path):
    run_dir = tmp_path / "run"
    code, console = interrupt_after(
        run_dir,
        "checkpoint (grpo step 2)",
        "training_loop.sft.max_steps=2",
        "training_loop.grpo.max_steps=200",
        "evaluation.every_n_steps=0",
        ready=run_dir / "checkpoints" / "grpo" / "checkpoint-2" / MARKER,  # written after the line
    )
    assert code == 130, console[-3000:]
    assert "stopped by Ctrl-C in train at grpo step" in console, console[-3000:]
    # The printed command carries the run's own overrides, so it runs as printed (SECURITY.md "Resume
    # at every boundary"); without them resume=auto was refused for changed settings.
    hint = next(x for x in console.splitlines() if "Resume with: " in x).split("Resume with: ")[1]
    overrides = [a for a in command(run_dir)[2:] if not a.startswith("hydra.run.dir=")]
    assert hint == shlex.join(
        [sys.executable, str(ROOT / "run_pipeline.py"), *overrides, "training_loop.sft.max_steps=2", "training_loop.grpo.max_steps=200",
         "evaluation.every_n_steps=0", "resume=auto", f"hydra.run.dir={run_dir}"]
    ), hint  # fmt: skip
    assert "interrupted (Ctrl-C): the last checkpoint is grpo step" in console, console
    assert "Traceback" not in console and "KeyboardInterrupt" not in console, console[-3000:]
    assert "KeyboardInterrupt" in log_file(run_dir)


def test_ctrl_c_before_any_checkpoint_says_a_rerun_starts_fresh(tmp_path):
    run_dir = tmp_path / "run"
    code, console = interrupt_after(
        run_dir,
        "sft step 5/",  # the console's first training line (every observers.console.log_every steps)
        "training_loop.sft.max_steps=200",
        "training_loop.sft.save_strategy=no",
        "evaluation.every_n_steps=0",
    )
    assert code == 130, console[-3000:]
    assert "stopped by Ctrl-C in train at sft step" in console, console[-3000:]
    assert (
        f"no checkpoint was saved yet: {shlex.join([sys.executable, str(ROOT / 'run_pipeline.py')])} "
        in console
    )
    assert f"resume=auto hydra.run.dir={run_dir} starts it afresh" in console, console
    assert "Traceback" not in console, console[-3000:]
