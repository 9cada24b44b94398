"""The run's evaluation labels (:class:`EvalLabel`) and training phase names, and their order: the one
list the evaluation schedule, the run history, checkpoints, the report and the console all read (a
leaf: it imports nothing of rlvr at run time, so any of them can import it)."""

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


class EvalLabel(StrEnum):
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
    def sampled(self) -> EvalLabel:
        """This label's evaluation sampled at the training temperature (evaluation.sampled)."""
        return EvalLabel(self.value + SAMPLED_SUFFIX)


SAMPLED_SUFFIX = "_sampled"
# Evaluations that also get a sampled evaluation: the GRPO phase's start and end.
SAMPLED = (EvalLabel.AFTER_SFT, EvalLabel.FINAL)
PHASES = (EvalLabel.SFT, EvalLabel.RFT, EvalLabel.GRPO)
# Paired changes the report and the console show: (name, before, after).
STAGE_CHANGES = (
    ("SFT", EvalLabel.BASELINE, EvalLabel.AFTER_SFT),
    ("GRPO", EvalLabel.AFTER_SFT, EvalLabel.FINAL),
    ("whole run", EvalLabel.BASELINE, EvalLabel.FINAL),
    ("GRPO, sampled at the training temperature", EvalLabel.AFTER_SFT_SAMPLED, EvalLabel.FINAL_SAMPLED),
)


def run_order(evaluations: list[EvalResult]) -> list[EvalResult]:
    """``evaluations`` in the order a run makes them (a resumed run holds reloaded ones first, then
    a baseline it had to make again): baseline, SFT steps, after SFT, GRPO steps, final."""
    order: list[str] = list(EvalLabel)  # a label read back from a file is a plain str

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
    if label == EvalLabel.BASELINE:
        return True
    if resume is None or label == EvalLabel.FINAL:
        return False
    phase, at = resume
    if label in (EvalLabel.SFT, EvalLabel.AFTER_SFT):
        return phase == EvalLabel.GRPO or step <= at
    if label == EvalLabel.GRPO:
        return phase == EvalLabel.GRPO and step <= at
    return False
