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

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rlvr.evaluation.metrics import (
    SUCCESS_THRESHOLD,
    AccuracySummary,
    PairedChange,
    normalize_answer,
    paired_change,
    summarize,
)


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


# Degenerate outputs (issue 56): a model that gives one answer to every question scores exactly the
# share of questions whose gold answer is that answer, which can look like a significant gain. The
# rules read one evaluation's greedy answers (each question's first sample) against its gold answers.
MIN_ANSWERED = 8
"""Fewer answered questions than this are too few to call a collapse: a model that answers a handful
of questions in the format is still learning the format (the base model answers none)."""
MIN_GOLD_DISTINCT = 4
"""The diversity rule needs gold answers that vary this much: a yes/no task's answers cannot."""
DIVERSITY_FLOOR = 0.25
"""Distinct answers per distinct gold answer below which the outputs are degenerate: under a quarter
of the gold values can ever be produced, so at least three of every four gold values are never
right. A model right on every question has 1.0; one right on some and wrong in varied ways has about
1.0 too (its wrong answers are new values). The ratios measured on real runs are in
docs/measurements.md ("Numbers behind choices in the code")."""


@dataclass(frozen=True)
class AnswerSpread:
    """How varied one evaluation's greedy answers are beside its gold answers, on the questions the
    model answered (an unanswered question is no answer format, not a collapse)."""

    n: int
    """Headline questions."""
    answered: int
    """Questions with an extracted answer (first sample)."""
    distinct: int
    """Distinct extracted answers (whitespace-normalised, rlvr.evaluation.metrics.normalize_answer)."""
    gold_distinct: int
    """Distinct gold answers on the answered questions."""
    top: str | None
    """The most common extracted answer."""
    top_count: int
    """Questions that got ``top``."""
    top_gold: int
    """Answered questions whose gold answer is ``top``: all a constant model gets right."""
    covered: int
    """Answered questions whose gold answer is one of the answers the model gives: its ceiling."""

    @property
    def ratio(self) -> float:
        """Distinct answers per distinct gold answer (1.0 for a model whose answers vary as the gold do)."""
        return self.distinct / self.gold_distinct if self.gold_distinct else 1.0

    @property
    def constant(self) -> bool:
        """Every answered question got the same answer, where the gold answers differ."""
        return self.answered >= MIN_ANSWERED and self.distinct == 1 and self.gold_distinct > 1

    @property
    def low_diversity(self) -> bool:
        return (
            self.answered >= MIN_ANSWERED
            and self.gold_distinct >= MIN_GOLD_DISTINCT
            and self.ratio < DIVERSITY_FLOOR
        )

    def problem(self) -> str | None:
        """What is degenerate about these answers (None: nothing)."""
        share = f"{self.top_gold} of {self.n} questions ({self.top_gold / self.n:.1%})" if self.n else ""
        if self.constant:
            return (
                f"every one of its {self.answered} answers is `{self.top}`"
                + (f" ({self.n - self.answered} questions unanswered)" if self.answered < self.n else "")
                + f", where the gold answers take {self.gold_distinct} values; `{self.top}` is the gold "
                f"answer of {share}: its accuracy measures that frequency, not the task"
            )
        if self.low_diversity:
            return (
                f"its {self.answered} answers take {self.distinct} values where the gold answers take "
                f"{self.gold_distinct} (ratio {self.ratio:.2f} < {DIVERSITY_FLOOR}; `{self.top}` "
                f"{self.top_count} times); it can be right on at most {self.covered} of {self.answered} "
                "answered questions, those whose gold answer is one it gives"
            )
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "ratio": round(self.ratio, 3),
            "constant": self.constant,
            "low_diversity": self.low_diversity,
            "degenerate": self.problem(),
        }


def answer_spread(evaluation: Evaluation) -> AnswerSpread:
    """The :class:`AnswerSpread` of ``evaluation``'s headline questions.

    >>> rows = [SampleRecord(i, "t", f"q{i}", str(i % 5), ["c"], ["1"], [float(i % 5 == 1)]) for i in range(10)]
    >>> s = answer_spread(Evaluation(rows, ks=[1], seconds=1.0, samples_per_second=1.0))
    >>> s.constant, s.top, s.top_gold, s.problem()[:30]
    (True, '1', 2, 'every one of its 10 answers is')
    """
    return _spread(evaluation.headline_samples())


def task_spreads(evaluation: Evaluation) -> dict[str, AnswerSpread]:
    """The :class:`AnswerSpread` of each task's headline questions, when they span several tasks (a
    mixture): one task's collapse (every letter_counting answer ``1``) hides in the whole's spread,
    which the other tasks' varied answers keep wide (empty for one task: the whole is that task).

    >>> rows = [SampleRecord(i, "a" if i < 10 else "b", f"q{i}", str(i % 5), ["c"], ["1" if i < 10 else str(i)], [0.0])
    ...         for i in range(20)]
    >>> spreads = task_spreads(Evaluation(rows, ks=[1], seconds=1.0, samples_per_second=1.0))
    >>> spreads["a"].constant, spreads["b"].constant
    (True, False)
    """
    by_task: dict[str, list[SampleRecord]] = {}
    for row in evaluation.headline_samples():
        by_task.setdefault(row.task, []).append(row)
    return {task: _spread(rows) for task, rows in by_task.items()} if len(by_task) > 1 else {}


def _spread(rows: list[SampleRecord]) -> AnswerSpread:
    answered = [
        (a, normalize_answer(r.reference)) for r in rows if (a := normalize_answer(_first(r.answers)))
    ]
    counts = Counter(a for a, _ in answered)
    top, top_count = counts.most_common(1)[0] if counts else (None, 0)
    return AnswerSpread(
        n=len(rows),
        answered=len(answered),
        distinct=len(counts),
        gold_distinct=len({g for _, g in answered if g is not None}),
        top=top,
        top_count=top_count,
        top_gold=sum(1 for _, g in answered if g == top),
        covered=sum(1 for _, g in answered if g in counts),
    )


def greedy(evaluation: Evaluation) -> bool:
    """One answer per question: the model's own answer, not one draw of several at a temperature."""
    return all(len(r.scores) == 1 for r in evaluation.headline_samples())


def _first(answers: list[str | None]) -> str | None:
    return answers[0] if answers else None


def constant_gain(before: Evaluation, after: Evaluation, change: PairedChange) -> str | None:
    """Why a paired change is no evidence of learning, when one side gave a single answer to every
    question: its accuracy is then that answer's share of the gold answers (None otherwise).

    A side counts when it is :attr:`AnswerSpread.constant` and its correct answers are exactly the
    questions whose gold answer is the constant one (the verifier agreed with the text). Only a change
    between greedy evaluations: a sampled one's answers are draws at a temperature."""
    if change.delta == 0 or not (greedy(before) and greedy(after)):
        return None
    sides = []
    for name, evaluation in (("after", after), ("before", before)):
        spread = answer_spread(evaluation)
        correct = round(evaluation.summary.correct)
        if spread.constant and correct == spread.top_gold:
            sides.append((name, spread))
    if not sides:
        return None
    parts = [
        f"{name} it, every answer is `{s.top}`, the gold answer of {s.top_gold} of {s.n} questions "
        f"({s.top_gold / s.n:.1%})"
        for name, s in sides
    ]
    return (
        f"{change.delta * 100:+.1f} points is the frequency of a constant answer among the gold "
        f"answers, not learning: {'; '.join(parts)}"
    )
