"""TRL glue of a curriculum (rlvr.data.curriculum): questions at the current level, feedback, state.

Why the GRPO trainer fills the rows and not a dataset regenerated per step: TRL's sampler picks the
rows and the dataloader fetches them ahead of the step that uses them, so a row's text fixed at fetch
time could predate the latest decision, by a number of batches that depends on the loader settings.
Here the rows carry only a ``slot``; the trainer (rlvr.training_loop.trainer.RLVRGRPOTrainer, its
``curriculum`` option) has :meth:`CurriculumFeed.fill` put each slot's question at the level current
when GRPO generates for the batch, and hands the verifier's verdicts on that batch back with
:meth:`CurriculumFeed.observe` right after scoring. So the level of a batch depends only on the
batches before it, which a resumed run restores from ``curriculum_state.json`` in the checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import TrainerCallback


@dataclass(frozen=True)
class CurriculumFeed:
    """A curriculum as the GRPO trainer's option.

    Args:
        source: the run's CurriculumSource (rlvr.data.curriculum): the levels and their questions.
        verdicts: (completions the verifier accepted, completions scored) in the latest generation
            batch of this process (the reward set's ``accepted``).
    """

    source: Any
    verdicts: Callable[[], tuple[int, int]]

    def fill(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The batch's rows with their questions at the current level."""
        return self.source.fill(rows)

    def observe(self, accelerator: Any) -> None:
        """The verdicts on the batch just scored, of every process, so their levels never differ."""
        local = torch.tensor([self.verdicts()], device=accelerator.device)
        accepted, scored = accelerator.gather(local).sum(0).tolist()
        self.source.curriculum.observe(int(accepted), int(scored))


class CurriculumState(TrainerCallback):
    """Writes the curriculum state and the manifest so far into every checkpoint (before
    CompletionMarker marks it complete)."""

    def __init__(self, source: Any):
        self.source = source

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and path.is_dir():
            self.source.save(path)
