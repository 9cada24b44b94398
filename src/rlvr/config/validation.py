"""Config checks that need no component: what each ``_target_`` is, and argument binding against signatures.

Whether a target may be instantiated at all is decided on the imported object by
:func:`rlvr.security.trust.judge_target` (where it is defined, not how its path is
spelt). Arguments are bound against each target's signature (torchtune's approach),
so a misspelt key fails with its path and the valid names, before anything loads; each value is
validated with pydantic against its parameter's annotation, which is also where a component
declares a setting's rule (``Literal`` choices, ``Annotated[int, Field(ge=1)]`` ranges).
"""

from __future__ import annotations

import inspect
import typing
from typing import Any

from hydra.utils import get_object
from omegaconf import DictConfig, ListConfig, OmegaConf

from rlvr.issues import ConfigIssue, suggest, value_issues
from rlvr.runtime.run_settings import RunSettings
from rlvr.security.trust import judge_target

_HYDRA_KEYS = {"_target_", "_partial_", "_recursive_", "_convert_", "_args_"}
# Slots whose every entry is a component of its own (dicts keyed by name, CONTRIBUTING.md rule 4).
COMPONENT_SLOTS = ("reward.terms", "observers")


def _chain(obj: Any) -> list[Any]:
    """The callables whose parameters a target accepts: a class's __init__ and, while it forwards
    ``**kwargs``, its bases' (so a subclass's inherited options are checked too)."""
    if not inspect.isclass(obj):
        return [obj]
    chain = []
    for klass in obj.__mro__:
        if klass is object or "__init__" not in vars(klass):
            continue
        init = vars(klass)["__init__"]
        chain.append(init)
        sig = inspect.signature(init)
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
            break
    return chain or [obj]


def _parameters(obj: Any) -> tuple[dict[str, inspect.Parameter] | None, bool]:
    """Named parameters over the chain (subclass first) and whether unknown names are accepted."""
    params: dict[str, inspect.Parameter] = {}
    try:
        signatures = [inspect.signature(f) for f in _chain(obj)]
    except (TypeError, ValueError):
        return None, True
    for sig in signatures:
        for name, p in sig.parameters.items():
            if name != "self" and p.kind not in (
                inspect.Parameter.VAR_KEYWORD,
                inspect.Parameter.VAR_POSITIONAL,
            ):
                params.setdefault(name, p)
    last = signatures[-1].parameters.values()
    return params, any(p.kind is inspect.Parameter.VAR_KEYWORD for p in last)


def _hints(obj: Any) -> dict[str, Any]:
    hints: dict[str, Any] = {}
    for f in reversed(_chain(obj)):
        try:
            hints.update(typing.get_type_hints(f, include_extras=True))
        except Exception:  # unresolvable forward references: skip type checks there
            continue
    return hints


def iter_targets(node: Any, path: str = "") -> list[tuple[str, DictConfig]]:
    """Every (dotted path, node) that has a ``_target_``, depth first."""
    found = []
    if isinstance(node, DictConfig):
        if "_target_" in node:
            found.append((path, node))
        for key in node:
            found.extend(iter_targets(node._get_node(key), f"{path}.{key}" if path else str(key)))
    elif isinstance(node, ListConfig):
        for i, item in enumerate(node):
            found.extend(iter_targets(item, f"{path}[{i}]"))
    return found


def run_key_issues(cfg: DictConfig) -> list[ConfigIssue]:
    """Top-level run settings that do not fit :class:`~rlvr.runtime.run_settings.RunSettings`
    (``validate_only=maybe`` would read as true, ``keep_checkpoints=latest`` is no choice)."""
    return [
        issue
        for key, wanted in typing.get_type_hints(RunSettings, include_extras=True).items()
        if key in cfg and not OmegaConf.is_missing(cfg, key)
        for issue in value_issues(key, OmegaConf.select(cfg, key), wanted, "the run")
    ]


def slot_issues(cfg: DictConfig, slots: tuple[str, ...] = COMPONENT_SLOTS) -> list[ConfigIssue]:
    """An entry of a named-component slot without a ``_target_``: a new name made by a misspelt
    ``+reward.terms.formatt.weight=0.5``, or a term added without its config file."""
    issues = []
    for slot in slots:
        node = OmegaConf.select(cfg, slot, default=None)
        if not isinstance(node, DictConfig):
            continue
        for name in node:
            entry = node._get_node(name)
            if isinstance(entry, DictConfig) and "_target_" in entry:
                continue
            others = [str(n) for n in node if n != name]
            issues.append(
                ConfigIssue(
                    f"{slot}.{name}",
                    OmegaConf.to_container(entry) if isinstance(entry, DictConfig) else entry,
                    f"is not a component (no _target_); {slot} holds one component per name",
                    f"{suggest(str(name), others)} to change an existing one, drop the '+'; to add one, "
                    f"compose its file (e.g. +reward/terms@reward.terms.{name}=<file>)"
                    if slot == "reward.terms"
                    else f"{suggest(str(name), others)} or give {slot}.{name} a _target_",
                )
            )
    return issues


def check_targets(
    cfg: DictConfig, runtime_args: dict[str, set[str]] | None = None, targets_only: bool = False
) -> list[ConfigIssue]:
    """Trust judgment (:func:`judge_target`) and, unless ``targets_only``, signature binding
    (:func:`binding_issues`) for every ``_target_`` in ``cfg``; every named-component slot entry
    has a ``_target_`` (:func:`slot_issues`).

    ``runtime_args`` names, per config path, the arguments passed at build time
    (rlvr.pipeline.wiring; they are absent from YAML on purpose).
    """
    runtime_args = runtime_args or {}
    issues = slot_issues(cfg)
    for path, node in iter_targets(cfg):
        target = OmegaConf.select(node, "_target_", throw_on_missing=False)
        problem = judge_target(f"{path}._target_", target)
        if problem is not None:
            issues.append(problem)
        elif not targets_only:
            issues.extend(binding_issues(path, node, target, runtime_args.get(path, set())))
    return issues


def binding_issues(path: str, node: DictConfig, target: str, runtime: set[str]) -> list[ConfigIssue]:
    """The node's keys bound against the target's signature: unknown names, values of the wrong
    type, required arguments neither given nor passed at run time (``runtime``), ``???`` values."""
    obj = get_object(target)
    params, accepts_kwargs = _parameters(obj)
    if params is None:
        return []
    given = [k for k in node if k not in _HYDRA_KEYS]
    issues = []
    if not accepts_kwargs:
        issues += [
            ConfigIssue(
                f"{path}.{name}",
                OmegaConf.select(node, name, throw_on_missing=False),
                f"{target} takes no argument '{name}'",
                f"{suggest(name, params)} valid: {', '.join(p for p in params if p != 'self')}",
            )
            for name in given
            if name not in params
        ]
    hints = _hints(obj)
    for name in given:
        if name in hints and not OmegaConf.is_missing(node, name):
            value = OmegaConf.select(node, name, throw_on_missing=False)
            issues += value_issues(f"{path}.{name}", value, hints[name], target)
    return issues + _unset_issues(path, node, obj, target, set(given) | runtime)


def _unset_issues(
    path: str, node: DictConfig, obj: Any, target: str, provided: set[str]
) -> list[ConfigIssue]:
    """Required arguments not provided, and ``???`` (mandatory) values left unset."""
    issues = []
    # A partial is completed by the caller at run time, so missing arguments are expected there.
    is_partial = bool(OmegaConf.select(node, "_partial_", default=False))
    # Only the target's own signature decides what is required: a subclass fills in its bases' arguments.
    own = inspect.signature(_chain(obj)[0]).parameters
    for name, param in own.items():
        if is_partial or name == "self":
            continue
        required = param.default is inspect.Parameter.empty and param.kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        )
        if required and name not in provided:
            issues.append(ConfigIssue(f"{path}.{name}", None, f"required by {target}", f"set {path}.{name}"))
    for name in node:
        if name not in _HYDRA_KEYS and OmegaConf.is_missing(node, name):
            issues.append(
                ConfigIssue(f"{path}.{name}", "???", "missing mandatory value", f"set {path}.{name}")
            )
    return issues
