"""Exact resume after a hard kill, clean SIGTERM preemption, and refusal of unsafe resumes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tests.conftest import ROOT

pytestmark = pytest.mark.integration

# Tiny model; the length reward gives GRPO non-zero advantages, so parameters really move.
BASE = [
    "experiment=smoke",
    "reward=with_brevity",
    "reward.terms.length.free_chars=0",
    "reward.terms.length.scale_chars=40",
    "training_loop.sft.max_steps=2",
    "training_loop.sft.save_strategy=no",
    "training_loop.grpo.max_steps=4",
    "training_loop.grpo.save_steps=2",
    "training_loop.grpo.save_total_limit=3",
    "evaluation.every_n_steps=0",
    "evaluation.baseline=false",
    "observers=default",
]


def cmd(run_dir: Path, *overrides: str) -> list[str]:
    return [sys.executable, str(ROOT / "run_pipeline.py"), f"hydra.run.dir={run_dir}", *BASE, *overrides]


def run(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd(run_dir, *overrides), capture_output=True, text=True, cwd=ROOT, timeout=600)


def steps(run_dir: Path) -> dict[int, dict]:
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["event"] == "train_step" and r["phase"] == "grpo" and "grpo/learning_rate" in r["metrics"]:
            out[r["step"]] = r["metrics"]
    return out


def wait_for(predicate, proc, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"process ended early: {proc.returncode}\n{proc.stdout.read()[-3000:]}")
        time.sleep(0.2)
    raise AssertionError("timed out")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("full")
    proc = run(run_dir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return run_dir


def test_killed_run_resumes_exactly(uninterrupted, tmp_path):
    run_dir = tmp_path / "killed"
    proc = subprocess.Popen(
        cmd(run_dir), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    marker = run_dir / "checkpoints" / "grpo" / "checkpoint-2" / "COMPLETE"
    wait_for(marker.exists, proc)
    proc.kill()  # SIGKILL: no chance to clean up
    proc.wait()
    assert not (run_dir / "final").exists()
    from rlvr.training.checkpoints import latest_checkpoint

    phase, newest = latest_checkpoint(run_dir)  # what resume=auto must pick
    assert phase == "grpo"

    resumed = run(run_dir, "resume=auto")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    # it started from that checkpoint: provenance says so, and its first GRPO step is the next one
    assert json.loads((run_dir / "provenance.json").read_text())["resumed_from"] == str(newest)
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    second_start = max(i for i, e in enumerate(events) if e["event"] == "pipeline_start")
    first = next(e for e in events[second_start:] if e["event"] == "train_step")
    assert (first["phase"], first["step"]) == ("grpo", int(newest.name.split("-")[1]) + 1)

    full, again = steps(uninterrupted), steps(run_dir)
    assert sorted(again) == [1, 2, 3, 4] or set(again) >= {3, 4}
    for step in (3, 4):  # same learning rate, same data (same tokens and rewards) per step
        for key in ("grpo/learning_rate", "grpo/num_tokens", "grpo/reward/mean"):
            assert again[step][key] == pytest.approx(full[step][key], abs=1e-6), (step, key)
    a = load_file(uninterrupted / "final" / "model.safetensors")
    b = load_file(run_dir / "final" / "model.safetensors")
    assert a.keys() == b.keys()
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst <= 1e-6, worst
    from rlvr.models import TinyRandomModel

    init = TinyRandomModel(seed=42).load().model.state_dict()
    moved = [k for k in a if k in init and not torch.equal(a[k], init[k])]
    assert len(moved) > len(a) // 2  # training really changed the parameters being compared


def test_sigterm_checkpoints_once_and_exits_75(tmp_path):
    run_dir = tmp_path / "preempted"
    proc = subprocess.Popen(
        cmd(run_dir, "training_loop.grpo.max_steps=40", "training_loop.grpo.save_steps=1000"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    wait_for(lambda: 1 in steps(run_dir) if (run_dir / "metrics.jsonl").exists() else False, proc)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)  # a second SIGTERM must not start a second save
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 75, out[-3000:]
    ckpts = list((run_dir / "checkpoints" / "grpo").glob("checkpoint-*"))
    assert len(ckpts) == 1 and (ckpts[0] / "COMPLETE").exists()
    assert (ckpts[0] / "optimizer.pt").exists() and (ckpts[0] / "rng_state.pth").exists()
    last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["event"] == "pipeline_end" and last["status"] == "PREEMPTED"
    assert "resume=auto" in out


def test_resume_from_missing_path_is_an_error(tmp_path):
    proc = run(tmp_path / "x", "resume=/nonexistent/checkpoint-5", "validate_only=true")
    assert proc.returncode == 2
    assert "resume='/nonexistent/checkpoint-5'" in proc.stderr
    # resume=auto where nothing was saved yet starts fresh: the first launch of a SLURM array task
    # or a cloud VM uses the same command as its requeue or restart.
    proc = run(tmp_path / "empty", "resume=auto", "validate_only=true")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "no complete checkpoint" in proc.stdout and "starting fresh" in proc.stdout


def test_changed_critical_setting_refused_unless_allowed(uninterrupted):
    proc = run(uninterrupted, "resume=auto", "seed=7", "validate_only=true")
    assert proc.returncode == 2
    assert "seed: 42 -> 7" in proc.stderr
    proc = run(uninterrupted, "resume=auto", "seed=7", "resume_allow_changes=true", "validate_only=true")
    assert proc.returncode == 0, proc.stderr[-2000:]
