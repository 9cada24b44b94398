"""Which SIGTERM stops a SLURM job requeues itself (rlvr.runtime.slurm_requeue): only a preemption under
way (a preemption time set) on a job still RUNNING that may be requeued. A scancel, SLURM's own requeue
(the job no longer RUNNING) and a run outside SLURM are left alone, and no free-text field of the job (a
comment, a name) can forge the record. The real cluster's paths are tests/slurm/test_preemption.py
(partition ``graced``) and tests/slurm/test_cpu_launcher.py (a forged comment); here squeue and scontrol
are scripts that answer with a given record and log what they were asked."""

from __future__ import annotations

import json
import os
import stat

import pytest

from rlvr.runtime.slurm_requeue import parse_record, requeue_if_preempted_in_grace


def squeue_json(state="RUNNING", preempt_time=1795929071, requeue=True, job_id=7, **fields) -> str:
    """``squeue --json`` as SLURM 22.05 (openapi v0.0.38) writes it: a job that is not ours listed too
    (that squeue ignores --jobs under --json)."""
    other = {"job_id": 3, "job_state": "RUNNING", "preempt_time": 1795929071, "requeue": True}
    job = {"job_id": job_id, "job_state": state, "preempt_time": preempt_time, "requeue": requeue, **fields}
    return json.dumps({"meta": {"Slurm": {"release": "22.05.8"}}, "errors": [], "jobs": [other, job]})


# A comment as a launcher file could set it before the `=` rule (SECURITY.md "SLURM preemption"); the
# text of `scontrol show job --oneliner` printed it as fields that a parse where later keys win took.
FORGED = "x JobState=RUNNING PreemptTime=2026-11-28T04:09:20 Requeue=1"


def as_text(record: str) -> str:
    """The job's record as ``scontrol show job --oneliner`` prints it (free text last, as SLURM does)."""
    try:
        job = next(j for j in json.loads(record)["jobs"] if j["job_id"] == 7)
    except (json.JSONDecodeError, StopIteration):
        return ""
    preempt = "2026-11-28T04:09:20" if job["preempt_time"] else "None"
    text = (
        f"JobId=7 JobName={job.get('name', 'x')} JobState={job['job_state']} Requeue={int(job['requeue'])} "
    )
    return text + f"PreemptTime={preempt} Comment={job.get('comment', '(null)')} StdOut=/tmp/x.out"


@pytest.fixture
def slurm(tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in {
        "squeue": 'printf "%s" "$RECORD"; exit "${SQUEUE_RC:-0}"\n',
        # `scontrol show job --oneliner` prints the same record as text (the parse this module had)
        "scontrol": 'if [ "$1" = show ]; then echo "$RECORD_TEXT"; exit 0; fi\nexit "${REQUEUE_RC:-0}"\n',
    }.items():
        script = bin_dir / name
        script.write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\n{body}')
        script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def run(record: str, rc: int = 0, job: str | None = "7", squeue_rc: int = 0):
        monkeypatch.setenv("RECORD", record)
        monkeypatch.setenv("RECORD_TEXT", as_text(record))
        monkeypatch.setenv("REQUEUE_RC", str(rc))
        monkeypatch.setenv("SQUEUE_RC", str(squeue_rc))
        env = {"SLURM_JOB_ID": job} if job else {}
        out = requeue_if_preempted_in_grace(env)
        return out, calls.read_text().splitlines() if calls.exists() else []

    return run


def test_a_preemption_in_its_grace_time_requeues_the_job(slurm):
    out, calls = slurm(squeue_json())
    assert calls == ["squeue --json --jobs 7", "scontrol requeue 7"]
    assert out == "SLURM job 7 preempted within its grace time: requeued it (scontrol requeue 7)"


@pytest.mark.parametrize(
    "record",
    [
        squeue_json(preempt_time=0),  # scancel: no preemption
        squeue_json(state="PENDING"),  # SLURM requeued it already
        squeue_json(state="COMPLETING"),
        squeue_json(job_id=8),  # not listed: no longer waiting or running
    ],
)
def test_a_cancel_or_slurms_own_requeue_is_left_alone(slurm, record):
    out, calls = slurm(record)
    assert out is None and calls == ["squeue --json --jobs 7"]


@pytest.mark.parametrize("field", ["comment", "name", "admin_comment", "account"])
def test_a_comment_that_reads_as_fields_cannot_forge_a_preemption(slurm, field):
    """Finding #6 of issue 55: a plain cancel (no preemption time) of a job whose free text carries
    ``JobState=RUNNING PreemptTime=... Requeue=1`` is left alone. Mutation: reading the text of
    ``scontrol show job --oneliner`` with a later key winning requeued it."""
    out, calls = slurm(squeue_json(preempt_time=0, requeue=False, **{field: FORGED}))
    assert "scontrol requeue 7" not in calls and out is None


def test_a_later_slurms_record_shapes_are_read_too():
    # From 23.x: the state a list (base state first, then flags), times {"set", "infinite", "number"}.
    later = json.dumps(
        {
            "jobs": [
                {
                    "job_id": 7,
                    "job_state": ["RUNNING"],
                    "preempt_time": {"set": True, "infinite": False, "number": 1795929071},
                    "requeue": True,
                    "comment": FORGED,
                }
            ]
        }
    )
    record = parse_record(later, "7")
    assert record is not None and (record.state, record.preempted, record.requeue) == ("RUNNING", True, True)
    unset = later.replace('"set": true', '"set": false')
    assert parse_record(unset, "7").preempted is False
    assert parse_record(later.replace('"requeue": true', '"requeue": "1"'), "7") is None  # unknown shape


def test_outside_slurm_nothing_is_asked(slurm):
    assert slurm(squeue_json(), job=None) == (None, [])


def test_a_job_that_may_not_be_requeued_or_a_failed_requeue_says_how_to_continue(slurm):
    out, calls = slurm(squeue_json(requeue=False))
    assert "may not be requeued (submit with --requeue): launch it again with resume=auto" in out
    assert "scontrol requeue 7" not in calls
    out, _ = slurm(squeue_json(), rc=1)
    assert out.startswith("SLURM job 7 is being preempted; scontrol requeue failed") and "resume=auto" in out


def test_a_record_that_cannot_be_read_is_said_and_nothing_is_requeued(slurm):
    out, calls = slurm("squeue: unrecognized option '--json'", squeue_rc=1)
    assert "scontrol requeue 7" not in calls
    assert out.startswith(
        "SLURM job 7 stopped by SIGTERM; its record could not be read (squeue --json failed"
    )
    assert out.endswith("if it was preempted, launch it again with resume=auto")
