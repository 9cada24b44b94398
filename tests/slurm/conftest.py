"""A real SLURM cluster for the tests marked ``slurm`` (``make test-slurm`` starts one on this host:
infrastructure/slurm/local_cluster.sh). Without one these tests fail, they never skip: a green
``make test-slurm`` means they ran against a slurmctld."""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.conftest import ROOT

# The launcher settings a one-node, CPU-only cluster takes (conf/hydra/launcher/slurm.yaml asks for
# a GPU, 8 CPUs and 32 GB by default). One CPU a task: the 2 points of a sweep run side by side on 2 cores.
CLUSTER = (
    "hydra/launcher=slurm",
    "hydra.launcher.partition=debug",
    "hydra.launcher.gpus_per_node=0",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=2",
    "hydra.launcher.timeout_min=20",
)


@pytest.fixture(scope="session")
def slurm() -> dict[str, str]:
    """The environment of the jobs' submitter: SLURM_CONF of the running cluster, this checkout's
    src/ first on PYTHONPATH (sbatch exports the submitter's environment to the job, and submitit
    starts the task with this interpreter), one torch thread a task."""
    conf = os.environ.get("SLURM_CONF")
    if not conf or not Path(conf).is_file() or shutil.which("sinfo") is None:
        pytest.fail(
            "no SLURM cluster: run `make test-slurm` (or infrastructure/slurm/local_cluster.sh run pytest -m slurm)"
        )
    state = subprocess.run(["sinfo", "-h", "-N", "-o", "%T"], capture_output=True, text=True, timeout=30)
    assert state.returncode == 0 and state.stdout.split(), state.stderr
    assert state.stdout.split()[0].rstrip("*") in {"idle", "mixed", "allocated"}, state.stdout
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "src"), str(ROOT), *filter(None, [env.get("PYTHONPATH")])]
    )
    env["OMP_NUM_THREADS"] = "1"
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


_LAUNCHED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def _no_launcher_left():
    """A test that fails while its launcher waits leaves no launcher (nor its jobs) behind."""
    yield
    while _LAUNCHED:
        proc = _LAUNCHED.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if os.environ.get("SLURM_CONF"):
        subprocess.run(["scancel", "--user", str(os.getuid())], capture_output=True, timeout=60)


def launch(
    sweep_dir: Path, env: dict[str, str], *overrides: str, config: str | None = None
) -> subprocess.Popen:
    """``python run_pipeline.py -m hydra/launcher=slurm ...`` as a user types it; it returns when
    every array task has its result (submitit polls the result files: there is no sacct here)."""
    cmd = [sys.executable, str(ROOT / "run_pipeline.py"), "-m"]
    if config:
        cmd += ["--config-name", config]
    cmd += [*CLUSTER, f"hydra.sweep.dir={sweep_dir}", *overrides]
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


ENDED_BADLY = {
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "PREEMPTED",
}


def wait_launcher(
    proc: subprocess.Popen, sweep_dir: Path, timeout: float = 900, on_poll: Callable[[], None] | None = None
) -> str:
    """The launcher's output once it returns. submitit learns that a task failed without a result
    file only from sacct, which this cluster (no slurmdbd) lacks: the launcher would wait for ever.
    So SLURM's own word is watched too, and a task that stays ended without success (FAILED,
    CANCELLED, ... for 5 s: a requeue makes it PENDING again) fails the test at once, with its log."""
    deadline = time.time() + timeout
    bad_since: dict[str, float] = {}
    while time.time() < deadline:
        try:
            out, _ = proc.communicate(timeout=2)
            return out
        except subprocess.TimeoutExpired:
            pass
        if on_poll is not None:
            on_poll()
        for folder in (sweep_dir / ".submitit").glob("*"):
            if not any(folder.glob("*_submitted.pkl")):
                continue
            try:
                info = job(folder.name)
            except AssertionError:
                continue
            if info.get("JobState") in ENDED_BADLY:
                first = bad_since.setdefault(folder.name, time.time())
                if time.time() - first > 5:
                    proc.kill()
                    logs = "".join(p.read_text()[-2500:] for p in sorted(folder.glob("*_log.*")))
                    raise AssertionError(
                        f"SLURM ended job {folder.name} as {info['JobState']} (exit {info.get('ExitCode')}):\n{logs}"
                    )
            else:
                bad_since.pop(folder.name, None)
    proc.kill()
    raise AssertionError(f"launcher still running after {timeout}s")


def scontrol(*args: str) -> str:
    out = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"scontrol {' '.join(args)}: {out.stderr}"
    return out.stdout


def job(job_id: str) -> dict[str, str]:
    """``scontrol show job`` as a dict (finished jobs stay listed for MinJobAge). A key's first
    occurrence wins: free text (a comment) comes after SLURM's own fields and may read as fields too
    (tests/slurm/test_cpu_launcher.py); the tests' job names hold no spaces."""
    text = scontrol("show", "job", "--oneliner", job_id)
    return dict(reversed(re.findall(r"(\w+)=(\S*)", text)))


def finished(job_id: str, timeout: float = 120) -> dict[str, str]:
    """The job's record once SLURM has ended it (submitit's result file is written a moment before
    the task's process exits, so the launcher can return while SLURM still says RUNNING)."""
    deadline = time.time() + timeout
    while True:
        info = job(job_id)
        if (
            info["JobState"] not in {"RUNNING", "COMPLETING", "PENDING", "CONFIGURING"}
            or time.time() > deadline
        ):
            return info
        time.sleep(0.5)


def array_jobs(sweep_dir: Path, n: int, timeout: float = 120) -> list[str]:
    """The SLURM ids of the sweep's n jobs, read from submitit's folders: ``<array id>_<task>`` for the
    tasks of an array, the plain job id where the sweep has one point (submitit submits no array then)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        ids = sorted(p.name for p in (sweep_dir / ".submitit").glob("*") if any(p.glob("*_submitted.pkl")))
        if len(ids) >= n:
            return ids
        time.sleep(0.5)
    raise AssertionError(f"no {n} submitit job folders under {sweep_dir}/.submitit")


def wait_for(predicate: Callable[[], bool], proc: subprocess.Popen, timeout: float = 400) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"launcher ended early: {proc.returncode}\n{proc.stdout.read()[-3000:]}")
        time.sleep(0.3)
    raise AssertionError("timed out")


# slurmd revokes the credential of a requeued job's old run and refuses any launch whose credential
# was made in the same second or before (22.05: "Job 84 already killed, do not launch batch job";
# slurmctld: "Killing non-startable batch JobId=84: Job credential revoked", and the job ends FAILED
# for good). SLURM's own hold (BeginTime, about two minutes) keeps clear of that; a test that cuts the
# hold short waits until the requeue's second is over. The requeue resets SubmitTime to its time.
REVOKE_CLEAR_S = 3.0


def _releasable(info: dict[str, str]) -> bool:
    """A requeued job waiting for its BeginTime, whose old run's revoked credential no longer covers a
    launch made now."""
    if info["JobState"] != "PENDING" or int(info.get("Restarts", "0")) == 0:
        return False
    requeued = datetime.datetime.strptime(info["SubmitTime"], "%Y-%m-%dT%H:%M:%S").timestamp()
    return time.time() >= requeued + REVOKE_CLEAR_S


def release_if_requeued(job_id: str) -> None:
    """Start a requeued job now if it waits for its BeginTime (see :func:`release_requeued`)."""
    if _releasable(job(job_id)):
        scontrol("update", f"jobid={job_id}", "StartTime=now")


def release_requeued(job_id: str, timeout: float = 120) -> None:
    """SLURM holds a requeued job back for about two minutes (its BeginTime); a CI run has no two
    minutes to wait, so the test lets it start as soon as the node is free."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        info = job(job_id)
        if _releasable(info):
            scontrol("update", f"jobid={job_id}", "StartTime=now")
            return
        if info["JobState"] == "RUNNING" and int(info.get("Restarts", "0")) > 0:
            return
        if info["JobState"] in ENDED_BADLY:  # ended and stays ended: nothing requeued it
            time.sleep(5)
            if job(job_id)["JobState"] in ENDED_BADLY:
                break
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} was not requeued: {job(job_id)}")


def grpo_steps(run_dir: Path) -> dict[int, dict]:
    out: dict[int, dict] = {}
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:  # a line being written
            continue
        if r["event"] == "train_step" and r["phase"] == "grpo" and "grpo/learning_rate" in r["metrics"]:
            out[r["step"]] = r["metrics"]
    return out
