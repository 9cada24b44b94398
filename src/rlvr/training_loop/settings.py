"""Each training phase's node as a type, and the allowlist of what a config may set in it.

``training_loop.sft``, ``.rft`` and ``.grpo`` are typed by their TRL config class's own fields (``trl.SFTConfig``,
``trl.GRPOConfig``, read from the installed TRL), so every field stays a known key and a misspelt one
gets "did you mean". Only the fields of the allowlist below may be set, each with its bounds (every
count with a finite ceiling, every float finite); every other field is refused when set, naming the
rule and where to set it instead (rlvr.issues.Refused): a config is often someone else's file, and a
denylist cannot keep up with two libraries' surfaces (SECURITY.md "What a config may set"). The
pipeline's own keys (``enabled``, SFT's ``cuda_batch_size``, RFT's rounds) are here too.
:class:`~rlvr.training_loop.loop.TrainingLoop` declares the nodes on its constructor, so the config
gate's one binding (rlvr.config.validation, with rlvr.issues.value_issues) reports an unknown key, a
refused key, a value of the wrong type and a broken bound as it does for every component's arguments.
What is left to the phases is TRL's own checks between fields (its ``__post_init__``).

docs/training_settings.md is this module's table (:func:`markdown`; ``python -m
rlvr.training_loop.settings > docs/training_settings.md``), and a unit test keeps the two equal.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Annotated, Any, Literal, TypedDict

from pydantic import ConfigDict, Field
from pydantic.fields import FieldInfo
from transformers import TrainingArguments
from trl import GRPOConfig, SFTConfig

from rlvr.issues import Refused, spelt
from rlvr.runtime import hardware

DOC = "docs/training_settings.md"


def _count(example: int, most: int, note: str, least: int = 1) -> Any:
    return Annotated[int, Field(ge=least, le=most, examples=[example], description=note)]


def _positive(example: int, most: int, note: str) -> Any:
    # "> 0", as these keys have said since before the ceilings (tests/integration/test_config_mistakes.py)
    return Annotated[int, Field(gt=0, le=most, examples=[example], description=note)]


def _real(
    example: float,
    note: str,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
) -> Any:
    # Finite too, as every float a config sets (rlvr.issues: the gate's one rule for .inf and .nan).
    return Annotated[float, Field(gt=gt, ge=ge, lt=lt, le=le, examples=[example], description=note)]


def _flag(note: str) -> Any:
    return Annotated[bool, Field(description=note)]


def _choice(options: tuple[str, ...], note: str) -> Any:
    return Annotated[Literal[options], Field(description=note)]


# -- the allowlist: the training knobs a researcher sets, each with its bounds -------------------------
# Ceilings are far above any run of this project's (conf/ and benchmarks/) and finite: 100000 workers
# passed validate_only, and 12 really forked 12 processes (SECURITY.md "What a config may set").
MOST_PROCESSES = 32  # dataloader workers, dataset.map processes
MOST_STEPS = 1_000_000
MOST_ROWS = 4_096  # rows in one micro-batch
MOST_TOKENS = 131_072  # a sequence or completion budget

# transformers' TrainingArguments fields, in every phase.
_TRAINING_ARGUMENTS: dict[str, Any] = {
    "learning_rate": _real(1e-5, "the optimizer's peak learning rate", gt=0, le=1),
    "lr_scheduler_type": _choice(
        ("linear", "cosine", "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup",
         "inverse_sqrt", "cosine_with_min_lr", "cosine_warmup_with_min_lr", "warmup_stable_decay"),
        "the learning-rate schedule (transformers' SchedulerType; plateau needs evaluation metrics "
        "the phases do not log)",
    ),
    "lr_scheduler_kwargs": Annotated[
        dict[str, float | int | str] | None,
        Field(description="the schedule's own arguments (min_lr_rate, num_cycles, power, num_decay_steps, ...)"),
    ],
    "warmup_steps": _real(10, "linear warmup steps (below 1: a fraction of max_steps)", ge=0, le=MOST_STEPS),
    "max_steps": _positive(100, MOST_STEPS, "optimizer steps of the phase"),
    "per_device_train_batch_size": _positive(8, MOST_ROWS, "rows per micro-batch on each process"),
    "gradient_accumulation_steps": _positive(1, 1_024, "micro-batches per optimizer step"),
    "weight_decay": _real(0.0, "AdamW's decoupled weight decay", ge=0, le=1),
    "max_grad_norm": _real(1.0, "gradient clipping norm (0 = off)", ge=0, le=1_000),
    "optim": _choice(
        ("adamw_torch", "adamw_torch_fused", "adafactor", "sgd", "adagrad", "rmsprop", "adamw_8bit",
         "paged_adamw_8bit"),
        "the optimizer (torch's own, or bitsandbytes' 8-bit AdamW)",
    ),
    "adam_beta1": _real(0.9, "Adam's first-moment decay", ge=0, lt=1),
    "adam_beta2": _real(0.999, "Adam's second-moment decay", ge=0, lt=1),
    "adam_epsilon": _real(1e-8, "Adam's epsilon", gt=0, le=1),
    "logging_steps": _count(1, MOST_STEPS, "steps between logged metrics (each a TrainStep event)"),
    "save_strategy": _choice(("steps", "no"), "checkpoints every save_steps steps, or none"),
    "save_steps": _count(50, MOST_STEPS, "steps between checkpoints"),
    "save_total_limit": _count(2, 1_000, "checkpoints kept while training (null = all)") | None,
    "save_only_model": _flag("checkpoints without optimizer state (a resume restarts the optimizer)"),
    "dataloader_num_workers": _count(0, MOST_PROCESSES, "data-loading worker processes (0 = in the main process)", least=0),
    "gradient_checkpointing": _flag("recompute activations in the backward pass (unset: model.gradient_checkpointing)"),
    "gradient_checkpointing_kwargs": Annotated[
        dict[str, bool] | None, Field(description="torch.utils.checkpoint's switches, e.g. {use_reentrant: false}")
    ],
    "use_liger_kernel": _flag("Liger's fused kernels (GPU)"),
    "ddp_timeout": _count(1_800, 7 * 86_400, "seconds a process waits at a collective (several processes)"),
}  # fmt: skip
# trl.SFTConfig's own fields, in the SFT and RFT phases.
_SFT_CONFIG: dict[str, Any] = {
    "max_length": _count(256, MOST_TOKENS, "tokens per row (null: no truncation; the bin size when packing)") | None,
    "padding_free": _flag("rows without padding (position ids restart at each row)"),
    "packing": _flag("rows packed into bins of max_length tokens"),
    "packing_strategy": _choice(("bfd", "bfd_split", "wrapped"), "how rows are packed"),
    "completion_only_loss": _flag("loss on the completion only (null: TRL's choice for the dataset)") | None,
    "loss_type": _choice(("nll", "dft"), "negative log-likelihood, or Dynamic Fine-Tuning"),
    "dataset_num_proc": _count(2, MOST_PROCESSES, "processes for tokenizing the dataset (null = one)") | None,
}  # fmt: skip
# trl.GRPOConfig's own fields.
_GRPO_CONFIG: dict[str, Any] = {
    "num_generations": _count(8, 1_024, "completions per prompt (GRPO compares them within a group)", least=2) | None,
    "max_completion_length": _positive(64, MOST_TOKENS, "completion budget in tokens") | None,
    "temperature": _real(1.0, "sampling temperature of the rollouts", gt=0, le=10),
    "top_p": _real(1.0, "nucleus sampling (1 = off)", gt=0, le=1),
    "top_k": _count(0, 1_000_000, "top-k sampling (0 = off)", least=0),
    "min_p": _real(0.05, "min-p sampling (null = off)", ge=0, le=1) | None,
    "repetition_penalty": _real(1.0, "repetition penalty (1 = off)", gt=0, le=10),
    "beta": _real(0.0, "KL coefficient against the reference model (0: no reference model)", ge=0, le=10),
    "epsilon": _real(0.2, "lower clipping bound of the ratio", gt=0, le=1),
    "epsilon_high": _real(0.28, "upper clipping bound (null = epsilon)", gt=0, le=10) | None,
    "delta": _real(1.5, "two-sided clipping's upper bound (null = off)", gt=0, le=100) | None,
    "loss_type": _choice(
        ("grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo"), "the loss's aggregation"
    ),
    "scale_rewards": Annotated[
        Literal["group", "batch", "none"] | bool,
        Field(description="advantage scaling by the reward's standard deviation (true = group, false = none)"),
    ],
    "importance_sampling_level": _choice(("token", "sequence"), "importance ratios per token or per sequence (GSPO)"),
    "mask_truncated_completions": _flag("completions cut at max_completion_length leave the loss"),
    "top_entropy_quantile": _real(1.0, "share of highest-entropy tokens kept in the loss", ge=0, le=1),
    "num_iterations": _count(1, 64, "optimizer passes over each generation batch"),
    "steps_per_generation": _count(4, 1_024, "optimizer steps per generation batch (null: gradient_accumulation_steps)") | None,
    "generation_batch_size": _count(64, 100_000, "completions generated at once (null: from steps_per_generation)") | None,
    "disable_dropout": _flag("dropout off in the policy (and reference) model"),
    "sync_ref_model": _flag("the reference model follows the policy (TR-DPO)"),
    "ref_model_sync_steps": _count(512, MOST_STEPS, "steps between reference-model syncs"),
    "ref_model_mixup_alpha": _real(0.6, "mix of policy into reference at each sync", ge=0, le=1),
    # Judged by its own rule too: only the command line may turn it on (SECURITY.md "Code shipped with a model").
    "trust_remote_code": _flag("TRL's colocated vLLM engine runs the model folder's own code"),
    "use_vllm": _flag("rollouts with vLLM (set by rollout=vllm_colocate / vllm_server)"),
    "vllm_mode": _choice(("colocate", "server"), "vLLM in the training process, or a separate server"),
    "vllm_gpu_memory_utilization": _real(0.3, "share of each GPU vLLM reserves", gt=0, le=1),
    "vllm_tensor_parallel_size": _count(1, 64, "GPUs one colocated vLLM engine spans"),
    "vllm_enable_sleep_mode": _flag("vLLM frees its GPU memory while the trainer steps"),
    "vllm_server_host": Annotated[
        str, Field(max_length=253, pattern=r"^[A-Za-z0-9.:\-]+$", description="the vLLM server's host name or address")
    ],
    "vllm_server_base_url": Annotated[
        str | None,
        Field(max_length=2_048, pattern=r"^https?://[^\s]+$", description="the vLLM server's URL (instead of host and port)"),
    ],
    "vllm_server_port": _count(8000, 65_535, "the vLLM server's port"),
    "vllm_server_timeout": _real(240, "seconds to wait for the vLLM server", gt=0, le=3_600),
    "use_transformers_continuous_batching": _flag("rollouts with transformers' continuous batching (rollout=hf_continuous)"),
}  # fmt: skip

# The pipeline's own keys.
_FREEZING: dict[str, Any] = {
    "freeze_embeddings": _flag("SFT leaves the token embeddings (and a head tied to them) as they are"),
    "frozen_layers": _count(10, 1_000, "SFT leaves the lowest N decoder layers as they are; 0 trains all", least=0),
}  # fmt: skip
FP32CPU = TypedDict("FP32CPU", _FREEZING, total=False)  # type: ignore[misc]
FP32CPU.__doc__ = "training_loop.sft.fp32_cpu: SFT's freezing where it trains in fp32 on a CPU"
_ENABLED: dict[str, Any] = {"enabled": _flag("the phase runs")}
_SFT_OWN: dict[str, Any] = {
    # Rows per SFT step on a CUDA GPU (rlvr.training_loop.microbatch.scale_sft); null keeps the batch.
    "cuda_batch_size": _count(64, MOST_ROWS, "rows per SFT step on a CUDA GPU; null keeps per_device_train_batch_size") | None,
    # What SFT does not train (rlvr.training_loop.loop.SFTPhase.freezing): less backward work, the same rows.
    **_FREEZING,
    # What SFT imitates: the marked answer, or a worked solution then the answer (rlvr.data.working).
    "target": Annotated[Literal["answer", "worked", "auto"], Field(description="answer: the marked answer; worked: the row's working (rlvr.data.working), then the answer; auto: worked where the rows have workings and the longest fits grpo.max_completion_length, else answer")],
    # Those two where SFT trains in fp32 on a CPU (no native bf16: precision auto picks fp32 there).
    "fp32_cpu": Annotated[FP32CPU | None, Field(description="freeze_embeddings and frozen_layers where SFT trains in fp32 on a CPU; null: as above")],
}  # fmt: skip
# The rounds of rejection sampling (rlvr.training_loop.rft.RFTSettings). 1e9 rounds or prompts passed
# validate_only and the run then grew to GBs of rounds and console lines (SECURITY.md "Bounds and timeouts").
_RFT_OWN: dict[str, Any] = {
    "rounds": _count(3, 1_000, "sample-then-fine-tune rounds"),
    "prompts_per_round": _count(64, 100_000, "training prompts sampled per round"),
    "samples_per_prompt": _count(8, 1_024, "completions sampled per prompt (k)"),
    "max_per_prompt": _count(2, 1_024, "verified distinct completions kept per prompt"),
    "steps_per_round": _count(20, 100_000, "optimizer steps per round"),
    "temperature": _real(1.0, "sampling temperature (GRPO's by default)", gt=0, le=10),
    "max_new_tokens": _count(64, MOST_TOKENS, "completion budget (GRPO's by default)"),
    "batch_size": _count(16, MOST_ROWS, "rows generated together (evaluation's by default)"),
}


# -- refused: where each is set instead ---------------------------------------------------------------
_LIST = f"not on the allowlist of settings a config may set: {DOC}"
_OTHERWISE = Refused(
    _LIST,
    f"remove it. {DOC} lists what a config may set; a new setting is added to "
    "rlvr/training_loop/settings.py with its bounds",
)
_PIPELINE = Refused("is set by the pipeline", "remove it")
_UPLOAD = Refused(
    "a run never uploads from config (a shared config must not publish your model)",
    "remove it, and push final/ yourself after the run, e.g. `huggingface-cli upload <repo> <run_dir>/final`",
)


def _hardware(owner: str) -> Refused:
    choices = "/".join(getattr(hardware, owner.upper() + "S"))
    return Refused(
        f"both phases take it from training_loop.{owner}",
        f"remove it and set training_loop.{owner}=... ({choices})",
    )


def _elsewhere(fix: str) -> Refused:
    return Refused(_LIST, f"remove it; {fix}")


_DISTRIBUTED = _elsewhere(
    "several processes, DeepSpeed and FSDP are set by an accelerate config file, chosen with "
    "distributed=ddp|deepspeed_zero2|deepspeed_zero3|fsdp (conf/distributed/, infrastructure/accelerate/; "
    'docs/scaling.md "Several processes"), which keeps every output in the run directory'
)
_PRINTS = _elsewhere(
    "the pipeline's own completions table shows sampled rollouts masked and escaped: "
    "completions.per_grpo_step (completions.jsonl in the run directory, W&B completions/grpo)"
)
_MODEL = _elsewhere("the model component loads the model and its tokenizer: set model.* (conf/model/)")
_EVALUATION = _elsewhere(
    "the pipeline evaluates: evaluation.every_n_steps and evaluation.* (conf/evaluation/)"
)
REFUSED: dict[str, Refused] = {
    **dict.fromkeys(("output_dir", "report_to", "reward_weights", "seed", "data_seed"), _PIPELINE),
    "use_cpu": _hardware("device"), "no_cuda": _hardware("device"),
    "bf16": _hardware("precision"), "fp16": _hardware("precision"),
    **dict.fromkeys(("push_to_hub", "hub_model_id", "hub_strategy", "hub_always_push", "hub_private_repo",
                     "hub_revision", "log_completions_hub_repo"), _UPLOAD),
    **dict.fromkeys(("deepspeed", "fsdp", "fsdp_config", "accelerator_config", "parallelism_config",
                     "ddp_backend", "local_rank", "ds3_gather_for_generation"), _DISTRIBUTED),
    # transformers' JIT checkpointing installs its own SIGTERM handler: a stop then ended the run
    # COMPLETED with exit 0 after a fraction of its steps.
    "enable_jit_checkpoint": _elsewhere(
        "the pipeline owns SIGTERM and the preemption warning: a stop saves a checkpoint at the end of "
        "the step and exits 75, and resume=auto continues (SECURITY.md \"Bounds and timeouts\")"
    ),
    # TRL prints these with rich: escape bytes from a data file reached the terminal, and a
    # credential cut short by rich's ellipsis got past the masking.
    **dict.fromkeys(("log_completions", "num_completions_to_print", "log_unique_prompts"), _PRINTS),
    "resume_from_checkpoint": _elsewhere("resume=auto or resume=<checkpoint> (conf/config.yaml)"),
    "num_train_epochs": _elsewhere("the phases train for max_steps steps: set max_steps"),
    **dict.fromkeys(("model_init_kwargs", "chat_template_path", "pad_token", "eos_token"), _MODEL),
    **dict.fromkeys(("eval_strategy", "eval_steps", "do_eval", "eval_on_start", "per_device_eval_batch_size",
                     "num_generations_eval"), _EVALUATION),
}  # fmt: skip
# RFT sets these from its rounds (rlvr.training_loop.rft).
_RFT_SETS = Refused(
    "is set by the phase (rounds x steps_per_round steps, each round's data read in order)",
    "remove it; set training_loop.rft.rounds / training_loop.rft.steps_per_round",
)
_RFT_REFUSED = dict.fromkeys(("max_steps", "train_sampling_strategy", "num_train_epochs"), _RFT_SETS)


@dataclasses.dataclass(frozen=True)
class PhaseSettings:
    """One phase's node: its path, its TRL class, the TRL fields it allows and its own keys."""

    path: str
    config_cls: type
    allowed: dict[str, Any]
    own: dict[str, Any]
    refused: dict[str, Refused]

    def trl_fields(self) -> dict[str, Any]:
        hints = typing.get_type_hints(self.config_cls)
        return {f.name: hints[f.name] for f in dataclasses.fields(self.config_cls) if f.init}

    def node(self, name: str) -> Any:
        """A TypedDict of every field of ``config_cls`` (each titled ``<class>.<field>``: the owner a
        message names), the allowed ones with their bounds and the others refused, and the phase's own
        keys (titled by their config path); every key optional, no other key."""
        fields: dict[str, Any] = {}
        for key, hint in self.trl_fields().items():
            title = Field(title=f"{self.config_cls.__name__}.{key}")
            if key in self.allowed and key not in self.refused:
                fields[key] = Annotated[self.allowed[key], title]
            else:
                fields[key] = Annotated[hint, title, self.refused.get(key, REFUSED.get(key, _OTHERWISE))]
        for key, annotation in self.own.items():
            fields[key] = Annotated[annotation, Field(title=f"{self.path}.{key}")]
        node = _typed_dict(name, fields, total=False)
        setattr(node, "__pydantic_config__", ConfigDict(extra="forbid"))  # noqa: B010 (pydantic reads it)
        return node


_typed_dict: Any = TypedDict  # called with a name made at run time (a type checker wants a literal)

PHASES = {
    "sft": PhaseSettings("training_loop.sft", SFTConfig, {**_TRAINING_ARGUMENTS, **_SFT_CONFIG}, {**_ENABLED, **_SFT_OWN}, {}),
    "rft": PhaseSettings("training_loop.rft", SFTConfig, {**_TRAINING_ARGUMENTS, **_SFT_CONFIG}, {**_ENABLED, **_RFT_OWN},
                 _RFT_REFUSED),
    "grpo": PhaseSettings("training_loop.grpo", GRPOConfig, {**_TRAINING_ARGUMENTS, **_GRPO_CONFIG}, _ENABLED, {}),
}  # fmt: skip
SFTNode = PHASES["sft"].node("SFTConfig")
RFTNode = PHASES["rft"].node("SFTConfig (or RFT rounds)")
GRPONode = PHASES["grpo"].node("GRPOConfig")


# -- docs/training_settings.md ------------------------------------------------------------------------
_SIGNS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}


def _number(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def _rule(meta: Any) -> str | None:
    """One constraint of a ``Field`` as a reader reads it."""
    for name, sign in _SIGNS.items():
        if getattr(meta, name, None) is not None:
            return f"{sign} {_number(getattr(meta, name))}"
    if getattr(meta, "max_length", None) is not None:
        return f"at most {meta.max_length} characters"
    if getattr(meta, "pattern", None):
        return f"matching `{meta.pattern}`"
    return None


def _bounds(annotation: Any) -> str:
    """An allowed key's rule as a reader reads it: its choices or range, finite, null allowed."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        shown = [_bounds(a) for a in args if a is not type(None)]
        return " or ".join(shown) + (" or null" if type(None) in args else "")
    if origin is Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin is Annotated:
        rules = [r for m in args[1:] if isinstance(m, FieldInfo) for x in m.metadata if (r := _rule(x))]
        return ", ".join([_bounds(args[0]), *rules, *(["finite"] if args[0] is float else [])])
    return "true or false" if annotation is bool else f"`{spelt(annotation)}`"


def _description(annotation: Any) -> str:
    """The ``Field(description=...)`` of an annotation (within ``| None`` too)."""
    for part in [annotation, *typing.get_args(annotation)]:
        for meta in getattr(part, "__metadata__", ()):
            if isinstance(meta, FieldInfo) and meta.description:
                return str(meta.description)
    return ""


def rows() -> list[tuple[str, str, str, str, str]]:
    """(key, phases, what it does, bounds, owner) for every key a config may set, in the nodes' order."""
    found: dict[str, list[Any]] = {}
    for name, phase in PHASES.items():
        trl = phase.trl_fields()
        for key, annotation in {**phase.allowed, **phase.own}.items():
            if key in phase.refused or (key in phase.allowed and key not in trl):
                continue
            if key in phase.own:
                owner = f"rlvr (`{phase.path}`)"
            elif key in {f.name for f in dataclasses.fields(TrainingArguments)}:
                owner = "transformers `TrainingArguments`"
            else:
                owner = f"trl `{phase.config_cls.__name__}`"
            entry = found.setdefault(
                f"{key}|{owner}", [key, [], _description(annotation), _bounds(annotation), owner]
            )
            entry[1].append(name)
    return [(k, ", ".join(p), d, b, o) for k, p, d, b, o in found.values()]


def _row(*cells: str) -> str:
    return (
        "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"
    )  # a | inside a cell is escaped


def _refused_rows() -> list[str]:
    """One row per refusal (its fields, rule and fix) over the fields of the installed classes."""
    known = {key for phase in PHASES.values() for key in phase.trl_fields()}
    grouped: dict[Refused, list[str]] = {}
    for key, refusal in REFUSED.items():
        if key in known:
            grouped.setdefault(refusal, []).append(f"`{key}`")
    for key, refusal in _RFT_REFUSED.items():
        grouped.setdefault(refusal, []).append(f"`{key}` (rft)")
    grouped.setdefault(_OTHERWISE, []).append("every other field")
    return [_row(", ".join(keys), r.rule, r.fix) for r, keys in grouped.items()]


def markdown() -> str:
    """docs/training_settings.md: the allowlist as one table, and where the refused fields are set."""
    return "\n".join(
        [
            "# Training settings a config may set",
            "",
            "<!-- Generated from src/rlvr/training_loop/settings.py: python -m rlvr.training_loop.settings > "
            "docs/training_settings.md (tests/unit/test_training_settings.py keeps them equal). -->",
            "",
            "`training_loop.sft`, `training_loop.rft` and `training_loop.grpo` are typed by the installed TRL's "
            '`SFTConfig` / `GRPOConfig`: every field is a known key (a misspelt one gets "did you mean"), but a '
            "config may set only the keys below, within their bounds (every count has a ceiling, every float "
            "is finite). Any other field is refused when set, from a file or the command line alike, with the "
            'key, the value, this rule and where to set it instead (SECURITY.md "What a config may set").',
            "",
            "| key | phases | what it does | bounds | owner |",
            "|---|---|---|---|---|",
            *(_row(f"`{k}`", p, d, b, o) for k, p, d, b, o in rows()),
            "",
            "## Refused, and where it is set instead",
            "",
            "| fields | rule | instead |",
            "|---|---|---|",
            *_refused_rows(),
            "",
        ]
    )


if __name__ == "__main__":
    print(markdown(), end="")
