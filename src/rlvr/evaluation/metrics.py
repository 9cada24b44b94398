"""Accuracy metrics for verifier scores: Wilson intervals, unbiased pass@k, majority vote, and a summary.

Pure Python/numpy so that result files can be summarised and re-summarised without torch.
Scores are floats in [0, 1] as returned by the verifiers; 1.0 means fully correct, values in
between are partial credit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

SUCCESS_THRESHOLD = 1.0
"""A sample counts as a success for pass@k when its score is >= this value (partial credit does not)."""


def wilson_interval(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion ``successes / n``.

    Preferred over the normal approximation because it stays inside [0, 1] and keeps a sensible
    width at 0% and 100%, which small evaluation sets hit often.

    ``successes`` may be fractional: for partial-credit scores pass the sum of the scores
    (that is, mean score * n). The interval is then the Wilson interval of the mean score,
    treated as if it were a proportion of n trials.

    >>> wilson_interval(0, 0)
    (0.0, 1.0)
    >>> [round(x, 4) for x in wilson_interval(5, 10)]
    [0.2366, 0.7634]
    """
    if n < 0:
        raise ValueError(f"n ({n}) must be >= 0")
    if n == 0:
        return (0.0, 1.0)
    if not 0.0 <= successes <= n:
        raise ValueError(f"successes ({successes}) must lie in [0, n={n}]")
    if z <= 0:
        raise ValueError(f"z ({z}) must be > 0")
    p = successes / n
    z2 = z * z
    denom = 1.0 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1.0 - p) / n + z2 / (4 * n * n)) / denom
    # At p = 0 and p = 1 the bound is exactly 0 or 1; rounding would give 1e-17 or 0.9999999999999999.
    low = 0.0 if successes == 0 else max(0.0, center - half)
    high = 1.0 if successes == n else min(1.0, center + half)
    return (low, high)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimator of Chen et al. 2021: ``1 - C(n-c, k) / C(n, k)``.

    ``n`` samples were drawn for a question and ``c`` of them are correct; the result is the
    probability that at least one of ``k`` samples drawn without replacement is correct.
    Uses the product form ``1 - prod_{i=n-c+1}^{n} (1 - k / i)``, which avoids the huge
    binomial coefficients of the closed form.

    >>> pass_at_k(10, 0, 5), pass_at_k(10, 10, 1)
    (0.0, 1.0)
    >>> round(pass_at_k(4, 1, 2), 4)
    0.5
    """
    if n < 1:
        raise ValueError(f"pass@k needs at least one sample per question, got n={n}")
    if not 0 <= c <= n:
        raise ValueError(f"the number of correct samples c ({c}) must lie in [0, n={n}]")
    if k < 1:
        raise ValueError(f"k ({k}) must be >= 1")
    if k > n:
        raise ValueError(
            f"pass@{k} needs at least k={k} samples per question, but only n={n} were drawn; "
            f"draw more samples or ask for k <= {n}"
        )
    if n - c < k:
        # Every draw of k samples must contain a correct one.
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def normalize_answer(answer: str | None) -> str | None:
    """Normalise an extracted answer for voting: trim and collapse whitespace; empty means no answer.

    Deliberately conservative (case and punctuation are kept) because some tasks are case-sensitive;
    equivalence beyond whitespace is the verifier's job.
    """
    if answer is None:
        return None
    normalized = " ".join(answer.split())
    return normalized or None


def majority_vote(answers: Sequence[str | None], scores: Sequence[float]) -> float:
    """Score of the most common answer among one question's samples.

    Answers are normalised with :func:`normalize_answer`; samples without an answer (None or
    blank) do not vote. Ties are broken by the answer that appeared first among the samples.
    The returned score is the mean score of the samples that gave the winning answer (these are
    equal whenever the verifier is a function of the answer). No answer at all scores 0.0.

    >>> majority_vote(["4", "5", " 4 ", None], [1.0, 0.0, 1.0, 0.0])
    1.0
    >>> majority_vote(["5", "4"], [0.0, 1.0])  # tie: the first answer seen wins
    0.0
    >>> majority_vote([None, None], [0.0, 0.0])
    0.0
    """
    if len(answers) != len(scores):
        raise ValueError(f"got {len(answers)} answers but {len(scores)} scores; pass one score per answer")
    # dicts keep insertion order, which is what makes the tie-break "first seen".
    votes: dict[str, list[float]] = {}
    for answer, score in zip(answers, scores, strict=True):
        key = normalize_answer(answer)
        if key is not None:
            votes.setdefault(key, []).append(float(score))
    if not votes:
        return 0.0
    winner = max(votes.values(), key=len)  # max returns the first of equal maxima
    return float(sum(winner) / len(winner))


@dataclass
class AccuracySummary:
    """Accuracy of one model on one task, with its uncertainty and multi-sample metrics."""

    n: int
    """Number of questions."""
    correct: float
    """Sum over questions of each question's mean sample score (fractional with several samples or
    partial credit)."""
    accuracy: float
    """correct / n: the mean score of a sample, i.e. pass@1 when questions have several samples (the
    greedy answer's score when each has one)."""
    ci_low: float
    """Lower bound of the 95% Wilson interval of accuracy."""
    ci_high: float
    """Upper bound of the 95% Wilson interval of accuracy."""
    pass_at_k: dict[int, float] = field(default_factory=dict)
    """k -> unbiased pass@k averaged over questions (success = score >= SUCCESS_THRESHOLD)."""
    majority_vote: float | None = None
    """Mean over questions of the majority-vote score; None with a single sample or no answers."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; pass@k keys become strings because JSON object keys must be."""
        data = asdict(self)
        data["pass_at_k"] = {str(k): v for k, v in sorted(self.pass_at_k.items())}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AccuracySummary:
        """Inverse of :meth:`to_dict` (accepts int or string pass@k keys)."""
        missing = [name for name in ("n", "correct", "accuracy", "ci_low", "ci_high") if name not in data]
        if missing:
            raise ValueError(f"accuracy summary is missing {missing}; got keys {sorted(data)}")
        mv = data.get("majority_vote")
        return cls(
            n=int(data["n"]),
            correct=float(data["correct"]),
            accuracy=float(data["accuracy"]),
            ci_low=float(data["ci_low"]),
            ci_high=float(data["ci_high"]),
            pass_at_k={int(k): float(v) for k, v in (data.get("pass_at_k") or {}).items()},
            majority_vote=None if mv is None else float(mv),
        )


def summarize(
    scores_per_question: Sequence[Sequence[float]],
    answers_per_question: Sequence[Sequence[str | None]] | None = None,
    ks: Sequence[int] = (1,),
    *,
    success_threshold: float = SUCCESS_THRESHOLD,
    z: float = 1.96,
) -> AccuracySummary:
    """Summarise per-question sample scores.

    - accuracy: mean over questions of the mean of their samples' scores (one sample: its score;
      k samples: pass@1, not the first sample's luck), with a Wilson interval on the summed means;
    - pass@k for each k in ``ks``: unbiased estimator averaged over questions, where a sample is
      a success when its score >= ``success_threshold`` (1.0: partial credit is not a pass);
    - majority vote: when answers are given and some question has more than one sample.

    Every question needs at least ``max(ks)`` samples; an empty question list gives n=0,
    accuracy 0.0 and the uninformative interval (0, 1).

    >>> s = summarize([[1.0, 0.0], [0.0, 0.0]], [["4", "5"], ["7", "7"]], ks=(1, 2))
    >>> s.accuracy, s.pass_at_k, s.majority_vote
    (0.25, {1: 0.25, 2: 0.5}, 0.5)
    """
    n = len(scores_per_question)
    for i, scores in enumerate(scores_per_question):
        if len(scores) == 0:
            raise ValueError(f"question {i} has no samples; every question needs at least one score")
    if answers_per_question is not None:
        if len(answers_per_question) != n:
            raise ValueError(
                f"got answers for {len(answers_per_question)} questions but scores for {n}; pass both per question"
            )
        for i, (answers, scores) in enumerate(zip(answers_per_question, scores_per_question, strict=True)):
            if len(answers) != len(scores):
                raise ValueError(f"question {i} has {len(answers)} answers but {len(scores)} scores")
    if ks and n:
        fewest = min(range(n), key=lambda i: len(scores_per_question[i]))
        if max(ks) > len(scores_per_question[fewest]):
            raise ValueError(
                f"pass@{max(ks)} needs at least {max(ks)} samples per question, but question {fewest} "
                f"has {len(scores_per_question[fewest])}; sample more or drop k={max(ks)} from ks"
            )

    correct = float(sum(sum(map(float, scores)) / len(scores) for scores in scores_per_question))
    accuracy = correct / n if n else 0.0
    ci_low, ci_high = wilson_interval(min(max(correct, 0.0), float(n)), n, z=z)

    pass_k: dict[int, float] = {}
    for k in sorted(set(ks)):
        if n == 0:
            continue
        per_question = [
            pass_at_k(len(scores), sum(1 for s in scores if s >= success_threshold), k)
            for scores in scores_per_question
        ]
        pass_k[k] = float(np.mean(per_question))

    mv: float | None = None
    if answers_per_question is not None and n and max(len(s) for s in scores_per_question) > 1:
        mv = float(
            np.mean(
                [majority_vote(a, s) for a, s in zip(answers_per_question, scores_per_question, strict=True)]
            )
        )

    return AccuracySummary(
        n=n,
        correct=correct,
        accuracy=accuracy,
        ci_low=ci_low,
        ci_high=ci_high,
        pass_at_k=pass_k,
        majority_vote=mv,
    )


def mcnemar_exact(right_to_wrong: int, wrong_to_right: int) -> float:
    """Two-sided exact McNemar p-value: a binomial test of the discordant pairs against 1/2.

    >>> round(mcnemar_exact(14, 4), 4)
    0.0309
    >>> mcnemar_exact(0, 0)
    1.0
    """
    n = right_to_wrong + wrong_to_right
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(right_to_wrong, wrong_to_right) + 1)) / 2**n
    return min(1.0, 2.0 * tail)


@dataclass(frozen=True)
class PairedChange:
    """The change in accuracy between two evaluations of the same questions.

    ``delta`` is mean(after - before) over questions, with a 95% Wald interval from the
    variance of the per-question differences (for 0/1 scores this is the textbook interval
    for paired proportions, ``sqrt((b + c) - (b - c)^2 / n) / n``); ``p_value`` is the exact
    McNemar test of the questions that flipped. Paired, because two overlapping Wilson
    intervals of the same questions hide changes the pairing shows. When a question's score is
    a mean over samples (pass@1 of k samples), ``binary`` is False: the interval still holds,
    but flips and McNemar count only 0/1 scores, so ``text`` leaves them out.
    """

    n: int
    before: float
    after: float
    delta: float
    ci_low: float
    ci_high: float
    right_to_wrong: int
    wrong_to_right: int
    p_value: float
    binary: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def text(self) -> str:
        if self.ci_low == self.ci_high:  # every question changed by the same amount: no interval to give
            same = "no question changed" if self.delta == 0 else "every question changed by this much"
            return f"{self.delta * 100:+.1f} points ({same}, n={self.n})"
        change = f"{self.delta * 100:+.1f} points [{self.ci_low * 100:+.1f}, {self.ci_high * 100:+.1f}] "
        if not self.binary:
            return change + f"(per-question means of samples, n={self.n})"
        return change + (
            f"({self.right_to_wrong} right->wrong, {self.wrong_to_right} wrong->right, "
            f"McNemar p={self.p_value:.3g}, n={self.n})"
        )


def paired_change(before: Sequence[float], after: Sequence[float], z: float = 1.96) -> PairedChange:
    """Paired change from per-question accuracies ``before[i]`` and ``after[i]`` (each in [0, 1]).

    >>> c = paired_change([1.0] * 14 + [0.0] * 4 + [1.0] * 100 + [0.0] * 82,
    ...                   [0.0] * 14 + [1.0] * 4 + [1.0] * 100 + [0.0] * 82)
    >>> round(c.delta, 3), round(c.ci_low, 3), round(c.ci_high, 3), round(c.p_value, 3)
    (-0.05, -0.091, -0.009, 0.031)
    """
    if len(before) != len(after):
        raise ValueError(f"paired change needs the same questions: {len(before)} vs {len(after)} values")
    n = len(before)
    if n == 0:
        raise ValueError("paired change of zero questions")
    diffs = np.asarray(after, dtype=float) - np.asarray(before, dtype=float)
    delta = float(diffs.mean())
    half = z * math.sqrt(float(diffs.var()) / n)
    r2w = int(sum(1 for b, a in zip(before, after, strict=True) if b >= 1.0 and a <= 0.0))
    w2r = int(sum(1 for b, a in zip(before, after, strict=True) if b <= 0.0 and a >= 1.0))
    return PairedChange(
        n=n,
        before=float(np.mean(before)),
        after=float(np.mean(after)),
        delta=delta,
        ci_low=max(-1.0, delta - half),
        ci_high=min(1.0, delta + half),
        right_to_wrong=r2w,
        wrong_to_right=w2r,
        p_value=mcnemar_exact(r2w, w2r),
        binary=all(v in (0.0, 1.0) for v in (*before, *after)),
    )


def average_interval(
    per_task: Sequence[Sequence[float]], resamples: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """95% interval of a macro average (the mean of the tasks' accuracies) by a bootstrap over questions.

    ``per_task[t]`` holds task t's per-question accuracies (each in [0, 1]: a 0/1 score, or the
    share of a question's samples that were right). Each of ``resamples`` draws resamples every
    task's questions with replacement (stratified: each task keeps its size, so every task weighs
    the same as in the average) and takes the mean of the task means; the interval is the
    percentile interval of those averages. A fixed ``seed`` makes a report reproducible. Not a
    Wilson interval of pooled counts: that is the interval of the pooled (micro) accuracy, which
    weighs a task by its question count while the average bar does not.

    >>> lo, hi = average_interval([[1.0] * 30 + [0.0] * 70, [1.0] * 60 + [0.0] * 40])
    >>> round(lo, 2), round(hi, 2)
    (0.39, 0.52)
    >>> average_interval([[1.0, 1.0], [1.0]])
    (1.0, 1.0)
    """
    if not per_task or any(len(scores) == 0 for scores in per_task):
        raise ValueError("an average interval needs at least one question in every task")
    rng = np.random.default_rng(seed)
    means = np.zeros(resamples)  # [R]
    for scores in per_task:
        values = np.asarray(scores, dtype=float)  # [Q]
        for start in range(0, resamples, 250):  # in chunks: [R, Q] indices of a large task are GBs
            stop = min(resamples, start + 250)
            picks = rng.integers(0, len(values), size=(stop - start, len(values)))  # [r, Q]
            means[start:stop] += values[picks].mean(axis=1)
    means /= len(per_task)
    tail = (1.0 - level) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return float(low), float(high)
