"""SFT's loss from logits at the completion positions only, on a device without Triton (a CPU).

TRL's SFTTrainer (1.16) scores a batch with its fused LM head, which projects only the positions whose
next token is a label, but only on Triton devices: elsewhere it scores every position, prompt and
padding included, and computes entropy and top-1 over all of them (``trl.trainer.utils.
add_fused_lm_head``: "On Triton devices, only the valid positions are scored"). On the default run's
rows (42 real tokens, 23% of them the answer) that made the SFT step on the fp32 path 1.21x slower
than the model's own loss (benchmarks/cpu_fp32.md).

:class:`RLVRSFTTrainer` overrides the documented ``compute_loss``: on such a device the model's own
forward projects only the positions where some row of the batch has a next-token label (transformers'
``logits_to_keep``, a tensor of positions), and the loss is TRL's (the negative log-likelihood summed over
the label tokens, over ``num_items_in_batch``) with TRL's metrics (``entropy``, ``mean_token_accuracy``,
``num_tokens``) over the same tokens TRL counts. Anything else (a CUDA device, TRL's other losses,
label smoothing, a ``compute_loss_func``, a mixture of experts, padding-free rows) keeps TRL's own path.
The loss and gradients equal TRL's to rounding (tests/integration/test_sft_loss.py).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from trl import SFTTrainer


def kept_positions(labels: torch.Tensor) -> torch.Tensor:
    """The positions whose next token is a label in some row (a causal model's logits at position t
    score token t+1).

    >>> kept_positions(torch.tensor([[-100, -100, 5, 6], [-100, 7, 8, -100]])).tolist()
    [0, 1, 2]
    """
    return (labels[:, 1:] != -100).any(dim=0).nonzero().squeeze(-1)


def completion_loss(
    logits: torch.Tensor, targets: torch.Tensor, num_items: Any = None
) -> tuple[torch.Tensor, dict]:
    """TRL's SFT loss (``loss_type="nll"``) from the logits at some positions and the next tokens there.

    ``logits``: (rows, positions, vocab); ``targets``: (rows, positions), -100 where there is no label.
    Returns the loss (summed negative log-likelihood over ``num_items``, else over the label count) and
    the sums TRL's metrics are made of: ``tokens``, ``entropy`` and ``top1`` (no gradient).
    """
    mask = targets != -100
    scored = logits[mask].float()  # only the label positions reach the softmax
    log_probs = torch.log_softmax(scored, dim=-1)
    wanted = targets[mask]
    nll = -log_probs.gather(-1, wanted.unsqueeze(-1)).squeeze(-1)
    count = mask.sum() if num_items is None else num_items
    loss = nll.sum() / torch.as_tensor(count, device=nll.device).clamp(min=1)
    with torch.no_grad():
        sums = {
            "tokens": mask.sum(),
            "entropy": -(log_probs.exp() * log_probs).sum(-1).sum(),
            "top1": (scored.argmax(-1) == wanted).sum(),
        }
    return loss, sums


def _accepts_logits_to_keep(model: Any) -> bool:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "logits_to_keep" in inspect.signature(type(base).forward).parameters


class RLVRSFTTrainer(SFTTrainer):
    """TRL's SFTTrainer, scoring only the completion positions where TRL's fused head scores them all."""

    def _compact_here(self, model: Any, inputs: dict[str, Any]) -> bool:
        """Whether this batch takes the completion-only path (else TRL's own ``compute_loss``)."""
        return (
            inputs["input_ids"].device.type != "cuda"  # CUDA: TRL's Triton head already scores labels only
            and self.args.loss_type == "nll"
            and self.label_smoother is None
            and self.compute_loss_func is None
            and not self.aux_loss_enabled
            and "attention_mask" in inputs
            and "position_ids" not in inputs  # padding-free rows: TRL's path
            and _accepts_logits_to_keep(model)
        )

    def compute_loss(
        self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        if return_outputs or not self._compact_here(model, inputs):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        mode = "train" if self.model.training else "eval"
        labels = inputs["labels"]
        keep = kept_positions(labels)
        forward = {k: v for k, v in inputs.items() if k != "labels"}
        forward["use_cache"] = False
        logits = model(**forward, logits_to_keep=keep).logits
        loss, sums = completion_loss(logits, labels[:, 1:][:, keep], num_items_in_batch)
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * self.accelerator.num_processes  # as TRL: DDP averages, the count is every rank's
        # TRL's metrics (SFTTrainer.compute_loss), over the same label tokens.
        gather = self.accelerator.gather_for_metrics
        valid = gather(sums["tokens"]).sum()
        entropy, top1 = gather(sums["entropy"]).sum(), gather(sums["top1"]).sum()
        self._metrics[mode]["entropy"].append((entropy / valid).item() if valid > 0 else 0.0)
        self._metrics[mode]["mean_token_accuracy"].append((top1 / valid).item() if valid > 0 else 0.0)
        if mode == "train":
            self._total_train_tokens += gather(inputs["attention_mask"].sum()).sum().item()
        self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
        return loss
