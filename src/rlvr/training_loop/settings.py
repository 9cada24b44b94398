"""Each training phase's node as a type: ``training_loop.sft``, ``.rft`` and ``.grpo`` are typed by
their TRL config class's own fields and annotations (``trl.SFTConfig``, ``trl.GRPOConfig``, read from
the installed TRL), narrowed where the pipeline needs more than TRL checks, plus the pipeline's own
keys (``enabled``, SFT's ``cuda_batch_size``, RFT's rounds). :class:`~rlvr.training_loop.loop.TrainingLoop`
declares them on its constructor, so the config gate's one binding (rlvr.config.validation, with
rlvr.issues.value_issues) reports an unknown key, a value of the wrong type and a broken bound as it
does for every component's arguments. What is left to the phases is what no type says: the keys the
pipeline sets itself, and TRL's own checks between fields (its ``__post_init__``)."""

from __future__ import annotations

import dataclasses
import typing
from typing import Annotated, Any, TypedDict

from pydantic import ConfigDict, Field
from trl import GRPOConfig, SFTConfig


def _positive(kind: type, example: float, note: str | None = None) -> Any:
    return Annotated[kind, Field(gt=0, examples=[example], description=note)]


def _count(example: int, most: int | None = None, note: str | None = None) -> Any:
    return Annotated[int, Field(ge=1, le=most, examples=[example], description=note)]


# Bounds TRL does not check (it reads max_steps=-1 as "train by epochs", which the pipeline never does).
_EVERY_PHASE: dict[str, Any] = {
    "enabled": bool,
    "learning_rate": _positive(float, 1e-5),
    "max_steps": _positive(int, 100),
    "per_device_train_batch_size": _positive(int, 8),
    "gradient_accumulation_steps": _positive(int, 1),
}
_GRPO: dict[str, Any] = {
    "num_generations": Annotated[int, Field(ge=2, examples=[8], description="GRPO compares completions within a group")] | None,
    "temperature": _positive(float, 1.0),
    "max_completion_length": _positive(int, 64) | None,
}  # fmt: skip
_SFT: dict[str, Any] = {
    # Rows per SFT step on a CUDA GPU (rlvr.training_loop.microbatch.scale_sft); null keeps the batch.
    "cuda_batch_size": _count(64, note="rows per SFT step on a CUDA GPU; null keeps per_device_train_batch_size") | None,
}  # fmt: skip
# The rounds of rejection sampling (rlvr.training_loop.rft.RFTSettings). The "most" bounds are checked
# before any work (SECURITY.md "Bounds and timeouts"): 1e9 rounds or prompts passed validate_only and
# the run then grew to GBs of rounds and console lines.
_RFT: dict[str, Any] = {
    "rounds": _count(3, 1_000, "sample-then-fine-tune rounds"),
    "prompts_per_round": _count(64, 100_000, "training prompts sampled per round"),
    "samples_per_prompt": _count(8, 1_024, "completions sampled per prompt (k)"),
    "max_per_prompt": _count(2, note="verified distinct completions kept per prompt"),
    "steps_per_round": _count(20, note="optimizer steps per round"),
    "temperature": _positive(float, 1.0, "sampling temperature (GRPO's by default)"),
    "max_new_tokens": _count(64, note="completion budget (GRPO's by default)"),
    "batch_size": _count(16, note="rows generated together (evaluation's by default)"),
}


def _node(name: str, path: str, config_cls: type, own: dict[str, Any]) -> Any:
    """A TypedDict of ``config_cls``'s fields (each titled ``<class>.<field>``: the owner a message names)
    and ``own`` (titled by their config ``path``), every key optional; no other key."""
    hints = typing.get_type_hints(config_cls)
    fields = {
        f.name: Annotated[hints[f.name], Field(title=f"{config_cls.__name__}.{f.name}")]
        for f in dataclasses.fields(config_cls)
        if f.init
    }
    for key, annotation in own.items():
        owner = config_cls.__name__ if key in fields else path
        fields[key] = Annotated[annotation, Field(title=f"{owner}.{key}")]
    node = _typed_dict(name, fields, total=False)
    setattr(node, "__pydantic_config__", ConfigDict(extra="forbid"))  # noqa: B010 (pydantic reads it)
    return node


_typed_dict: Any = TypedDict  # called with a name made at run time (a type checker wants a literal)


SFTNode = _node("SFTConfig", "training_loop.sft", SFTConfig, {**_EVERY_PHASE, **_SFT})
RFTNode = _node("SFTConfig (or RFT rounds)", "training_loop.rft", SFTConfig, {**_EVERY_PHASE, **_RFT})
GRPONode = _node("GRPOConfig", "training_loop.grpo", GRPOConfig, {**_EVERY_PHASE, **_GRPO})
