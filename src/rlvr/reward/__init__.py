"""Reward terms in TRL's reward-function contract, combined with weights by a RewardSet.

The catalogue (docs/rewards-and-prompts.md "Reward catalogue"; each a drop-in under conf/reward/): correctness,
answer matching, strict and approximate format, numeric tolerance, length, overlong, and any
plain reward function of yours (``catalogue``; the term types are in ``terms``). A plugin's term
runs under a deadline (``timeout``).
"""

from rlvr.reward.catalogue import (
    AnswerMatchReward,
    ApproxFormatReward,
    FunctionReward,
    NumericToleranceReward,
    OverlongPenalty,
)
from rlvr.reward.terms import CorrectnessReward, FormatReward, LengthPenalty, RewardSet

__all__ = [
    "AnswerMatchReward",
    "ApproxFormatReward",
    "CorrectnessReward",
    "FormatReward",
    "FunctionReward",
    "LengthPenalty",
    "NumericToleranceReward",
    "OverlongPenalty",
    "RewardSet",
]
