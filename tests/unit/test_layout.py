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
    assert len((SRC / "pipeline" / "orchestrator.py").read_text().splitlines()) <= 350


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The rlvr modules ``path`` imports when it is imported: statements at module level, those
    under ``if TYPE_CHECKING:`` too (a circle a type checker sees), not those inside functions."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        statements = [node] if not isinstance(node, ast.If) else [*node.body, *node.orelse]
        for s in statements:
            if isinstance(s, ast.Import):
                found |= {a.name for a in s.names}
            elif isinstance(s, ast.ImportFrom) and s.module and s.level == 0:
                for a in s.names:  # ``from rlvr.x import y``: the submodule y where there is one
                    found.add(f"{s.module}.{a.name}" if f"{s.module}.{a.name}" in modules else s.module)
    return {m for m in found if m in modules}


def test_no_import_circle():
    modules = _modules()
    graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
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
