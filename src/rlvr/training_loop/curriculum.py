"""TRL glue of a curriculum (rlvr.data.curriculum): questions at the current level, feedback, state.

Why a GRPOTrainer subclass and not a dataset regenerated per step: TRL's sampler picks the rows and
the dataloader fetches them ahead of the step that uses them, so a row's text fixed at fetch time
could predate the latest decision, by a number of batches that depends on the loader settings.
Here the rows carry only a ``slot``; :meth:`generate` fills each slot with its question at the
level current when GRPO generates for the batch, and hands the verifier's verdicts on that batch
back to the curriculum right after scoring. So the level of a batch depends only on the batches
before it, which a resumed run restores from ``curriculum_state.json`` in the checkpoint.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from transformers import TrainerCallback


@functools.cache
def trainer_class() -> type:
    """GRPOTrainer with curriculum rows (imported lazily: TRL is heavy)."""
    import torch
    from trl import GRPOTrainer

    class CurriculumGRPOTrainer(GRPOTrainer):
        """GRPOTrainer whose batches are filled at the curriculum's current level and scored back to it."""

        def __init__(self, *args: Any, curriculum: Any, rewards: Any, **kwargs: Any):
            self.curriculum_source, self.curriculum_rewards = curriculum, rewards
            super().__init__(*args, **kwargs)

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            if not self.model.training:
                return super()._generate_and_score_completions(inputs)
            out = super()._generate_and_score_completions(self.curriculum_source.fill(inputs))
            # Every process decides on the batch of all processes, so their levels never differ.
            local = torch.tensor([self.curriculum_rewards.accepted()], device=self.accelerator.device)
            accepted, scored = self.accelerator.gather(local).sum(0).tolist()
            self.curriculum_source.curriculum.observe(int(accepted), int(scored))
            return out

    return CurriculumGRPOTrainer


class CurriculumState(TrainerCallback):
    """Writes the curriculum state and the manifest so far into every checkpoint (before
    CompletionMarker marks it complete)."""

    def __init__(self, source: Any):
        self.source = source

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and path.is_dir():
            self.source.save(path)
