"""The one evaluation result type: per-sample records plus the summary computed from them.

Pipeline evaluations (baseline, in-training, final), their events, the run report
and every benchmark cell hold an :class:`Evaluation`. A run on several tasks, or with
extra evaluation sets (rlvr.data.base), keeps one Evaluation: its headline summary covers
the training tasks' held-out questions, and :meth:`Evaluation.groups` breaks it down per
task and per extra set, each with its own accuracy and confidence interval. Its summary is always a
function of its samples: :meth:`Evaluation.from_dict` recomputes it from the
stored scores and refuses a file whose stored summary disagrees, so an edited
accuracy in a results file is caught instead of reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rlvr.evaluation.metrics import SUCCESS_THRESHOLD, AccuracySummary, PairedChange, paired_change, summarize


@dataclass
class SampleRecord:
    """Everything generated and scored for one question (k samples)."""

    index: int
    """Position of the question in the evaluated split."""
    task: str
    question: str
    reference: str | None  # None: the task has no reference answer (scored by its checker alone)
    """Gold answer as text, kept so failures can be read without the dataset."""
    completions: list[str]
    """Raw model outputs, one per sample, cut at the prompt's stop string."""
    answers: list[str | None]
    """Extracted answers, one per sample; None when the output had no parsable answer."""
    scores: list[float]
    """Raw verifier scores in [0, 1], one per sample (partial credit included)."""
    status: list[str] = field(default_factory=list)
    """Verifier status per sample (ok, no_answer, timeout, error, rejected, ...)."""
    eval_set: str | None = None
    """Name of the extra evaluation set this question belongs to; None = the training tasks'
    own held-out split (the headline accuracy)."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SampleRecord:
        try:
            return cls(**data)
        except TypeError as exc:
            raise ValueError(f"malformed sample record: {exc}") from exc


def summarize_samples(samples: Sequence[SampleRecord], ks: Sequence[int]) -> AccuracySummary:
    """Accuracy, Wilson CI, pass@k and majority vote of ``samples``.

    A sample counts as correct only at the verifier's full score: some reasoning-gym verifiers
    give partial credit for near misses, which helps as a reward but would inflate an accuracy.
    """
    exact = [[1.0 if s >= SUCCESS_THRESHOLD else 0.0 for s in r.scores] for r in samples]
    multi = any(len(r.scores) > 1 for r in samples)
    return summarize(exact, [r.answers for r in samples] if multi else None, ks)


@dataclass
class Evaluation:
    """One model on one question set: the records, the summary derived from them, and speed."""

    samples: list[SampleRecord]
    ks: list[int]
    seconds: float
    """Wall time of generation and scoring."""
    samples_per_second: float
    """Generated samples per second of generation."""
    summary: AccuracySummary = field(init=False)

    def __post_init__(self) -> None:
        self.samples = [SampleRecord.from_dict(s) if isinstance(s, dict) else s for s in self.samples]
        self.ks = [int(k) for k in self.ks]
        self.summary = summarize_samples(self.headline_samples(), self.ks)

    def headline_samples(self) -> list[SampleRecord]:
        """The training tasks' held-out questions (all samples when every one is in an extra set)."""
        own = [s for s in self.samples if s.eval_set is None]
        return own or self.samples

    def groups(self) -> dict[str, AccuracySummary]:
        """Per-task summaries of the headline questions (when they span several tasks), then one
        summary per extra evaluation set, keyed ``task/<name>`` and ``set/<name>``."""
        by_task: dict[str, list[SampleRecord]] = {}
        for s in self.samples:
            if s.eval_set is None:
                by_task.setdefault(s.task, []).append(s)
        by_set: dict[str, list[SampleRecord]] = {}
        for s in self.samples:
            if s.eval_set is not None:
                by_set.setdefault(s.eval_set, []).append(s)
        out = (
            {f"task/{t}": summarize_samples(v, self.ks) for t, v in by_task.items()}
            if len(by_task) > 1
            else {}
        )
        out.update({f"set/{name}": summarize_samples(v, self.ks) for name, v in by_set.items()})
        return out

    @property
    def accuracy(self) -> float:
        return self.summary.accuracy

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary.to_dict(),
            # Derived like the summary (recomputed on load); kept so a reader sees each task and set.
            **({"groups": {k: v.to_dict() for k, v in groups.items()}} if (groups := self.groups()) else {}),
            "ks": self.ks,
            "seconds": round(self.seconds, 3),
            "samples_per_second": round(self.samples_per_second, 3),
            "samples": [asdict(s) for s in self.samples],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Evaluation:
        """Inverse of :meth:`to_dict`; raises ValueError if the stored summary is not the one its
        samples give (an edited or stale file)."""
        if not isinstance(data, dict):
            raise ValueError(f"an evaluation must be a JSON object, got {type(data).__name__}")
        missing = [k for k in ("summary", "ks", "samples") if k not in data]
        if missing:
            raise ValueError(f"evaluation is missing {missing}")
        evaluation = cls(
            samples=data["samples"],
            ks=data["ks"],
            seconds=float(data.get("seconds", 0.0)),
            samples_per_second=float(data.get("samples_per_second", 0.0)),
        )
        stored = AccuracySummary.from_dict(data["summary"]).to_dict()
        if stored != evaluation.summary.to_dict():
            raise ValueError(
                f"stored summary {stored} does not match the one recomputed from its "
                f"{len(evaluation.samples)} per-sample scores {evaluation.summary.to_dict()}"
            )
        return evaluation


def per_question_accuracy(evaluation: Evaluation) -> dict[tuple[str, str], float]:
    """(task, question) -> share of its samples at the verifier's full score (headline questions)."""
    return {
        (r.task, r.question): (
            sum(1.0 for s in r.scores if s >= SUCCESS_THRESHOLD) / len(r.scores) if r.scores else 0.0
        )
        for r in evaluation.headline_samples()
    }


def paired(before: Evaluation, after: Evaluation) -> PairedChange:
    """The paired change from ``before`` to ``after``, which must have scored the same questions."""
    a, b = per_question_accuracy(before), per_question_accuracy(after)
    if a.keys() != b.keys():
        raise ValueError(
            f"a paired change needs the same questions: {len(a.keys() - b.keys())} only before, "
            f"{len(b.keys() - a.keys())} only after"
        )
    keys = sorted(a)
    return paired_change([a[k] for k in keys], [b[k] for k in keys])
