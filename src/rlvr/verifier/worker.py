"""Call one verifier (reasoning-gym's, or a checker for free-form data) safely, and the verifier worker process that does so in a loop.

:func:`call_verifier` is the single place a reasoning-gym ``score_answer`` runs, both in a
worker and in :class:`rlvr.verifier.sandbox.VerifierPool`'s in-process mode. Run as
``python -m rlvr.verifier.worker FD MEMORY_LIMIT_MB PARENT_PID``, this module serves scoring
chunks over the connection on file descriptor FD until the parent closes it or dies.

Wire protocol (pickled by :class:`multiprocessing.connection.Connection`):
worker -> parent ``("ready", pid)`` once, then per item ``(index, value, status, detail)``,
or ``("chunk_error", detail)`` if a chunk could not be read; parent -> worker a list of
``(index, task, answer, entry)`` per chunk.
"""

from __future__ import annotations

import functools
import math
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

# Two workers on a two-core machine: numeric libraries must not each start a thread pool.
_SINGLE_THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@functools.cache
def _score_fn(task: str) -> Callable[..., Any]:
    import reasoning_gym

    # get_score_answer_fn builds a dataset object per call; some load word lists or boards.
    return reasoning_gym.get_score_answer_fn(task)


def call_verifier(task: str, answer: str, entry: dict) -> tuple[float, str, str]:
    """Score one answer with reasoning-gym's own verifier, or with the checker the entry names
    (``entry["checker"]``, see rlvr.verifier.checkers): ``(value, status, detail)``.

    status is "ok", or "error" when the verifier raised or returned something that is not a
    finite number. Screening and length checks happen before this; see the sandbox module.
    """
    try:
        if "checker" in entry:  # a free-form data source names its checker (rlvr.verifier.checkers)
            from rlvr.verifier.checkers import build

            value = float(build(entry["checker"])(answer, entry))
        else:
            value = float(_score_fn(task)(answer=answer, entry=entry))
    except BaseException as error:  # SystemExit from eval'd code must not end a worker
        if isinstance(error, KeyboardInterrupt):
            raise
        return 0.0, "error", f"{type(error).__name__}: {str(error)[:200]}"
    if not math.isfinite(value):
        return 0.0, "error", f"verifier returned {value}"
    return value, "ok", ""


def _die_with_parent(parent_pid: int) -> None:
    """Ask Linux to SIGKILL this worker when its parent dies.

    Needed because a worker stuck in a C-level bignum never reads the closed pipe and holds
    the GIL, so no Python-level watchdog could run. Caveat: the signal fires when the
    parent *thread* that started the worker exits.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def _address_space_kb() -> int:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _limit_memory(memory_limit_mb: int) -> None:
    """Cap the address space at what the worker holds after imports plus ``memory_limit_mb``.

    Relative, because the baseline depends on what the interpreter loaded (hundreds of MB
    of mapped libraries), not on what scoring needs.
    """
    import resource

    limit = _address_space_kb() * 1024 + memory_limit_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def main(argv: list[str]) -> None:
    from multiprocessing.connection import Connection

    fd, memory_limit_mb, parent_pid = (int(arg) for arg in argv)
    # Ctrl-C reaches the whole process group; the parent decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(parent_pid)
    for key, value in _SINGLE_THREAD_ENV.items():
        os.environ[key] = value
    conn = Connection(fd)

    import reasoning_gym  # noqa: F401 - pay the import (~1 s) before reporting ready

    _limit_memory(memory_limit_mb)
    try:
        conn.send(("ready", os.getpid()))
        while True:
            try:
                chunk = conn.recv()
            except (EOFError, OSError):
                raise
            except Exception as error:  # a chunk that cannot be unpickled, e.g. MemoryError
                conn.send(("chunk_error", f"{type(error).__name__}: {str(error)[:200]}"))
                continue
            for index, task, answer, entry in chunk:
                conn.send((index, *call_verifier(task, answer, entry)))
    except (EOFError, OSError):  # the parent closed the connection (close(), exit or death)
        return


if __name__ == "__main__":
    main(sys.argv[1:])
