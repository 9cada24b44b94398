"""Typed events the orchestrator and training loop emit; observers receive them, never change control flow."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class PipelineStart:
    run_dir: Path
    config: dict[str, Any]  # resolved and secret-free


@dataclass(frozen=True)
class StageStart:
    stage: str


@dataclass(frozen=True)
class StageEnd:
    stage: str
    seconds: float
    status: str = "ok"  # ok | failed


@dataclass(frozen=True)
class TrainStep:
    phase: str  # "sft" | "grpo"
    step: int
    max_steps: int
    metrics: dict[str, float]  # slash-namespaced: train/reward/mean, train/loss, ...


@dataclass(frozen=True)
class EvalResult:
    label: str  # baseline | after_sft | in_training | final
    step: int
    accuracy: float
    ci_low: float
    ci_high: float
    n: int
    path: Path | None = None
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckpointSaved:
    phase: str
    step: int
    path: Path


@dataclass(frozen=True)
class Warning_:
    message: str
    step: int | None = None


@dataclass(frozen=True)
class ErrorEvent:
    stage: str
    error: BaseException


@dataclass(frozen=True)
class PipelineEnd:
    status: str  # COMPLETED | FAILED | INTERRUPTED
    seconds: float
    summary: dict[str, Any] = field(default_factory=dict)
