"""Typed events the orchestrator and training loop emit; observers receive them, never change control flow."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr.evaluation.metrics import PairedChange
from rlvr.evaluation.results import Evaluation

# How a run ends (RunResult.status, PipelineEnd.status): the two a run that ended normally has, whatever
# it learned (resume has nothing left to do, a sweeper reads it as done; rlvr.records.learning says
# which), then FAILED, INTERRUPTED and PREEMPTED.
COMPLETED, COMPLETED_WITH_WARNINGS = "COMPLETED", "COMPLETED_WITH_WARNINGS"
COMPLETED_STATUSES = frozenset({COMPLETED, COMPLETED_WITH_WARNINGS})


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

    label: str  # an rlvr.stages.EvalLabel
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


def as_text(value: Any) -> str:
    """A prompt or completion as text: a string as it is; a conversation (TRL's conversational
    format, a list of ``{"role", "content"}`` messages) as its messages, one ``role: content`` each."""
    if isinstance(value, str):
        return value
    return "\n".join(f"{m['role']}: {m['content']}" for m in value or [])


@dataclass(frozen=True)
class CompletionRow:
    """One completion as a completions table shows it (W&B ``completions/...``, completions.jsonl)."""

    prompt: str
    completion: str
    task: str | None
    reference: str | None  # the gold answer, where the data has one
    answer: str | None  # the answer extracted from the completion, where it was scored by the verifier
    rewards: dict[str, float | None]  # each reward term's own (unweighted) value; {} for evaluations
    score: float  # GRPO: the weighted total reward; an evaluation: the verifier's score
    correct: bool | None  # the verifier's verdict at its full score; None where no term ran it


@dataclass(frozen=True)
class Completions:
    """Rows sampled (by seed) from one GRPO step's rollouts or from one evaluation by the component that
    scored them (the reward set, the evaluator), for the trackers' completions tables."""

    source: str  # "grpo" | "eval/<label>"
    step: int
    rows: list[CompletionRow]

    @staticmethod
    def pick(count: int, n: int, seed: int, key: str) -> list[int]:
        """``n`` of ``range(count)`` (all when fewer), in order, the same for the same seed and key.

        >>> Completions.pick(10, 3, 42, "grpo/1") == Completions.pick(10, 3, 42, "grpo/1")
        True
        >>> Completions.pick(2, 3, 42, "x")
        [0, 1]
        """
        import random

        return sorted(random.Random(f"{seed}/{key}").sample(range(count), min(n, count)))


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
    before: str  # evaluation labels (rlvr.stages.EvalLabel)
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
    worth opening (name -> path). The payload of :class:`PipelineEnd` and the training app's return
    value; the run fills it as it goes (rlvr.pipeline.orchestrator.Run.result)."""

    status: str  # COMPLETED | COMPLETED_WITH_WARNINGS | FAILED | INTERRUPTED | PREEMPTED
    run_dir: Path
    evaluations: list[EvalResult] = field(default_factory=list)
    changes: list[StageChange] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # what the run did not learn (rlvr.records.learning): among the notes, and the end status says so
    warnings: list[str] = field(default_factory=list)
    # per phase: tokens/s and MFU on the device (rlvr.training_loop.throughput), once reported
    throughput: dict[str, dict] = field(default_factory=dict)
    # budget_minutes: each part of the run planned and as it went (rlvr.training_loop.budget.planned_vs_actual)
    budget: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PipelineEnd:
    status: str  # COMPLETED | COMPLETED_WITH_WARNINGS | FAILED | INTERRUPTED | PREEMPTED
    seconds: float
    result: RunResult | None = None  # None when the run ended before it had one
