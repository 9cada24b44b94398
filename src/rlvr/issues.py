"""Configuration problems, collected and reported all at once before anything heavy loads: the issue
type every layer reports with, and how an issue is found for a value against its annotation
(:func:`value_issues`, with pydantic; a node of many keys typed as a ``TypedDict``, key by key). A
leaf: it imports nothing of rlvr, so the ground floor (rlvr.runtime) reports issues without pointing
up (tests/unit/test_layout.py).
"""

from __future__ import annotations

import difflib
import functools
import inspect
import json
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo


@dataclass(frozen=True)
class ConfigIssue:
    """One problem: where (dotted config key), what value, which rule, and how to fix it."""

    key: str
    value: Any
    problem: str
    fix: str
    # A value of the right type that breaks a rule its parameter declares (a range, a choice): the
    # component is still built, so its own validate() reports the rules between its fields too.
    builds: bool = field(default=False, compare=False, repr=False)
    # Where the value was set and the keys that copy it by interpolation, when the gate folded their
    # issues into this one (rlvr.config.copies): one mistake, one message.
    origin: str = field(default="", compare=False, repr=False)

    def __str__(self) -> str:
        from rlvr.runtime.secrets import redact_text  # a message quotes values: it is an output too

        where = f" ({self.origin})" if self.origin else ""
        return redact_text(f"{self.key}={self.value!r}{where}: {self.problem}. Fix: {self.fix}")


@dataclass(frozen=True)
class Refused:
    """A typed node's key that stays known (a misspelling of it still gets "did you mean") but that a
    config may not set: the rule and the fix its refusal names. Put in the key's ``Annotated``
    metadata (rlvr.training_loop.settings: what is not on the allowlist of a training phase)."""

    rule: str
    fix: str


class ConfigValidationError(ValueError):
    """Raised with every ConfigIssue found, so a user fixes them in one pass."""

    def __init__(self, issues: Iterable[ConfigIssue]):
        self.issues = list(issues)
        lines = "\n".join(f"  - {issue}" for issue in self.issues)
        super().__init__(f"{len(self.issues)} configuration problem(s):\n{lines}")


def suggest(value: str, choices: Iterable[str], n: int = 3) -> str:
    """'did you mean ...' text for a misspelt name."""
    close = difflib.get_close_matches(value, list(choices), n=n, cutoff=0.5)
    return f"did you mean {', '.join(repr(c) for c in close)}?" if close else "no close match"


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
    # Every float a config sets is finite (``.inf`` passed gt=0 bounds, then crashed the run with a
    # raw traceback): pydantic's allow_inf_nan=False for every annotation, not only those that say so.
    try:  # a class pydantic does not know is one the config cannot spell: see value_issues
        return TypeAdapter(annotation, config=ConfigDict(arbitrary_types_allowed=True, allow_inf_nan=False))
    except Exception:  # PydanticSchemaGenerationError, PydanticUndefinedAnnotation, ...: not checkable
        return None


# Pydantic error types that are rules on a value of the right type (a range, a choice), in the
# user's words; any other error says the value has the wrong type.
_RULES = {"greater_than": "> {gt}", "greater_than_equal": ">= {ge}", "less_than": "< {lt}",
          "less_than_equal": "<= {le}", "literal_error": "{expected}", "multiple_of": "a multiple of {multiple_of}",
          "string_too_short": "at least {min_length} characters", "too_short": "at least {min_length} items",
          "finite_number": "a finite number", "string_too_long": "at most {max_length} characters",
          "string_pattern_mismatch": "a string matching {pattern}"}  # fmt: skip


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
    (``must be >= 0``). A typed node (a ``TypedDict`` annotation) is judged key by key: :func:`_node_issues`."""
    node = _typed_node(annotation)
    if node is not None and isinstance(plain := _plain(value), dict):
        return _node_issues(key, plain, node)
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
        ctx = {
            k: int(v) if isinstance(v, float) and v.is_integer() else v
            for k, v in first.get("ctx", {}).items()
        }
        rule = _RULES[first["type"]].format(**ctx)
        fix = _rule_fix(where, part, rule, annotation)
        issues.append(ConfigIssue(where, part, f"must be {rule}", fix, builds=True))
    return issues


def _typed_node(annotation: Any) -> Any:
    """The ``TypedDict`` an annotation is (within ``Annotated``, or ``Node | None``), or None."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        nodes = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _typed_node(nodes[0]) if len(nodes) == 1 else None
    return annotation if typing.is_typeddict(annotation) else None


def _titled(annotation: Any) -> tuple[Any, str | None]:
    """A node key's annotation without ``Required``, and the title its ``Field(title=...)`` gives (the
    owner messages name: ``GRPOConfig.learning_rate``)."""
    wrappers = {getattr(typing, name, None) for name in ("Required", "NotRequired")} - {None}  # 3.11+
    if typing.get_origin(annotation) in wrappers:
        annotation = typing.get_args(annotation)[0]
    meta = typing.get_args(annotation)[1:] if typing.get_origin(annotation) is typing.Annotated else ()
    titles = [m.title for m in meta if isinstance(m, FieldInfo) and m.title]
    return annotation, (titles[0] if titles else None)


def _node_issues(key: str, value: dict[str, Any], node: Any) -> list[ConfigIssue]:
    """A typed node's keys: one it does not declare (with the close names), each value against its
    key's own annotation, and a required key left out."""
    hints = typing.get_type_hints(node, include_extras=True)
    issues = [
        ConfigIssue(f"{key}.{name}", v, f"not a {node.__name__} field", suggest(name, hints))
        for name, v in value.items()
        if name not in hints
    ]
    issues += refusals(key, value, node)
    for name, v in value.items():
        if name in hints and _refusal(hints[name]) is None:
            annotation, title = _titled(hints[name])
            issues += value_issues(f"{key}.{name}", v, annotation, title or f"{node.__name__}.{name}")
    return issues + [
        ConfigIssue(f"{key}.{name}", None, "missing", f"set {key}.{name}")
        for name in sorted(node.__required_keys__)
        if name not in value
    ]


def _refusal(annotation: Any) -> Refused | None:
    """The :class:`Refused` a node key's annotation carries, or None (a key a config may set)."""
    annotation = _titled(annotation)[0]
    meta = typing.get_args(annotation)[1:] if typing.get_origin(annotation) is typing.Annotated else ()
    return next((m for m in meta if isinstance(m, Refused)), None)


def refusals(key: str, value: dict[str, Any], node: Any) -> list[ConfigIssue]:
    """The keys of ``value`` that the typed ``node`` knows but refuses (:class:`Refused`), each
    naming the key, the value as set, the rule and the fix; the component is not built with them."""
    hints = typing.get_type_hints(node, include_extras=True)
    return [
        ConfigIssue(f"{key}.{name}", v, refused.rule, refused.fix)
        for name, v in value.items()
        if name in hints and (refused := _refusal(hints[name])) is not None
    ]


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
    target = rule if rule.startswith("a ") else f"a value {rule}"  # "a finite number"
    return f"set {where} to {target}{example}{note}"


def _field_info(annotation: Any) -> FieldInfo | None:
    """The ``Field(...)`` an annotation declares, within an ``Optional`` too."""
    found = [m for m in getattr(annotation, "__metadata__", ()) if isinstance(m, FieldInfo)]
    found += [i for a in typing.get_args(annotation) if (i := _field_info(a)) is not None]
    told = [i for i in found if i.examples or i.description]  # not a Field that only titles its key
    return (told or found)[0] if found else None


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
