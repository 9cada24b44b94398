"""The run directory at the end of a run: after a completed run keep only the checkpoints asked for and
report its size (:func:`finish_run_dir`); after a failure on a full disk, the one message that names
what happened, what is kept and the command that continues (:func:`fault_of`).

A checkpoint of the 135M default is 1.5 GiB (fp32 weights 0.5 GiB, Adam's two moments 1.0 GiB)
beside a 0.5 GiB final model, and a sweep multiplies that. Once a run has completed, ``resume=auto``
has nothing left to do (rlvr.training_loop.resume.finished_run) and the report reads only the
evaluation files, so by default no checkpoint is kept. ``keep_checkpoints`` (top level): ``none``
deletes ``checkpoints/``, ``last`` keeps the newest intact checkpoint (GRPO before SFT; to train on
from it with ``resume=<path>``), ``all`` keeps everything. Measured in docs/scaling.md (paragraph "Disk").

The detection of a full disk (every shape it reaches Python in) is the ground floor's
(rlvr.runtime.faults.is_disk_error); what the run had kept and how to continue it is known here.
"""

from __future__ import annotations

import errno
import logging
import resource
import shutil
from pathlib import Path

from rlvr.runtime.disk import dir_size, free_bytes, human
from rlvr.runtime.faults import DiskFull, RunFault, chain, is_disk_error
from rlvr.runtime.run_settings import KEEP_CHOICES
from rlvr.training_loop.checkpoints import latest_checkpoint
from rlvr.training_loop.resume import continue_command


def prune_checkpoints(run_dir: Path, keep: str) -> list[Path]:
    """Delete the checkpoints ``keep`` does not ask for; returns the deleted directories."""
    if keep not in KEEP_CHOICES:  # the gate refuses any other (RunSettings): a caller that skipped it
        raise ValueError(f"keep_checkpoints={keep!r}: must be one of {', '.join(KEEP_CHOICES)}")
    root = run_dir / "checkpoints"
    if keep == "all" or not root.is_dir():
        return []
    if keep == "none":
        removed = [p for p in root.glob("*/checkpoint-*") if p.is_dir() and not p.is_symlink()]
        shutil.rmtree(root)
        return removed
    found = latest_checkpoint(run_dir)
    kept = found[1] if found else None
    removed = []
    for phase_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        for ckpt in sorted(phase_dir.iterdir()):
            if ckpt != kept and ckpt.is_dir() and not ckpt.is_symlink():
                shutil.rmtree(ckpt)
                removed.append(ckpt)
    return removed


def finish_run_dir(run_dir: Path, keep: str) -> str:
    """Prune after a completed run; returns the run directory, its size and what was deleted (for
    the closing summary)."""
    removed = prune_checkpoints(run_dir, keep)
    note = f"; {len(removed)} checkpoint dir(s) deleted (keep_checkpoints={keep})" if removed else ""
    return f"{run_dir} ({human(dir_size(run_dir))}{note})"


def disk_fault(exc: BaseException, stage: str, run_dir: Path, resume: str) -> DiskFull | None:
    """A :class:`DiskFull` for ``exc`` if it is a full disk (or a file size limit), else None.
    ``resume`` is the command that continues the run."""
    if not is_disk_error(exc):
        return None
    found = latest_checkpoint(run_dir)
    kept = (
        f"the newest complete checkpoint is {found[1]} ({human(dir_size(found[1]))}; the next one "
        "needs about as much)"
        if found
        else "no checkpoint was complete yet"
    )
    errnos = {e.errno for e in chain(exc) if isinstance(e, OSError)}
    # torch's writer drops the errno: a finite file size limit without ENOSPC is taken to be the cause.
    size_limit, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    limited = size_limit != resource.RLIM_INFINITY and not errnos & {errno.ENOSPC, errno.EDQUOT}
    if errno.EFBIG in errnos or limited:
        what = f"a file hit the process's file size limit (ulimit -f: {human(size_limit)})"
    else:
        what = "the disk is full"
    return DiskFull(
        f"{what} while writing in stage {stage!r} ({human(free_bytes(run_dir))} free on the disk holding "
        f"{run_dir}, which holds {human(dir_size(run_dir))}). Nothing already written is lost: {kept}, "
        "and an incomplete one is never resumed. Fix: free space (or raise the limit), or set a "
        "larger disk with hydra.run.dir; fewer checkpoints per run: training_loop.<sft|grpo>."
        f"save_total_limit. Then continue with: {resume}"
    )


def fault_of(exc: BaseException, stage: str, run_dir: Path) -> RunFault | None:
    """The fault a failed run reports for ``exc``: ``exc`` itself when it is one, a
    :class:`DiskFull` (what happened and the fix, in one message) when it is a full disk, else None."""
    fault = exc if isinstance(exc, RunFault) else None
    if fault is None and isinstance(exc, Exception):
        fault = disk_fault(exc, stage, run_dir, continue_command(run_dir))
    if isinstance(fault, DiskFull):
        # The log file is on the full disk too: logging would print its own "--- Logging error ---"
        # traceback for every record it cannot write, burying the one message.
        logging.raiseExceptions = False
    return fault
