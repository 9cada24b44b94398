"""Every value has one home: a key the composed conf/ YAML carries has no Python default in the
signature of the ``_target_`` it is passed to (CONTRIBUTING.md rule 10). Two homes drift apart: evaluation's
``every_n_steps`` once read 160 in YAML and 0 in Python."""

from __future__ import annotations

import ast
import inspect
import textwrap
import typing

import pytest
from hydra.utils import get_object
from omegaconf import OmegaConf
from tests.conftest import CONF, compose_config

from rlvr.config.validation import iter_targets

_HYDRA_KEYS = {"_target_", "_partial_", "_recursive_", "_convert_", "_args_"}
# Still in two homes, each waiting on a change outside rlvr's component constructors (issue 25);
# any other key in two homes fails. Drop an entry once its Python default is gone.
WAITING = {
    # rlvr.benchmark.runner builds HFModel(name_or_path=...) for a hub id or directory: once benchmark
    # models are composed model nodes, HFModel's arguments lose their defaults too.
    "rlvr.model.loader.HFModel": {
        "dtype", "trust_remote_code", "use_safetensors", "gguf_file", "lora", "quantization",
        "gradient_checkpointing", "attn_implementation",
    },
    "rlvr.prompts.PromptTemplate": {
        "system", "answer_start", "answer_end", "reasoning_start", "reasoning_end", "family",
    },
}  # fmt: skip
GROUPS = sorted(p.name for p in CONF.iterdir() if p.is_dir() and p.name not in ("hydra", "experiment"))
SUBGROUPS = sorted(str(p.relative_to(CONF)) for g in GROUPS for p in (CONF / g).iterdir() if p.is_dir())
OPTIONS = [f"{g}={f.stem}" for g in GROUPS + SUBGROUPS for f in sorted((CONF / g).glob("*.yaml"))]
EXPERIMENTS = [f"experiment={f.stem}" for f in sorted((CONF / "experiment").glob("*.yaml"))]


def _overrides(option: str) -> list[str]:
    group, _, name = option.partition("=")
    if group == "data/source":  # no default: each option is placed under a name in data.eval_sets
        return [f"+data/source@data.eval_sets.extra={name}"]
    if group == "reward/terms":  # terms are keyed by name
        return [f"+reward/terms@reward.terms.extra={name}"]
    if group.startswith("data/"):  # a file source's checker and processor
        return ["data=qa_file", option]
    if option in ("model=hf", "model=unsloth"):
        return [option, "model.name_or_path=some/model"]
    return [option]


def _defaults_in_python(obj, keys) -> dict[str, object]:
    """Of ``keys``, those whose parameter has a default along the signatures ``obj`` forwards
    ``**kwargs`` through (a subclass's __init__, then its bases'), minus those :data:`WAITING`."""
    chain = [(obj, obj)]
    if inspect.isclass(obj):
        chain = [(k, k.__init__) for k in obj.__mro__ if k is not object and "__init__" in vars(k)]
    found: dict[str, object] = {}
    for owner, f in chain:
        params = inspect.signature(f).parameters
        waiting = WAITING.get(f"{owner.__module__}.{owner.__qualname__}", set())
        for key in keys:
            p = params.get(key)
            if p is not None and key not in found:
                found[key] = inspect.Parameter.empty if key in waiting else p.default
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            break
    return {k: d for k, d in found.items() if d is not inspect.Parameter.empty}


def two_homes(overrides: list[str], config_name: str = "config") -> list[str]:
    cfg = compose_config(overrides, config_name)
    found = []
    for path, node in iter_targets(cfg):
        keys = [k for k in node if k not in _HYDRA_KEYS]
        obj = get_object(OmegaConf.select(node, "_target_"))
        for key, default in _defaults_in_python(obj, keys).items():
            found.append(f"{path}.{key}: YAML {OmegaConf.select(node, key)!r}, Python {default!r}")
    return found


@pytest.mark.parametrize("option", ["", *OPTIONS, *EXPERIMENTS])
def test_a_key_the_yaml_carries_has_no_python_default(option):
    assert two_homes(_overrides(option) if option else []) == []


def test_the_benchmark_config_has_one_home_per_value():
    assert two_homes([], "benchmark") == []


# -- a setting's rule has one home: its parameter's annotation -------------------------------------------

# (the bound's keyword, the comparisons ``self.<p> <op> bound`` that state it or its negation)
_BOUNDS = {"ge": (ast.GtE, ast.Lt), "gt": (ast.Gt, ast.LtE), "le": (ast.LtE, ast.Gt), "lt": (ast.Lt, ast.GtE)}
_FLIPPED = {ast.GtE: ast.LtE, ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE}


def _shipped_targets() -> set[str]:
    """Every ``_target_`` a file under conf/ names (interpolated ones aside)."""
    found = set()
    for path in CONF.rglob("*.yaml"):
        for _, node in iter_targets(OmegaConf.load(path)):
            target = node._get_node("_target_")._value()
            if isinstance(target, str) and "${" not in target:
                found.add(target)
    return found


def _classes(target: str) -> list[type]:
    """The target's class and its bases from this package (whose __init__ the target may call)."""
    obj = get_object(target)
    return [k for k in getattr(obj, "__mro__", ()) if k.__module__.startswith("rlvr.")]


def _declared(klass: type) -> dict[str, tuple[list[tuple[type, object]], bool]]:
    """Per parameter of klass.__init__: the bounds its annotation declares (comparison types that state
    or negate each) and whether it is a ``Literal`` choice."""
    rules = {}
    for name, hint in typing.get_type_hints(klass.__init__, include_extras=True).items():
        bounds, choice, stack = [], False, [hint]
        while stack:
            a = stack.pop()
            choice |= typing.get_origin(a) is typing.Literal
            stack += typing.get_args(a)
            for meta in getattr(a, "__metadata__", ()):
                for m in getattr(meta, "metadata", [meta]):
                    bounds += [
                        (op, getattr(m, k)) for k, ops in _BOUNDS.items() if hasattr(m, k) for op in ops
                    ]
        if bounds or choice:
            rules[name] = (bounds, choice)
    return rules


def _restated(klass: type) -> list[str]:
    """Comparisons in klass's own code that restate a rule its signature declares: ``self.p < 1``
    for ``p: Annotated[int, Field(ge=1)]`` (or ``1 > self.p``), ``self.p in (...)`` for a ``Literal``
    ``p``. A rule between fields (``self.lower_at >= self.raise_at``) or another bound
    (``self.num_samples > 1``) is not a restatement."""
    declared = _declared(klass)
    found = []
    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(klass)))):
        if not isinstance(node, ast.Compare) or len(node.ops) != 1:
            continue
        left, op, right = node.left, type(node.ops[0]), node.comparators[0]
        if not _is_self_attr(left, declared):
            left, right, op = right, left, _FLIPPED.get(op, op)
        if not _is_self_attr(left, declared):
            continue
        bounds, choice = declared[left.attr]
        value = right.value if isinstance(right, ast.Constant) else None
        if (op, value) in bounds or choice and op in (ast.In, ast.NotIn):
            found.append(f"{klass.__qualname__}: {ast.unparse(node)} restates {left.attr}'s annotation")
    return found


def _is_self_attr(node: ast.AST, declared: dict) -> typing.TypeGuard[ast.Attribute]:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and node.attr in declared
    )


def test_no_component_restates_a_rule_its_signature_declares():
    """A range or choice declared in a parameter's annotation is bound by the config gate
    (rlvr.config.validation); a validate() that checks it again is a second home that drifts."""
    classes = {k for t in _shipped_targets() for k in _classes(t)}
    assert len(classes) > 20  # the walk reaches the shipped components
    assert [line for k in sorted(classes, key=str) for line in _restated(k)] == []


def test_a_setting_a_subclass_passes_on_is_declared_as_its_base_declares_it():
    """CurriculumData's train_size is ReasoningGymData's: the same annotation (one ``Size``), so a
    range declared on one is not missing from the other."""
    found = []
    for klass in {k for t in _shipped_targets() for k in _classes(t)}:
        own = [k for k in klass.__mro__ if k.__module__.startswith("rlvr.") and "__init__" in vars(k)]
        hints = [typing.get_type_hints(k.__init__, include_extras=True) for k in own]
        for sub, base, h_sub, h_base in zip(own, own[1:], hints, hints[1:], strict=False):
            found += [
                f"{sub.__qualname__}.{name}: {h_sub[name]} vs {base.__qualname__}'s {h_base[name]}"
                for name in h_sub.keys() & h_base.keys()
                if name != "return" and h_sub[name] != h_base[name]
            ]
    assert found == []
