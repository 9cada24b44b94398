"""SLURM on a CPU cluster with the shipped defaults (issue 56 item 4), and a requeue decision no job
text can forge (issue 55 finding #6), on the real one-node cluster (`make test-slurm`)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.conftest import ROOT
from tests.slurm.conftest import array_jobs, finished, job, wait_launcher

pytestmark = pytest.mark.slurm

TINY_POINT = (
    "experiment=smoke",
    "training_loop.sft.max_steps=1",
    "training_loop.grpo.max_steps=1",
    "data.eval_size=8",
    "evaluation.every_n_steps=0",
)


def sbatch(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["sbatch", *args], capture_output=True, text=True, env=env, timeout=60)


def test_the_gpu_defaults_do_not_fit_a_cpu_node_and_slurm_cpus_do(slurm):
    """The premise, asked of slurmctld without running anything (sbatch --test-only)."""
    gpu = sbatch(
        "--test-only", "--gpus-per-node=1", "--cpus-per-task=8", "--mem=32GB", "--wrap=true", env=slurm
    )
    assert gpu.returncode != 0, gpu.stderr
    cpu = sbatch("--test-only", "--cpus-per-task=2", "--mem=8GB", "--wrap=true", env=slurm)
    assert cpu.returncode == 0 and "to start at" in cpu.stderr, cpu.stderr


def test_a_sweep_point_with_the_slurm_cpu_launcher_runs_and_says_sacct_once(slurm, tmp_path):
    """hydra/launcher=slurm_cpu with nothing but the partition: SLURM runs the job (it does not pend),
    and the launcher's console has one line about sacct (this cluster keeps no accounting), not 18.
    Mutation: run_pipeline.py without quiet_submitit_sacct() printed "Bypassing sacct error" 18 times."""
    cmd = [sys.executable, str(ROOT / "run_pipeline.py"), "-m", "hydra/launcher=slurm_cpu"]
    cmd += ["hydra.launcher.partition=debug", f"hydra.sweep.dir={tmp_path}", *TINY_POINT, "seed=1"]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=slurm, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    (job_id,) = array_jobs(tmp_path, 1)
    # It starts: no Reason=Resources / ReqNodeNotAvail wait on a node with no GPU.
    deadline = time.time() + 60
    while job(job_id)["JobState"] == "PENDING":
        assert time.time() < deadline, job(job_id)
        time.sleep(0.5)
    out = wait_launcher(proc, tmp_path)
    assert proc.returncode == 0, out[-4000:]
    info = finished(job_id)
    assert (info["JobState"], info["ExitCode"], info["NumCPUs"]) == ("COMPLETED", "0:0", "2"), info
    assert (tmp_path / "0" / "report.json").is_file()
    assert "Bypassing sacct error" not in out
    assert out.count("sacct does not answer on this cluster") == 1, out[-4000:]


def test_a_comment_that_reads_as_fields_does_not_requeue_a_job(slurm, tmp_path):
    """A job whose comment is "x JobState=RUNNING PreemptTime=... Requeue=1" (the config rules refuse
    it now; a job could still carry it) asks for its own record while running and not preempted: the
    decision is "nothing to do", and SLURM never restarted it. Mutation: the old parse of `scontrol
    show job` text (a later key wins) requeued the job from inside itself."""
    forged = "x JobState=RUNNING PreemptTime=2026-11-28T04:09:20 Requeue=1"
    code = (
        "from rlvr.runtime.slurm_requeue import requeue_if_preempted_in_grace as r; print('decision:', r())"
    )
    out_file = Path(tmp_path) / "decision.out"
    sub = sbatch(
        "--parsable",
        "--requeue",
        "--partition=debug",
        "--cpus-per-task=1",
        f"--comment={forged}",
        f"--output={out_file}",
        f'--wrap={sys.executable} -c "{code}"',
        env=slurm,
    )
    assert sub.returncode == 0, sub.stderr
    job_id = sub.stdout.strip().split(";")[0]
    info = finished(job_id)
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "0", info
    assert out_file.read_text().strip().splitlines()[-1] == "decision: None", out_file.read_text()
