"""Config checks that need no component: what each ``_target_`` is, and argument binding against signatures.

Whether a target may be instantiated at all is decided on the imported object by
:func:`rlvr.security.trust.judge_target` (where it is defined, not how its path is
spelt). Arguments are bound against each target's signature (torchtune's approach),
so a misspelt key fails with its path and the valid names, before anything loads; each value is
validated with pydantic against its parameter's annotation, which is also where a component
declares a setting's rule (``Literal`` choices, ``Annotated[int, Field(ge=1)]`` ranges).
"""

from __future__ import annotations

import functools
import inspect
import json
import types
import typing
from typing import Any

from hydra.utils import get_object
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from rlvr.config.errors import ConfigIssue, suggest
from rlvr.security.trust import judge_target

_HYDRA_KEYS = {"_target_", "_partial_", "_recursive_", "_convert_", "_args_"}
# Slots whose every entry is a component of its own (dicts keyed by name, STYLE.md 4).
COMPONENT_SLOTS = ("reward.terms", "observers")


def _adapter(annotation: Any) -> TypeAdapter[Any] | None:
    """A pydantic adapter for a parameter's annotation, built once; None where pydantic cannot
    build one (an unresolved forward reference, a TypeVar): such values are accepted."""
    if annotation in (Any, inspect.Parameter.empty) or isinstance(annotation, (str, typing.TypeVar)):
        return None
    try:
        return _cached_adapter(annotation)
    except TypeError:  # an unhashable annotation: built each time
        return _cached_adapter.__wrapped__(annotation)


@functools.cache
def _cached_adapter(annotation: Any) -> TypeAdapter[Any] | None:
    try:  # a class pydantic does not know is one the config cannot spell: see value_issues
        return TypeAdapter(annotation, config=ConfigDict(arbitrary_types_allowed=True))
    except Exception:  # PydanticSchemaGenerationError, PydanticUndefinedAnnotation, ...: not checkable
        return None


# Pydantic error types that are rules on a value of the right type (a range, a choice), in the
# user's words; any other error says the value has the wrong type.
_RULES = {"greater_than": "> {gt}", "greater_than_equal": ">= {ge}", "less_than": "< {lt}",
          "less_than_equal": "<= {le}", "literal_error": "{expected}", "multiple_of": "a multiple of {multiple_of}",
          "string_too_short": "at least {min_length} characters", "too_short": "at least {min_length} items",
          "finite_number": "a finite number"}  # fmt: skip


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
    by_part: dict[str, list[dict[str, Any]]] = {}
    for error in errors:
        by_part.setdefault(_located(value, tuple(error["loc"]))[0], []).append(dict(error))
    issues = []
    for suffix, found in by_part.items():
        part, where = _located(value, tuple(found[0]["loc"]))[1], f"{key}{suffix}"
        kinds = {e["type"] for e in found}
        # A part that may be an object of a class pydantic does not know (``dict[str, _Term]``,
        # ``Scorer | None``) is built by the caller or a nested ``_target_``: accepted, as its type says.
        if "needs_python_object" in kinds:
            continue
        if kinds - set(_RULES) or not isinstance(part, str) and "literal_error" in kinds:
            # the wrong type, or a union's members each refusing it (``'maybe'`` for ``Literal['unsloth'] | bool``)
            within = f" ({found[0]['msg'].replace('Input should', 'should')})" if suffix else ""
            problem = f"has type {type(part).__name__}, {owner} expects {spelt(annotation)}{within}"
            issues.append(ConfigIssue(where, part, problem, f"give {where} a value of that type"))
            continue
        first = found[0]  # a rule on a value of the right type: a range, a choice
        ctx = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in first["ctx"].items()}
        rule = _RULES[first["type"]].format(**ctx)
        fix = _rule_fix(where, part, rule, annotation)
        issues.append(ConfigIssue(where, part, f"must be {rule}", fix, builds=True))
    return issues


def _rule_fix(where: str, part: Any, rule: str, annotation: Any) -> str:
    """How to meet a rule: a close choice, the rule, and the example and note its declaration
    gives (``Annotated[int, Field(ge=1, examples=[5], description="0 = off")]``)."""
    choices = _choices(annotation)
    if choices:
        close = f"{suggest(str(part), choices)} " if isinstance(part, str) else ""
        return f"{close}set {where} to {rule}"
    info = _field_info(annotation)
    example = f", e.g. {info.examples[0]}" if info is not None and info.examples else ""
    note = f" ({info.description})" if info is not None and info.description else ""
    return f"set {where} to a value {rule}{example}{note}"


def _field_info(annotation: Any) -> FieldInfo | None:
    """The ``Field(...)`` an annotation declares, within an ``Optional`` too."""
    found = [m for m in getattr(annotation, "__metadata__", ()) if isinstance(m, FieldInfo)]
    found += [i for a in typing.get_args(annotation) if (i := _field_info(a)) is not None]
    return found[0] if found else None


def spelt(annotation: Any) -> str:
    """An annotation as a user reads it: ``int | None``, ``list[str]``, ``Literal['a', 'b']``,
    without ``Annotated`` rules or ``typing.`` prefixes."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return spelt(args[0])
    if origin is typing.Literal:
        return f"Literal[{', '.join(repr(a) for a in args)}]"
    if origin in (typing.Union, types.UnionType):
        return " | ".join("None" if a is type(None) else spelt(a) for a in args)
    if origin is not None and args:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(spelt(a) for a in args)}]"
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


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
    strict: bool


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
