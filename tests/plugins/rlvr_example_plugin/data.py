"""A user's own dataset format and answer checker, in a plugin package (docs/data.md "Your own data")."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

from rlvr.data.processors import QAItem
from rlvr.verifier.checkers import Checker


class TriviaProcessor:
    """Rows ``{"prompt": ..., "target": ..., "topic": ...}``: the question, its answer, kept metadata."""

    def __call__(self, row: dict) -> QAItem | None:
        if not row["target"]:
            return None  # unanswered rows are skipped
        return QAItem(question=row["prompt"], answer=row["target"].strip(), metadata={"topic": row["topic"]})


@dataclass(frozen=True)
class SlowChecker(Checker):
    """Exact match after ``delay_s`` seconds: shows a user's checker is bound by the sandbox timeout."""

    delay_s: float = 0.0

    def __call__(self, answer: str, entry: dict) -> float:
        time.sleep(self.delay_s)
        return 1.0 if answer.strip() == entry["answer"] else 0.0


@dataclass(frozen=True)
class OddLength(Checker):
    """A checker without a reference answer (``needs_reference = False``): accepts an answer with an
    odd number of characters. It stands for a user's constraint checker in the tests of data that
    has no reference answers (rlvr.data.references): SFT is refused, RFT and GRPO train from it."""

    needs_reference: ClassVar[bool] = False

    def __call__(self, answer: str, entry: dict) -> float:
        return 1.0 if len(answer.strip()) % 2 == 1 else 0.0
