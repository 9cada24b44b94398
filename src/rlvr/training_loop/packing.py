"""Padding-free batches and packing for the SFT and RFT phases (TRL ``SFTConfig`` ``padding_free``,
``packing``): the settings that cannot run, refused before anything loads, and a probe of the loaded
model, refused before any step.

How TRL 1.16 does it: with ``padding_free`` (or ``packing`` with the ``bfd`` strategy, which turns it
on) its collator concatenates a batch's rows into one row without padding or attention mask, with
``position_ids`` that restart at 0 at every row. Rows then stay apart only if the model's attention
reads those position ids: transformers 5.17 builds a block-diagonal mask from them for ``sdpa``,
``eager`` and ``flex_attention`` (masking_utils.find_packed_sequence_indices) and passes the row
boundaries to the flash-attention kernels, but only in a forward without a KV cache (TRL's own
``compute_loss`` sets ``use_cache=False``). An attention implementation or a model's own code that
ignores them lets each row attend to the rows before it, silently, and a kernel can get the mask
wrong on one machine and right on another: torch 2.13's compiled ``flex_attention`` keeps the rows
apart on an AVX512 CPU and not on an AVX2-only one (docs/install.md, "The AVX2 CPU kind"). So
nothing is assumed of an implementation: the probe runs the loaded model on two rows through TRL's
own collator, padded and padding-free, on the machine that will train, and refuses the run when the
two disagree (or the padding-free forward fails).
"""

from __future__ import annotations

import math
from typing import Any

from rlvr.issues import ConfigIssue

# Strategies that keep a row whole (truncated at max_length like an unpacked row); "bfd_split" puts
# the overflow of a long row into another bin and "wrapped" cuts rows anywhere, so an answer can be
# trained apart from its question.
WHOLE_ROWS = ("bfd",)
# How many times model_issues runs the probe (two tiny forwards each) before it trusts a kernel.
PROBES = 3


def padding_free(args: Any) -> bool:
    """Whether TRL's SFTTrainer runs this config padding-free (its own rule, SFTTrainer.__init__)."""
    return bool(args.padding_free or (args.packing and args.packing_strategy in ("bfd", "bfd_split")))


def config_issues(key: str, args: Any, rounds: bool = False) -> list[ConfigIssue]:
    """The combinations of a phase's ``trl.SFTConfig`` (``args``) that cannot run or would train
    something else than its rows (``rounds``: the RFT phase, whose rounds are exact epochs)."""
    issues = []
    if args.padding_free and not args.packing and args.max_length is not None:
        issues.append(
            ConfigIssue(
                f"{key}.padding_free",
                True,
                f"without packing TRL's SFTTrainer does not truncate rows, so it refuses max_length "
                f"({args.max_length}) with padding_free",
                f"set {key}.max_length=null as well (rows are then never cut; the phase's rows are a "
                f"prompt and one short answer), or {key}.packing=true",
            )
        )
    if args.packing and args.max_length is None:
        issues.append(
            ConfigIssue(
                f"{key}.packing",
                True,
                "packing fills bins of max_length tokens, and max_length is null",
                f"set {key}.max_length to the bin size, e.g. 1024",
            )
        )
    if args.packing and args.packing_strategy not in WHOLE_ROWS:
        issues.append(
            ConfigIssue(
                f"{key}.packing_strategy",
                args.packing_strategy,
                "this strategy can cut a row (wrapped: anywhere, without restarting the position ids; "
                "bfd_split: a row longer than max_length), so an answer would be trained apart from "
                "its question",
                f"set {key}.packing_strategy=bfd (rows whole, one attention block each)",
            )
        )
    if rounds and args.packing:
        issues.append(
            ConfigIssue(
                f"{key}.packing",
                True,
                "each RFT round is exactly steps_per_round batches of its own kept completions, read in "
                "order (exact resume); packing merges rows into fewer bins, so a round would cycle its "
                "data and a resume would skip batches",
                f"use {key}.padding_free=true with {key}.max_length=null: no padding, the same rows a step",
            )
        )
    return issues


def probe_rows(vocab: int) -> list[dict[str, list[int]]]:
    """A long row then a short one: if the short one attends to the long one, its logits move far."""
    return [
        {"input_ids": [(3 + 7 * i) % vocab for i in range(24)]},
        {"input_ids": [(5 + 11 * i) % vocab for i in range(5)]},
    ]


def probe(model: Any, pad_token_id: int = 0) -> float:
    """The largest difference of the log-probabilities a padding-free forward gives the probe rows
    from a padded forward of the same rows, both batches made by TRL's collator and run as TRL's
    ``compute_loss`` runs them (no KV cache)."""
    import torch
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    rows = probe_rows(model.config.get_text_config().vocab_size)
    batches = [
        DataCollatorForLanguageModeling(pad_token_id=pad_token_id, padding_free=free)(rows)
        for free in (False, True)
    ]
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            padded, flat = (
                model(**{k: v.to(model.device) if hasattr(v, "to") else v for k, v in b.items() if k != "labels"},
                      use_cache=False).logits.float().log_softmax(-1)
                for b in batches
            )  # fmt: skip
    finally:
        model.train(training)
    real = batches[0]["attention_mask"].bool().to(padded.device)  # [2, 24]
    return float((padded[real] - flat[0]).abs().max())


def tolerance(model: Any) -> float:
    """How far a padding-free forward may differ from a padded one by rounding alone: tight in fp32;
    in 16-bit the two batch shapes sum in other orders. A row attending to the row before it moved
    the log-probabilities by 0.3-0.5 even in a 2-layer random model (tests/unit/test_packing.py). An fp32
    model whose forward runs under 16-bit autocast (accelerate's wrapper, put on at placement where it
    trains in bf16/fp16: rlvr.training_loop.loop.evaluate_at_training_precision) computes in 16 bits."""
    import torch

    autocast = hasattr(model, "_original_forward")
    return 1e-3 if model.dtype == torch.float32 and not autocast else 0.1


def slow_attention_hint(model: Any) -> str | None:
    """A padding-free batch on CUDA under an attention that keeps its rows apart with a dense mask
    (sdpa, eager): the hint to take the varlen kernel instead (why: docs/measurements.md, "Numbers
    behind choices in the code")."""
    attention = getattr(model.config, "_attn_implementation", None)
    if getattr(model.device, "type", None) != "cuda" or attention not in ("sdpa", "eager"):
        return None
    return (
        f"padding-free rows on CUDA under {attention}: the rows are kept apart by a dense mask; "
        "model.attn_implementation=varlen runs PyTorch's variable-length flash kernel instead, "
        "without the mask (measured: benchmarks/gpu_varlen_lease.md)"
    )


def model_issues(key: str, model: Any) -> list[ConfigIssue]:
    """The loaded model refused for a padding-free phase when its attention does not keep the rows
    of a padding-free batch apart (:func:`probe`; the padded batch's pad id is masked, so any id does),
    or cannot run one on this machine (the probe's forward raised)."""
    try:
        # A broken kernel need not be wrong every time (torch 2.13's flex_attention on an AVX2 CPU gave
        # NaN, then 0.2-0.4 at each call): the largest of a few forwards, NaN if any was
        readings = [probe(model) for _ in range(PROBES)]
        moved = math.nan if any(math.isnan(r) for r in readings) else max(readings)
    except Exception as error:  # e.g. torch.compile (flex_attention's kernel) on a CPU it does not support
        measured = f"TRL's padding-free batch of two probe rows failed: {type(error).__name__}: {error}"
    else:
        if moved <= tolerance(model):  # False for NaN: a NaN is refused too
            return []
        measured = (
            f"on two probe rows TRL's padding-free batch moved the log-probabilities by up to {moved:.3f} "
            "from the padded batch, so each row would attend to the rows before it"
        )
    from rlvr.model.loader import ATTENTION

    attention = getattr(model.config, "_attn_implementation", None)
    cause = (
        "load the model with an attention that reads position_ids (model.attn_implementation=sdpa, eager or "
        "flash_attention_2)"
        if attention not in ATTENTION
        else f"{attention} reads position ids, so on this machine its kernel, this model's own code or TRL's "
        "collator does not keep them apart: try model.attn_implementation="
        f"{'eager' if attention == 'sdpa' else 'sdpa'}, and report it with this message"
    )
    return [
        ConfigIssue(
            f"{key}.padding_free",
            True,
            f"a padding-free batch does not keep its rows apart in this model on this machine (attention "
            f"{attention!r}, {type(model).__name__}): {measured}",
            f"set {key}.padding_free=false and {key}.packing=false; {cause}",
        )
    ]
