"""Score model answers with reasoning-gym's verifiers without letting an answer hang, exhaust or crash the trainer.

Untrusted model answers go through three layers before and around reasoning-gym's own
``score_answer``:

1. a type and length check (non-string answers and overlong answers are refused),
2. :mod:`rlvr.verifier.screen`, which refuses answers that could execute code in the nine
   verifiers that ``eval`` the answer,
3. persistent worker processes, each with an ``RLIMIT_AS`` address-space limit, whose
   per-item deadline is enforced by the parent: a worker that overruns (a C-level bignum
   such as ``9**9**9**9`` ignores signals) or dies is killed and replaced, the item gets
   ``failure_reward`` and the rest of the batch carries on.

Entries (question, gold answer, metadata) are trusted: they come from reasoning-gym in this
process. Some verifiers ``eval`` entry fields, so entries must never come from the model.

Example:
    >>> import reasoning_gym
    >>> entry = reasoning_gym.create_dataset("leg_counting", size=1, seed=1)[0]
    >>> limits = dict(timeout_s=5.0, memory_limit_mb=1024, max_answer_chars=2048, failure_reward=0.0)
    >>> with VerifierPool(num_workers=0, **limits) as pool:
    ...     [s.status for s in pool.score([ScoreRequest("leg_counting", entry["answer"], entry),
    ...                                     ScoreRequest("leg_counting", None, entry)])]
    ['ok', 'no_answer']
"""

from __future__ import annotations

import collections
import contextlib
import json
import math
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Protocol

from rlvr.verifier import worker as worker_module
from rlvr.verifier.entries import from_json_safe
from rlvr.verifier.screen import screen_answer

COUNTER_NAMES = ("verifier_errors", "verifier_timeouts", "verifier_rejected", "verifier_crashes", "scored")
_STATUS_COUNTER = {
    "error": "verifier_errors",
    "timeout": "verifier_timeouts",
    "rejected": "verifier_rejected",
    "crashed": "verifier_crashes",
}
# Chunks amortise the pipe round-trip; capped so a killed worker requeues little work and
# both workers get a share of small batches.
_MAX_CHUNK = 64
_STARTUP_TIMEOUT_S = 120.0
_MAX_STARTUP_FAILURES = 3

# The worker is loaded from its file with the parent's sys.path rather than by
# ``-m rlvr.verifier.worker``: that would import rlvr/__init__.py (which may grow heavy
# imports) and, unlike multiprocessing's spawn, does not re-run the parent's __main__
# (a training script importing torch). Same interpreter, same import resolution.
_BOOTSTRAP = (
    "import importlib.util, json, sys\n"
    "sys.path[:] = json.loads(sys.argv[5])\n"
    "spec = importlib.util.spec_from_file_location('rlvr_verifier_worker', sys.argv[1])\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(module)\n"
    "module.main(sys.argv[2:5])\n"
)


@dataclass(frozen=True)
class ScoreRequest:
    """One answer to score.

    ``task`` names the reasoning-gym dataset; when ``entry["metadata"]["source_dataset"]``
    is present it wins (it is what reasoning-gym itself dispatches on, e.g. for composite
    datasets), and the same name selects the screen.
    """

    task: str
    answer: str | None  # extracted answer; None = the model gave none
    entry: dict  # reasoning-gym entry (question, answer, metadata), raw or in its JSON form (rlvr.verifier.entries)


@dataclass(frozen=True)
class Score:
    """Reward for one request.

    status: "ok" (verifier's value), "no_answer", "rejected" (refused before scoring),
    "error" (verifier raised), "timeout" or "crashed" (worker killed or died). Every status
    but "ok" carries the pool's ``failure_reward``; ``detail`` says why.
    """

    value: float
    status: str
    detail: str = ""


class Scorer(Protocol):
    """What rewards and evaluation need from a verifier: :class:`VerifierPool` is the one they get."""

    def score(self, requests: Sequence[ScoreRequest]) -> list[Score]: ...


def verifier_task(request: ScoreRequest) -> str:
    """The reasoning-gym dataset whose verifier (and screen) applies to ``request``."""
    metadata = request.entry.get("metadata") if isinstance(request.entry, dict) else None
    source = metadata.get("source_dataset") if isinstance(metadata, dict) else None
    return source if isinstance(source, str) else request.task


class _Worker:
    """One verifier process and the chunk it is working through."""

    def __init__(self, memory_limit_mb: int) -> None:
        parent_end, child_end = socket.socketpair()
        with child_end:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    _BOOTSTRAP,
                    worker_module.__file__,
                    str(child_end.fileno()),
                    str(memory_limit_mb),
                    str(os.getpid()),
                    json.dumps(sys.path),
                ],
                pass_fds=(child_end.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # some verifiers print; stderr stays for tracebacks
            )
        self.conn = Connection(parent_end.detach())
        self.started = time.monotonic()
        self.ready = False
        self.chunk: collections.deque[tuple[int, str, str, dict]] = collections.deque()
        self.item_started = 0.0

    def stop(self) -> None:
        self.conn.close()
        if self.process.poll() is None:
            self.process.kill()
        # A process stuck in uninterruptible sleep ignores SIGKILL for a while; don't hang on it.
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)


def _stop_workers(workers: list[_Worker], owner_pid: int) -> None:
    # A forked child (e.g. a DataLoader worker) inherits the pool; its exit must not kill
    # the parent's workers.
    if os.getpid() != owner_pid:
        return
    for w in workers:
        w.stop()
    workers.clear()


class VerifierPool:
    """Score :class:`ScoreRequest` batches in persistent sandboxed worker processes.

    Args:
        num_workers: worker processes. 0 scores in this process: screen, type and length
            checks still apply, but there is NO timeout, memory limit or crash isolation;
            meant for unit tests and tiny runs.
        timeout_s: wall-clock budget per item, measured by the parent from the moment the
            worker starts the item.
        memory_limit_mb: address space a worker may add to what it holds after start-up
            (set as ``RLIMIT_AS``); an allocation past it raises MemoryError in the verifier.
        max_answer_chars: answers longer than this are refused (status "rejected"), not cut:
            a truncated answer is a different answer and could still earn partial credit.
            Raise it for tasks whose gold answers are longer (e.g. large spiral matrices).
        failure_reward: value of every Score whose status is not "ok".

    Non-string answers: int and float are converted with ``str()`` (a verifier expects
    text); any other type (bool, list, dict, bytes...) is refused.

    Example:
        >>> import reasoning_gym
        >>> entry = reasoning_gym.create_dataset("countdown", size=1, seed=1)[0]
        >>> limits = dict(memory_limit_mb=1024, max_answer_chars=2048, failure_reward=0.0)
        >>> with VerifierPool(num_workers=1, timeout_s=5.0, **limits) as pool:
        ...     scores = pool.score([ScoreRequest("countdown", entry["answer"], entry),
        ...                          ScoreRequest("countdown", "__import__('os')", entry)])
        >>> [(s.value, s.status) for s in scores]
        [(1.0, 'ok'), (0.0, 'rejected')]
    """

    def __init__(
        self,
        *,
        num_workers: int,
        timeout_s: float,
        memory_limit_mb: int,
        max_answer_chars: int,
        failure_reward: float,
    ) -> None:
        from rlvr.issues import ConfigIssue, ConfigValidationError

        checks = [
            ("num_workers", num_workers, num_workers >= 0, "must be >= 0", "use 0 to score in-process"),
            ("timeout_s", timeout_s, timeout_s > 0, "must be > 0", "set e.g. 5.0"),
            ("memory_limit_mb", memory_limit_mb, memory_limit_mb > 0, "must be > 0", "set e.g. 1024"),
            ("max_answer_chars", max_answer_chars, max_answer_chars > 0, "must be > 0", "set e.g. 2048"),
        ]
        errors = [ConfigIssue(f"verifier.{k}", v, rule, fix) for k, v, ok, rule, fix in checks if not ok]
        if errors:
            raise ConfigValidationError(errors)
        self.num_workers = num_workers
        self.timeout_s = timeout_s
        self.memory_limit_mb = memory_limit_mb
        self.max_answer_chars = max_answer_chars
        self.failure_reward = failure_reward
        self._counters = dict.fromkeys(COUNTER_NAMES, 0)
        self._lock = threading.Lock()
        self._closed = False
        self._startup_failures = 0
        self._workers: list[_Worker] = []
        self._owner_pid = os.getpid()
        # Runs on close(), on garbage collection and at interpreter exit, without keeping
        # the pool alive the way an atexit-registered bound method would.
        self._finalizer = weakref.finalize(self, _stop_workers, self._workers, self._owner_pid)
        for _ in range(num_workers):
            self._workers.append(_Worker(memory_limit_mb))

    @property
    def counters(self) -> dict[str, int]:
        """Cumulative counts: scored (every Score returned) and one per failure status."""
        return dict(self._counters)

    @property
    def worker_pids(self) -> list[int]:
        """PIDs of the current worker processes (they change when workers are replaced)."""
        return [w.process.pid for w in self._workers]

    def score(self, requests: Sequence[ScoreRequest]) -> list[Score]:
        """Score every request; the i-th Score answers the i-th request."""
        with self._lock:
            if self._closed:
                raise RuntimeError("VerifierPool.score() called after close()")
            if os.getpid() != self._owner_pid:
                raise RuntimeError("VerifierPool.score() called in a forked child; create a pool per process")
            results: list[Score | None] = [None] * len(requests)
            todo: collections.deque[tuple[int, str, str, dict]] = collections.deque()
            for index, request in enumerate(requests):
                prepared = self._prepare(request)
                if isinstance(prepared, Score):
                    results[index] = prepared
                else:
                    todo.append((index, *prepared))
            if self.num_workers == 0:
                for index, task, answer, entry in todo:
                    results[index] = self._result(*worker_module.call_verifier(task, answer, entry))
            elif todo:
                try:
                    self._dispatch(todo, results)
                except BaseException:
                    # e.g. Ctrl-C: results still in flight belong to this batch, not the next.
                    for slot, w in enumerate(self._workers):
                        if w.chunk:
                            w.chunk.clear()
                            self._replace(slot, todo, results, None, "")
                    raise
            for result in results:
                assert result is not None
                self._counters["scored"] += 1
                if result.status in _STATUS_COUNTER:
                    self._counters[_STATUS_COUNTER[result.status]] += 1
            return results  # type: ignore[return-value]

    def close(self) -> None:
        """Kill the worker processes; waits for a score() running in another thread. Idempotent."""
        with self._lock:
            self._closed = True
            self._finalizer()

    def __enter__(self) -> VerifierPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _result(self, value: float, status: str, detail: str = "") -> Score:
        return Score(value if status == "ok" else self.failure_reward, status, detail)

    def _prepare(self, request: ScoreRequest) -> Score | tuple[str, str, dict]:
        """Refuse what must not reach a verifier; otherwise ``(task, answer, entry)``."""
        answer = request.answer
        if answer is None:
            return self._result(0.0, "no_answer")
        if not isinstance(request.entry, dict):
            return self._result(0.0, "error", f"entry must be a dict, got {type(request.entry).__name__}")
        if isinstance(answer, (int, float)) and not isinstance(answer, bool):
            answer = str(answer)
        if not isinstance(answer, str):
            return self._result(0.0, "rejected", f"answer of type {type(answer).__name__} is not a string")
        if len(answer) > self.max_answer_chars:
            return self._result(
                0.0,
                "rejected",
                f"answer has {len(answer)} characters, max_answer_chars is {self.max_answer_chars}",
            )
        task = verifier_task(request)
        refusal = screen_answer(task, answer)
        if refusal is not None:
            return self._result(0.0, "rejected", f"screen: {refusal}")
        # The generator's own objects (tuples, Fractions, sets ...), which some verifiers compare
        # with; they pickle to the worker as they are, so the worker imports nothing of rlvr.
        return task, answer, from_json_safe(request.entry)

    def _dispatch(self, todo: collections.deque, results: list[Score | None]) -> None:
        chunk_size = max(1, min(_MAX_CHUNK, math.ceil(len(todo) / (2 * len(self._workers)))))
        while todo or any(w.chunk for w in self._workers):
            for slot, w in enumerate(self._workers):
                if w.ready and not w.chunk and todo:
                    self._send(
                        slot, [todo.popleft() for _ in range(min(chunk_size, len(todo)))], todo, results
                    )
            deadlines = [w.item_started + self.timeout_s for w in self._workers if w.chunk]
            deadlines += [w.started + _STARTUP_TIMEOUT_S for w in self._workers if not w.ready]
            timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            readable = wait([w.conn for w in self._workers], timeout=timeout)
            for slot, w in enumerate(self._workers):
                if w.conn in readable:
                    self._drain(slot, todo, results)
            now = time.monotonic()
            for slot, w in enumerate(self._workers):
                if w.chunk and now >= w.item_started + self.timeout_s:
                    self._replace(slot, todo, results, "timeout", f"no result within {self.timeout_s:g} s")
                elif not w.ready and now >= w.started + _STARTUP_TIMEOUT_S:
                    raise RuntimeError(
                        f"verifier worker did not start within {_STARTUP_TIMEOUT_S:g} s; "
                        "check that `python -c 'import reasoning_gym'` works in this environment"
                    )

    def _send(self, slot: int, items: list, todo: collections.deque, results: list[Score | None]) -> None:
        w = self._workers[slot]
        try:
            w.conn.send(items)
        except (pickle.PicklingError, TypeError, AttributeError):
            # Find the unpicklable entries, fail only those, retry the rest next round.
            for item in reversed(items):
                try:
                    pickle.dumps(item)
                    todo.appendleft(item)
                except Exception as error:
                    results[item[0]] = self._result(0.0, "error", f"entry cannot be pickled: {error}")
            return
        except OSError:  # died while idle (e.g. killed from outside): no item to blame
            todo.extendleft(reversed(items))
            self._replace(slot, todo, results, None, "")
            return
        w.chunk.extend(items)
        w.item_started = time.monotonic()

    def _drain(self, slot: int, todo: collections.deque, results: list[Score | None]) -> None:
        w = self._workers[slot]
        try:
            while w.conn.poll():
                message = w.conn.recv()
                if message[0] == "ready":
                    w.ready = True
                    self._startup_failures = 0
                elif message[0] == "chunk_error":
                    while w.chunk:
                        results[w.chunk.popleft()[0]] = self._result(0.0, "error", message[1])
                else:
                    index, value, status, detail = message
                    if w.chunk and w.chunk[0][0] == index:
                        w.chunk.popleft()
                        results[index] = self._result(value, status, detail)
                        w.item_started = time.monotonic()
        except (EOFError, OSError):
            code = w.process.wait()
            if not w.ready:
                self._startup_failures += 1
                if self._startup_failures >= _MAX_STARTUP_FAILURES:
                    raise RuntimeError(
                        f"verifier worker exited with code {code} during start-up "
                        f"{self._startup_failures} times in a row; see its traceback above"
                    ) from None
            self._replace(slot, todo, results, "crashed", f"worker exited with code {code}")

    def _replace(
        self, slot: int, todo: collections.deque, results: list[Score | None], status: str | None, detail: str
    ) -> None:
        """Stop the worker in ``slot``, fail its current item with ``status``, requeue the rest."""
        w = self._workers[slot]
        w.stop()
        if w.chunk:
            current = w.chunk.popleft()
            if status is not None:
                results[current[0]] = self._result(0.0, status, detail)
            else:
                w.chunk.appendleft(current)
            todo.extendleft(reversed(w.chunk))
        self._workers[slot] = _Worker(self.memory_limit_mb)
