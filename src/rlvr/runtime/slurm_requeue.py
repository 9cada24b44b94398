"""A SLURM job preempted with a grace time requeues itself once its checkpoint is on disk.

Under ``PreemptMode=REQUEUE`` SLURM requeues a preempted job at once when the partition has no
``GraceTime`` (SIGTERM, then SIGKILL after ``KillWait``; the same path as ``scontrol requeue``). With a
``GraceTime`` it sends SIGTERM and requeues the job only if it is still running when the grace time
ends: a run that finishes its step, checkpoints and exits 75 within it ended ``FAILED`` and was never
requeued (seen on a real cluster: tests/slurm/test_preemption.py). So after a SIGTERM stop inside a
SLURM job the entry point asks SLURM for the job's record, and when it shows a preemption under way
(``PreemptTime`` set) on a job still ``RUNNING`` that may be requeued (``Requeue=1``), it runs
``scontrol requeue`` itself, as submitit does for its time-limit signal. A ``scancel`` (no preemption
time) and the no-grace path (SLURM has already requeued: the job is no longer RUNNING) are left alone.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

_FIELD = re.compile(r"(\w+)=(\S*)")


def job_record(job_id: str) -> dict[str, str] | None:
    """``scontrol show job`` of ``job_id`` as a dict, or None where scontrol cannot answer."""
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return None
    try:
        out = subprocess.run(
            [scontrol, "show", "job", "--oneliner", job_id], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return dict(_FIELD.findall(out.stdout)) if out.returncode == 0 else None


def requeue_if_preempted_in_grace(environ: dict[str, str] | None = None) -> str | None:
    """Requeue this SLURM job when it is being preempted within a grace time; a line saying what was
    done (or why it could not be), or None when there was nothing to do (not in a SLURM job, not
    preempted, or already requeued by SLURM)."""
    env = os.environ if environ is None else environ
    job_id = env.get("SLURM_JOB_ID")
    if not job_id:
        return None
    record = job_record(job_id)
    if record is None or record.get("JobState") != "RUNNING" or record.get("PreemptTime") in (None, "None"):
        return None
    if record.get("Requeue") != "1":
        return (
            f"SLURM job {job_id} is being preempted and may not be requeued (submit with --requeue): "
            "launch it again with resume=auto"
        )
    scontrol = shutil.which("scontrol") or "scontrol"
    try:
        done = subprocess.run([scontrol, "requeue", job_id], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"SLURM job {job_id} is being preempted; scontrol requeue failed ({exc}): launch it again with resume=auto"
    if done.returncode != 0:
        return (
            f"SLURM job {job_id} is being preempted; scontrol requeue failed ({done.stderr.strip()}): "
            "launch it again with resume=auto"
        )
    return f"SLURM job {job_id} preempted within its grace time: requeued it (scontrol requeue {job_id})"
