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
import stat
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rlvr.issues import ConfigIssue, ConfigValidationError
from rlvr.runtime import distributed
from rlvr.runtime.io import hard_link_problem

log = logging.getLogger(__name__)

LOCK_FILE = "run.lock"
# sysexits' EX_CANTCREAT: the run cannot have its output directory (another process owns it). Not 75
# (preempted, a checkpoint was saved): a scheduler that requeues on 75 would start it again at once.
BUSY_EXIT_CODE = 73


class RunDirBusy(Exception):
    """Another process owns the run directory; nothing was written."""

    exit_code = BUSY_EXIT_CODE


def printable(value: object, limit: int = 200) -> str:
    """``value`` as text a terminal shows as written: control and escape characters (ESC, CR, a line
    break, DEL, C1) are written as escapes (``\\x1b``), and the text is cut at ``limit`` characters.

    The lock file's record is read from a file anyone who could write the run directory may have
    written: printed raw, an escape sequence clears the console or draws a fake line."""
    text = str(value)[:limit]
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def _holder_text(holder: dict[str, Any]) -> str:
    host, pid, started = (printable(holder.get(key, "?")) for key in ("host", "pid", "started_at"))
    return f"host {host}, pid {pid}, started {started}"


_KINDS = ((stat.S_ISLNK, "a link"), (stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISSOCK, "a socket"))  # fmt: skip


def _kind_problem(mode: int) -> str | None:
    """Why a file of this mode cannot be the lock file (not a regular file), or None."""
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "a device or other special file")
    return f"{LOCK_FILE} is {kind}, not a plain file; a run never writes through one"


def _linked(path: Path, st: os.stat_result) -> str | None:
    """Why a hard-linked lock file is refused (it is rewritten in place), or None. Never read: its
    content may be another file's, which a refusal would otherwise print as the holder's record."""
    linked = hard_link_problem(path, st)
    return f"{LOCK_FILE} is a hard link; a run never writes through one" if linked else None


def _refusal(path: Path, problem: str) -> ConfigValidationError:
    fix = f"remove it (rm -r {path}; a run recreates it) or choose another hydra.run.dir"
    return ConfigValidationError([ConfigIssue("hydra.run.dir", str(path.parent), problem, fix)])


def _open_lock(path: Path) -> int:
    """The lock file opened for reading and writing, created if absent; :class:`ConfigValidationError`
    when ``path`` is anything but a plain file of its own (a link, a hard link, a folder, a FIFO, a device).

    Checked with ``lstat`` first (a clear message), then opened without following a link and without
    blocking (a FIFO planted after the check), then checked again on the open descriptor."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        found = None
    problem = found and (_kind_problem(found.st_mode) or _linked(path, found))
    if problem:
        raise _refusal(path, problem)
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o644)  # not truncated: a holder's record stays
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EWOULDBLOCK):
            raise
        raise _refusal(path, f"{LOCK_FILE} cannot be opened as a plain file ({exc.strerror})") from None
    opened = os.fstat(fd)
    problem = _kind_problem(opened.st_mode) or _linked(path, opened)  # before a byte is read or written
    if problem:
        os.close(fd)
        raise _refusal(path, problem)
    return fd


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
        fd = _open_lock(self.path)  # a plain file, never through a link (SECURITY.md "Where a run writes")
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
