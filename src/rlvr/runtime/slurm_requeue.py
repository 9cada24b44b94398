"""A SLURM job preempted with a grace time requeues itself once its checkpoint is on disk.

Under ``PreemptMode=REQUEUE`` SLURM requeues a preempted job at once when the partition has no
``GraceTime`` (SIGTERM, then SIGKILL after ``KillWait``; the same path as ``scontrol requeue``). With a
``GraceTime`` it sends SIGTERM and requeues the job only if it is still running when the grace time
ends: a run that finishes its step, checkpoints and exits 75 within it ended ``FAILED`` and was never
requeued (seen on a real cluster: tests/slurm/test_preemption.py). So after a SIGTERM stop inside a
SLURM job the entry point asks SLURM for the job's record, and when it shows a preemption under way
(a preemption time set) on a job still ``RUNNING`` that may be requeued, it runs ``scontrol requeue``
itself, as submitit does for its time-limit signal. A ``scancel`` (no preemption time) and the
no-grace path (SLURM has already requeued: the job is no longer RUNNING) are left alone.

The record is SLURM's JSON (``squeue --json``), read field by field. ``scontrol show job`` text cannot
be trusted for this: a job's comment, name or other free text is printed in the same ``Key=value``
line, so a comment ``x JobState=RUNNING PreemptTime=... Requeue=1`` read as a later key wins turned a
plain cancel into a requeue (SECURITY.md "SLURM preemption"). ``squeue --json`` exists from SLURM
21.08; Debian 12's 22.05 has no ``scontrol show job --json`` (measured 2026-11-29), and its squeue
lists every job whatever ``--jobs`` says, so the job is picked by its id from the list.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class JobRecord:
    """The three facts of a job's record the requeue decision reads."""

    state: str  # the base state: RUNNING, PENDING, COMPLETING, ...
    preempted: bool  # a preemption time is set
    requeue: bool  # the job may be requeued (--requeue)


def _state(value: Any) -> str | None:
    # v0.0.38 (SLURM 22.05) writes "RUNNING"; later versions a list of the base state and its flags.
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and isinstance(value[0], str):
        return value[0]
    return None


def _time_set(value: Any) -> bool | None:
    # v0.0.38 writes seconds since the epoch (0: none); later versions {"set", "infinite", "number"}.
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value > 0
    if isinstance(value, dict) and isinstance(value.get("set"), bool):
        return value["set"] and isinstance(value.get("number"), int) and value["number"] > 0
    return None


def parse_record(text: str, job_id: str) -> JobRecord | None:
    """The record of ``job_id`` in ``squeue --json`` output; None when it is not listed (the job no
    longer waits or runs) or a field is missing or of an unknown shape."""
    try:
        jobs = json.loads(text).get("jobs")
    except (json.JSONDecodeError, AttributeError):
        return None
    if not isinstance(jobs, list):
        return None
    for job in jobs:
        if not isinstance(job, dict) or str(job.get("job_id")) != job_id:
            continue
        state, preempted, requeue = (
            _state(job.get("job_state")),
            _time_set(job.get("preempt_time")),
            job.get("requeue"),
        )
        if state is None or preempted is None or not isinstance(requeue, bool):
            return None
        return JobRecord(state=state, preempted=preempted, requeue=requeue)
    return None


def job_record(job_id: str) -> JobRecord | str | None:
    """The job's record from ``squeue --json``; a line saying why it could not be read; or None when
    the job is not listed (no longer waiting or running)."""
    squeue = shutil.which("squeue")
    if squeue is None:
        return "squeue is not on PATH"
    try:
        out = subprocess.run([squeue, "--json", "--jobs", job_id], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"squeue --json failed ({exc})"
    if out.returncode != 0:
        return f"squeue --json failed ({out.stderr.strip()[:200]}; SLURM >= 21.08 has it)"
    return parse_record(out.stdout, job_id)


def requeue_if_preempted_in_grace(environ: dict[str, str] | None = None) -> str | None:
    """Requeue this SLURM job when it is being preempted within a grace time; a line saying what was
    done (or why it could not be), or None when there was nothing to do (not in a SLURM job, not
    preempted, or already requeued by SLURM)."""
    env = os.environ if environ is None else environ
    job_id = env.get("SLURM_JOB_ID")
    if not job_id:
        return None
    record = job_record(job_id)
    if isinstance(record, str):
        return (
            f"SLURM job {job_id} stopped by SIGTERM; its record could not be read ({record}), so it was "
            "not requeued: if it was preempted, launch it again with resume=auto"
        )
    if record is None or record.state != "RUNNING" or not record.preempted:
        return None
    if not record.requeue:
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
