"""Faults of the machine or of the run directory that end a run: one message naming what happened and
the fix, on the console; the traceback goes to the run's log file (rlvr.app).

A full disk reaches Python in several shapes: ``OSError`` with ENOSPC / EDQUOT (or EFBIG past a file
size limit), torch's ``PytorchStreamWriter failed writing file`` and ``unexpected pos`` (no errno),
safetensors' ``No space left on device (os error 28)``. :func:`disk_fault` recognises them all along
the exception's chain. A checkpoint that passed the completeness checks (rlvr.training_loop.checkpoints)
but still fails to load is a :class:`CheckpointDamaged`.
"""

from __future__ import annotations

import errno
import resource
import shutil
from collections.abc import Iterator
from pathlib import Path

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


class DiskFull(RunFault):
    pass


class CheckpointDamaged(RunFault):
    pass


def _chain(first: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    exc: BaseException | None = first
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def is_disk_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) is a full disk or a file size limit."""
    for e in _chain(exc):
        if isinstance(e, OSError) and e.errno in DISK_ERRNOS:
            return True
        if any(text in str(e).lower() for text in DISK_TEXT):
            return True
    return False


def _free(path: Path) -> int:
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def disk_fault(exc: BaseException, stage: str, run_dir: Path, resume: str) -> DiskFull | None:
    """A :class:`DiskFull` for ``exc`` if it is a full disk (or a file size limit), else None.
    ``resume`` is the command that continues the run."""
    if not is_disk_error(exc):
        return None
    from rlvr.runtime.disk import dir_size, human
    from rlvr.training_loop.checkpoints import latest_checkpoint

    found = latest_checkpoint(run_dir)
    kept = (
        f"the newest complete checkpoint is {found[1]} ({human(dir_size(found[1]))}; the next one "
        "needs about as much)"
        if found
        else "no checkpoint was complete yet"
    )
    errnos = {e.errno for e in _chain(exc) if isinstance(e, OSError)}
    # torch's writer drops the errno: a finite file size limit without ENOSPC is taken to be the cause.
    size_limit, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    limited = size_limit != resource.RLIM_INFINITY and not errnos & {errno.ENOSPC, errno.EDQUOT}
    if errno.EFBIG in errnos or limited:
        what = f"a file hit the process's file size limit (ulimit -f: {human(size_limit)})"
    else:
        what = "the disk is full"
    return DiskFull(
        f"{what} while writing in stage {stage!r} ({human(_free(run_dir))} free on the disk holding "
        f"{run_dir}, which holds {human(dir_size(run_dir))}). Nothing already written is lost: {kept}, "
        "and an incomplete one is never resumed. Fix: free space (or raise the limit), or set a "
        "larger disk with hydra.run.dir; fewer checkpoints per run: training_loop.<sft|grpo>."
        f"save_total_limit. Then continue with: {resume}"
    )


def fault_of(exc: BaseException, stage: str, run_dir: Path) -> RunFault | None:
    """The fault a failed run reports for ``exc``: ``exc`` itself when it is one, a
    :class:`DiskFull` (what happened and the fix, in one message) when it is a full disk, else None."""
    import logging

    from rlvr.training_loop.resume import continue_command

    fault = exc if isinstance(exc, RunFault) else None
    if fault is None and isinstance(exc, Exception):
        fault = disk_fault(exc, stage, run_dir, continue_command(run_dir))
    if isinstance(fault, DiskFull):
        # The log file is on the full disk too: logging would print its own "--- Logging error ---"
        # traceback for every record it cannot write, burying the one message.
        logging.raiseExceptions = False
    return fault
