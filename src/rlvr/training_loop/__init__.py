"""Training loops: optional SFT warm start on gold answers, then GRPO, both through TRL."""

from rlvr.training_loop.loop import GRPOLoop, GRPOPhase, Session, SFTPhase, TrainOutcome

__all__ = ["GRPOLoop", "GRPOPhase", "SFTPhase", "Session", "TrainOutcome"]
