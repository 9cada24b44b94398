"""The orchestrator: build components from ``_target_`` configs, validate all, run the lifecycle."""

from rlvr.pipeline.orchestrator import PipelineOrchestrator, RunResult

__all__ = ["PipelineOrchestrator", "RunResult"]
