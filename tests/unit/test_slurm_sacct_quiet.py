"""A SLURM launch on a cluster without accounting prints one line about sacct, not three per poll
(issue 56 item 4; rlvr.runtime.logs.quiet_submitit_sacct).

The real submitit watcher polls a ``sacct`` that fails as it does without slurmdbd ("Slurm accounting
storage is disabled", exit 1); submitit logs each failure as a warning on its logger, which its own
two handlers print (stderr and stdout) and Hydra's console prints again through the root logger.
"""

from __future__ import annotations

import logging
import os
import stat

import pytest
from submitit.slurm.slurm import SlurmInfoWatcher

from rlvr.runtime.logs import LAUNCHER_NOTES, SACCT_ERROR, SUBMITIT_LOGGER, quiet_submitit_sacct


@pytest.fixture
def no_accounting(tmp_path, monkeypatch):
    """``sacct`` on PATH that fails as SLURM's does without accounting; submitit's logger as it was after."""
    sacct = tmp_path / "sacct"
    sacct.write_text("#!/bin/sh\necho 'Slurm accounting storage is disabled' >&2\nexit 1\n")
    sacct.chmod(sacct.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    logger = logging.getLogger(SUBMITIT_LOGGER)
    filters = list(logger.filters)
    yield
    logger.filters[:] = filters


def poll(times: int) -> None:
    watcher = SlurmInfoWatcher()
    watcher.register_job("3")
    for _ in range(times):
        watcher.update()


def sacct_warnings(caplog) -> list[str]:
    """submitit's sacct warnings that reached a handler: the root logger's (Hydra's console in a launch;
    caplog here). A logger's filter acts before any handler, submitit's own two included."""
    return [
        r.getMessage() for r in caplog.records if r.name == SUBMITIT_LOGGER and SACCT_ERROR in r.getMessage()
    ]


def test_without_the_filter_every_poll_is_a_warning(no_accounting, caplog):
    # the premise: in a launch each of these printed 3 times (submitit's stderr and stdout handlers, Hydra's console)
    poll(5)
    assert [m.split(" - ")[0] for m in sacct_warnings(caplog)] == [f"Call #{n}" for n in range(1, 6)]


def test_sacct_errors_become_one_line_said_once(no_accounting, caplog):
    """Mutation: without quiet_submitit_sacct (run_pipeline.py calls it) the five warnings reached the
    handlers; a real one-job launch printed 18 lines."""
    quiet_submitit_sacct()
    quiet_submitit_sacct()  # twice: one filter
    with caplog.at_level(logging.INFO):
        poll(5)
    assert sacct_warnings(caplog) == []
    notes = [r.getMessage() for r in caplog.records if r.name == LAUNCHER_NOTES]
    assert len(notes) == 1
    assert notes[0].startswith("sacct does not answer on this cluster (Command '['sacct', '-o'")
    assert notes[0].endswith(
        "SLURM keeps no job accounting here, so submitit follows the jobs by their result files and job "
        "states may lag; further sacct errors of this launch are not shown"
    )


def test_submitits_other_warnings_still_reach_the_handlers(no_accounting, caplog):
    quiet_submitit_sacct()
    logging.getLogger(SUBMITIT_LOGGER).warning("Bypassing state error:\nboom")
    assert [r.getMessage() for r in caplog.records if r.name == SUBMITIT_LOGGER] == [
        "Bypassing state error:\nboom"
    ]
