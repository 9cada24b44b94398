"""Training loops: optional SFT warm start on gold answers, then GRPO, both through TRL."""

from rlvr.training_loop.loop import GRPOPhase, SFTPhase, TrainingLoop
from rlvr.training_loop.phase import Session, TrainOutcome

__all__ = ["TrainingLoop", "GRPOPhase", "SFTPhase", "Session", "TrainOutcome"]
