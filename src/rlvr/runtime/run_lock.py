"""One owner per run directory: an exclusive lock on ``<run_dir>/run.lock`` held for the run's life.

Two processes in one run directory (a requeued SLURM attempt beside a straggler, ``resume=auto``
typed twice) would both train, append to one ``metrics.jsonl`` and overwrite each other's
checkpoints. The first to take the lock owns the directory; a second is refused before it writes
anything, with the holder's host, pid and start time (:class:`RunDirBusy`).

The lock is ``flock`` on the file (the kernel releases it when the process ends, however it ends;
NFS clients emulate it with POSIX locks, which the server releases when the holder's lease ends). The
file records the holder (host, pid, start time) while the lock is held and is emptied on release,
so a record found by the next owner names a holder that ended without releasing it (killed, or its
machine lost): that owner takes over and says so. Under ``accelerate launch`` rank 0 takes the lock
for the launch as a whole; the other ranks neither take nor check it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rlvr.config.errors import ConfigIssue, ConfigValidationError
from rlvr.runtime import distributed

log = logging.getLogger(__name__)

LOCK_FILE = "run.lock"
# sysexits' EX_CANTCREAT: the run cannot have its output directory (another process owns it). Not 75
# (preempted, a checkpoint was saved): a scheduler that requeues on 75 would start it again at once.
BUSY_EXIT_CODE = 73


class RunDirBusy(Exception):
    """Another process owns the run directory; nothing was written."""

    exit_code = BUSY_EXIT_CODE


def _holder_text(holder: dict[str, Any]) -> str:
    return f"host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, started {holder.get('started_at', '?')}"


def _read(fd: int) -> dict[str, Any]:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 4096)
    try:
        holder = json.loads(raw) if raw.strip() else {}
    except ValueError:
        return {"host": "?", "pid": "?", "started_at": f"(unreadable record {raw[:80]!r})"}
    return holder if isinstance(holder, dict) else {}


def _alive_here(holder: dict[str, Any]) -> bool:
    """Whether the recorded holder is a running process on this machine (other than this one)."""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return False
    if holder["pid"] == os.getpid():
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunDirLock:
    """``with RunDirLock(run_dir):`` owns ``run_dir`` for the block, or raises :class:`RunDirBusy`.

    ``previous`` is the record of a holder that ended without releasing the lock (None if there was
    none); the caller reports it.
    """

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK_FILE
        self.previous: dict[str, Any] | None = None
        self._fd: int | None = None

    def __enter__(self) -> RunDirLock:
        return self.acquire()

    def acquire(self) -> RunDirLock:
        """Take the directory, or raise :class:`RunDirBusy` (only rank 0 of a launch takes it)."""
        if not distributed.is_main():
            return self  # rank 0 owns the directory for the whole launch
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Never through a link (SECURITY.md "Where a run writes"); not truncated: a holder's record stays.
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            issue = ConfigIssue(
                "hydra.run.dir", str(self.path.parent), f"{LOCK_FILE} is a link; a run never writes through one",
                f"remove {self.path}",
            )  # fmt: skip
            raise ConfigValidationError([issue]) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read(fd)
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise self._busy(holder) from None
            # A file system without flock (some Lustre and FUSE mounts): the record is all there is.
            if _alive_here(holder):
                raise self._busy(holder) from None
            log.warning(
                "cannot lock %s (%s): a second process in this run directory is not prevented", self.path, exc
            )
            return self
        self._fd = fd
        self.previous = _read(fd) or None
        record = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        os.fsync(fd)
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        """Empty the record and release the lock (idempotent): the directory has no owner."""
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)
        finally:
            os.close(self._fd)  # closing the last descriptor releases the flock
            self._fd = None

    def taken_over(self) -> str | None:
        """A line naming the earlier holder that ended without releasing the directory, if any."""
        if not self.previous:
            return None
        return (
            f"{self.path.parent}: taking over from a process that ended without releasing it "
            f"({_holder_text(self.previous)}; killed, or its machine was lost)"
        )

    def _busy(self, holder: dict[str, Any]) -> RunDirBusy:
        return RunDirBusy(
            f"run directory {self.path.parent} is in use by another process ({_holder_text(holder)}); "
            "nothing was written. Wait for it to end (or stop it), then run this command again; "
            f"to run beside it, choose another hydra.run.dir. If that process is gone and its host "
            f"cannot release the lock (a lost node on a network file system), delete {self.path}."
        )
