"""Pre-flight: will this training run fit the device's memory? Checked before anything loads.

The estimate is arithmetic over the model's published shape (its ``config.json``, or the table
below for hub models that cannot be fetched) and the run's settings:

- weights: parameters x bytes per parameter (fp32 4, bf16/fp16 2, 8-bit 1, 4-bit NF4 ~0.56 with
  double quantisation and the unquantised embeddings counted at 2);
- gradients and AdamW state for the trainable parameters only: all of them in a full fine-tune
  (mixed precision as in the ZeRO paper: 16-bit gradients, fp32 master copy and two fp32
  moments, 16 bytes per parameter with the weights), the adapter's with LoRA (kept in fp32);
- activations of one training micro-batch (Korthikanti et al. 2022: ``s b h (34 + 5 a s / h)``
  bytes per layer in 16-bit, ``2 s b h`` per layer with activation checkpointing), plus the fp32
  logits and their gradient (``2 x b s V x 4`` bytes, large for 150k-token vocabularies);
- the rollout KV cache of GRPO generation (``2 x layers x kv_heads x head_dim x tokens x 2`` bytes
  per completion), or the share a colocated vLLM reserves (``vllm_gpu_memory_utilization``);
- each data-parallel process holds all of it under DDP. DeepSpeed ZeRO-2 divides the gradients and
  optimizer state by the number of processes (Rajbhandari et al. 2020, stage 2: P_os+g); FSDP and
  ZeRO-3 divide the weights too (stage 3: P_os+g+p), while activations, logits and the rollout KV
  cache stay per process. Sharded, rank 0 also holds a full 16-bit copy of the weights while it
  evaluates or saves (rlvr.distributed.Distributed.on_rank0). The all-gathered layer FSDP/ZeRO-3
  hold during a forward pass (one layer's weights) is left out.

On a GPU an estimate above the device's memory refuses the run; on a CPU it only warns (RAM
can swap, and the terms are GPU-shaped). It is an estimate for catching the impossible early (a 7B full fine-tune on a 24 GB GPU), not a
promise: the margin is 10% and every term is printed so the user sees where the memory goes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.config.errors import ConfigIssue

GB = 1024**3


@dataclass(frozen=True)
class Shape:
    """What the estimate needs of a decoder-only transformer."""

    params: float
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    intermediate: int

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Shape:
        hidden, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
        heads = cfg["num_attention_heads"]
        kv = cfg.get("num_key_value_heads") or heads
        vocab, inter = cfg["vocab_size"], cfg.get("intermediate_size", 4 * hidden)
        head_dim = cfg.get("head_dim") or hidden // heads
        per_layer = hidden * head_dim * (2 * heads + 2 * kv) + 3 * hidden * inter
        embed = vocab * hidden * (1 if cfg.get("tie_word_embeddings", False) else 2)
        return cls(float(layers * per_layer + embed), hidden, layers, heads, kv, vocab, inter)


# Published config.json values (hub model cards), for hub ids that cannot be fetched offline.
PUBLISHED = {
    "Qwen/Qwen2.5-0.5B-Instruct": Shape(0.494e9, 896, 24, 14, 2, 151936, 4864),
    "Qwen/Qwen2.5-1.5B-Instruct": Shape(1.54e9, 1536, 28, 12, 2, 151936, 8960),
    "Qwen/Qwen2.5-7B-Instruct": Shape(7.62e9, 3584, 28, 28, 4, 152064, 18944),
    "google/gemma-3-1b-it": Shape(1.0e9, 1152, 26, 4, 1, 262144, 6912),
}

WEIGHT_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0, "8bit": 1.0, "4bit": 0.56}


def shape_of(name_or_path: str) -> Shape | None:
    """The model's shape from its local config.json, else the published table, else None."""
    config = Path(name_or_path) / "config.json"
    if config.is_file():
        return Shape.from_config(json.loads(config.read_text()))
    return PUBLISHED.get(name_or_path)


@dataclass(frozen=True)
class Plan:
    """The settings of one training process that decide its memory."""

    dtype: str = "bfloat16"  # weight dtype as loaded
    quantization: str | None = None  # None | 4bit | 8bit
    lora_r: int | None = None  # None = full fine-tune
    lora_modules: int = 4  # adapted projections per layer
    batch: int = 16  # per-device micro-batch (completions for GRPO)
    seq: int = 512  # prompt + completion tokens
    activation_checkpointing: bool = False
    rollout_tokens: int = 512  # tokens per completion held in the KV cache during generation
    vllm_fraction: float | None = None  # colocated vLLM's share of the device
    processes: int = 1
    # What the distributed strategy divides by ``processes``: None (DDP: nothing), "optimizer"
    # (ZeRO-1/2: gradients + optimizer state) or "weights" (FSDP, ZeRO-3: weights as well).
    shard: str | None = None


def estimate(shape: Shape, plan: Plan, device_gb: float) -> dict[str, float]:
    """Bytes per term for one process, in GB."""
    wbytes = WEIGHT_BYTES[plan.quantization or plan.dtype]
    if plan.quantization:  # embeddings and lm_head stay in 16-bit
        embed = shape.vocab * shape.hidden
        weights = (shape.params - embed) * wbytes + embed * 2.0
    else:
        weights = shape.params * wbytes
    if plan.lora_r:
        trainable = plan.lora_r * 2 * shape.hidden * plan.lora_modules * shape.layers
        train_bytes = trainable * (4 + 4 + 8)  # fp32 adapter: grads + AdamW moments (weights counted above)
        train_bytes += trainable * 4
    else:
        trainable = shape.params
        # Mixed-precision AdamW (Rajbhandari et al. 2020, ZeRO): 16-bit grads + fp32 master copy and
        # two fp32 moments = 2 + 12 bytes per parameter; fp32 weights: fp32 grads + moments = 12.
        train_bytes = trainable * (14.0 if wbytes == 2.0 else 12.0)
    act_scale = 1.0 if plan.dtype != "float32" else 2.0
    s, b, h = plan.seq, plan.batch, shape.hidden
    per_layer = 2 * s * b * h if plan.activation_checkpointing else s * b * h * (34 + 5 * shape.heads * s / h)
    activations = per_layer * shape.layers * act_scale + 2 * b * s * shape.vocab * 4
    head_dim = shape.hidden // shape.heads
    kv = 2 * shape.layers * shape.kv_heads * head_dim * plan.rollout_tokens * plan.batch * 2
    rank0_copy = 0.0
    if plan.shard in ("optimizer", "weights") and plan.processes > 1:
        train_bytes /= plan.processes
    if plan.shard == "weights" and plan.processes > 1:
        rank0_copy = shape.params * 2.0  # the gathered 16-bit copy rank 0 evaluates and saves
        weights /= plan.processes
    terms = {
        "weights": weights,
        "gradients + optimizer": train_bytes,
        "activations + logits": activations,
        "rollout KV cache": kv,
    }
    if rank0_copy:
        terms["rank-0 full-weight copy"] = rank0_copy
    out = {k: v / GB for k, v in terms.items()}
    if plan.vllm_fraction:  # vLLM reserves its share up front (weights and KV cache live in it)
        out["rollout KV cache"] = 0.0
        out["vLLM reservation"] = plan.vllm_fraction * device_gb
    return out


def check(
    shape: Shape, plan: Plan, device_gb: float, device: str, key: str = "model", margin: float = 0.9
) -> tuple[list[ConfigIssue], list[str]]:
    """(refusals, warnings): refuse when the estimate exceeds the device, warn above ``margin``."""
    terms = estimate(shape, plan, device_gb)
    total = sum(terms.values())
    detail = ", ".join(f"{k} {v:.1f}" for k, v in terms.items())
    text = (
        f"estimated {total:.1f} GB per process ({detail}) for {shape.params / 1e9:.2f}B parameters on a "
        f"{device_gb:.0f} GB {device}"
    )
    fixes = []
    if not plan.lora_r:
        fixes.append("train a LoRA adapter (model.lora={r: 16, ...})")
    if not plan.quantization:
        fixes.append("load the base in 4-bit (model.quantization=4bit, with LoRA: QLoRA)")
    if not plan.activation_checkpointing:
        fixes.append("model.gradient_checkpointing=true")
    if plan.processes > 1 and plan.shard != "weights":
        fixes.append(
            f"shard the weights, gradients and optimizer state across the {plan.processes} processes "
            "(distributed=fsdp or distributed=deepspeed_zero3)"
        )
    fixes.append("a smaller per_device_train_batch_size or max_completion_length")
    if total > device_gb:
        return [ConfigIssue(key, "(memory)", f"does not fit: {text}", "; or ".join(fixes))], []
    if total > margin * device_gb:
        return [], [f"tight memory: {text}; if it runs out: {'; or '.join(fixes)}"]
    return [], []


def batch_issue(
    per_device: int, processes: int, accumulation: int, num_generations: int
) -> ConfigIssue | None:
    """GRPO groups num_generations completions of one prompt; the global batch must hold whole groups."""
    total = per_device * processes * accumulation
    if total % num_generations == 0:
        return None
    return ConfigIssue(
        "training_loop.grpo.per_device_train_batch_size",
        per_device,
        f"global batch {per_device} x {processes} process(es) x {accumulation} accumulation = {total} "
        f"is not a multiple of num_generations={num_generations}",
        f"make it a multiple, e.g. per_device_train_batch_size={num_generations} with {processes} process(es)",
    )


def device_memory_gb(device: str) -> float:
    """Total memory of the training device: the GPU's, or the machine's RAM for the CPU."""
    if device == "cuda":
        import torch

        return torch.cuda.get_device_properties(0).total_memory / GB
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024 / GB
    return float("inf")  # unknown: nothing to compare against


def shard_of(setup: Any) -> str | None:
    """What a distributed setup (rlvr.distributed.Distributed, or None) shards: see Plan.shard."""
    if setup is None:
        return None
    if setup.sharded:
        return "weights"
    return "optimizer" if setup.strategy == "DEEPSPEED" else None


def training_args(loop: Any) -> Any | None:
    """The TRL config object of the phase whose memory is estimated (``trl.GRPOConfig``, else
    ``trl.SFTConfig``), built from the run's fields as the phase builds it for its trainer; None
    when no phase trains. Its values are TRL's, defaults included: nothing here copies them."""
    import tempfile

    # A training loop without TRL phases (a plugin's own) has nothing to estimate.
    phases = [getattr(loop, name, None) for name in ("grpo_phase", "rft_phase", "sft_phase")]
    phase = next((p for p in phases if p is not None and p.enabled), None)
    if phase is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        return phase.config(Path(tmp))


# Tokens a prompt may take beside the completion (the tasks' prompts are well under it).
PROMPT_BUDGET = 256


def plan_of(model: Any, args: Any, processes: int, shard: str | None = None) -> Plan:
    """The memory plan of the configured model component and a phase's TRL config (``args``)."""
    lora = getattr(model, "lora", None) or {}
    modules = lora.get("target_modules")
    if hasattr(args, "max_completion_length"):  # GRPO: the prompt budget + the completion
        completion = args.max_completion_length
    else:  # SFT: max_length covers prompt and answer (None: not truncated, budget as for GRPO)
        completion = args.max_length - PROMPT_BUDGET if args.max_length else PROMPT_BUDGET
    dtype = getattr(model, "dtype", "float32")
    return Plan(
        # "auto" (transformers) and None (unsloth) pick a 16-bit dtype on a GPU
        dtype=dtype if dtype not in ("auto", None) else "bfloat16",
        quantization=getattr(model, "quantization", None),
        lora_r=lora.get("r") if lora else None,
        lora_modules=len(modules) if isinstance(modules, list | tuple) else 7,
        batch=args.per_device_train_batch_size,
        seq=PROMPT_BUDGET + completion,
        activation_checkpointing=bool(getattr(model, "gradient_checkpointing", False)),
        rollout_tokens=PROMPT_BUDGET + completion,
        vllm_fraction=args.vllm_gpu_memory_utilization if getattr(args, "use_vllm", False) else None,
        processes=processes,
        shard=shard,
    )


def run_checks(model: Any, loop: Any, setup: Any = None) -> tuple[list[ConfigIssue], list[str]]:
    """Memory and batch checks of a configured pipeline, before anything loads (``setup``: the
    distributed component, for what its strategy shards)."""
    import os

    processes = int(os.environ.get("WORLD_SIZE", "1"))
    args = training_args(loop)
    issues: list[ConfigIssue] = []
    if hasattr(args, "num_generations"):
        found = batch_issue(
            args.per_device_train_batch_size,
            processes,
            args.gradient_accumulation_steps,
            args.num_generations,
        )
        if found:
            issues.append(found)
    inputs = _estimate_inputs(model, loop, args, setup, processes)
    if inputs is None:
        return issues, []
    shape, plan, device = inputs
    refusals, warnings = check(shape, plan, device_memory_gb(device), device)
    if device != "cuda":  # RAM is not a hard wall (and the estimate is for GPUs): say it, don't refuse
        warnings = [i.problem for i in refusals] + warnings
        refusals = []
    return issues + refusals, warnings


def _estimate_inputs(
    model: Any, loop: Any, args: Any, setup: Any, processes: int
) -> tuple[Shape, Plan, str] | None:
    """(shape, plan, device) of a configured training run; None when nothing is estimated (no
    training phase, or a model whose shape is unknown)."""
    shape = shape_of(str(getattr(model, "name_or_path", "")))
    if args is None or shape is None:
        return None
    return shape, plan_of(model, args, processes, shard_of(setup)), loop.hardware.device


def memory_record(model: Any, loop: Any, setup: Any = None) -> dict[str, Any]:
    """What report.json records under ``memory``: the pre-flight's estimate for this run (the same
    arithmetic as :func:`run_checks`, per process) beside the CUDA peak this process measured, so
    the estimate can be judged against the real thing (scripts/gpu_check.py). Sizes in GB (2**30
    bytes); None where there is nothing to record (no estimate; no CUDA peak on a CPU run)."""
    import os

    from rlvr.hardware import cuda_peak_gb

    inputs = _estimate_inputs(model, loop, training_args(loop), setup, int(os.environ.get("WORLD_SIZE", "1")))
    record: dict[str, Any] = {"preflight_estimate_gb": None, "preflight_terms_gb": None}
    if inputs is not None:
        shape, plan, device = inputs
        device_gb = device_memory_gb(device)
        terms = estimate(shape, plan, device_gb)
        record = {
            "preflight_estimate_gb": round(sum(terms.values()), 3),
            "preflight_terms_gb": {k: round(v, 3) for k, v in terms.items()},
            "device_memory_gb": round(device_gb, 3),
        }
    return {**record, **cuda_peak_gb()}
