"""The training recipe (``orchestrator``): one :class:`~rlvr.pipeline.orchestrator.Run` holds a run's
state and runs its lifecycle (setup, train, cleanup) over the components the config gate built and
passed; ``wiring``: what each component receives at build time, and the one builder."""

from __future__ import annotations

from typing import Any

__all__ = ["Run", "RunResult"]


def __getattr__(name: str) -> Any:
    # Lazy: run_pipeline.py imports rlvr.config.hydra_check to refuse a config before Hydra starts, and
    # that check must not wait ~6 s for the orchestrator's torch/transformers imports.
    if name in __all__:
        from rlvr.pipeline import orchestrator

        return getattr(orchestrator, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
