"""A deadline for reward terms whose code comes from a plugin package, so a hanging one cannot stall GRPO.

rlvr's own terms need none: they are plain arithmetic on the completion, or hand the answer to
the verifier sandbox (rlvr.verifier.sandbox), which has its deadline. A term from a plugin
(``RLVR_PLUGINS``: a class of its own, or ``rlvr.reward.FunctionReward`` around a function of its
own) may call a service, wait on a lock or loop forever. :class:`Deadline` runs each call of such a
term in a helper thread and waits ``reward.plugin_timeout_s`` for it; past that, the batch scores
0.0 for that term (as the sandbox scores a verifier timeout), a warning names the term, and the
metric ``reward/plugin_timeouts`` counts it. While a timed-out call is still running, the term is
not called again (its next batches also score 0.0 and count): one stuck thread per term at most.

Why a thread and not the sandbox's worker processes: those run one fixed job (a verifier on
``(task, answer, entry)``), while a term is any object holding the run's collaborators (the prompt,
the verifier pool with its sockets) and is called with TRL's own objects (``trainer_state``), which
do not cross a process boundary. The price: a thread cannot be killed, so a call stuck in C code
that holds the GIL still stalls the run, and a timed-out call keeps its thread until it returns.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


def plugin_module(term: Any) -> str | None:
    """The module outside rlvr whose code ``term`` runs (its class's, or for ``FunctionReward`` its
    function's), or None for rlvr's own terms."""
    targets = [type(term)]
    function = getattr(term, "function", None)
    while function is not None and hasattr(function, "func"):  # a functools.partial (Hydra's _partial_)
        function = function.func
    if function is not None:
        targets.append(function)
    for target in targets:
        module = getattr(target, "__module__", None) or ""
        if module != "rlvr" and not module.startswith("rlvr."):
            return module
    return None


class Deadline:
    """Call a plugin term with a per-call timeout (see the module docstring).

    Args:
        name: the term's name under ``reward.terms`` (for messages).
        timeout_s: seconds a call may take (``reward.plugin_timeout_s``).

    >>> import time
    >>> slow = Deadline("slow", timeout_s=0.05)
    >>> slow(lambda completions, **_: time.sleep(1) or [1.0], ["a", "b"]), slow.timeouts
    ([0.0, 0.0], 1)
    """

    def __init__(self, name: str, timeout_s: float):
        self.name, self.timeout_s = name, timeout_s
        self.timeouts = 0
        self._running: threading.Thread | None = None

    def __call__(self, function: Callable[..., Any], completions: list[Any], **kwargs: Any) -> Any:
        if self._running is not None and self._running.is_alive():
            return self._timed_out(completions, "its call of an earlier batch is still running")
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["value"] = function(completions, **kwargs)
            except BaseException as exc:  # handed to the caller's thread, raised there
                outcome["error"] = exc

        thread = threading.Thread(target=run, name=f"reward-{self.name}", daemon=True)
        thread.start()
        thread.join(self.timeout_s)
        if thread.is_alive():
            self._running = thread
            return self._timed_out(completions, f"no result within {self.timeout_s:g} s")
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    def _timed_out(self, completions: list[Any], why: str) -> list[float]:
        self.timeouts += 1
        log.warning(
            "reward.terms.%s: %s; its %d completions score 0.0 (timeout %d of this run). Fix: make the "
            "function return in time, or raise reward.plugin_timeout_s",
            self.name,
            why,
            len(completions),
            self.timeouts,
        )
        return [0.0] * len(completions)
