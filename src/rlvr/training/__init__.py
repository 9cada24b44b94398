"""Training loops: optional SFT warm start on gold answers, then GRPO, both through TRL."""

from rlvr.training.loop import GRPOLoop, TrainOutcome

__all__ = ["GRPOLoop", "TrainOutcome"]
