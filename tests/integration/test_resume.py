"""Exact resume after a hard kill, clean preemption (SIGTERM, USR2; a submitit job requeued the way SLURM
requeues it), and refusal of unsafe resumes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from safetensors.torch import load_file
from tests import in_process
from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.long]  # a minute or more: make test-long, CI

# Tiny model; the smoke file's length reward gives GRPO non-zero advantages, so parameters really move.
BASE = [
    "experiment=smoke",
    # The embedded tokenizer's whole vocabulary (conf/model/tiny.yaml cuts it to 4,096 tokens): the
    # signals these tests send must land mid-phase, and with the cut vocabulary a tiny GRPO step takes
    # ~0.3 s, shorter than a test takes to see step 1 and signal (a submitit run finished first).
    "model.vocab_size=49152",
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


def run(run_dir: Path, *overrides: str) -> in_process.Run:
    return in_process.run_command(cmd(run_dir, *overrides))


def steps(run_dir: Path) -> dict[int, dict]:
    out = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["event"] == "train_step" and r["phase"] == "grpo" and "grpo/learning_rate" in r["metrics"]:
            out[r["step"]] = r["metrics"]
    return out


def wait_for(predicate, proc, timeout=300, interval=0.2):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"process ended early: {proc.returncode}\n{proc.stdout.read()[-3000:]}")
        time.sleep(interval)
    raise AssertionError("timed out")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("full")
    proc = run(run_dir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return run_dir


# Dynamic sampling on the tiny model: with 90 characters free, about one group in four has reward
# variance, so most steps generate several rounds (prompts drawn per step and round).
DYNAMIC = [
    "reward.terms.length.free_chars=90",
    "training_loop.signal.dynamic_sampling=true",
    "training_loop.signal.max_rounds=8",
]


@pytest.fixture(scope="module")
def uninterrupted_dynamic(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("full_dynamic")
    proc = run(run_dir, *DYNAMIC)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return run_dir


def test_killed_run_resumes_exactly(uninterrupted, tmp_path):
    killed_and_resumed(uninterrupted, tmp_path, ("grpo/learning_rate", "grpo/num_tokens", "grpo/reward/mean"))


def test_killed_run_with_dynamic_sampling_resumes_exactly(uninterrupted_dynamic, tmp_path):
    keys = ("grpo/num_tokens", "grpo/reward/mean", "grpo/signal/groups_generated", "grpo/signal/groups_kept")
    full = killed_and_resumed(uninterrupted_dynamic, tmp_path, keys, *DYNAMIC)
    assert max(s["grpo/signal/rounds"] for s in full.values()) > 1  # the resumed steps drew extra rounds


def killed_and_resumed(uninterrupted: Path, tmp_path: Path, keys: tuple[str, ...], *extra: str) -> dict:
    """Kill a run after its GRPO checkpoint 2, resume it, and compare steps 3-4 and the final weights."""
    run_dir = tmp_path / "killed"
    proc = subprocess.Popen(
        cmd(run_dir, *extra), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    marker = run_dir / "checkpoints" / "grpo" / "checkpoint-2" / "COMPLETE"
    wait_for(marker.exists, proc, interval=0.01)  # steps 3-4 and the end race the poll
    proc.kill()  # SIGKILL: no chance to clean up
    proc.wait()
    assert not (run_dir / "final").exists()
    from rlvr.training_loop.checkpoints import latest_checkpoint

    phase, newest = latest_checkpoint(run_dir)  # what resume=auto must pick
    assert phase == "grpo"

    resumed = run(run_dir, *extra, "resume=auto")
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
        for key in keys:
            assert again[step][key] == pytest.approx(full[step][key], abs=1e-6), (step, key)
    a = load_file(uninterrupted / "final" / "model.safetensors")
    b = load_file(run_dir / "final" / "model.safetensors")
    assert a.keys() == b.keys()
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst <= 1e-6, worst
    from tests.conftest import tiny_model

    init = tiny_model(seed=42).load().model.state_dict()
    moved = [k for k in a if k in init and not torch.equal(a[k], init[k])]
    assert len(moved) > len(a) // 2  # training really changed the parameters being compared
    return {s: full[s] for s in (3, 4)}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGUSR2], ids=["SIGTERM", "SIGUSR2"])
def test_preemption_signal_checkpoints_once_and_exits_75(tmp_path, sig):
    """Without submitit (a plain sbatch script): SIGTERM (preemption, time limit) and USR2 (SLURM's
    warning ahead of the time limit) each finish the step, save one checkpoint and exit 75."""
    run_dir = tmp_path / "preempted"
    proc = subprocess.Popen(
        cmd(run_dir, "training_loop.grpo.max_steps=40", "training_loop.grpo.save_steps=1000"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    wait_for(lambda: 1 in steps(run_dir) if (run_dir / "metrics.jsonl").exists() else False, proc)
    proc.send_signal(sig)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)  # SLURM's SIGTERM after the warning must not start a second save
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 75, out[-3000:]
    ckpts = list((run_dir / "checkpoints" / "grpo").glob("checkpoint-*"))
    assert len(ckpts) == 1 and (ckpts[0] / "COMPLETE").exists()
    assert (ckpts[0] / "optimizer.pt").exists() and (ckpts[0] / "rng_state.pth").exists()
    last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["event"] == "pipeline_end" and last["status"] == "PREEMPTED"
    assert "resume=auto" in out
    assert f"stopped by {sig.name}" in out


# The entry point run the way a job step runs it, then SLURM's warning landing as the finished process
# shuts down (sent by the process itself: no timing to race with).
WARNED_AFTER_THE_END = """
import os, runpy, signal, sys
sys.argv = sys.argv[1:]
code = 0
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as exc:
    code = exc.code
print("the run returned", code, flush=True)
os.kill(os.getpid(), signal.SIGUSR2)
print("still here after the warning", flush=True)
sys.exit(code)
"""


def test_the_schedulers_warning_after_the_run_completed_changes_nothing(tmp_path):
    """CI, 2026-12-03 (tests/slurm, the real time limit): a requeued task completed its run, and SLURM's
    USR2 warning reached the process while it shut down; USR2's default action killed it and SLURM
    recorded FAILED for a run that had COMPLETED. A completed run now ignores the warning until it
    exits (rlvr.training_loop.checkpoints.PreemptionGuard). Mutation: the guard restoring the default
    action after a completed run -> the process dies of USR2 (returncode -12)."""
    run_dir = tmp_path / "done"
    done = subprocess.run(
        [sys.executable, "-c", WARNED_AFTER_THE_END, *cmd(run_dir, "training_loop.grpo.max_steps=1")[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert "the run returned 0" in out and "still here after the warning" in out, out[-3000:]
    last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["event"] == "pipeline_end" and last["status"] in ("COMPLETED", "COMPLETED_WITH_WARNINGS")


def test_submitit_job_warned_by_usr2_checkpoints_requeues_and_matches_uninterrupted(uninterrupted, tmp_path):
    """SLURM's time-limit warning (``--signal=USR2@<signal_delay_s>``) or a preemption with
    ``send_user_signal`` inside a real submitit job: submitit's local executor runs the task as a real
    process and requeues it the way its SLURM executor does (same pickled job, same sweep point, same
    run directory), so the whole cycle runs here except `scontrol requeue` itself."""
    sweep = tmp_path / "sweep"
    run_dir = sweep / "0"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "run_pipeline.py"),
            "-m",
            "hydra/launcher=submitit_local_run",
            f"hydra.sweep.dir={sweep}",
            *BASE,
            "training_loop.grpo.save_steps=1000",  # the only checkpoint before the end is the signal's
            "resume=auto",  # as the SLURM command of docs/scaling.md: the requeued task continues
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    wait_for(lambda: 1 in steps(run_dir) if (run_dir / "metrics.jsonl").exists() else False, proc)
    tasks = [
        c for c in psutil.Process(proc.pid).children(recursive=True) if "submitit.core._submit" in c.cmdline()
    ]
    assert len(tasks) == 1, tasks
    tasks[0].send_signal(signal.SIGUSR2)  # SLURM signals the job step's processes, not the launcher
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]

    log = next(sweep.glob(".submitit/*/*_0_log.out")).read_text()
    own = "\n".join(line for line in log.splitlines() if line.startswith("submitit "))  # Hydra echoes each
    assert own.count("Caught signal SIGUSR2") == 1 and own.count("Requeued job") == 1, log[-3000:]
    assert "Job completed successfully" in own
    # submitit's handler ran only after the pipeline had written its checkpoint
    assert log.index("checkpoint (grpo step") < log.index("Caught signal SIGUSR2")
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    starts = [i for i, e in enumerate(events) if e["event"] == "pipeline_start"]
    assert len(starts) == 2  # the first attempt and the requeued one, in the same run directory
    first_attempt = events[starts[0] : starts[1]]
    assert first_attempt[-1]["event"] == "pipeline_end" and first_attempt[-1]["status"] == "PREEMPTED"
    saved = [e for e in first_attempt if e["event"] == "checkpoint"]
    assert len(saved) == 1 and saved[0]["phase"] == "grpo", saved  # written before submitit requeued
    k = saved[0]["step"]
    assert 1 <= k < 4, k  # stopped mid-training, so the requeued task had steps left to run
    assert json.loads((run_dir / "provenance.json").read_text())["resumed_from"] == saved[0]["path"]
    first = next(e for e in events[starts[1] :] if e["event"] == "train_step")
    assert (first["phase"], first["step"]) == ("grpo", k + 1)

    full, again = steps(uninterrupted), steps(run_dir)
    for step in range(k + 1, 5):
        for key in ("grpo/learning_rate", "grpo/num_tokens", "grpo/reward/mean"):
            assert again[step][key] == pytest.approx(full[step][key], abs=1e-6), (step, key)
    a = load_file(uninterrupted / "final" / "model.safetensors")
    b = load_file(run_dir / "final" / "model.safetensors")
    assert a.keys() == b.keys()
    assert max((a[name] - b[name]).abs().max().item() for name in a) <= 1e-6
    # and the same final evaluation, answer for answer
    final_a = json.loads(next((uninterrupted / "eval").glob("final_step*.json")).read_text())
    final_b = json.loads(next((run_dir / "eval").glob("final_step*.json")).read_text())
    assert final_b["summary"] == final_a["summary"]
    assert [r["completions"] for r in final_b["samples"]] == [r["completions"] for r in final_a["samples"]]

    # The requeued point reports the whole run (rlvr.records.run_history), and so does its sweep-report row:
    # the after-SFT evaluation and the SFT steps of the first attempt, both attempts' wall time.
    report = json.loads((run_dir / "report.json").read_text())
    full = json.loads((uninterrupted / "report.json").read_text())

    def rows(r: dict) -> list[tuple]:
        return [
            (a["stage"], a["step"], a["accuracy"], a["ci_low"], a["ci_high"], a["n"]) for a in r["accuracy"]
        ]

    assert [r[0] for r in rows(report)] == ["after SFT", "final"]  # BASE turns the baseline off
    assert rows(report) == rows(full)
    assert report["steps"] == full["steps"] == {"sft": 2, "grpo": 4}
    # the uninterrupted run's own end (COMPLETED, or COMPLETED_WITH_WARNINGS when its tiny GRPO groups
    # carried no reward variance: rlvr.records.learning), the same verdict and warnings after the requeue
    ended = full["attempts"][-1]["status"]
    assert ended in ("COMPLETED", "COMPLETED_WITH_WARNINGS")
    assert [a["status"] for a in report["attempts"]] == ["PREEMPTED", ended]
    assert report.get("warnings") == full.get("warnings")
    assert report["wall_seconds"] >= max(a["seconds"] for a in report["attempts"]) > 0
    from rlvr.records.sweep_report import collect

    (point,) = collect(sweep)
    assert point.status == ended and point.attempts == 2
    after_sft = next(a for a in full["accuracy"] if a["stage"] == "after SFT")
    assert point.accuracy["after SFT"] == {k: after_sft[k] for k in ("accuracy", "ci_low", "ci_high", "n")}
    assert point.steps == {"sft": 2, "grpo": 4} and point.wall_seconds == report["wall_seconds"]


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
