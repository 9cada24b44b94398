"""The training loop (``loop``): optional SFT warm start on gold answers, RFT rounds (``rft``), then GRPO,
each a phase (``phase``, typed by ``settings``) run through TRL. GRPO runs on one trainer class
(``trainer``: TRL's GRPOTrainer with signal skipping and dynamic sampling, a curriculum and rollout
timing as options), over the rules of ``grpo_signal`` and the curriculum glue (``curriculum``). SFT
and RFT score the completion positions only (``sft_loss``). Beside them: batching (``microbatch``,
``packing``), the trainer callbacks (``callbacks``), ``throughput``, ``checkpoints`` and ``resume``, the run directory at the end of a run (``run_dir``) and the GRPO budget
note (``expectation``); ``budget_minutes`` sizes the phases' steps to a wall-clock budget (``budget``)."""

from rlvr.training_loop.loop import GRPOPhase, SFTPhase, TrainingLoop
from rlvr.training_loop.phase import TrainingRun, TrainOutcome

__all__ = ["TrainingLoop", "GRPOPhase", "SFTPhase", "TrainingRun", "TrainOutcome"]
