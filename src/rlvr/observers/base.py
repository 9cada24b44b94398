"""Observer base class (every hook a no-op) and the hub that fans events out safely.

Every observer writes somewhere (metrics.jsonl, the console, W&B, TensorBoard), so the hub hands
each one the event with secrets masked (rlvr.runtime.secrets.redact): no observer needs its own redaction.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from rlvr import events as ev
from rlvr.issues import ConfigIssue
from rlvr.runtime.secrets import redact

log = logging.getLogger(__name__)

_HOOKS = {
    ev.PipelineStart: "on_pipeline_start",
    ev.StageStart: "on_stage_start",
    ev.StageEnd: "on_stage_end",
    ev.TrainStep: "on_train_step",
    ev.EvalResult: "on_evaluation",
    ev.Completions: "on_completions",
    ev.PhaseEnd: "on_phase_end",
    ev.CheckpointSaved: "on_checkpoint",
    ev.RunWarning: "on_warning",
    ev.ErrorEvent: "on_error",
    ev.PipelineEnd: "on_pipeline_end",
}


class Observer:
    """Override the hooks you need; the rest do nothing."""

    def validate(self) -> list[ConfigIssue]:
        return []

    def on_pipeline_start(self, event: ev.PipelineStart) -> None: ...
    def on_stage_start(self, event: ev.StageStart) -> None: ...
    def on_stage_end(self, event: ev.StageEnd) -> None: ...
    def on_train_step(self, event: ev.TrainStep) -> None: ...
    def on_evaluation(self, event: ev.EvalResult) -> None: ...
    def on_completions(self, event: ev.Completions) -> None: ...
    def on_phase_end(self, event: ev.PhaseEnd) -> None: ...
    def on_checkpoint(self, event: ev.CheckpointSaved) -> None: ...
    def on_warning(self, event: ev.RunWarning) -> None: ...
    def on_error(self, event: ev.ErrorEvent) -> None: ...
    def on_pipeline_end(self, event: ev.PipelineEnd) -> None: ...

    def progress(self, label: str, total: int, unit: str = "item") -> ProgressHandle | None:
        """A progress handle with ``advance(n)`` and ``close()`` over ``total`` ``unit``; console
        observers draw it."""
        return None

    def close(self) -> None: ...


class ProgressHandle(Protocol):
    """What :meth:`Observer.progress` hands out: a bar advanced per finished item."""

    def advance(self, n: int = 1) -> None: ...
    def close(self) -> None: ...


class _Progress:
    def __init__(self, handles: list[ProgressHandle | None]):
        self.handles = [h for h in handles if h is not None]

    def advance(self, n: int = 1) -> None:
        for h in self.handles:
            h.advance(n)

    def close(self) -> None:
        for h in self.handles:
            h.close()


class ObserverHub:
    """Delivers each event, secrets masked, to every observer; an observer that raises is logged,
    never fatal."""

    def __init__(self, observers: dict[str, Observer]):
        self.observers = dict(observers)
        self.history: list[Any] = []
        self._closed = False
        self._disk_full: set[str] = set()  # observers told once that the disk is full

    def emit(self, event: Any) -> None:
        self.history.append(event)
        hook = _HOOKS[type(event)]
        masked = redact(event) if self.observers else event
        for name, observer in self.observers.items():
            try:
                getattr(observer, hook)(masked)
            except Exception as exc:
                self._failed(name, hook, exc)

    def _failed(self, name: str, hook: str, exc: Exception) -> None:
        from rlvr.runtime.faults import is_disk_error

        if not is_disk_error(exc):
            log.exception("observer %s failed in %s; continuing", name, hook)
        elif name not in self._disk_full:
            # A full disk fails every later write as well: one line per observer, not a traceback per
            # event (the run's own error says what to do, rlvr.runtime.faults).
            self._disk_full.add(name)
            log.warning("observer %s cannot write (%s): its records stop here", name, exc)

    def progress(self, label: str, total: int, unit: str = "item") -> _Progress:
        return _Progress([o.progress(label, total, unit) for o in self.observers.values()])

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for name, observer in self.observers.items():
            try:
                observer.close()
            except Exception:
                log.exception("observer %s failed to close", name)
