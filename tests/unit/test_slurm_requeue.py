"""Which SIGTERM stops a SLURM job requeues itself (rlvr.runtime.slurm_requeue): only a preemption under
way (PreemptTime set) on a job still RUNNING that may be requeued. A scancel, SLURM's own requeue (the job
no longer RUNNING) and a run outside SLURM are left alone. The real cluster's path is
tests/slurm/test_preemption.py (partition ``graced``); here scontrol is a script that answers with a
given record and logs what it was asked."""

from __future__ import annotations

import os
import stat

import pytest

from rlvr.runtime.slurm_requeue import requeue_if_preempted_in_grace

RUNNING_PREEMPTED = "JobId=7 JobState=RUNNING Requeue=1 PreemptTime=2026-11-28T04:09:20 Restarts=0"


@pytest.fixture
def scontrol(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    script = tmp_path / "bin" / "scontrol"
    script.parent.mkdir()
    script.write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\n'
        'if [ "$1" = show ]; then echo "$RECORD"; exit 0; fi\n'
        'if [ "$1" = requeue ]; then exit "${REQUEUE_RC:-0}"; fi\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")

    def run(record: str, rc: int = 0, job: str | None = "7") -> tuple[str | None, list[str]]:
        monkeypatch.setenv("RECORD", record)
        monkeypatch.setenv("REQUEUE_RC", str(rc))
        env = {"SLURM_JOB_ID": job} if job else {}
        out = requeue_if_preempted_in_grace(env)
        return out, calls.read_text().splitlines() if calls.exists() else []

    return run


def test_a_preemption_in_its_grace_time_requeues_the_job(scontrol):
    out, calls = scontrol(RUNNING_PREEMPTED)
    assert calls == ["show job --oneliner 7", "requeue 7"]
    assert out == "SLURM job 7 preempted within its grace time: requeued it (scontrol requeue 7)"


@pytest.mark.parametrize(
    "record",
    [
        "JobId=7 JobState=RUNNING Requeue=1 PreemptTime=None",  # scancel: no preemption
        "JobId=7 JobState=PENDING Requeue=1 PreemptTime=2026-11-28T04:09:20",  # SLURM requeued it already
        "JobId=7 JobState=COMPLETING Requeue=1 PreemptTime=2026-11-28T04:09:20",
    ],
)
def test_a_cancel_or_slurms_own_requeue_is_left_alone(scontrol, record):
    out, calls = scontrol(record)
    assert out is None and calls == ["show job --oneliner 7"]


def test_outside_slurm_nothing_is_asked(scontrol):
    assert scontrol(RUNNING_PREEMPTED, job=None) == (None, [])


def test_a_job_that_may_not_be_requeued_or_a_failed_requeue_says_how_to_continue(scontrol):
    out, calls = scontrol(RUNNING_PREEMPTED.replace("Requeue=1", "Requeue=0"))
    assert "may not be requeued (submit with --requeue): launch it again with resume=auto" in out
    assert "requeue 7" not in calls
    out, _ = scontrol(RUNNING_PREEMPTED, rc=1)
    assert out.startswith("SLURM job 7 is being preempted; scontrol requeue failed") and "resume=auto" in out
