"""The training loop (``loop``): optional SFT warm start on gold answers, RFT rounds (``rft``), then GRPO,
each a phase (``phase``, typed by ``settings``) run through TRL. Beside them: GRPO's signal skipping
(``grpo_signal``), curriculum glue (``curriculum``), rollout timing (``rollout_clock``), batching
(``microbatch``, ``packing``), the trainer callbacks (``callbacks``), throughput, checkpoints and
``resume``, the run directory at the end of a run (``run_dir``) and the GRPO budget note
(``expectation``)."""

from rlvr.training_loop.loop import GRPOPhase, SFTPhase, TrainingLoop
from rlvr.training_loop.phase import Session, TrainOutcome

__all__ = ["TrainingLoop", "GRPOPhase", "SFTPhase", "Session", "TrainOutcome"]
