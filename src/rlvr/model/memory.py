"""Memory check: will this training run fit the device's memory? Checked before training starts.

The estimate is arithmetic over the model's published shape (its ``config.json``, or
rlvr.model.architectures for hub models that cannot be fetched) and the run's settings, one term for
each thing a training process keeps (GB, 2**30 bytes; measured against shape models on a GPU and on
this CPU: benchmarks/memory_preflight.md, docs/scaling.md):

- weights: parameters x bytes per parameter (fp32 4, bf16/fp16 2, 8-bit 1, NF4 ~0.52 with double
  quantisation, the embeddings and LM head unquantised: in fp32 under QLoRA, see :func:`kbit_prepared`);
- autocast copies: a model held in fp32 but trained in bf16/fp16 keeps a 16-bit copy of each weight
  that a matmul used, until the backward pass has used it (2 bytes per parameter);
- gradients and optimizer state for the trainable parameters: transformers' Trainer runs
  ``torch.optim.AdamW`` on the parameters as loaded, so gradients and both moments take the
  parameter's own dtype (3 x 2 bytes per parameter in bf16, 3 x 4 in fp32; no fp32 master copy);
  a LoRA adapter is kept in fp32 by PEFT (4 + 4 + 8 bytes per adapter parameter, weights included);
- activations saved for backward, per token and layer (bf16 under autocast, SDPA's fused kernels,
  which keep no s x s score matrix): ``16 h + 6 q + 4 kv + 8 i`` bytes for a Llama/Qwen block
  (h hidden, q and kv the query and key/value widths, i the MLP width), 1.5x that with an fp32
  residual stream (an fp32 model, or QLoRA); with gradient checkpointing each layer keeps its input
  (2 h bytes, 4 h in fp32) and one layer is recomputed at a time (up to 1.5x its activations, measured);
- logits: TRL's fused LM head scores the completion tokens in tiles and never holds the
  (batch, sequence, vocabulary) logits, so what remains is a tile's worth (LOGIT_ROWS rows of
  fp32 logits, softmax and gradient); generation holds one step's fp32 logits for the generation
  batch;
- the rollout KV cache of GRPO generation (``2 x layers x kv_heads x head_dim x tokens x 2`` bytes
  for each sequence generated at once), or the share a colocated vLLM reserves;
- the peak is the resident part (weights, autocast copies, optimizer state) plus the larger of the
  backward pass (gradients, activations, logits) and generation (KV cache, sampling logits): they
  never coexist;
- each data-parallel process holds all of it under DDP. DeepSpeed ZeRO-2 divides the gradients and
  optimizer state by the number of processes (Rajbhandari et al. 2020, stage 2: P_os+g); FSDP and
  ZeRO-3 divide the weights too (stage 3: P_os+g+p), while activations, logits and the rollout KV
  cache stay per process. Sharded, rank 0 also holds a full 16-bit copy of the weights while it
  evaluates or saves (rlvr.runtime.distributed.Distributed.on_rank0).

Sequence lengths: the completion is the configured one (GRPO's ``max_completion_length``, RFT's
``max_new_tokens``, SFT's answers within ``max_length``); before anything loads the prompt takes
PROMPT_BUDGET tokens (a bound); once the data is loaded the check runs again with the longest prompt the
run will train on, tokenized by the model's own tokenizer and chat template, before any training step.
Every verdict says which lengths it assumed and where each comes from (``Plan.prompt_from``,
``Plan.completion_from``), the longest completion that fits, and, when it does not fit, each change
that would make it fit with its estimate (:func:`levers`).

On a GPU an estimate above the device's memory refuses the run; on a CPU it only warns (RAM can
swap) up to RAM plus swap. Every term is printed so the user sees where the memory goes, with what
the estimate rests on (:func:`basis`: measured shapes, or an extrapolation beyond them).

Planning a rental: ``runtime.memory.target`` names a card (rlvr.runtime.cards) or a size in GB; the
check before anything loads then compares with that card, in the precision ``auto`` picks there, and
``validate_only=true`` prints the verdict with the estimate whether it fits or not (:func:`summary`).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlvr.issues import ConfigIssue
from rlvr.runtime.cards import CARDS, Card

GB = 1024**3
# LoRA target name -> (input width, output width) in terms of the shape's sizes
_LORA_DIMS = {
    "q_proj": ("h", "q"),
    "k_proj": ("h", "kv"),
    "v_proj": ("h", "kv"),
    "o_proj": ("q", "h"),
    "gate_proj": ("h", "i"),
    "up_proj": ("h", "i"),
    "down_proj": ("i", "h"),
}
ALL_LINEAR = tuple(_LORA_DIMS)


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
    head_dim: int = 0  # 0: hidden // heads
    tied: bool = True

    @property
    def dims(self) -> dict[str, int]:
        head_dim = self.head_dim or self.hidden // self.heads
        return {
            "h": self.hidden,
            "q": self.heads * head_dim,
            "kv": self.kv_heads * head_dim,
            "i": self.intermediate,
        }

    @property
    def embedding_params(self) -> float:
        return self.vocab * self.hidden * (1 if self.tied else 2)

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> Shape:
        """The shape a ``config.json`` declares, every weight it declares counted (mixture-of-experts
        layers, shared experts, extra prediction layers: :func:`mlp_params`); :class:`UncountedWeights`
        for a config that declares weights this arithmetic cannot count."""
        uncounted_keys(cfg)
        hidden, layers = _count(cfg, "hidden_size"), _count(cfg, "num_hidden_layers")
        heads = _count(cfg, "num_attention_heads")
        kv = _count(cfg, "num_key_value_heads", heads) or heads
        vocab, inter = _count(cfg, "vocab_size"), _count(cfg, "intermediate_size", 4 * hidden)
        head_dim = _count(cfg, "head_dim", 0) or hidden // max(heads, 1)
        tied = bool(cfg.get("tie_word_embeddings", False))
        attention = hidden * head_dim * (2 * heads + 2 * kv)
        mlp, extra_layers = mlp_params(cfg, hidden, inter, layers)
        embed = vocab * hidden * (1 if tied else 2)
        params = float((layers + extra_layers) * attention + mlp + embed)
        return cls(params, hidden, layers, heads, kv, vocab, inter, head_dim, tied)


class UncountedWeights(ValueError):
    """A ``config.json`` that declares weights the memory check cannot count: the keys, and why."""


# config.json keys the arithmetic reads (COUNTED) or knows to add no weights (rope and norm settings,
# token ids, routing settings, attention windows). Any other key whose name says it multiplies
# weights (_MULTIPLIES: a number of experts, heads or layers, a size, a rank, a sub-model's config)
# is refused: an estimate that leaves weights out lets a model that allocates GBs pass as "OK".
COUNTED = frozenset(
    {
        "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
        "vocab_size", "intermediate_size", "num_experts", "num_local_experts", "n_routed_experts",
        "moe_intermediate_size", "n_shared_experts", "shared_expert_intermediate_size",
        "first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step", "mlp_only_layers",
        "num_nextn_predict_layers",
    }
)  # fmt: skip
NO_WEIGHTS = frozenset(
    {
        "max_window_layers", "num_experts_per_tok", "output_router_logits", "router_aux_loss_coef",
        "router_z_loss_coef", "router_jitter_noise", "n_group", "topk_group", "ep_size",
        "quantization_config", "rope_scaling", "rope_parameters", "max_position_embeddings",
        "sliding_window_size", "attention_chunk_size", "no_rope_layers", "no_rope_layer_interval",
    }
)  # fmt: skip
_MULTIPLIES = re.compile(
    r"^num_|^n_|_num_|expert|moe|router|_heads?$|_layers?$|_rank$|_size$|_dim$|nextn|mtp|_config$"
)
# More layers than this is no model (and would be counted one by one).
MAX_LAYERS = 1_000_000


def uncounted_keys(cfg: dict[str, Any]) -> None:
    """Raise :class:`UncountedWeights` naming the keys of ``cfg`` that declare weights the
    arithmetic does not count."""
    unknown = sorted(
        str(k) for k in cfg if k not in COUNTED and k not in NO_WEIGHTS and _MULTIPLIES.search(str(k))
    )
    if unknown:
        raise UncountedWeights(
            f"its config.json declares {', '.join(f'{k}={cfg[k]!r}'[:80] for k in unknown)}, weights the "
            "memory check cannot count (other experts, heads, layers or a sub-model)"
        )


def _count(cfg: dict[str, Any], key: str, default: int | None = None) -> int:
    """A whole, non-negative number of ``cfg``; :class:`UncountedWeights` for anything else."""
    value = cfg.get(key, default)
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        shown = "missing" if key not in cfg else f"{value!r}"[:80]
        raise UncountedWeights(f"its config.json's {key} is {shown}, not a whole number of at least 0")
    return value


def mlp_params(cfg: dict[str, Any], hidden: int, inter: int, layers: int) -> tuple[int, int]:
    """(weights of every layer's MLP, extra layers) that ``cfg`` declares: a dense MLP
    (``3 h i``), or in a mixture-of-experts layer each routed expert (``num_experts`` /
    ``num_local_experts`` / ``n_routed_experts`` of width ``moe_intermediate_size``, else
    ``intermediate_size``), the router, the shared experts (``n_shared_experts`` of that width, or one
    of ``shared_expert_intermediate_size`` with its gate); which layers are sparse as Qwen-MoE
    (``decoder_sparse_step``, ``mlp_only_layers``) and DeepSeek (``first_k_dense_replace``,
    ``moe_layer_freq``) say; ``num_nextn_predict_layers`` extra layers (DeepSeek-V3's multi-token
    prediction) as sparse ones with their ``2 h x h`` projection."""
    if layers > MAX_LAYERS:
        raise UncountedWeights(f"its config.json declares {layers} layers, more than {MAX_LAYERS:,}")
    experts = max(_count(cfg, k, 0) for k in ("num_experts", "num_local_experts", "n_routed_experts"))
    dense = 3 * hidden * inter
    if experts == 0:
        return layers * dense, 0
    width = _count(cfg, "moe_intermediate_size", 0) or inter
    sparse = experts * (3 * hidden * width + hidden)
    sparse += _count(cfg, "n_shared_experts", 0) * 3 * hidden * width
    shared = _count(cfg, "shared_expert_intermediate_size", 0)
    sparse += 3 * hidden * shared + (hidden if shared else 0)
    first, freq = _count(cfg, "first_k_dense_replace", 0), _count(cfg, "moe_layer_freq", 1) or 1
    step, listed = _count(cfg, "decoder_sparse_step", 1) or 1, cfg.get("mlp_only_layers") or []
    if not isinstance(listed, list) or not all(type(i) is int for i in listed):
        raise UncountedWeights(f"its config.json's mlp_only_layers is {listed!r:.80}, not a list of layers")
    only = set(listed)
    n_sparse = sum(
        1 for i in range(layers) if i >= first and i % freq == 0 and (i + 1) % step == 0 and i not in only
    )
    extra = _count(cfg, "num_nextn_predict_layers", 0)
    return n_sparse * sparse + (layers - n_sparse) * dense + extra * (sparse + 2 * hidden * hidden), extra


def _published() -> dict[str, Shape]:
    from rlvr.model.architectures import BY_HUB_ID

    return {hub_id: Shape.from_config(fields) for hub_id, fields in BY_HUB_ID.items()}


# Published config.json values (rlvr.model.architectures), for hub ids that cannot be fetched offline.
PUBLISHED = _published()

WEIGHT_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0, "8bit": 1.0, "4bit": 0.52}


def shape_of(name_or_path: str) -> Shape | None:
    """The model's shape from its local config.json, else the published table, else None."""
    config = Path(name_or_path) / "config.json"
    if config.is_file():
        from rlvr.runtime.safe_json import loads

        try:
            cfg = loads(config.read_bytes(), config)
        except (ValueError, OSError) as exc:
            raise UncountedWeights(f"its config.json cannot be read as JSON ({exc})") from None
        if not isinstance(cfg, dict):
            raise UncountedWeights("its config.json is not a JSON object")
        return Shape.from_config(cfg)
    return PUBLISHED.get(name_or_path)


def uncounted_issue(name_or_path: str, exc: UncountedWeights) -> ConfigIssue:
    """The refusal of a model whose config.json declares weights the memory check cannot count."""
    return ConfigIssue(
        "model.name_or_path",
        name_or_path,
        f"{exc}; a run is not started on a memory estimate that leaves weights out",
        "use a model folder whose config.json declares only what the memory check counts (a decoder with "
        'dense or mixture-of-experts layers: SECURITY.md "Run directories and checkpoints"), or check '
        "where that folder came from",
    )


@dataclass(frozen=True)
class Plan:
    """The settings of one training process that decide its memory."""

    dtype: str = "bfloat16"  # weight dtype as loaded
    precision: str = "bf16"  # the training precision (rlvr.runtime.hardware): bf16 | fp16 | fp32
    quantization: str | None = None  # None | 4bit | 8bit
    lora_r: int | None = None  # None = full fine-tune
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    batch: int = 16  # per-device training micro-batch (sequences)
    prompt: int = 256  # prompt tokens (the longest of the batch: shorter ones are padded to it)
    completion: int = 256  # completion / answer tokens
    activation_checkpointing: bool = False
    generation_batch: int = 0  # GRPO: sequences generated at once (0: no generation)
    vllm_fraction: float | None = None  # colocated vLLM's share of the device
    processes: int = 1
    # What the distributed strategy divides by ``processes``: None (DDP: nothing), "optimizer"
    # (ZeRO-1/2: gradients + optimizer state) or "weights" (FSDP, ZeRO-3: weights as well).
    shard: str | None = None
    phase: str = "grpo"  # the training phase planned (its settings are training_loop.<phase>.*)
    # Where the two lengths come from, said with every verdict (the setting, the data or a bound).
    prompt_from: str = "given"
    completion_from: str = "given"


# Terms that are resident through a step, and the two phases of a step that never coexist.
RESIDENT = ("weights", "autocast copies", "optimizer state")
BACKWARD = ("gradients", "activations", "logits")
ROLLOUT = ("rollout KV cache", "vLLM reservation")
# What TRL's fused LM head holds at once, as rows of fp32 logits with their softmax and gradient
# (rows x vocab x 4 x 3 bytes): the largest transient beside the activations measured on an H200
# was 0.43 GB at Qwen2.5's 151,936-token vocabulary (benchmarks/memory_preflight.md).
LOGIT_ROWS = 256
# Gradient checkpointing recomputes one layer during backward; the recomputed layer and its
# gradients were up to 1.5x a layer's saved activations (benchmarks/memory_preflight.md).
RECOMPUTE = 1.5


def adapter_params(shape: Shape, plan: Plan) -> float:
    dims = shape.dims
    per_layer = sum(
        dims[a] + dims[b] for a, b in (_LORA_DIMS[t] for t in plan.lora_targets if t in _LORA_DIMS)
    )
    return float(plan.lora_r or 0) * per_layer * shape.layers


def kbit_prepared(plan: Plan) -> bool:
    """QLoRA: rlvr's loader runs PEFT's ``prepare_model_for_kbit_training``, which casts every
    parameter left in 16-bit (the embeddings, the LM head, the norms) to fp32, so the embeddings
    take 4 bytes a parameter and the residual stream runs in fp32 (measured on an H200: the
    estimate without this was 0.78-0.87x of the peak; benchmarks/memory_preflight.md)."""
    return bool(plan.quantization and plan.lora_r)


def activation_bytes_per_token(shape: Shape, plan: Plan) -> float:
    """Bytes one token keeps for backward across all layers."""
    d = shape.dims
    block = float(16 * d["h"] + 6 * d["q"] + 4 * d["kv"] + 8 * d["i"])
    fp32_stream = plan.dtype == "float32" or kbit_prepared(plan)
    if fp32_stream:  # fp32 residual stream and norms beside the 16-bit matmul inputs
        block *= 1.5
    if plan.precision == "fp32":
        block *= 2.0
    if plan.activation_checkpointing:
        stream = 4 if fp32_stream else 2
        return shape.layers * stream * d["h"] + RECOMPUTE * block
    return shape.layers * block


def _sharded(terms: dict[str, float], shape: Shape, plan: Plan) -> dict[str, float]:
    if plan.processes <= 1 or plan.shard not in ("optimizer", "weights"):
        return terms
    for key in ("gradients", "optimizer state"):
        terms[key] /= plan.processes
    if plan.shard == "weights":
        terms["weights"] /= plan.processes
        terms["rank-0 full-weight copy"] = shape.params * 2.0  # the gathered 16-bit copy rank 0 uses
    return terms


def estimate(shape: Shape, plan: Plan, device_gb: float) -> dict[str, float]:
    """GB per term for one process; :func:`peak` combines them."""
    wbytes = WEIGHT_BYTES[plan.quantization or plan.dtype]
    embed = shape.embedding_params
    # quantised: the embeddings and lm_head stay unquantised (in fp32 once prepared for QLoRA)
    embed_bytes = 4.0 if kbit_prepared(plan) else 2.0
    weights = (
        (shape.params - embed) * wbytes + embed * embed_bytes if plan.quantization else shape.params * wbytes
    )
    sixteen_bit = plan.precision in ("bf16", "fp16")
    autocast = (
        shape.params * 2.0 if sixteen_bit and plan.dtype == "float32" and not plan.quantization else 0.0
    )
    if plan.lora_r:
        adapter = adapter_params(shape, plan)
        weights += adapter * 4  # PEFT keeps the adapter in fp32
        gradients, optimizer = adapter * 4, adapter * 8
    else:
        gradients, optimizer = shape.params * wbytes, shape.params * wbytes * 2
    tokens = plan.batch * (plan.prompt + plan.completion)
    activations = tokens * activation_bytes_per_token(shape, plan)
    logits = min(plan.batch * plan.completion, LOGIT_ROWS) * shape.vocab * 4 * 3
    kv_heads_dim = shape.dims["kv"]
    rollout = (
        2 * shape.layers * kv_heads_dim * (plan.prompt + plan.completion) * plan.generation_batch * 2
        + plan.generation_batch * shape.vocab * 4 * 3
    )
    terms = {
        "weights": weights,
        "autocast copies": autocast,
        "optimizer state": optimizer,
        "gradients": gradients,
        "activations": activations,
        "logits": logits,
        "rollout KV cache": rollout,
    }
    out = {k: v / GB for k, v in _sharded(terms, shape, plan).items()}
    if plan.vllm_fraction:  # vLLM reserves its share up front (weights and KV cache live in it)
        out["rollout KV cache"] = 0.0
        out["vLLM reservation"] = plan.vllm_fraction * device_gb
    return out


def peak(terms: dict[str, float]) -> float:
    """The estimated peak of a step: what stays resident plus the larger of backward and rollout."""
    resident = sum(v for k, v in terms.items() if k not in BACKWARD + ROLLOUT)
    backward = sum(terms.get(k, 0.0) for k in BACKWARD)
    rollout = sum(terms.get(k, 0.0) for k in ROLLOUT)
    # a colocated vLLM holds its reservation through the backward pass too
    return resident + max(backward + terms.get("vLLM reservation", 0.0), rollout)


# The shape models whose measured training peaks the estimate was fitted to, and how far above those
# peaks it came out (benchmarks/memory_preflight.md).
MEASURED = ("HuggingFaceTB/SmolLM2-135M-Instruct", "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct")
MEASURED_RATIO = (1.03, 1.28)


def basis(shape: Shape) -> str:
    """What the estimate for ``shape`` rests on: measured shapes of its size, or an extrapolation
    from the largest of them."""
    sizes = [PUBLISHED[name].params for name in MEASURED]
    low, high = MEASURED_RATIO
    measured = (
        f"training steps of shape models of {min(sizes) / 1e9:.2f}-{max(sizes) / 1e9:.2f}B parameters "
        f"measured on an H200, where the estimate was {low:.2f}-{high:.2f}x each measured peak "
        "(benchmarks/memory_preflight.md)"
    )
    if shape.params <= max(sizes) * 1.01:
        return f"basis: {measured}"
    return (
        f"basis: extrapolated ({shape.params / max(sizes):.1f}x the largest shape measured) from {measured}; "
        "the weight, gradient and optimizer terms scale exactly with the parameters, the activation terms "
        "with the bytes per token and layer measured there"
    )


def _terms_text(terms: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:.1f}" for k, v in terms.items() if v)


def _plan_text(shape: Shape, plan: Plan) -> str:
    return (
        f"{shape.params / 1e9:.2f}B parameters, micro-batch {plan.batch} x ({plan.prompt} prompt + "
        f"{plan.completion} completion) tokens in {plan.precision} (the {plan.phase} phase; prompt: "
        f"{plan.prompt_from}; completion: {plan.completion_from})"
    )


# The LoRA rank a lever proposes where the run trains every weight (PEFT's usual r; the adapter's own
# memory is small beside the base: adapter_params).
LEVER_RANK = 16
# Lengths searched for the longest completion that fits (a bound: no task here asks for more).
LONGEST = 131_072


def _fits(shape: Shape, plan: Plan, limit_gb: float, device_gb: float) -> bool:
    return peak(estimate(shape, plan, device_gb)) <= limit_gb


def longest_completion(shape: Shape, plan: Plan, limit_gb: float, device_gb: float) -> int:
    """The longest completion (tokens) that keeps ``plan`` under ``limit_gb``, up to LONGEST; 0 when
    none does (the peak only grows with the length: a binary search)."""
    low, high = 0, LONGEST
    while low < high:
        mid = (low + high + 1) // 2
        if _fits(shape, dataclasses.replace(plan, completion=mid), limit_gb, device_gb):
            low = mid
        else:
            high = mid - 1
    return low


def _length_lever(plan: Plan, tokens: int) -> str:
    """The setting that caps the completion at ``tokens`` in ``plan``'s phase."""
    key = f"training_loop.{plan.phase}"
    if plan.phase == "grpo":
        return f"{key}.max_completion_length={tokens}"
    if plan.phase == "rft":
        return f"{key}.max_new_tokens={tokens}"
    return f"{key}.max_length={plan.prompt + tokens}"


def levers(shape: Shape, plan: Plan, limit_gb: float, device_gb: float) -> list[str]:
    """Each change that brings ``plan``'s estimated peak under ``limit_gb``, with that peak: one setting
    at a time (gradient checkpointing, a LoRA adapter, QLoRA, sharding, the largest micro-batch that
    fits with the accumulation that keeps the batch, the longest completion that fits), else the
    switches together (with the micro-batch or length they still need); and the smallest listed card
    that holds the plan as it is."""
    key = f"training_loop.{plan.phase}"
    lora = f"model.lora={{r: {LEVER_RANK}}}"
    # (the setting, what it does, the plan's fields it changes)
    switches: list[tuple[str, str, dict[str, Any]]] = []
    if not plan.activation_checkpointing:
        checkpointing = {"activation_checkpointing": True}
        switches.append(("model.gradient_checkpointing=true", " (recompute activations)", checkpointing))
    if not plan.lora_r:
        switches.append((lora, " (train a LoRA adapter)", {"lora_r": LEVER_RANK}))
    if not plan.quantization:
        setting = "model.quantization=4bit" + ("" if plan.lora_r else f" with {lora}")
        switches.append((setting, " (QLoRA)", {"quantization": "4bit", "lora_r": plan.lora_r or LEVER_RANK}))
    if plan.processes > 1 and plan.shard != "weights":
        switches.append(
            (
                "distributed=fsdp or distributed=deepspeed_zero3",
                f" (shard the weights, gradients and optimizer state across the {plan.processes} processes)",
                {"shard": "weights"},
            )
        )

    def gb(candidate: Plan) -> str:
        return f"{peak(estimate(shape, candidate, device_gb)):.1f} GB"

    def fit(candidate: Plan) -> bool:
        return _fits(shape, candidate, limit_gb, device_gb)

    def shrunk(base: Plan, prefix: str) -> list[str]:
        out = []
        smaller = [b for b in range(base.batch - 1, 0, -1) if base.batch % b == 0]
        batch = next((b for b in smaller if fit(dataclasses.replace(base, batch=b))), 0)
        if batch:
            out.append(
                f"{prefix}{key}.per_device_train_batch_size={batch} with {base.batch // batch}x its "
                f"gradient_accumulation_steps (the same batch): {gb(dataclasses.replace(base, batch=batch))}"
            )
        tokens = longest_completion(shape, base, limit_gb, device_gb)
        if 0 < tokens < base.completion:
            shorter = dataclasses.replace(base, completion=tokens)
            out.append(f"{prefix}{_length_lever(base, tokens)}: {gb(shorter)}")
        return out

    found = [
        f"{setting}{why}: {gb(changed)}"
        for setting, why, changes in switches
        if fit(changed := dataclasses.replace(plan, **changes))
    ]
    found += shrunk(plan, "")
    if not found and switches:  # no one change is enough: the switches together, then shrink
        together = dataclasses.replace(plan, **{k: v for *_, changes in switches for k, v in changes.items()})
        names = " + ".join(
            dict.fromkeys(part for setting, *_ in switches for part in setting.split(" with "))
        )
        names += f" ({', '.join(why.strip(' ()') for _, why, _ in switches)}, together)"
        found += [f"{names}: {gb(together)}"] if fit(together) else shrunk(together, f"{names} + ")
    need = peak(estimate(shape, plan, device_gb)) * device_gb / limit_gb
    cards = sorted((c for c in CARDS.values() if c.memory_gb >= need), key=lambda c: c.memory_gb)
    if cards:
        found.append(f"a card of {need:.1f} GB or more (the smallest listed: {cards[0].name})")
    return found


def describe(shape: Shape, plan: Plan, terms: dict[str, float], where: str) -> str:
    """The estimate in words: its peak, every term, the plan it is for, the device and its basis."""
    return (
        f"estimated peak {peak(terms):.1f} GB per process ({_terms_text(terms)}; backward and rollout "
        f"never coexist) for {_plan_text(shape, plan)}, on {where}; {basis(shape)}"
    )


def check(
    shape: Shape,
    plan: Plan,
    device_gb: float,
    device: str,
    key: str = "model",
    margin: float = 0.9,
    where: str | None = None,
) -> tuple[list[ConfigIssue], list[str]]:
    """(refusals, warnings): refuse when the estimate exceeds the device, warn above ``margin``
    (``where``: the device in words; default "a <GB> GB <device>")."""
    terms = estimate(shape, plan, device_gb)
    total = peak(terms)
    text = describe(shape, plan, terms, where or f"a {device_gb:.0f} GB {device}")
    if total > device_gb:
        fixes = levers(shape, plan, device_gb, device_gb) or [_NO_LEVER]
        return [ConfigIssue(key, "(memory)", f"does not fit: {text}", _levers_text(fixes))], []
    if total > margin * device_gb:
        fixes = levers(shape, plan, margin * device_gb, device_gb) or [_NO_LEVER]
        return [], [f"tight memory: {text}; if it runs out: {_levers_text(fixes)}"]
    return [], []


_NO_LEVER = "no single setting here brings it under: several processes with sharding (distributed=fsdp)"


def _levers_text(found: list[str]) -> str:
    return f"each of these fits (estimated peak): {'; or '.join(found)}"


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
    """What a distributed setup (rlvr.runtime.distributed.Distributed, or None) shards: see Plan.shard."""
    if setup is None:
        return None
    if setup.sharded:
        return "weights"
    return "optimizer" if setup.strategy == "DEEPSPEED" else None


def training_args(loop: Any) -> Any | None:
    """The TRL config object of the phase whose memory is estimated (``trl.GRPOConfig``, else
    ``trl.SFTConfig``), built from the run's fields as the phase builds it for its trainer; None
    when no phase trains. Its values are TRL's, defaults included: nothing here copies them."""
    configs = phase_configs(loop)
    return next(iter(configs.values()), None)  # grpo, else rft, else sft


# Tokens a prompt may take before the data is loaded (a bound: the tasks' prompts are well under
# it); the check that runs once the data is loaded uses the longest prompt instead.
PROMPT_BUDGET = 256


# Chat-template tokens around an SFT answer (the assistant turn's markers, the end of turn).
ANSWER_MARKERS = 8


def plan_of(
    model: Any,
    args: Any,
    processes: int,
    shard: str | None = None,
    lengths: tuple[int, int] | None = None,
    phase: str | None = None,
    rft: Any = None,
) -> Plan:
    """The memory plan of the configured model component and a phase's TRL config (``args``);
    ``lengths``: the data's longest (prompt, answer) in tokens (None: PROMPT_BUDGET, and for SFT the
    rest of ``max_length``); ``phase``: its name (default grpo for a GRPO config, else sft); ``rft``:
    an RFT phase's round settings (rlvr.training_loop.rft.RFTSettings): it trains on completions it
    sampled, up to ``max_new_tokens``, sampled ``max(batch_size, samples_per_prompt)`` at once."""
    lora = getattr(model, "lora", None) or {}
    modules = lora.get("target_modules")
    grpo = hasattr(args, "max_completion_length")
    phase = phase or ("grpo" if grpo else "sft")
    key = f"training_loop.{phase}"
    prompt = lengths[0] if lengths else PROMPT_BUDGET
    prompt_from = (
        "the longest training prompt, tokenized with the model's chat template"
        if lengths
        else f"a {PROMPT_BUDGET}-token bound until the data is loaded, then its longest prompt"
    )
    generation_batch = 0
    if grpo:  # GRPO: the prompt + the completion
        completion, completion_from = args.max_completion_length, f"{key}.max_completion_length"
        generation_batch = args.generation_batch_size or (
            args.per_device_train_batch_size * args.steps_per_generation
        )
    else:  # SFT: the prompt + the formatted gold answer, truncated at max_length
        limit = args.max_length or (prompt + PROMPT_BUDGET)
        answer = lengths[1] + ANSWER_MARKERS if lengths else limit - prompt
        completion_from = (
            "the longest gold answer, tokenized" if lengths else f"the rest of {key}.max_length={limit}"
        )
        if rft is not None:  # the sampled completions, as long as max_new_tokens
            answer, completion_from = rft.max_new_tokens, f"{key}.max_new_tokens"
            generation_batch = max(rft.batch_size, rft.samples_per_prompt)
        packed = bool(getattr(args, "packing", False))
        if packed:  # bins of max_length tokens, filled with whole rows
            answer, completion_from = limit, f"packed bins of {key}.max_length={limit}"
        prompt = min(prompt, limit)
        completion = max(min(answer, limit - prompt), 0)
        if completion < answer and not packed:
            completion_from += f", cut at {key}.max_length={limit}"
    dtype = getattr(model, "dtype", "float32")
    precision = "bf16" if getattr(args, "bf16", False) else "fp16" if getattr(args, "fp16", False) else "fp32"
    # "all-linear" and friends, or no list: every projection of the block
    targets = tuple(modules) if isinstance(modules, list | tuple) else ALL_LINEAR
    return Plan(
        # "auto" (transformers) and None (unsloth) pick a 16-bit dtype on a GPU
        dtype=dtype if dtype not in ("auto", None) else "bfloat16",
        precision=precision,
        quantization=getattr(model, "quantization", None),
        lora_r=lora.get("r") if lora else None,
        lora_targets=targets,
        batch=args.per_device_train_batch_size,
        prompt=prompt,
        completion=completion,
        activation_checkpointing=bool(getattr(model, "gradient_checkpointing", False)),
        generation_batch=generation_batch,
        vllm_fraction=args.vllm_gpu_memory_utilization if getattr(args, "use_vllm", False) else None,
        processes=processes,
        shard=shard,
        phase=phase,
        prompt_from=prompt_from,
        completion_from=completion_from,
    )


def data_lengths(
    dataset: Any, tokenizer: Any, format_answer: Any, limit: int = 4096
) -> tuple[int, int] | None:
    """The longest prompt (its chat messages as TRL tokenizes them, with the model's chat template)
    and the longest formatted gold answer of ``dataset``'s first ``limit`` rows, in tokens; None
    when they cannot be told (no chat prompts, no template): the estimate keeps its budget then.
    ``format_answer`` takes a row's answer, or its answer and ``entry`` where it takes two arguments
    (the SFT phase's ``completion``: a worked target is longer than the answer)."""
    try:
        rows = dataset.select(range(min(limit, len(dataset))))
        texts = [
            tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True)
            for m in rows["prompt"]
        ]
        # the template's text already holds its special tokens
        prompts = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
        if len(inspect.signature(format_answer).parameters) > 1:
            entries = rows["entry"] if "entry" in rows.column_names else [None] * len(rows)
            targets = [format_answer(a, e) for a, e in zip(rows["answer"], entries, strict=True)]
        else:
            targets = [format_answer(a) for a in rows["answer"]]
        answers = [len(tokenizer(t)["input_ids"]) for t in targets]
    except Exception:  # a plugin's dataset without these columns, a tokenizer without a template
        return None
    return (max(prompts), max(answers)) if prompts and answers else None


def run_checks(
    model: Any,
    loop: Any,
    setup: Any = None,
    lengths: tuple[int, int] | None = None,
    card: Card | None = None,
) -> tuple[list[ConfigIssue], list[str]]:
    """Memory and batch checks of a configured pipeline (``setup``: the distributed component, for
    what its strategy shards; ``lengths``: the data's longest prompt and answer in tokens, once it
    is loaded; ``card``: the GPU to plan for, rlvr.runtime.cards, instead of this machine's device)."""
    import os

    processes = int(os.environ.get("WORLD_SIZE", "1"))
    args = training_args(loop)
    issues: list[ConfigIssue] = []
    if args is not None and hasattr(args, "num_generations"):
        found = batch_issue(
            args.per_device_train_batch_size,
            processes,
            args.gradient_accumulation_steps,
            args.num_generations,
        )
        if found:
            issues.append(found)
    try:
        inputs = _estimate_inputs(model, loop, setup, processes, lengths, card=card)
    except UncountedWeights as exc:
        return [*issues, uncounted_issue(str(getattr(model, "name_or_path", "")), exc)], []
    if inputs is None:
        return issues, []
    shape, plan, device, device_gb = inputs
    refusals, warnings = check(shape, plan, device_gb, device, where=card.where if card else None)
    if card is None and device != "cuda":
        # RAM bends (swap, a rough estimate made for GPUs): past it, warn. Past RAM plus swap nothing
        # bends: loading would allocate until the kernel kills the process, so refuse before it starts.
        total = device_gb + swap_gb()
        hard, _ = check(shape, plan, total, device, where=f"a {total:.0f} GB {device} (its RAM plus swap)")
        warnings = warnings if hard else [i.problem for i in refusals] + warnings
        refusals = hard
    return issues + refusals, warnings


def summary(model: Any, loop: Any, setup: Any = None, card: Card | None = None) -> str | None:
    """The memory check's verdict in one line, with the estimate and its terms, also when the run fits
    (``validate_only``, ``runtime.memory.target``); None when nothing is estimated."""
    import os

    inputs = _estimate_inputs(model, loop, setup, int(os.environ.get("WORLD_SIZE", "1")), card=card)
    if inputs is None:
        return None
    shape, plan, device, device_gb = inputs
    terms = estimate(shape, plan, device_gb)
    fits = peak(terms) <= device_gb
    where = card.where if card else f"a {device_gb:.0f} GB {device}"
    longest = longest_completion(shape, plan, device_gb, device_gb)
    reach = f"any up to {LONGEST:,}" if longest >= LONGEST else f"{longest:,}" if longest else "none"
    found = levers(shape, plan, device_gb, device_gb) or [_NO_LEVER]
    return "\n".join(
        (
            f"memory check: {'fits' if fits else 'does not fit'} on {where}: estimated peak "
            f"{peak(terms):.1f} GB per process",
            f"  terms (GB): {_terms_text(terms)} (backward and rollout never coexist)",
            f"  for {_plan_text(shape, plan)}",
            f"  longest completion that fits at this micro-batch: {reach} tokens "
            f"({_length_lever(plan, plan.completion)} now)",
            *([] if fits else [f"  to fit: {_levers_text(found)}"]),
            f"  {basis(shape)}",
        )
    )


def fits_batch(
    model: Any,
    loop: Any,
    setup: Any,
    lengths: tuple[int, int] | None,
    batch: int,
    phase: str = "grpo",
    share: float = 0.8,
) -> bool:
    """Whether a micro-batch of ``batch`` sequences in ``phase`` keeps the estimated peak under
    ``share`` of the device's memory (on a GPU, rlvr.training_loop.microbatch folds GRPO's
    accumulation with it and SFT takes its ``cuda_batch_size``)."""
    import os

    try:
        inputs = _estimate_inputs(
            model, loop, setup, int(os.environ.get("WORLD_SIZE", "1")), lengths, {phase: batch}
        )
    except UncountedWeights:  # refused by run_checks before any batch is chosen
        return False
    if inputs is None:
        return False
    shape, plan, _, device_gb = inputs
    return peak(estimate(shape, plan, device_gb)) <= share * device_gb


def phase_configs(loop: Any) -> dict[str, Any]:
    """The TRL config of every enabled phase, by name: the arguments the phase built once
    (rlvr.training_loop.phase.Phase.args), the ones its trainer runs with. A training loop without
    TRL phases (a plugin's own) has nothing to estimate."""
    phases = ((name, getattr(loop, f"{name}_phase", None)) for name in ("grpo", "rft", "sft"))
    return {name: phase.args for name, phase in phases if phase is not None and phase.enabled}


def swap_gb() -> float:
    """The machine's swap space (0 where /proc/meminfo does not say)."""
    meminfo = Path("/proc/meminfo")
    for line in meminfo.read_text().splitlines() if meminfo.is_file() else []:
        if line.startswith("SwapTotal:"):
            return int(line.split()[1]) * 1024 / GB
    return 0.0


def _estimate_inputs(
    model: Any,
    loop: Any,
    setup: Any,
    processes: int,
    lengths: tuple[int, int] | None = None,
    micro_batches: dict[str, int] | None = None,
    card: Card | None = None,
) -> tuple[Shape, Plan, str, float] | None:
    """(shape, plan, device, its GB) of a configured training run, the plan of the phase with the
    larger estimated peak (``micro_batches``: a phase's micro-batch as it ran, when the device
    changed it; ``card``: a GPU planned for, which also decides the precision ``auto`` trains in);
    None when nothing is estimated (no training phase, or a model whose shape is unknown)."""
    import dataclasses

    shape = shape_of(str(getattr(model, "name_or_path", "")))
    configs = phase_configs(loop)
    if not configs or shape is None:
        return None
    device = card.name if card else loop.hardware.device
    device_gb = card.memory_gb if card else device_memory_gb(device)
    plans = []
    for name, args in configs.items():
        rft = getattr(loop.rft_phase, "settings", None) if name == "rft" else None
        plan = plan_of(model, args, processes, shard_of(setup), lengths, phase=name, rft=rft)
        if micro_batches and name in micro_batches:
            plan = dataclasses.replace(plan, batch=micro_batches[name])
        if card is not None:  # TRL's config was built for this machine's precision
            plan = dataclasses.replace(plan, precision=card.precision(getattr(loop, "precision", "auto")))
        plans.append(plan)
    return shape, max(plans, key=lambda plan: peak(estimate(shape, plan, device_gb))), device, device_gb


def memory_record(
    model: Any,
    loop: Any,
    setup: Any = None,
    lengths: tuple[int, int] | None = None,
    micro_batches: dict[str, int] | None = None,
) -> dict[str, Any]:
    """What report.json records under ``memory``: the memory check's estimate for this run (the same
    arithmetic as :func:`run_checks`, per process) beside the CUDA peak this process measured, so
    the estimate can be judged against the real thing (scripts/gpu_check.py). Sizes in GB (2**30
    bytes); None where there is nothing to record (no estimate; no CUDA peak on a CPU run)."""
    import os

    from rlvr.runtime.hardware import cuda_peak_gb

    try:
        inputs = _estimate_inputs(
            model, loop, setup, int(os.environ.get("WORLD_SIZE", "1")), lengths, micro_batches
        )
    except UncountedWeights:  # (refused by run_checks before the run started)
        inputs = None
    record: dict[str, Any] = {"preflight_estimate_gb": None, "preflight_terms_gb": None}
    if inputs is not None:
        shape, plan, _, device_gb = inputs
        terms = estimate(shape, plan, device_gb)
        record = {
            "preflight_estimate_gb": round(peak(terms), 3),
            "preflight_plan": {k: v for k, v in plan.__dict__.items() if k not in ("lora_targets",)},
            "preflight_terms_gb": {k: round(v, 3) for k, v in terms.items()},
            "device_memory_gb": round(device_gb, 3),
        }
    return {**record, **cuda_peak_gb()}


def data_checks(
    model: Any, loop: Any, setup: Any, train: Any, tokenizer: Any, prompts: Any
) -> tuple[tuple[int, int] | None, list[ConfigIssue], list[str]]:
    """:func:`run_checks` again once the data is loaded: the longest prompt and answer the run will
    train on (tokenized by the model's own chat template) in place of the budget it assumed before.
    Returns those lengths, the refusals and the warnings."""
    # a plugin's prompt object may have no SFT target format: the answer's own text is the bound then
    sft = getattr(loop, "sft_phase", None)
    target = sft.completion if sft is not None and sft.enabled else getattr(prompts, "format_answer", str)
    lengths = data_lengths(train, tokenizer, target)
    issues, warnings = run_checks(model, loop, setup, lengths)
    return lengths, issues, warnings
