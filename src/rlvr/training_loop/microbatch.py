"""How a GPU run splits a GRPO step into micro-batches: the configured split is the update; on a GPU
the accumulation is folded into larger micro-batches as far as the memory estimate allows.

The configured ``per_device_train_batch_size x gradient_accumulation_steps`` is shaped for a 2-core
CPU (micro-batches of 16 short sequences); on a GPU each micro-batch is a few milliseconds of work
behind a fixed per-step cost, so the card idles. Folding keeps the product of the two, so the
sequences per optimizer step, the generation batch and (with TRL's normalisation over the
generation batch) the update stay the same.
"""

from __future__ import annotations

from collections.abc import Callable


def fold_accumulation(
    per_device: int, accumulation: int, fits: Callable[[int], bool]
) -> tuple[int, int] | None:
    """(micro-batch, accumulation) with the fewest accumulation steps whose micro-batch ``fits``,
    keeping ``per_device x accumulation``; None when nothing larger than the configured one fits."""
    for steps in range(1, accumulation):
        if accumulation % steps == 0 and fits(per_device * accumulation // steps):
            return per_device * accumulation // steps, steps
    return None
