"""Training loops: optional SFT warm start on gold answers, then GRPO, both through TRL."""

from rlvr.training_loop.loop import GRPOLoop, GRPOPhase, SFTPhase
from rlvr.training_loop.phase import Session, TrainOutcome

__all__ = ["GRPOLoop", "GRPOPhase", "SFTPhase", "Session", "TrainOutcome"]
