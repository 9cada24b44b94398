"""A user's own reward term: 1.0 when the extracted answer is an even integer."""

from __future__ import annotations

import os
from typing import Any

from rlvr.reward.terms import _Term, completion_text


class EvenAnswerReward(_Term):
    name = "even_answer"

    def __call__(self, completions: list[Any], **_: Any) -> list[float]:
        out = []
        for c in completions:
            answer = self.prompt.extract(completion_text(c))
            out.append(
                1.0 if answer is not None and answer.lstrip("-").isdigit() and int(answer) % 2 == 0 else 0.0
            )
        return out


class BuggyTerm(_Term):
    """A component with a bug in its constructor (for the "bugs keep their traceback" test)."""

    def __init__(self, weight: float = 1.0, **collaborators: Any):
        super().__init__(weight, **collaborators)
        raise ZeroDivisionError("a bug, not a config mistake")


def distinct_words(completions: list[Any], **_: Any) -> list[float | None]:
    """A plain TRL reward function: the share of distinct words (1.0 = no word repeated), None for
    an empty completion. Joins a run through ``rlvr.reward.FunctionReward``:

    ``+reward.terms.variety={_target_: rlvr.reward.FunctionReward, weight: 0.1,
    function: {_target_: rlvr_example_plugin.rewards.distinct_words, _partial_: true}}``

    >>> distinct_words(["a b a b", "", "one two"])
    [0.5, None, 1.0]
    """
    out: list[float | None] = []
    for c in completions:
        words = completion_text(c).split()
        out.append(len(set(words)) / len(words) if words else None)
    return out


class FailsOnRank(_Term):
    """Raises on one rank of a multi-process run (for the "a failure on any rank ends the run" test)."""

    name = "fails_on_rank"

    def __init__(self, weight: float = 1.0, rank: int = 1, **collaborators: Any):
        super().__init__(weight, **collaborators)
        self.rank = rank

    def __call__(self, completions: list[Any], **_: Any) -> list[float]:
        if int(os.environ.get("RANK", "0")) == self.rank:
            raise ValueError(f"this term fails on rank {self.rank} on purpose")
        return [0.0] * len(completions)
