"""Reward terms in TRL's reward-function contract, combined with weights by a RewardSet."""

from rlvr.rewards.terms import CorrectnessReward, FormatReward, LengthPenalty, RewardSet

__all__ = ["CorrectnessReward", "FormatReward", "LengthPenalty", "RewardSet"]
