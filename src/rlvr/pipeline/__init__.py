"""The orchestrator: build components from ``_target_`` configs, validate all, run the lifecycle."""

from __future__ import annotations

from typing import Any

__all__ = ["PipelineOrchestrator", "RunResult"]


def __getattr__(name: str) -> Any:
    # Lazy: run_pipeline.py imports rlvr.config.hydra_check to refuse a config before Hydra starts, and
    # that check must not wait ~6 s for the orchestrator's torch/transformers imports.
    if name in __all__:
        from rlvr.pipeline import orchestrator

        return getattr(orchestrator, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
