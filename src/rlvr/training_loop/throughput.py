"""Tokens per second and model FLOP utilisation (MFU) of each training phase, from its step records.

MFU is the share of the GPU's dense bf16 peak that the model's own arithmetic used (PaLM, Chowdhery
et al. 2022, appendix B): a training token costs ``6 N`` FLOPs for the N matmul parameters (forward
2N, backward 4N); with a frozen base (LoRA, QLoRA) the weight gradients of the base are never
computed, so ``4 N``. Attention's own ``12 L q s`` is left out (4% of 6N for a 1.5B model at 700
tokens), so the figure is a slight underestimate. A GRPO step also generates its
completions, ``2 N`` per token, so its tokens are counted at ``8 N`` (``6 N`` frozen). Time is the sum
of the phase's step times (in-training evaluations excluded). The peak is the vendor's dense bf16
figure for the GPU; an unknown GPU gets no MFU (tokens/s still), a CPU none either.
"""

from __future__ import annotations

from typing import Any

# Dense bf16 tensor-core peak, TFLOP/s, by a substring of torch.cuda.get_device_name() (datasheets;
# longest match wins, so "H100 PCIe" beats "H100").
PEAK_BF16_TFLOPS = {
    "H200": 989.4,
    "H100": 989.4,
    "H100 PCIe": 756.0,
    "H100 NVL": 835.0,
    "GH200": 989.4,
    "B200": 2250.0,
    "A100": 312.0,
    "A800": 312.0,
    "L40S": 362.1,
    "L40": 181.0,
    "L4": 121.0,
    "A10G": 70.0,
    "A10": 125.0,
    "RTX 4090": 165.2,
    "RTX 3090": 71.0,
    "A6000": 154.8,
}


def peak_tflops(device_name: str | None) -> float | None:
    if not device_name:
        return None
    matches = [k for k in PEAK_BF16_TFLOPS if k in device_name]
    return PEAK_BF16_TFLOPS[max(matches, key=len)] if matches else None


def matmul_params(config: Any) -> float:
    """N of a transformers config: every weight a token multiplies, the LM head included, the input
    embedding lookup excluded."""
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    hidden, layers = cfg.hidden_size, cfg.num_hidden_layers
    heads = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or hidden // heads
    inter = getattr(cfg, "intermediate_size", 4 * hidden)
    per_layer = hidden * head_dim * (2 * heads + 2 * kv) + 3 * hidden * inter
    return float(layers * per_layer + cfg.vocab_size * hidden)


def phase_throughput(
    rows: list[dict[str, float]], phase: str, config: Any, frozen_base: bool, device_name: str | None
) -> dict[str, Any] | None:
    """tokens, seconds, tokens/s, FLOPs per token and MFU of one phase, over the steps whose token
    count is known (each step's tokens from TRL's running ``num_tokens``; the first step of an
    attempt has no earlier count, and it carries the warm-up too); None when no step has one."""
    steps = [r for r in rows if f"{phase}/tokens_per_second" in r and f"{phase}/step_seconds" in r]
    if not steps:
        return None
    seconds = sum(r[f"{phase}/step_seconds"] for r in steps)
    tokens = sum(r[f"{phase}/tokens_per_second"] * r[f"{phase}/step_seconds"] for r in steps)
    n = matmul_params(config)
    per_token = (4.0 if frozen_base else 6.0) * n + (2.0 * n if phase == "grpo" else 0.0)
    peak = peak_tflops(device_name)
    rate = tokens / seconds if seconds > 0 else 0.0
    return {
        "steps": len(steps),
        "tokens": int(round(tokens)),
        "seconds": round(seconds, 2),
        "tokens_per_second": round(rate, 1),
        "flops_per_token_trained": per_token,
        "mfu": round(rate * per_token / (peak * 1e12), 4) if peak else None,
        "peak_tflops": peak,
        "device": device_name or "cpu",
    }


def summary(rows: list[dict[str, float]], model: Any, device_name: str | None) -> dict[str, dict[str, Any]]:
    """Per phase: what :func:`phase_throughput` gives, for the phases that logged tokens."""
    params = list(model.parameters())
    trainable = sum(p.numel() for p in params if p.requires_grad)
    frozen = trainable < 0.5 * sum(p.numel() for p in params)
    out = {}
    for phase in ("sft", "grpo"):
        found = phase_throughput(rows, phase, model.config, frozen, device_name)
        if found is not None:
            out[phase] = found
    return out


def attempt_summary(outcome: Any) -> dict[str, dict[str, Any]]:
    """:func:`summary` of one attempt's training (a TrainOutcome; None or no steps: empty), on the
    CUDA device it ran on."""
    if outcome is None or not outcome.history:
        return {}
    name = None
    if (outcome.hardware or {}).get("device") == "cuda":
        import torch

        name = torch.cuda.get_device_name(0)
    return summary(outcome.history, outcome.model, name)
