"""The run's stage and phase names, and their order: the one list the evaluation schedule, the run
history, checkpoints, the report and the console all read (a leaf: it imports nothing of rlvr at run
time, so any of them can import it)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if sys.version_info >= (3, 11):
    from enum import StrEnum
else:  # Python 3.10 (pyproject's requires-python): enum.StrEnum's behaviour, str() and format() the value
    from enum import Enum

    class StrEnum(str, Enum):
        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return str(self.value).__format__(spec)


if TYPE_CHECKING:
    from rlvr.events import EvalResult


class Stage(StrEnum):
    """Evaluation labels, in the order a run makes them (the report lists evaluations in this order).

    ``sft``, ``rft`` and ``grpo`` are also the training phases' names: an in-training evaluation is labelled
    by its phase. A StrEnum: the labels are the strings evaluation files and reports record.
    """

    BASELINE = "baseline"
    SFT = "sft"
    AFTER_SFT = "after_sft"
    AFTER_SFT_SAMPLED = "after_sft_sampled"
    RFT = "rft"
    GRPO = "grpo"
    FINAL = "final"
    FINAL_SAMPLED = "final_sampled"

    @property
    def sampled(self) -> Stage:
        """This stage's evaluation sampled at the training temperature (evaluation.sampled)."""
        return Stage(self.value + SAMPLED_SUFFIX)


SAMPLED_SUFFIX = "_sampled"
# Stage evaluations that also get a sampled evaluation: the GRPO stage's start and end.
SAMPLED = (Stage.AFTER_SFT, Stage.FINAL)
PHASES = (Stage.SFT, Stage.RFT, Stage.GRPO)
# Paired changes the report and the console show: (name, before, after).
STAGE_CHANGES = (
    ("SFT", Stage.BASELINE, Stage.AFTER_SFT),
    ("GRPO", Stage.AFTER_SFT, Stage.FINAL),
    ("whole run", Stage.BASELINE, Stage.FINAL),
    ("GRPO, sampled at the training temperature", Stage.AFTER_SFT_SAMPLED, Stage.FINAL_SAMPLED),
)


def run_order(evaluations: list[EvalResult]) -> list[EvalResult]:
    """``evaluations`` in the order a run makes them (a resumed run holds reloaded ones first, then
    a baseline it had to make again): baseline, SFT steps, after SFT, GRPO steps, final."""
    order: list[str] = list(Stage)  # a label read back from a file is a plain str

    def key(e: EvalResult) -> tuple[int, int]:
        return (order.index(e.label) if e.label in order else len(order), e.step)

    return sorted(evaluations, key=key)


def on_resumed_path(label: str, step: int, resume: tuple[str, int] | None) -> bool:
    """Whether an evaluation (``label`` at ``step``) measured weights the resumed run continues from.

    ``resume`` is (phase, checkpoint step), or None for a restart from scratch. The base model is on
    every path; a GRPO checkpoint was trained from the finished SFT phase, so all of SFT is on its
    path; within the resumed phase, steps up to the checkpoint. A later step's evaluation belongs to
    work after the checkpoint, which the resumed run does again (and evaluates again).
    """
    if label == Stage.BASELINE:
        return True
    if resume is None or label == Stage.FINAL:
        return False
    phase, at = resume
    if label in (Stage.SFT, Stage.AFTER_SFT):
        return phase == Stage.GRPO or step <= at
    if label == Stage.GRPO:
        return phase == Stage.GRPO and step <= at
    return False
