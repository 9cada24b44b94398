"""Custom OmegaConf resolvers that pick a model family's reasoning and answer markers.

Registered once, when the ``rlvr`` package is imported (run_pipeline.py imports it before Hydra
composes anything), and allowed by the config trust check (``rlvr.security.trust.SAFE_RESOLVERS``).
Both are pure table look-ups: they read no file, no environment variable and run no code named
by their arguments; an argument outside the table is refused with the allowed values, and every
value they can return is a fixed string written below (never one holding ``${``, so a resolved
config cannot turn into a new interpolation).

``${rlvr.marker:<family>,<marker>}``
    one marker of a family: ``reasoning_start``, ``reasoning_end``, ``answer_start`` or
    ``answer_end`` (``null`` for a family without reasoning markers).
``${rlvr.family_of:<model id or path>}``
    the family of a known model (matched on the last path component, case-insensitive),
    e.g. ``prompts.family='${rlvr.family_of:${model.name_or_path}}'``.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import OmegaConf


@dataclass(frozen=True)
class Markers:
    answer_start: str
    answer_end: str
    reasoning_start: str | None = None
    reasoning_end: str | None = None


# The families and their markers. Add a family here (not in a config): a config only selects one.
FAMILIES: dict[str, Markers] = {
    # Answer tags only: small instruct models (SmolLM2, Qwen2.5) answer directly.
    "plain": Markers("<answer>", "</answer>"),
    # DeepSeek-R1 / Qwen3 style: reasoning in <think>, the final answer in <answer>.
    "think": Markers("<answer>", "</answer>", "<think>", "</think>"),
    # The seed system's Gemma 3 GRPO recipe.
    "working_out": Markers("<SOLUTION>", "</SOLUTION>", "<start_working_out>", "<end_working_out>"),
}
MARKER_NAMES = ("reasoning_start", "reasoning_end", "answer_start", "answer_end")

# Model name fragments (lower case, in the last path component) -> family; first match wins.
MODEL_FAMILIES: tuple[tuple[str, str], ...] = (
    ("deepseek-r1", "think"),
    ("qwen3", "think"),
    ("qwq", "think"),
    ("gemma-3", "working_out"),
    ("gemma3", "working_out"),
    ("qwen2.5", "plain"),
    ("qwen2_5", "plain"),
    ("smollm", "plain"),
)

RESOLVER_NAMES = ("rlvr.marker", "rlvr.family_of")


class ResolverArgumentError(ValueError):
    """A resolver argument outside its table (OmegaConf reports it with the config key)."""


def _family(family: object) -> Markers:
    if not isinstance(family, str) or family not in FAMILIES:
        raise ResolverArgumentError(
            f"{family!r} is not a prompt family; the families are {sorted(FAMILIES)} "
            "(add one to rlvr.prompt_families.FAMILIES)"
        )
    return FAMILIES[family]


def marker(family: object, name: object) -> str | None:
    """``${rlvr.marker:think,answer_start}`` -> ``'<answer>'``.

    >>> marker("working_out", "reasoning_end")
    '<end_working_out>'
    >>> marker("plain", "reasoning_start") is None
    True
    """
    markers = _family(family)
    if not isinstance(name, str) or name not in MARKER_NAMES:
        raise ResolverArgumentError(f"{name!r} is not a marker name; use one of {list(MARKER_NAMES)}")
    return getattr(markers, name)


def family_of(model: object) -> str:
    """``${rlvr.family_of:Qwen/Qwen3-0.6B}`` -> ``'think'``; an unknown model is refused.

    >>> family_of("google/gemma-3-1b-it")
    'working_out'
    """
    if not isinstance(model, str) or not model:
        raise ResolverArgumentError(f"{model!r} is not a model id or path")
    last = model.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1].lower()
    for fragment, family in MODEL_FAMILIES:
        if fragment in last:
            return family
    raise ResolverArgumentError(
        f"no known prompt family for the model {model!r} (known: {[f for f, _ in MODEL_FAMILIES]}); "
        f"set prompts.family to one of {sorted(FAMILIES)}"
    )


def register() -> None:
    """Register the resolvers (idempotent: a second import or call changes nothing)."""
    for name, fn in zip(RESOLVER_NAMES, (marker, family_of), strict=True):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
