"""Typed events the orchestrator and training loop emit; observers receive them, never change control flow."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.evaluation.metrics import PairedChange
from rlvr.evaluation.results import Evaluation


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
    """One held-out evaluation: the stage label and step, the Evaluation itself, and its file."""

    label: str  # an rlvr.stages.Stage
    step: int
    evaluation: Evaluation
    path: Path | None = None

    @property
    def accuracy(self) -> float:
        return self.evaluation.summary.accuracy

    @property
    def ci_low(self) -> float:
        return self.evaluation.summary.ci_low

    @property
    def ci_high(self) -> float:
        return self.evaluation.summary.ci_high

    @property
    def n(self) -> int:
        return self.evaluation.summary.n

    def record(self) -> dict[str, Any]:
        """The JSON-ready summary line (metrics.jsonl, report, pipeline summary): no per-sample data."""
        return {
            "label": self.label,
            "step": self.step,
            **self.evaluation.summary.to_dict(),
            **(
                {"groups": {k: v.to_dict() for k, v in groups.items()}}
                if (groups := self.evaluation.groups())
                else {}
            ),
            "samples_per_second": round(self.evaluation.samples_per_second, 3),
            "path": str(self.path) if self.path else None,
        }


@dataclass(frozen=True)
class PhaseEnd:
    """A training phase stopped: finished, or stopped early by a preemption signal (``steps`` <
    ``max_steps``). ``steps`` counts the phase's optimizer steps since it began, across a resume;
    ``seconds`` is this process's time in it. The run's attempt record keeps it, so a resumed run's
    report still knows a phase that an earlier attempt ran."""

    phase: str  # "sft" | "grpo"
    steps: int
    max_steps: int
    seconds: float


@dataclass(frozen=True)
class CheckpointSaved:
    phase: str
    step: int
    path: Path


@dataclass(frozen=True)
class RunWarning:
    message: str
    step: int | None = None


@dataclass(frozen=True)
class ErrorEvent:
    stage: str
    error: BaseException


@dataclass(frozen=True)
class StageChange:
    """What one stage changed: accuracy before and after, paired on the same questions."""

    stage: str  # SFT | GRPO | whole run
    before: str  # evaluation labels (rlvr.stages.Stage)
    after: str
    change: PairedChange

    @property
    def text(self) -> str:
        return self.change.text()

    def record(self) -> dict[str, Any]:
        """The JSON-ready form (report.json's ``paired_changes``)."""
        return {
            "stage": self.stage,
            "from": self.before,
            "to": self.after,
            **self.change.to_dict(),
            "text": self.text,
        }


@dataclass
class RunResult:
    """What a run produced: its status, its evaluations in run order (earlier attempts' included),
    the paired change of each stage, what to read into those changes (``notes``) and the files
    worth opening (name -> path)."""

    status: str  # COMPLETED | FAILED | INTERRUPTED | PREEMPTED
    run_dir: Path
    evaluations: list[EvalResult] = field(default_factory=list)
    changes: list[StageChange] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # per phase: tokens/s and MFU on the device (rlvr.training_loop.throughput), once reported
    throughput: dict[str, dict] = field(default_factory=dict)


@dataclass(frozen=True)
class PipelineEnd:
    status: str  # COMPLETED | FAILED | INTERRUPTED | PREEMPTED
    seconds: float
    result: RunResult | None = None  # None when the run ended before it had one
