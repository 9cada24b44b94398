"""Preemption and the time-limit warning on the real scheduler: SLURM signals the running array task,
the pipeline checkpoints mid-GRPO, the task is requeued by SLURM (``scontrol requeue``) and the
requeued task resumes from that checkpoint to the weights, steps and evaluation of an uninterrupted run."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tests.conftest import ROOT
from tests.slurm.conftest import (
    array_jobs,
    finished,
    grpo_steps,
    launch,
    release_if_requeued,
    release_requeued,
    scontrol,
    wait_for,
    wait_launcher,
)

pytestmark = pytest.mark.slurm

# tests/integration/test_resume.py's run: tiny model with the whole vocabulary (a GRPO step long
# enough to signal mid-phase), a length reward so that parameters move, no checkpoint but the signal's.
BASE = (
    "experiment=smoke",
    "model.vocab_size=49152",
    "reward.terms.length.free_chars=0",
    "reward.terms.length.scale_chars=40",
    "training_loop.sft.max_steps=2",
    "training_loop.sft.save_strategy=no",
    # 8 steps: a quiet machine ran steps 2-4 of a 4-step phase before the requeue's SIGTERM arrived
    "training_loop.grpo.max_steps=8",
    "training_loop.grpo.save_steps=1000",
    "training_loop.grpo.save_total_limit=3",
    "evaluation.every_n_steps=0",
    "evaluation.baseline=false",
    "observers=default",
)


@pytest.fixture(scope="module")
def uninterrupted(slurm, tmp_path_factory):
    """The same run without a signal, in a plain process (started at once; the SLURM runs go beside it)."""
    return plain_run(tmp_path_factory.mktemp("uninterrupted"), slurm, *BASE)


def plain_run(run_dir: Path, env: dict[str, str], *overrides: str) -> Callable[[], Path]:
    """A run in a plain process, started at once; the returned call waits for it and checks it ended 0."""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "run_pipeline.py"), f"hydra.run.dir={run_dir}", *overrides],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def result() -> Path:
        out, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, out[-3000:]
        return run_dir

    return result


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def assert_resumed_exactly(run_dir: Path, full: Path, steps: int = 8) -> int:
    ev = events(run_dir)
    starts = [i for i, e in enumerate(ev) if e["event"] == "pipeline_start"]
    assert len(starts) == 2, [e["event"] for e in ev]  # the first attempt and the requeued one, one run dir
    first = ev[starts[0] : starts[1]]
    assert first[-1]["event"] == "pipeline_end" and first[-1]["status"] == "PREEMPTED", first[-1]
    saved = [e for e in first if e["event"] == "checkpoint"]
    assert len(saved) == 1 and saved[0]["phase"] == "grpo", saved
    k = saved[0]["step"]
    assert 1 <= k < steps, k  # stopped mid-GRPO: the requeued task had steps left
    assert json.loads((run_dir / "provenance.json").read_text())["resumed_from"] == saved[0]["path"]
    again = next(e for e in ev[starts[1] :] if e["event"] == "train_step")
    assert (again["phase"], again["step"]) == ("grpo", k + 1)
    # the uninterrupted run's own end: COMPLETED, or COMPLETED_WITH_WARNINGS when its tiny GRPO groups
    # carried no reward variance (rlvr.records.learning); the requeued run must end the same way
    ended = events(full)[-1]["status"]
    assert ended in ("COMPLETED", "COMPLETED_WITH_WARNINGS")
    assert ev[-1]["event"] == "pipeline_end" and ev[-1]["status"] == ended

    a, b = grpo_steps(full), grpo_steps(run_dir)
    for step in range(k + 1, steps + 1):
        for key in ("grpo/learning_rate", "grpo/num_tokens", "grpo/reward/mean"):
            assert b[step][key] == pytest.approx(a[step][key], abs=1e-6), (step, key)
    wa = load_file(full / "final" / "model.safetensors")
    wb = load_file(run_dir / "final" / "model.safetensors")
    assert wa.keys() == wb.keys()
    assert max((wa[n] - wb[n]).abs().max().item() for n in wa) <= 1e-6
    from tests.conftest import tiny_model

    init = tiny_model(seed=42).load().model.state_dict()
    assert sum(1 for n in wa if n in init and not torch.equal(wa[n], init[n])) > len(wa) // 2  # weights moved
    final_a = json.loads(next((full / "eval").glob("final_step*.json")).read_text())
    final_b = json.loads(next((run_dir / "eval").glob("final_step*.json")).read_text())
    assert final_b["summary"] == final_a["summary"]
    assert [r["completions"] for r in final_b["samples"]] == [r["completions"] for r in final_a["samples"]]
    report = json.loads((run_dir / "report.json").read_text())
    assert [a["status"] for a in report["attempts"]] == ["PREEMPTED", ended]
    return k


def test_scontrol_requeue_preempts_exits_75_and_resumes_exactly(slurm, uninterrupted, tmp_path):
    """``scontrol requeue`` of a running task, as a PreemptMode=REQUEUE preemption does: SLURM sends
    SIGCONT + SIGTERM (SIGKILL after KillWait); the pipeline finishes the step, checkpoints, exits 75;
    SLURM puts the same task back in the queue and it resumes with resume=auto."""
    proc = launch(tmp_path, slurm, *BASE, "resume=auto")
    (task,) = array_jobs(tmp_path, 1)
    run_dir = tmp_path / "0"
    wait_for(lambda: 1 in grpo_steps(run_dir), proc)
    scontrol("requeue", task)
    release_requeued(task)
    out = wait_launcher(proc, tmp_path)
    assert proc.returncode == 0, out[-4000:]

    info = finished(task)
    assert (info["JobState"], info["Restarts"]) == ("COMPLETED", "1"), info
    err = next((tmp_path / ".submitit" / task).glob("*_log.err")).read_text()
    log = next((tmp_path / ".submitit" / task).glob("*_log.out")).read_text()
    assert "DUE TO JOB REQUEUE" in err, err[-3000:]
    assert "stopped by SIGTERM" in log + err, (log + err)[-3000:]
    assert "task 0: Exited with exit code 75" in err, err[-3000:]  # srun's word for the first attempt
    assert_resumed_exactly(run_dir, uninterrupted())


def test_time_limit_warning_usr2_checkpoints_submitit_requeues_and_resumes_exactly(
    slurm, uninterrupted, tmp_path
):
    """The time-limit path: the warning SLURM sends the job's steps ``signal_delay_s`` before the limit
    (``--signal=USR2@...``, sent here at once with ``scancel --signal=USR2``: a real limit would make the
    test wait minutes). The pipeline finishes the step and checkpoints, then hands the signal to
    submitit, whose handler runs ``scontrol requeue`` on this cluster; the requeued task resumes exactly."""
    proc = launch(tmp_path, slurm, *BASE, "resume=auto")
    (task,) = array_jobs(tmp_path, 1)
    run_dir = tmp_path / "0"
    wait_for(lambda: 1 in grpo_steps(run_dir), proc)
    script = next((tmp_path / ".submitit").glob("*/*_submission.sh")).read_text().splitlines()
    assert "#SBATCH --signal=USR2@120" in script and "#SBATCH --requeue" in script  # what SLURM was asked
    signalled = subprocess.run(["scancel", "--signal=USR2", task], capture_output=True, text=True, timeout=60)
    assert signalled.returncode == 0, signalled.stderr
    release_requeued(task)
    out = wait_launcher(proc, tmp_path)
    assert proc.returncode == 0, out[-4000:]

    info = finished(task)
    assert (info["JobState"], info["Restarts"]) == ("COMPLETED", "1"), info
    log = next((tmp_path / ".submitit" / task).glob("*_log.out")).read_text()
    own = "\n".join(line for line in log.splitlines() if line.startswith("submitit "))
    assert own.count("Caught signal SIGUSR2") == 1 and own.count("Requeued job") == 1, log[-3000:]
    # submitit's handler (and its scontrol requeue) ran only after the checkpoint was on disk
    assert log.index("checkpoint (grpo step") < log.index("Caught signal SIGUSR2")
    assert "Job completed successfully" in own
    assert_resumed_exactly(run_dir, uninterrupted())


# A run long enough to meet a real 2-minute limit. SLURM's timer looks at running jobs every 30 s and
# sends the warning at the first look that finds the limit within signal_delay_s + ~30 s: measured here
# (2026-11-28, a batch shell trapping USR2, --time=2) at 21 s after the start with --signal=USR2@75 and
# @100 alike. With signal_delay_s=60 it lands 30-60 s after the start; 400 GRPO steps of ~0.2-0.5 s after
# ~10-15 s of start-up are still running then (200 were not on a faster machine of the same kind: 38.5 s of
# GRPO, the run done 47 s after its start and the warning landing as it exited, so the job ended FAILED).
TIME_LIMITED = (
    *(o for o in BASE if not o.startswith("training_loop.grpo.max_steps=")),
    "training_loop.grpo.max_steps=400",
)


def test_a_real_time_limit_warns_with_usr2_and_the_requeued_task_finishes_as_uninterrupted(slurm, tmp_path):
    """No signal from the test: the job asks for a 2-minute limit and the warning 60 s before it; SLURM's
    own timer sends USR2; the pipeline stops at its next boundary (a checkpoint when it is training),
    submitit requeues the task, and the task (requeued as often as the limit needs) ends with the weights
    and evaluation of an uninterrupted run. The job never ends TIMEOUT."""
    plain = plain_run(tmp_path / "uninterrupted", slurm, *TIME_LIMITED)
    sweep = tmp_path / "sweep"
    # As many requeues as a slow machine needs: a 2-minute slot of the real AVX2-only EPYC (2026-12-02)
    # trained about 75 of the 400 GRPO steps, so the task needed more than conf/hydra/launcher/slurm's 3
    # and submitit gave up ("timed-out too many times").
    limits = (
        "hydra.launcher.timeout_min=2",
        "hydra.launcher.signal_delay_s=60",
        "hydra.launcher.max_num_timeout=12",
    )
    proc = launch(sweep, slurm, *TIME_LIMITED, *limits, "resume=auto")
    (task,) = array_jobs(sweep, 1)
    script = next((sweep / ".submitit").glob("*/*_submission.sh")).read_text().splitlines()
    assert "#SBATCH --time=2" in script and "#SBATCH --signal=USR2@60" in script
    out = wait_launcher(proc, sweep, timeout=1200, on_poll=lambda: release_if_requeued(task))
    assert proc.returncode == 0, out[-4000:]
    full = plain()

    info = finished(task)
    restarts = int(info["Restarts"])
    assert info["JobState"] == "COMPLETED" and restarts >= 1, info
    log = next((sweep / ".submitit" / task).glob("*_log.out")).read_text()
    own = [line for line in log.splitlines() if line.startswith("submitit ")]
    # every requeue was submitit's answer to SLURM's warning: one caught USR2 and one requeue an attempt
    assert sum("Caught signal SIGUSR2" in line for line in own) == restarts, log[-3000:]
    assert sum("Requeued job" in line for line in own) == restarts, log[-3000:]
    # the warning landed mid-GRPO (the calibration above): the checkpoint was on disk before submitit's
    # handler ran and requeued the task
    assert log.index("checkpoint (grpo step") < log.index("Caught signal SIGUSR2"), log[-3000:]
    run_dir = sweep / "0"
    statuses = [a["status"] for a in json.loads((run_dir / "attempts.json").read_text())]
    ended = events(full)[-1]["status"]
    assert statuses == ["PREEMPTED"] * restarts + [ended], statuses
    wa = load_file(full / "final" / "model.safetensors")
    wb = load_file(run_dir / "final" / "model.safetensors")
    assert max((wa[n] - wb[n]).abs().max().item() for n in wa) <= 1e-6
    final_a = json.loads(next((full / "eval").glob("final_step*.json")).read_text())
    final_b = json.loads(next((run_dir / "eval").glob("final_step*.json")).read_text())
    assert [r["completions"] for r in final_b["samples"]] == [r["completions"] for r in final_a["samples"]]


# SLURM's scheduler took a few seconds to preempt for the urgent job: on a quiet machine 8 GRPO steps had
# ended by then (a CI run, 2026-11-28), so this run has 40.
PREEMPTIBLE = (
    *(o for o in BASE if not o.startswith("training_loop.grpo.max_steps=")),
    "training_loop.grpo.max_steps=40",
)


@pytest.fixture(scope="module")
def uninterrupted_40(slurm, tmp_path_factory):
    return plain_run(tmp_path_factory.mktemp("uninterrupted_40"), slurm, *PREEMPTIBLE)


@pytest.mark.parametrize("partition", ["debug", "graced"])
def test_a_higher_priority_job_preempts_the_task_which_checkpoints_exits_75_and_resumes_exactly(
    slurm, uninterrupted_40, tmp_path, partition
):
    """A real preemption: the cluster's partition ``urgent`` outranks ``debug`` and ``graced``
    (PreemptType=preempt/partition_prio, PreemptMode=REQUEUE; infrastructure/slurm/local_cluster.sh).
    A job there that needs every CPU of the node makes SLURM preempt the running task: SIGCONT + SIGTERM,
    the pipeline finishes the step, checkpoints and exits 75, the task is requeued, runs again once the
    urgent job is done and resumes exactly. ``debug`` has no GraceTime: SLURM requeues at once.
    ``graced`` has GraceTime=60: SLURM would requeue only a job still running after it (an early exit 75
    ended FAILED), so the pipeline requeued itself (rlvr.runtime.slurm_requeue). Mutation: the self-requeue
    removed -> the graced case ends FAILED."""
    proc = launch(tmp_path, slurm, *PREEMPTIBLE, "resume=auto", f"hydra.launcher.partition={partition}")
    (task,) = array_jobs(tmp_path, 1)
    run_dir = tmp_path / "0"
    wait_for(lambda: 1 in grpo_steps(run_dir), proc)
    cpus = subprocess.run(["sinfo", "-h", "-N", "-o", "%c"], capture_output=True, text=True, timeout=60)
    urgent = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--partition=urgent",
            f"--cpus-per-task={cpus.stdout.split()[0]}",
            f"--output={tmp_path / 'urgent.out'}",
            "--wrap",
            "sleep 3",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        env=slurm,
        timeout=60,
    )
    assert urgent.returncode == 0, urgent.stderr
    release_requeued(task)
    out = wait_launcher(proc, tmp_path)
    assert proc.returncode == 0, out[-4000:]

    assert finished(urgent.stdout.strip())["JobState"] == "COMPLETED"
    info = finished(task)
    assert (info["JobState"], info["Restarts"]) == ("COMPLETED", "1"), info
    err = next((tmp_path / ".submitit" / task).glob("*_log.err")).read_text()
    log = next((tmp_path / ".submitit" / task).glob("*_log.out")).read_text()
    # SLURM's own requeue (no grace time), or the one the pipeline asked for after its checkpoint
    assert ("DUE TO PREEMPTION" if partition == "debug" else "DUE TO JOB REQUEUE") in err, err[-3000:]
    assert "stopped by SIGTERM" in log + err, (log + err)[-3000:]
    assert "task 0: Exited with exit code 75" in err, err[-3000:]
    requeued_itself = "preempted within its grace time: requeued it (scontrol requeue" in log
    assert requeued_itself == (partition == "graced"), log[-3000:]
    assert_resumed_exactly(run_dir, uninterrupted_40(), steps=40)
