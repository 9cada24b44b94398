"""The shape of the source tree a newcomer reads (issue 34), held so that it does not drift back:
config and code one hop apart, a small root, short functions, an orchestrator that stays a recipe,
a config gate that stays a gate, and no import circle."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

from tests.conftest import CONF, ROOT

SRC = ROOT / "src" / "rlvr"


def _modules() -> dict[str, Path]:
    """Every module of the rlvr package by dotted name (a package by its ``__init__``)."""
    found = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def test_every_target_names_the_module_that_defines_its_class():
    """``_target_: rlvr.a.b.C`` is read in one hop: C is defined in rlvr/a/b.py, not re-exported."""
    targets = {m for f in CONF.rglob("*.yaml") for m in re.findall(r"_target_:\s*([\w.]+)", f.read_text())}
    assert len(targets) > 20
    elsewhere = {}
    for target in sorted(targets):
        module, _, name = target.rpartition(".")
        defined_in = getattr(getattr(importlib.import_module(module), name), "__module__", None)
        if defined_in != module:
            elsewhere[target] = defined_in
    assert not elsewhere, f"point these _target_ paths at the defining module: {elsewhere}"


def test_the_root_holds_at_most_eight_modules_beside_the_packages():
    modules = sorted(p.name for p in SRC.glob("*.py") if p.name != "__init__.py")
    assert len(modules) <= 8, modules


def test_no_function_is_over_80_lines():
    long = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > 80:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long


def _lines(folder: Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in folder.rglob("*.py"))


def test_the_config_gate_and_the_orchestrator_stay_small():
    """rlvr/config is the gate (the typed binding does the per-key checks); the trust boundary's
    rules are rlvr/security's. The orchestrator only sequences (rlvr.pipeline.wiring builds)."""
    assert _lines(SRC / "config") <= 1000
    # 350, and 20 for the budget stage (issue 58 item 4: its planning lives in rlvr.training_loop.budget),
    # and 45 for the one Run object (issue 57 item 3): the typed components wiring's Components held
    # (35 lines there, gone), setup/train/cleanup where RunContext and PipelineOrchestrator were, and
    # the members training reads of the run, where phase.py's Session dataclass was (gone)
    assert len((SRC / "pipeline" / "orchestrator.py").read_text().splitlines()) <= 415


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The rlvr modules ``path`` imports anywhere: at module level, under ``if TYPE_CHECKING:`` (a
    circle a type checker sees) and inside functions (a deferred import is still an arrow: it only
    hides a circle from the interpreter until the function runs)."""
    found = set()
    for s in ast.walk(ast.parse(path.read_text())):
        if isinstance(s, ast.Import):
            found |= {a.name for a in s.names}
        elif isinstance(s, ast.ImportFrom) and s.module and s.level == 0:
            for a in s.names:  # ``from rlvr.x import y``: the submodule y where there is one
                found.add(f"{s.module}.{a.name}" if f"{s.module}.{a.name}" in modules else s.module)
    return {m for m in found if m in modules}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(path, modules) - {name} for name, path in modules.items()}


def test_no_import_circle():
    graph = _graph()
    done: set[str] = set()

    def visit(name: str, stack: list[str]) -> None:
        if name in stack:
            raise AssertionError("import circle: " + " -> ".join([*stack[stack.index(name) :], name]))
        if name in done:
            return
        for other in sorted(graph[name]):
            visit(other, [*stack, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


# The floors of the source tree, lowest first: a module imports its own floor and those below it,
# never one above (CONTRIBUTING.md, "Floors"). A module's floor is that of the longest prefix listed;
# the package itself (its __init__) is listed by its exact name and places no other module, so a new
# folder or root module that nobody placed is reported rather than put on the top floor.
FLOORS = (
    # ground: the machine, files, processes, signals, and the issue type every floor reports with
    ("rlvr.issues", "rlvr.runtime"),
    # the trust boundary: what code and files a config may name
    ("rlvr.security",),
    # the words the parts share: prompts, verifiers, stage names, evaluation results, events
    (
        "rlvr.prompt_families",
        "rlvr.prompts",
        "rlvr.verifier",
        "rlvr.stages",
        "rlvr.evaluation.metrics",
        "rlvr.evaluation.results",
        "rlvr.events",
    ),  # fmt: skip
    # the components' inputs and outputs: data, model, reward, observers
    ("rlvr.data", "rlvr.model", "rlvr.reward", "rlvr.observers"),
    # measuring and recording a run: evaluation, run history, report
    ("rlvr.evaluation", "rlvr.records"),
    # training: the phases and their checkpoints
    ("rlvr.training_loop",),
    # assembly: the config gate, the orchestrator and wiring, the apps
    ("rlvr.config", "rlvr.pipeline", "rlvr.app", "rlvr.benchmark", "rlvr"),
)


PACKAGE = SRC.name  # "rlvr": matches only the package's own __init__


def _floor_or_none(module: str) -> int | None:
    matches = [(len(prefix), n) for n, floor in enumerate(FLOORS) for prefix in floor
               if module == prefix or (prefix != PACKAGE and module.startswith(prefix + "."))]  # fmt: skip
    return max(matches)[1] if matches else None


def _floor(module: str) -> int:
    floor = _floor_or_none(module)
    assert floor is not None, f"{module} is on no floor: add it to FLOORS"
    return floor


def test_every_module_is_on_a_floor():
    """Each module of src/rlvr, importing or imported or neither, is on a listed floor."""
    unplaced = sorted(m for m in _modules() if _floor_or_none(m) is None)
    assert not unplaced, f"on no floor (add each to FLOORS and CONTRIBUTING.md's table): {unplaced}"


def test_a_module_nobody_placed_is_on_no_floor():
    """The check above can fail: a new folder or root module is on no floor until it is listed, and
    the package's own name places only its __init__ (a bare "rlvr" prefix placed every module on the
    top floor, so the check could never fire: issue 54). Mutation: the prefix rule for PACKAGE
    restored -> red."""
    assert _floor_or_none("rlvr.newpart.module") is None
    assert _floor_or_none("rlvr.newmodule") is None
    assert _floor_or_none("rlvrx.data") is None
    assert _floor_or_none(PACKAGE) == len(FLOORS) - 1
    assert _floor_or_none("rlvr.training_loop.grpo") == _floor_or_none("rlvr.training_loop")
    assert _floor("rlvr.evaluation.metrics") < _floor("rlvr.evaluation.report")
    try:
        _floor("rlvr.newpart.module")
    except AssertionError as error:
        assert "rlvr.newpart.module is on no floor: add it to FLOORS" in str(error)
    else:
        raise AssertionError("_floor placed a module on no listed floor")


def test_every_import_points_down_or_level():
    up = [f"{a} -> {b}" for a, targets in _graph().items() for b in sorted(targets) if _floor(b) > _floor(a)]
    assert not up, "imports that point up a floor:\n" + "\n".join(sorted(up))


def test_the_ground_floor_imports_nothing_above_it():
    """rlvr.runtime is the ground: it imports only itself and the issue type, which imports only the
    redaction its messages pass through."""
    graph = _graph()
    runtime = {f"{a} -> {b}" for a, bs in graph.items() if a.startswith("rlvr.runtime") for b in bs
               if not b.startswith("rlvr.runtime") and b != "rlvr.issues"}  # fmt: skip
    assert not runtime, sorted(runtime)
    assert graph["rlvr.issues"] <= {"rlvr.runtime.secrets"}, graph["rlvr.issues"]
    assert not graph["rlvr.runtime.secrets"], graph["rlvr.runtime.secrets"]


def test_every_cited_rule_is_in_the_repository():
    """Code cites CONTRIBUTING.md's numbered rules; a rule cited from a page outside the repository
    (a style page beside it) cannot be read by a contributor."""
    rules = set(re.findall(r"^(\d+)\. ", (ROOT / "CONTRIBUTING.md").read_text(), flags=re.M))
    texts = {p: p.read_text() for folder in ("src", "tests", "conf", "benchmarks", "scripts")
             for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".yaml", ".sh", ".md")}  # fmt: skip
    cited = {
        (p.relative_to(ROOT), n)
        for p, text in texts.items()
        for n in re.findall(r"CONTRIBUTING\.md rule (\d+)", text)
    }
    assert cited and all(n in rules for _, n in cited), sorted(c for c in cited if c[1] not in rules)
    outside = sorted(
        str(p.relative_to(ROOT))
        for p, text in texts.items()
        if re.search(r"\bSTYLE\.md\b", text) and p != Path(__file__)
    )
    assert not outside, outside
