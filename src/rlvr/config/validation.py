"""Config checks that need no component: what each ``_target_`` is, and argument binding against signatures.

Whether a target may be instantiated at all is decided on the imported object by
:func:`rlvr.config.trust.judge_target` (where it is defined, not how its path is
spelt). Arguments are bound against each target's signature (torchtune's approach),
so a misspelt key fails with its path and the valid names, before anything loads.
"""

from __future__ import annotations

import inspect
import json
import typing
from typing import Any

from hydra.utils import get_object
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import ConfigDict, TypeAdapter, ValidationError

from rlvr.config.errors import ConfigIssue, suggest
from rlvr.config.trust import judge_target

_HYDRA_KEYS = {"_target_", "_partial_", "_recursive_", "_convert_", "_args_"}
# Slots whose every entry is a component of its own (dicts keyed by name, STYLE.md 4).
COMPONENT_SLOTS = ("reward.terms", "observers")


def _adapter(annotation: Any) -> TypeAdapter[Any] | None:
    """A cached pydantic adapter for a parameter's annotation; None where pydantic cannot build one
    (a Protocol, an arbitrary class, an unresolved forward reference): such values are accepted."""
    if annotation in (Any, inspect.Parameter.empty) or isinstance(annotation, (str, typing.TypeVar)):
        return None
    try:
        return _ADAPTERS[annotation]
    except KeyError:
        pass
    except TypeError:  # an unhashable annotation: built each time
        return _build_adapter(annotation)
    _ADAPTERS[annotation] = adapter = _build_adapter(annotation)
    return adapter


def _build_adapter(annotation: Any) -> TypeAdapter[Any] | None:
    try:  # a class pydantic does not know is one the config cannot spell: see value_issues
        return TypeAdapter(annotation, config=ConfigDict(arbitrary_types_allowed=True))
    except Exception:  # PydanticSchemaGenerationError, PydanticUndefinedAnnotation, ...: not checkable
        return None


_ADAPTERS: dict[Any, TypeAdapter[Any] | None] = {}
# Pydantic error types that say the value has the wrong type (the rest are rules on a value of
# the right type: a range, a choice).
_TYPE_ERRORS = ("_type", "_parsing", "is_instance_of", "is_subclass_of", "missing", "extra_forbidden")
_RULES = {"greater_than": "> {gt}", "greater_than_equal": ">= {ge}", "less_than": "< {lt}",
          "less_than_equal": "<= {le}", "literal_error": "one of {expected}"}  # fmt: skip


def _plain(value: Any) -> Any:
    """A config value as YAML gives it: OmegaConf containers become plain lists and dicts."""
    if isinstance(value, (DictConfig, ListConfig)):
        return OmegaConf.to_container(value, resolve=True)
    return value


def _has_target(value: Any) -> bool:
    if isinstance(value, dict):
        return "_target_" in value or any(_has_target(v) for v in value.values())
    return isinstance(value, list) and any(_has_target(v) for v in value)


def _located(value: Any, loc: tuple[Any, ...]) -> tuple[str, Any]:
    """The part of ``value`` a pydantic error location points at, as a key suffix (``.name``,
    ``[0]``) and that part; location steps that name a union member, not a part, are skipped."""
    suffix = ""
    for step in loc:
        if isinstance(value, dict) and str(step) in value:
            value, suffix = value[str(step)], f"{suffix}.{step}"
        elif isinstance(value, list) and isinstance(step, int) and step < len(value):
            value, suffix = value[step], f"{suffix}[{step}]"
    return suffix, value


def _choices(annotation: Any) -> list[str]:
    """The strings of the ``Literal`` choices within an annotation (for "did you mean")."""
    if typing.get_origin(annotation) is typing.Literal:
        return [str(c) for c in typing.get_args(annotation) if isinstance(c, str)]
    return [c for a in typing.get_args(annotation) for c in _choices(a)]


def value_issues(key: str, value: Any, annotation: Any, owner: str) -> list[ConfigIssue]:
    """``value`` validated against ``annotation`` with pydantic as a YAML value (JSON mode, strict:
    ``maybe`` is no bool, ``'3'`` no int, ``3`` is a float); one issue per wrong part, naming the
    annotation's ``owner`` (``has type str, GRPOConfig.learning_rate expects float``) or its rule
    (``must be >= 0``)."""
    adapter = _adapter(annotation)
    if adapter is None:
        return []
    try:
        value = _plain(value)
        if _has_target(value):  # nested components are bound on their own
            return []
        adapter.validate_json(json.dumps(value, allow_nan=True), strict=True)
        return []
    except ValidationError as e:
        errors = e.errors(include_url=False)
    except (TypeError, ValueError, OmegaConfBaseException):  # not a YAML value, or unresolvable: not ours
        return []
    wanted = annotation.__name__ if isinstance(annotation, type) else str(annotation).replace("typing.", "")
    found: dict[str, ConfigIssue] = {}
    # A part that may be an object of a class pydantic does not know (``dict[str, _Term]``,
    # ``Scorer | None``) is built by the caller or a nested ``_target_``: accepted, as its type says.
    objects = {_located(value, tuple(e["loc"]))[0] for e in errors if e["type"] == "needs_python_object"}
    for error in errors:  # a union's members each fail: one issue per part, a rule before a type
        suffix, part = _located(value, tuple(error["loc"]))
        if suffix in objects:
            continue
        rule = _RULES.get(error["type"])
        if rule is None and not error["type"].endswith(_TYPE_ERRORS):
            rule = error["msg"].replace("Input should be ", "").replace("Value ", "")
        plain = type(part).__name__
        where = f"{key}{suffix}"
        if rule is not None:
            rule = rule.format(**error.get("ctx", {}))
            choices = _choices(annotation)
            close = f"{suggest(str(part), choices)} " if choices and isinstance(part, str) else ""
            fix = f"{close}set {where} to a value that is {rule}"
            found[where] = ConfigIssue(where, part, f"must be {rule}", fix)
        elif where not in found:
            within = "" if not suffix else f" ({error['msg'].replace('Input should', 'should')})"
            problem = f"has type {plain}, {owner} expects {wanted}{within}"
            found[where] = ConfigIssue(where, part, problem, f"give {where} a value of that type")
    return list(found.values())


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


class RunSettings(typing.TypedDict):
    """The run's own top-level keys (conf/config.yaml): no component's signature declares them."""

    seed: int
    validate_only: bool
    resume_allow_changes: bool


def run_key_issues(cfg: DictConfig) -> list[ConfigIssue]:
    """Top-level run settings that do not fit :class:`RunSettings` (``validate_only=maybe`` would read as true)."""
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
