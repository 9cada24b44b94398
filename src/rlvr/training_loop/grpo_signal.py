"""Every rollout carries signal: zero-advantage skipping and dynamic sampling, as settings and the
batch arithmetic they need; the GRPO trainer (rlvr.training_loop.trainer.RLVRGRPOTrainer) applies them.

**Zero advantage where there is no signal.** A group whose rewards are all equal gets advantage 0
(TRL leaves a float residue of about 1e-3 there: rlvr.reward.terms.flat_groups, the one test of a
flat group, which the reward set's ``reward/zero_std_groups_frac`` also counts with).

**Skipping.** A completion whose advantage is exactly zero (every completion of a group without
reward variance) adds nothing to the policy loss of any TRL loss type: each one multiplies the
advantage into the per-token loss. When nothing else in the loss reads it (``beta = 0``, no entropy
bonus or entropy mask, no router loss), it is dropped from its micro-batch before the forward pass,
and the micro-batch's loss is rescaled by what its normaliser counted (rows or tokens of the full
micro-batch; the global token count of ``dapo``/``cispo``/``vespo`` is kept as it is), so the update
equals TRL's own (tests/integration/test_grpo_signal.py compares the weights per loss type). A
micro-batch with nothing left is not forwarded at all (with several processes one row is kept, so
every rank runs the same collective backward).

**Dynamic sampling** (DAPO, Yu et al. 2025, "dynamic sampling"; trl issue 3708). The step's first
round is TRL's own batch. While fewer groups than the step holds have reward variance, a further
round generates for prompts drawn from the training set, up to ``max_rounds`` rounds (at most
:data:`MAX_ROUNDS`, checked at validation); a pending stop (SIGTERM, the preemption warning) ends
the rounds at once, so the step ends and the checkpoint is saved within one round; the batch
is then the first informative groups in order, topped up with groups without variance if the cap
was hit (those are skipped above at no cost). A round's prompts depend only on (seed, step, round),
so a resumed run draws the very prompts the uninterrupted run drew. A curriculum fills and scores
every round, so its level sees all that was generated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

import torch
import torch.nn.functional as F
from pydantic import Field

from rlvr.issues import ConfigIssue, value_issues
from rlvr.reward.terms import flat_groups, weighted_totals

# How each TRL loss type normalises a micro-batch's summed per-token loss (trl GRPOTrainer._compute_loss).
ROW_MEAN = frozenset({"grpo", "sapo", "dr_grpo", "luspo"})  # by the micro-batch's rows
TOKEN_MEAN = frozenset({"bnpo"})  # by the micro-batch's completion tokens
GLOBAL_TOKENS = frozenset({"dapo", "cispo", "vespo"})  # by num_items_in_batch of the whole generation batch
LOSS_TYPES = ROW_MEAN | TOKEN_MEAN | GLOBAL_TOKENS

SCALE_KEY = "rlvr_loss_scale"
# The ceiling of training_loop.signal.max_rounds: each round is a full generation batch, so a step
# costs up to this many ordinary steps. DAPO's recipe caps its rounds at 10; 64 leaves room for
# very hard tasks while a typo (4000) cannot turn one step into days.
MAX_ROUNDS = 64
# Keys of TRL's scored batch that dynamic sampling knows how to join across rounds: how each is padded.
_LEFT_PADDED = {"prompt_ids": "pad", "prompt_mask": 0}
_RIGHT_PADDED = {
    "completion_ids": "pad",
    "completion_mask": 0,
    "old_per_token_logps": 0.0,
    "ref_per_token_logps": 0.0,
    "sampling_per_token_logps": 0.0,
    "importance_sampling_ratio": 1.0,
}


class SignalNode(TypedDict):
    """``training_loop.signal`` as a type (TrainingLoop's ``signal``; the config gate binds it)."""

    skip_zero_advantage: bool
    dynamic_sampling: bool
    max_rounds: Annotated[
        int,
        Field(ge=1, le=MAX_ROUNDS, examples=[4], description="each round is a whole generation batch; a task "
              "whose batches rarely carry signal needs other data.task_params or a curriculum, not more rounds"),
    ]  # fmt: skip


@dataclass(frozen=True)
class SignalSettings:
    """``training_loop.signal`` (:class:`SignalNode` types it).

    Args:
        skip_zero_advantage: do not forward or backpropagate completions whose advantage is zero
            (exact: applies only where the update is unchanged, see :func:`skip_blockers`).
        dynamic_sampling: refill each GRPO batch with groups that have reward variance (DAPO).
        max_rounds: at most this many generation rounds per step under dynamic sampling
            (1 to :data:`MAX_ROUNDS`).
    """

    skip_zero_advantage: bool
    dynamic_sampling: bool
    max_rounds: int

    @classmethod
    def from_config(cls, node: dict[str, Any]) -> SignalSettings:
        return cls(**{k: node[k] for k in ("skip_zero_advantage", "dynamic_sampling", "max_rounds")})

    @classmethod
    def validate(cls, node: dict[str, Any], processes: int) -> list[ConfigIssue]:
        """Settings dynamic sampling cannot honour on this launch (a node that does not hold for
        :class:`SignalNode` has its keys named by the config gate)."""
        key = "training_loop.signal"
        if value_issues(key, node, SignalNode, key) or not (node["dynamic_sampling"] and processes > 1):
            return []
        return [
            ConfigIssue(
                f"{key}.dynamic_sampling",
                True,
                f"runs on one process: TRL splits a group's completions across processes ({processes} here)",
                f"set {key}.dynamic_sampling=false for multi-process runs",
            )
        ]


def skip_blockers(args: Any, trainer: Any = None) -> list[str]:
    """Why dropping zero-advantage completions would change this run's update (empty: it would not)."""
    reasons = []
    if args.beta != 0.0:
        reasons.append(f"beta={args.beta} (the KL term reads every completion)")
    if getattr(args, "top_entropy_quantile", 1.0) < 1.0:
        reasons.append(
            f"top_entropy_quantile={args.top_entropy_quantile} (its threshold reads every completion)"
        )
    if getattr(args, "entropy_coef", 0.0) or getattr(args, "use_adaptive_entropy", False):
        reasons.append("an entropy bonus (it reads every completion)")
    if getattr(args, "use_liger_kernel", False):
        reasons.append("use_liger_kernel (its loss normalises on its own)")
    if args.loss_type not in LOSS_TYPES:
        reasons.append(f"loss_type={args.loss_type} (its normaliser is not known here)")
    if trainer is not None and getattr(trainer, "aux_loss_enabled", False):
        reasons.append("the router's auxiliary loss")
    return reasons


def row_count(inputs: dict[str, Any]) -> int:
    """The rows of a micro-batch (or of a scored generation batch)."""
    return int(inputs["advantages"].shape[0])


def take_rows(inputs: dict[str, Any], index: torch.Tensor) -> dict[str, Any]:
    """The rows ``index`` of every per-row entry (scalars such as ``num_items_in_batch`` kept)."""
    n = row_count(inputs)
    out = {}
    for key, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.ndim > 0 and value.shape[0] == n:
            out[key] = value[index.to(value.device)]
        elif isinstance(value, list) and len(value) == n:
            out[key] = [value[i] for i in index.tolist()]
        else:
            out[key] = value
    return out


def signal_rows(inputs: dict[str, Any]) -> torch.Tensor:
    """One flag per row of a micro-batch: whether its advantage is non-zero."""
    advantages = inputs["advantages"]
    return advantages.reshape(advantages.shape[0], -1).ne(0).any(dim=1)


def drop_zero_advantage(inputs: dict[str, Any], loss_type: str, min_rows: int = 0) -> dict[str, Any]:
    """The micro-batch without its zero-advantage rows, and the loss scale that keeps TRL's normaliser.

    TRL divides the summed per-token loss of a micro-batch by its rows (ROW_MEAN), by its completion
    tokens (TOKEN_MEAN) or by a count fixed for the whole generation batch (GLOBAL_TOKENS). With the
    rows gone, TRL would divide by the kept rows or tokens; multiplying by kept/full restores the
    full micro-batch's divisor. ``min_rows`` keeps zero-advantage rows, the first ones, up to that
    many rows in all: several processes must all run a backward, and TRL gathers per-row metrics
    across them, so each must hold as many rows as the others. A kept zero-advantage row adds nothing
    to the loss (skipping requires beta=0, skip_blockers) and counts in the normaliser like any
    kept row.

    >>> import torch
    >>> batch = {"advantages": torch.tensor([0.0, 1.0, -1.0, 0.0]),
    ...          "completion_mask": torch.tensor([[1, 1], [1, 0], [1, 1], [1, 1]]),
    ...          "num_items_in_batch": torch.tensor(7)}
    >>> out = drop_zero_advantage(batch, "grpo")
    >>> out["advantages"].tolist(), out[SCALE_KEY]
    ([1.0, -1.0], 0.5)
    >>> drop_zero_advantage(batch, "bnpo")[SCALE_KEY], drop_zero_advantage(batch, "dapo")[SCALE_KEY]
    (0.42857142857142855, 1.0)
    """
    nonzero = signal_rows(inputs)
    keep = nonzero.nonzero().flatten()
    if keep.numel() < min_rows:
        fill = (~nonzero).nonzero().flatten()[: min_rows - keep.numel()]
        keep = torch.cat([keep, fill]).sort().values
    out = take_rows(inputs, keep)
    if loss_type in ROW_MEAN:
        scale = keep.numel() / max(row_count(inputs), 1)
    elif loss_type in TOKEN_MEAN:
        mask = inputs["completion_mask"] * inputs.get("tool_mask", 1)
        kept_tokens = float(mask[keep.to(mask.device)].sum()) if keep.numel() else 0.0
        scale = max(kept_tokens, 1.0) / max(float(mask.sum()), 1.0)
    else:
        scale = 1.0
    out[SCALE_KEY] = scale
    return out


def flat_rows(
    rewards_per_func: torch.Tensor, weights: Any, group_size: int, process_index: int, rows: int
) -> torch.Tensor:
    """One flag per row of this process's part of a scored batch: whether its group has no reward
    variance (its advantage is then set to 0, where TRL leaves a float residue).

    ``rewards_per_func`` holds every process's rows (TRL gathers them before the advantages), one
    column a reward term; this process's ``rows`` rows are the ``process_index``-th slice, as TRL slices.

    >>> import torch
    >>> rewards = torch.tensor([[1.2], [1.2], [0.0], [1.0]])
    >>> flat_rows(rewards, [1.0], 2, 0, 2).tolist(), flat_rows(rewards, [1.0], 2, 1, 2).tolist()
    ([True, True], [False, False])
    """
    flat = flat_groups(weighted_totals(rewards_per_func, weights), group_size)
    every = flat.repeat_interleave(group_size)
    return every[process_index * rows : (process_index + 1) * rows]


def informative(advantages: torch.Tensor, group_size: int) -> torch.Tensor:
    """One flag per group of ``group_size`` consecutive rows: whether any of its advantages is nonzero."""
    return advantages.reshape(advantages.shape[0], -1).ne(0).any(dim=1).reshape(-1, group_size).any(dim=1)


def join_rounds(outputs: list[dict[str, Any]], pad_token_id: int) -> dict[str, Any]:
    """One scored batch from several rounds of TRL's ``_generate_and_score_completions``.

    Prompts are left-padded and completions right-padded to the longest of any round, as TRL pads one
    round; ``num_items_in_batch`` is recounted by the caller on the rows it keeps.
    """
    if len(outputs) == 1:
        return outputs[0]
    joined: dict[str, Any] = {}
    for key in outputs[0]:
        if key == "num_items_in_batch":
            continue
        values = [o[key] for o in outputs]
        if key == "advantages":
            joined[key] = torch.cat(values)
        elif key in _LEFT_PADDED or key in _RIGHT_PADDED:
            left = key in _LEFT_PADDED
            fill = (_LEFT_PADDED if left else _RIGHT_PADDED)[key]
            fill = pad_token_id if fill == "pad" else fill
            width = max(v.shape[1] for v in values) if values[0].ndim > 1 else None
            if width is None:
                joined[key] = torch.cat(values)
                continue
            padded = [
                F.pad(v, (width - v.shape[1], 0) if left else (0, width - v.shape[1]), value=fill)
                for v in values
            ]
            joined[key] = torch.cat(padded)
        else:
            raise NotImplementedError(
                f"dynamic sampling cannot join TRL's batch key {key!r} across rounds (multimodal or tool "
                "inputs): set training_loop.signal.dynamic_sampling=false for this run"
            )
    return joined


def round_rows(
    dataset: Any, seed: int, step: int, round_: int, groups: int, group_size: int
) -> list[dict[str, Any]]:
    """The rows of one extra round: ``groups`` prompts drawn from ``dataset``, each repeated ``group_size`` times.

    The draw depends only on (seed, step, round), so a resumed run repeats it exactly.
    """
    import numpy as np

    rng = np.random.default_rng([seed, step, round_])
    picks = rng.choice(len(dataset), size=groups, replace=groups > len(dataset))
    return [dataset[int(i)] for i in picks for _ in range(group_size)]


def select_groups(advantages: torch.Tensor, group_size: int, wanted: int) -> tuple[torch.Tensor, int]:
    """Row indices of the first ``wanted`` informative groups, topped up with uninformative ones in order.

    >>> import torch
    >>> adv = torch.tensor([0., 0., 1., -1., 0., 0., 2., -2.])
    >>> select_groups(adv, 2, 2)
    (tensor([2, 3, 6, 7]), 2)
    >>> select_groups(adv[:4], 2, 2)
    (tensor([2, 3, 0, 1]), 1)
    """
    flags = informative(advantages, group_size)
    order = torch.cat([flags.nonzero().flatten(), (~flags).nonzero().flatten()])[:wanted]
    kept = int(flags[order].sum())
    rows = (order[:, None] * group_size + torch.arange(group_size)).flatten()
    return rows, kept
