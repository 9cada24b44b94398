"""The private trainer methods rlvr overrides or calls hold in both locked releases (issue 57 item 2).

rlvr.training_loop.trainer lists them (``TRL_PRIVATE``, the public hooks it overrides in ``TRL_HOOKS``,
the private attributes it reads in ``TRL_PRIVATE_ATTRIBUTES``), each with the class that defines it and
the signature the override or call was written against. Here each is looked up, as source parsed with
``ast`` (never imported), in the CPU lock's TRL and transformers (the venv's files) and in the GPU lock's
(requirements/gpu.txt's files, `make gpu-sources`; tests/locked_source.py): a TRL upgrade that renames,
moves or reshapes one of them is red here instead of silently skipping an override. And nothing
unlisted slips in: every method of RLVRGRPOTrainer that shadows one of the locked trainer's is listed,
every private trainer name the class reads is its own or listed, and so is every private trainer method
src/rlvr calls on another object (``trainer._load_from_checkpoint``).
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib.metadata
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.locked_source import Found, Source, locked_release

from rlvr.training_loop import trainer as trainer_module
from rlvr.training_loop.trainer import TRL_HOOKS, TRL_PRIVATE, TRL_PRIVATE_ATTRIBUTES, RLVRGRPOTrainer

SRC = Path(__file__).resolve().parents[2] / "src" / "rlvr"
TRAINER_PY = Path(inspect.getfile(trainer_module))
GRPO_TRAINER = "trl.trainer.grpo_trainer.GRPOTrainer"
HF_TRAINER = "transformers.trainer.Trainer"
# The trainers src/rlvr subclasses, by the name its class statements give them.
TRAINERS = {"GRPOTrainer": GRPO_TRAINER, "SFTTrainer": "trl.trainer.sft_trainer.SFTTrainer"}
LISTED = {**TRL_PRIVATE, **TRL_HOOKS}


@functools.cache
def _venv(dist: str) -> Source:
    """The venv's installed release of ``dist`` (the CPU lock's): its own package's files only, as
    in the GPU lock's wheel (a base class from another package ends a class chain)."""
    found = importlib.metadata.distribution(dist)
    base = Path(found.locate_file(""))

    def read(path: str) -> bytes | None:
        file = base / path
        return file.read_bytes() if path.startswith(f"{dist}/") and file.is_file() else None

    return Source(f"{dist} {found.version} (the CPU lock's, installed)", read)


LOCKS = {
    "cpu": lambda: (_venv("trl"), _venv("transformers")),
    # the GPU lock's file where its version differs from the venv's (trl 1.15.0 against 1.16.0 today)
    "gpu": lambda: (locked_release("trl"), locked_release("transformers")),
}


@functools.cache
def _chain(lock: tuple[Source, Source], trainer: str = GRPO_TRAINER) -> list[Found]:
    """A TRL trainer's classes: TRL's (e.g. GRPOTrainer, _BaseTrainer), then transformers' Trainer."""
    trl, transformers = lock
    found = []
    for source, dotted in ((trl, trainer), (transformers, HF_TRAINER)):
        cls = source.resolve(dotted)
        while True:
            found.append(cls)
            bases = [
                b for b in cls.node.bases if not (isinstance(b, ast.Name) and b.id in ("object", "Generic"))
            ]
            try:
                cls = source.resolve_expr(cls.module, bases[0]) if bases else None
            except LookupError:  # a base from the other release (TRL's _BaseTrainer(Trainer))
                cls = None
            if cls is None:
                break
    return found


def _methods(cls: Found) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in cls.node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


def _defined(
    lock: tuple[Source, Source], name: str, trainers: tuple[str, ...] = tuple(TRAINERS.values())
) -> tuple[str, ast.FunctionDef] | None:
    """(the class that defines the trainers' method ``name``, its definition), or None."""
    for trainer in trainers:
        for cls in _chain(lock, trainer):
            if name in _methods(cls):
                return f"{cls.module}.{cls.node.name}", _methods(cls)[name]
    return None


def _signature(node: ast.FunctionDef) -> str:
    """The parameters as written (names, kinds, defaults), without annotations."""
    args = copy.deepcopy(node.args)
    for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg):
        if arg is not None:
            arg.annotation = None
    return ast.unparse(args)


def _our_class() -> ast.ClassDef:
    [cls] = [n for n in ast.parse(TRAINER_PY.read_text()).body if getattr(n, "name", "") == "RLVRGRPOTrainer"]
    return cls


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _is_super(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and getattr(node.func, "id", "") == "super"


def _self_assigned(nodes: list[ast.AST]) -> set[str]:
    """Attribute names assigned on ``self`` anywhere in ``nodes``."""
    names = set()
    for node in nodes:
        for sub in ast.walk(node):
            if not isinstance(sub, ast.Assign | ast.AnnAssign | ast.AugAssign):
                continue
            for target in sub.targets if isinstance(sub, ast.Assign) else [sub.target]:
                names.update(
                    t.attr for t in ast.walk(target) if isinstance(t, ast.Attribute) and _is_self(t.value)
                )
    return names


@pytest.fixture(scope="module", params=sorted(LOCKS))
def lock(request) -> tuple[Source, Source]:
    return LOCKS[request.param]()


@pytest.mark.parametrize("name", sorted(LISTED))
def test_each_listed_trainer_method_is_defined_where_and_as_the_code_expects(lock, name):
    expected = LISTED[name]
    found = _defined(lock, name)
    labels = " / ".join(source.label for source in lock)
    assert found is not None, f"{name} is in no class of GRPOTrainer in {labels}: rlvr's override is dead"
    owner, node = found
    assert owner == expected.owner, f"{name} moved to {owner} in {labels} (recorded: {expected.owner})"
    assert _signature(node) == expected.signature, (
        f"{owner}.{name} takes ({_signature(node)}) in {labels}; rlvr's code was written against "
        f"({expected.signature}): check the override or call, then update TRL_PRIVATE"
    )


def test_generate_single_turn_returns_the_pair_the_rollout_clock_unpacks(lock):
    """The clock unpacks ``completion_ids, logprobs`` from ``_generate_single_turn``."""
    _, node = _defined(lock, "_generate_single_turn")
    returns = [n.value for n in ast.walk(node) if isinstance(n, ast.Return)]
    assert returns and all(
        isinstance(r, ast.Tuple)
        and [getattr(e, "id", None) for e in r.elts] == ["completion_ids", "logprobs"]
        for r in returns
    ), lock[0].label


@pytest.mark.parametrize("name", sorted(TRL_PRIVATE_ATTRIBUTES))
def test_each_private_attribute_read_is_set_by_the_locked_trainer(lock, name):
    init = [_methods(cls)["__init__"] for cls in _chain(lock) if "__init__" in _methods(cls)]
    assert name in _self_assigned(init), f"no __init__ of GRPOTrainer sets self.{name} in {lock[0].label}"


def test_every_method_of_the_trainer_that_shadows_the_locked_trainers_is_listed(lock):
    """A new override (or a helper whose name a TRL upgrade takes) cannot slip in unlisted; a listed
    override that the class no longer defines is red too. Instance attributes the class sets must not
    be the locked trainer's either (they would overwrite its state)."""
    ours = {
        name
        for name, value in vars(RLVRGRPOTrainer).items()
        if inspect.isfunction(value) and not name.startswith("__")
    }
    shadowing = {name for name in ours if _defined(lock, name, (GRPO_TRAINER,)) is not None}
    unlisted = sorted(shadowing - LISTED.keys())
    assert unlisted == [], f"overrides not listed in TRL_PRIVATE / TRL_HOOKS ({lock[0].label})"
    overridden = {name for name, entry in LISTED.items() if entry.use == "override"}
    assert sorted(overridden - ours) == [], "listed as overridden but not defined on RLVRGRPOTrainer"
    theirs = _self_assigned([cls.node for cls in _chain(lock)])
    clash = sorted(_self_assigned([_our_class()]) & theirs)
    assert clash == [], f"attributes the locked trainer sets too ({lock[0].label})"


def test_no_trainer_class_in_src_overrides_an_unlisted_private_method(lock):
    """Any class of src/rlvr on a TRL trainer (the SFT phase's too): its private methods that the
    locked trainer defines are listed in TRL_PRIVATE, the one place."""
    unlisted = []
    for path in sorted(SRC.rglob("*.py")):
        for cls in ast.walk(ast.parse(path.read_text())):
            bases = [getattr(b, "id", getattr(b, "attr", "")) for b in getattr(cls, "bases", [])]
            trainers = tuple(TRAINERS[b] for b in bases if b in TRAINERS)
            if not (isinstance(cls, ast.ClassDef) and trainers):
                continue
            unlisted += [
                f"{path.relative_to(SRC)}: {cls.name}.{name}"
                for name in _methods(Found("", cls))
                if _private(name) and name not in TRL_PRIVATE and _defined(lock, name, trainers)
            ]
    assert unlisted == [], f"private overrides of {lock[0].label} not in TRL_PRIVATE"


def test_the_runtime_method_resolution_agrees():
    """The installed classes say the same as the CPU lock's source: every method of RLVRGRPOTrainer
    that one of TRL's GRPOTrainer classes or transformers' Trainer defines is listed."""
    from trl import GRPOTrainer

    shadowing = {
        name
        for name, value in vars(RLVRGRPOTrainer).items()
        if inspect.isfunction(value)
        and not name.startswith("__")
        and any(name in vars(base) for base in GRPOTrainer.__mro__)
    }
    assert shadowing and sorted(shadowing - LISTED.keys()) == []


def test_every_private_trainer_name_the_class_reads_is_its_own_or_listed():
    """``self._x`` and ``super()._x`` in RLVRGRPOTrainer name the class's own methods and attributes,
    or a listed private of TRL's trainer (reading, say, ``self._buffered_inputs`` unlisted is red)."""
    cls = _our_class()
    own = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)} | _self_assigned([cls])
    read = {
        node.attr
        for node in ast.walk(cls)
        if isinstance(node, ast.Attribute)
        and _private(node.attr)
        and (_is_self(node.value) or _is_super(node.value))
    }
    assert read, "the scan found nothing: it would pass for any class"
    assert sorted(read - own - LISTED.keys() - TRL_PRIVATE_ATTRIBUTES.keys()) == []


def _private_calls_on_other_objects() -> dict[str, list[str]]:
    """``x._name`` where x is not ``self``/``cls``/``super()``, in src/rlvr: name -> where."""
    found: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            if _is_self(node.value) or _is_super(node.value) or getattr(node.value, "id", "") == "cls":
                continue
            found.setdefault(node.attr, []).append(f"{path.relative_to(SRC)}:{node.lineno}")
    return found


def test_every_private_trainer_method_src_calls_on_a_trainer_is_listed():
    lock = LOCKS["cpu"]()
    calls = _private_calls_on_other_objects()
    trainer_methods = {name: where for name, where in calls.items() if _defined(lock, name) is not None}
    assert "_load_from_checkpoint" in trainer_methods, "the scan misses the one known call"
    assert {name: where for name, where in trainer_methods.items() if name not in TRL_PRIVATE} == {}


def _module_level_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Imports that run when the module is imported (not those inside a function)."""
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            todo.extend(ast.iter_child_nodes(node))


def test_src_imports_the_trainer_module_only_inside_a_function():
    """RLVRGRPOTrainer subclasses the trl.GRPOTrainer present when its module is first imported, and
    unsloth replaces TRL's trainer classes when it loads a model: a module-level import anywhere in
    src/rlvr could bind TRL's class before unsloth's exists."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for node in _module_level_imports(ast.parse(path.read_text())):
            names = [a.name for a in node.names]
            module = node.module if isinstance(node, ast.ImportFrom) else None
            if (
                module == "rlvr.training_loop.trainer"
                or "rlvr.training_loop.trainer" in names
                or (module == "rlvr.training_loop" and "trainer" in names)
            ):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert found == []
