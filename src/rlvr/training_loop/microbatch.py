"""How a GPU run batches its training steps. GRPO: the configured split is the update; on a GPU the
accumulation is folded into larger micro-batches as far as the memory estimate allows. SFT: on a GPU
``training_loop.sft.cuda_batch_size`` rows a step in proportionally fewer steps (:func:`scale_sft`).

The configured ``per_device_train_batch_size x gradient_accumulation_steps`` is shaped for a 2-core
CPU (micro-batches of 16 short sequences); on a GPU each micro-batch is a few milliseconds of work
behind a fixed per-step cost, so the card idles. Folding keeps the product of the two, so the
sequences per optimizer step, the generation batch and (with TRL's normalisation over the
generation batch) the update stay the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


def fold_accumulation(
    per_device: int, accumulation: int, fits: Callable[[int], bool]
) -> tuple[int, int] | None:
    """(micro-batch, accumulation) with the fewest accumulation steps whose micro-batch ``fits``,
    keeping ``per_device x accumulation``; None when nothing larger than the configured one fits."""
    for steps in range(1, accumulation):
        if accumulation % steps == 0 and fits(per_device * accumulation // steps):
            return per_device * accumulation // steps, steps
    return None


def scale_sft(args: Any, rows: int) -> str:
    """Set ``args`` (a trl.SFTConfig) to ``rows`` sequences a step and say what changed.

    The run sees the same rows (``max_steps`` divided by the batch ratio k, rounded up), the schedule
    keeps its shape (warm-up and save interval divided by k) and the learning rate is multiplied by
    sqrt(k): the square-root rule for Adam (Malladi et al. 2022, "On the SDEs and Scaling Rules for
    Adaptive Gradient Algorithms"). SFT of the default run on an H200 takes about as long a step at
    64 rows as at 16 (per-step overhead): 64 rows made its SFT 2.9x faster but cost 20 points of
    accuracy (benchmarks/gpu_first_hour.md), so the default recipe leaves it off."""
    k = rows / args.per_device_train_batch_size
    before = f"{args.per_device_train_batch_size} rows x {args.max_steps} steps at lr {args.learning_rate:g}"
    args.per_device_train_batch_size = rows
    args.max_steps = math.ceil(args.max_steps / k)
    args.learning_rate = args.learning_rate * math.sqrt(k)
    if args.warmup_steps >= 1:  # below 1 it is a share of the steps
        args.warmup_steps = max(1, math.ceil(args.warmup_steps / k))
    if isinstance(args.save_steps, int) and args.save_steps > 1:
        args.save_steps = max(1, math.ceil(args.save_steps / k))
    return f"{before} -> {rows} x {args.max_steps} at lr {args.learning_rate:g} (cuda_batch_size)"
