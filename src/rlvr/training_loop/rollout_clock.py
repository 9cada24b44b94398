"""Rollout timing for GRPO: how long each rollout took and how many completion tokens it made.

A GRPO step on a GPU is mostly rollout generation, so the backend that generates (transformers'
``generate``, its continuous batching, or vLLM) decides the step time. TRL times these blocks only
for W&B/MLflow (trl.extras.profiling); this mixin puts the same measurement into the trainer's own
metrics, so metrics.jsonl, the console and every tracker carry it:

- ``rollout/seconds``: wall time of one rollout (for vLLM: the weight sync and the generation),
  measured after the device finished its queued work;
- ``rollout/tokens``: completion tokens that rollout produced for this process's rows;
- ``rollout/tokens_per_second``: the two divided.

benchmarks/grpo_rollout.py reads them to compare backends in one run on one card.
"""

from __future__ import annotations

import time
from typing import Any

import torch

# For the type checker the mixin stands on TRL's trainer; at run time on object (see grpo_signal).
_TrainerBase: Any = object


def _settle() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class RolloutClock(_TrainerBase):
    """Mixed in before TRL's GRPOTrainer: times ``_generate_single_turn``, the one place every rollout
    backend of TRL 1.15-1.16 goes through (vLLM colocate/server, transformers' continuous batching and
    ``generate``), and records the metrics above for training rollouts."""

    def _generate_single_turn(self, prompt_ids: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.model.training:
            return super()._generate_single_turn(prompt_ids, *args, **kwargs)
        _settle()
        start = time.perf_counter()
        completion_ids, logprobs = super()._generate_single_turn(prompt_ids, *args, **kwargs)
        _settle()
        seconds = time.perf_counter() - start
        tokens = float(sum(len(ids) for ids in completion_ids))
        metrics = self._metrics["train"]
        metrics["rollout/seconds"].append(seconds)
        metrics["rollout/tokens"].append(tokens)
        metrics["rollout/tokens_per_second"].append(tokens / seconds if seconds > 0 else 0.0)
        return completion_ids, logprobs
