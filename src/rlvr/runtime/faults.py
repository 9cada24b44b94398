"""Faults of the machine or of the run directory that end a run: one message naming what happened and
the fix, on the console; the traceback goes to the run's log file (rlvr.app).

A full disk reaches Python in several shapes: ``OSError`` with ENOSPC / EDQUOT (or EFBIG past a file
size limit), torch's ``PytorchStreamWriter failed writing file`` and ``unexpected pos`` (no errno),
safetensors' ``No space left on device (os error 28)``. :func:`is_disk_error` recognises them all along
the exception's chain. A checkpoint that passed the completeness checks (rlvr.training_loop.checkpoints)
but still fails to load is a :class:`CheckpointDamaged`; a phase that something other than the
pipeline's stop ended early is a :class:`StoppedEarly`.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator

DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
# How the libraries word the same errors when they drop the errno (torch's C++ writer, safetensors).
DISK_TEXT = (
    "no space left on device",
    "disk quota exceeded",
    "file too large",
    "os error 28",
    "os error 27",
    "pytorchstreamwriter failed writing",
    "unexpected pos",
)


class RunFault(Exception):
    """A fault the run ends with: its message says what happened and the fix."""

    exit_code = 1
    status = "FAILED"  # the run's end status (rlvr.pipeline.orchestrator)


class DiskFull(RunFault):
    pass


class CheckpointDamaged(RunFault):
    pass


class StoppedEarly(RunFault):
    """A training phase ended before its ``max_steps`` without the pipeline's own stop (a library's
    callback or signal handler stopped the trainer): the run is INTERRUPTED, never COMPLETED, and
    ``resume=auto`` continues it (rlvr.training_loop.phase.stop_unless_finished)."""

    status = "INTERRUPTED"


def chain(first: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    exc: BaseException | None = first
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def is_disk_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) is a full disk or a file size limit."""
    for e in chain(exc):
        if isinstance(e, OSError) and e.errno in DISK_ERRNOS:
            return True
        if any(text in str(e).lower() for text in DISK_TEXT):
            return True
    return False
