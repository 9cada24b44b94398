"""The pipeline's GRPO trainer: TRL's ``GRPOTrainer`` with rlvr's options, in one class.

:class:`RLVRGRPOTrainer` adds, each an option of its constructor (off when not given):

- ``signal`` (rlvr.training_loop.grpo_signal.SignalSettings): skipping zero-advantage completions and
  dynamic sampling. Always on: a group without reward variance gets advantage 0 (TRL leaves a float
  residue of about 1e-3 there).
- ``curriculum`` (rlvr.training_loop.curriculum.CurriculumFeed): each batch is filled at the
  curriculum's current level right before generation and its verdicts are handed back right after.
- ``time_rollouts``: every training rollout's wall time and completion tokens go into the trainer's
  metrics (``rollout/seconds``, measured after the device finished its queued work; ``rollout/tokens``,
  this process's completion tokens; ``rollout/tokens_per_second``). TRL times the same block only
  for W&B/MLflow (trl.extras.profiling); these reach metrics.jsonl, the console and every tracker,
  and benchmarks/grpo_rollout.py compares rollout backends with them.

Where TRL offers a public hook the class uses it (``compute_loss``, which transformers documents for
subclassing, carries the skipping). :data:`TRL_PRIVATE` lists every private method of TRL's or
transformers' trainer that rlvr overrides or calls, with the signature it was written against, and
:data:`TRL_PRIVATE_ATTRIBUTES` the private attributes it reads; tests/unit/test_trainer_overrides.py
checks both against the CPU and the GPU lock's sources, and that no other private method is overridden.

The class subclasses the ``trl.GRPOTrainer`` present when this module is first imported; unsloth
replaces TRL's trainer classes with its own when it loads a model, so src/rlvr imports this module
only inside the function that builds the trainer (tests/unit/test_trainer_overrides.py holds that).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from trl import GRPOTrainer

from rlvr.training_loop import grpo_signal
from rlvr.training_loop.checkpoints import PreemptionGuard
from rlvr.training_loop.curriculum import CurriculumFeed
from rlvr.training_loop.grpo_signal import SCALE_KEY, SignalSettings, row_count


@dataclass(frozen=True)
class Private:
    """A private trainer method rlvr overrides or calls, as the locked releases define it."""

    owner: str  # the class that defines it (the first in GRPOTrainer's method resolution order)
    signature: str  # its parameters as written there (annotations left out)
    use: Literal["override", "call"]  # RLVRGRPOTrainer overrides it, or rlvr calls it on a trainer
    why: str  # what rlvr needs it for, and why no public hook does it


TRL_PRIVATE: dict[str, Private] = {
    "_generate_and_score_completions": Private(
        "trl.trainer.grpo_trainer.GRPOTrainer",
        "self, inputs",
        "override",
        "One generation batch from rows to scored advantages. The curriculum fills the rows "
        "just before generation (the dataloader fetches them earlier, at an older level) and reads the "
        "verdicts just after scoring; dynamic sampling generates further rounds within one step; flat "
        "groups get advantage 0. Callbacks run only between steps, and rollout_func (experimental) "
        "replaces generation but neither the rows the rewards read nor the scoring.",
    ),
    "_calculate_rewards": Private(
        "trl.trainer.grpo_trainer.GRPOTrainer",
        "self, inputs, prompts, completions, completion_ids_list",
        "override",
        "Passed through to keep its result: every process's per-term rewards, gathered, which tell a group "
        "without reward variance; TRL's batch carries only the advantages, and a reward function sees "
        "only its own process's rows.",
    ),
    "_generate_single_turn": Private(
        "trl.trainer.grpo_trainer.GRPOTrainer",
        "self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False",
        "override",
        "Times each rollout: the one call every TRL rollout backend goes through (vLLM "
        "colocate/server, continuous batching, generate), returning (completion_ids, logprobs). TRL's "
        "own timing (profiling_context) reaches only W&B and MLflow, and no callback runs inside a step.",
    ),
    "_load_from_checkpoint": Private(
        "transformers.trainer.Trainer",
        "self, resume_from_checkpoint, model=None",
        "call",
        "rlvr.training_loop.phase._restore loads a checkpoint saved at a phase's last step with it: "
        "train(resume_from_checkpoint=) would train one step past max_steps, and this is the loader it "
        "uses (full weights, sharded files or a PEFT adapter); transformers has no public one.",
    ),
}

# Documented hooks (public) the class overrides: checked like TRL_PRIVATE, since ``super()`` is called
# with these parameters.
TRL_HOOKS: dict[str, Private] = {
    "compute_loss": Private(
        "trl.trainer.grpo_trainer.GRPOTrainer",
        "self, model, inputs, return_outputs=False, num_items_in_batch=None",
        "override",
        "Skipping drops the micro-batch's zero-advantage rows before the forward pass and rescales "
        "the loss (transformers documents compute_loss for subclasses)",
    ),
}

TRL_PRIVATE_ATTRIBUTES: dict[str, str] = {
    "_metrics": "GRPOTrainer.__init__'s {'train': defaultdict(list), 'eval': ...}: values appended "
    "there are averaged over the logging steps and logged with TRL's own metrics (signal/*, rollout/*)",
}


def _settle() -> None:
    """Wait for the device's queued work, so a rollout's time is its own."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


class RLVRGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer with skipping, dynamic sampling, a curriculum and the rollout clock as options.

    Args:
        *args, **kwargs: TRL's ``GRPOTrainer`` arguments (model, reward_funcs, args, train_dataset,
            processing_class, callbacks, ...).
        signal: skipping and dynamic sampling; None: neither.
        curriculum: the curriculum's rows and verdicts (rlvr.training_loop.curriculum.CurriculumFeed);
            None: the dataset's rows as they are.
        time_rollouts: record each training rollout's time and tokens in the metrics.
        warn: told each warning (a skip that does not apply, the round cap hit).
    """

    def __init__(
        self,
        *args: Any,
        signal: SignalSettings | None = None,
        curriculum: CurriculumFeed | None = None,
        time_rollouts: bool = True,
        warn: Callable[[str], None] | None = None,
        **kwargs: Any,
    ):
        self.curriculum = curriculum
        self.time_rollouts = time_rollouts
        super().__init__(*args, **kwargs)
        self.signal = signal or SignalSettings(
            skip_zero_advantage=False, dynamic_sampling=False, max_rounds=1
        )
        self._warn = warn or (lambda message: None)
        blockers = grpo_signal.skip_blockers(self.args, self) if self.signal.skip_zero_advantage else []
        self.skipping = self.signal.skip_zero_advantage and not blockers
        if blockers:
            self._warn(
                "training_loop.signal.skip_zero_advantage is on but does not apply to this run: "
                + "; ".join(blockers)
            )
        self._cap_warned = False

    # -- one round: curriculum rows, TRL's generation and scoring, flat groups at advantage 0 --------
    def _calculate_rewards(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        self._rewards_per_func = super()._calculate_rewards(*args, **kwargs)  # every process's rows
        return self._rewards_per_func

    def _score_round(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        if not self.model.training:
            return super()._generate_and_score_completions(inputs)
        if self.curriculum is not None:
            inputs = self.curriculum.fill(inputs)
        out = super()._generate_and_score_completions(inputs)
        if self.curriculum is not None:
            self.curriculum.observe(self.accelerator)
        if self.args.multi_objective_aggregation == "sum_then_normalize":
            flat = grpo_signal.flat_rows(
                self._rewards_per_func,
                self.reward_weights,
                self.num_generations,
                self.accelerator.process_index,
                len(inputs),
            )
            out["advantages"] = out["advantages"].masked_fill(flat.to(out["advantages"].device), 0.0)
        return out

    # -- dynamic sampling ---------------------------------------------------------------------
    def _stop_pending(self) -> bool:
        """A stop was requested (SIGTERM or the preemption warning, rlvr's PreemptionGuard): the
        guard acts at the end of the step, so the rounds must not keep the step going."""
        guards = [cb for cb in self.callback_handler.callbacks if isinstance(cb, PreemptionGuard)]
        return any(guard.stopping for guard in guards)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        if not (self.model.training and self.signal.dynamic_sampling):
            return self._score_round(inputs)
        size = self.num_generations
        wanted = len(inputs) // size
        outputs = [self._score_round(inputs)]
        found = int(grpo_signal.informative(outputs[0]["advantages"], size).sum())
        generated, rounds = wanted, 1
        while found < wanted and rounds < self.signal.max_rounds and not self._stop_pending():
            rate = max(found / generated, 1.0 / wanted)
            groups = min(wanted, math.ceil((wanted - found) / rate))
            rows = grpo_signal.round_rows(
                self.train_dataset, self.args.seed, self.state.global_step, rounds, groups, size
            )
            outputs.append(self._score_round(rows))
            found += int(grpo_signal.informative(outputs[-1]["advantages"], size).sum())
            generated += groups
            rounds += 1
        joined = grpo_signal.join_rounds(outputs, self.processing_class.pad_token_id)
        index, kept = grpo_signal.select_groups(joined["advantages"], size, wanted)
        batch = grpo_signal.take_rows(joined, index.to(joined["advantages"].device))
        mask = batch["completion_mask"] * batch.get("tool_mask", 1)
        batch["num_items_in_batch"] = self.accelerator.gather(mask.sum()).sum()
        self._record_rounds(generated, kept, wanted, rounds)
        return batch

    def _record_rounds(self, generated: int, kept: int, wanted: int, rounds: int) -> None:
        metrics = self._metrics["train"]
        metrics["signal/groups_generated"].append(float(generated))
        metrics["signal/groups_kept"].append(float(kept))
        metrics["signal/rounds"].append(float(rounds))
        metrics["signal/cap_hit"].append(float(kept < wanted))
        if kept < wanted and not self._cap_warned:
            self._cap_warned = True
            self._warn(
                f"dynamic sampling hit training_loop.signal.max_rounds={self.signal.max_rounds} at GRPO "
                f"step {self.state.global_step + 1}: {kept} of {wanted} groups had reward variance after "
                f"{generated} generated (the rest of the batch carries no signal; raise max_rounds "
                "or make the task easier/harder; the metric signal/cap_hit counts such steps)"
            )

    # -- skipping ------------------------------------------------------------------------------
    def compute_loss(
        self,
        model: Any,
        inputs: dict[str, Any],
        return_outputs: bool = False,
        num_items_in_batch: Any = None,
    ) -> Any:
        if not (self.model.training and self.skipping):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        full = row_count(inputs)
        min_rows = 0
        if self.accelerator.num_processes > 1:
            # Every process runs a backward through the model, and TRL gathers per-row metrics (its
            # clip ratios) across processes with accelerate's gather, which needs the same number of
            # rows on each: the largest count of signal rows among them (at least one) on every one.
            carrying = int(grpo_signal.signal_rows(inputs).sum())
            count = torch.tensor([max(carrying, 1)], device=self.accelerator.device)
            min_rows = int(self.accelerator.gather(count).max())
        elif self.accelerator.distributed_type != "NO":  # a DeepSpeed/FSDP engine runs a backward too
            min_rows = 1
        inputs = grpo_signal.drop_zero_advantage(inputs, self.loss_type, min_rows=min_rows)
        scale = inputs.pop(SCALE_KEY)
        self._metrics["train"]["signal/rows_skipped"].append(float(full - row_count(inputs)))
        if row_count(inputs) == 0:  # nothing carries signal: no forward, no backward through the model
            return torch.zeros((), device=self.accelerator.device, requires_grad=True)
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch) * scale

    # -- the rollout clock ---------------------------------------------------------------------
    def _generate_single_turn(self, prompt_ids: Any, *args: Any, **kwargs: Any) -> Any:
        if not (self.time_rollouts and self.model.training):
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
