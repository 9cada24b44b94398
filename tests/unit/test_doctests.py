"""Every ``>>>`` example in src/rlvr runs and prints what its docstring shows, as the standard
library's doctest runs it. pytest collects tests/ only (pyproject's ``testpaths``), so without this
file the examples never ran: issue 54 counted 97 of them in 25 modules, one already wrong.

A module is found by its text (any line starting with ``>>>``), so a new example is run without
being listed here; each module is imported as the package's users import it, so a module whose
import needs a GPU library would fail here rather than hide its examples."""

from __future__ import annotations

import doctest
import importlib
import re
import subprocess
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
EXAMPLE = re.compile(r"^\s*>>>(?: |$)", re.MULTILINE)


def modules_with_examples() -> list[tuple[str, int]]:
    """(dotted module name, number of ``>>>`` lines) for every module of src/rlvr that has one."""
    found = []
    for path in sorted((SRC / "rlvr").rglob("*.py")):
        examples = len(EXAMPLE.findall(path.read_text(encoding="utf-8")))
        if examples:
            found.append((".".join(path.relative_to(SRC).with_suffix("").parts), examples))
    return found


MODULES = modules_with_examples()
# Modules whose examples start the verifier's worker interpreter: a unit test starts none, so
# tests/integration/test_doctests_workers.py runs these (the unit test below refuses any other
# example that starts a process).
WORKER_MODULES = frozenset({"rlvr.verifier.sandbox"})


def run_examples(module: str) -> tuple[doctest.TestResults, str]:
    """The module's docstring examples run by doctest (its finder and runner), and the report of any
    that failed."""
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    for test in doctest.DocTestFinder().find(importlib.import_module(module)):
        runner.run(test, out=report.append)
    return runner.summarize(verbose=False), "".join(report)


def test_the_examples_are_found():
    """The search above sees the tree's examples (so the test below is not vacuous): 101 ``>>>``
    lines in 26 modules on 2026-11-29, after two that never ran (``+SKIP``, needing a loaded model,
    their output made up) were deleted and a stale one (GSM8K without its fields) fixed."""
    assert len(MODULES) >= 20 and sum(n for _, n in MODULES) >= 90, MODULES


def check_examples(module: str, examples: int) -> None:
    """Each ``>>>`` line is an example doctest runs (not one outside a docstring, where the finder
    does not look, and not one marked ``+SKIP``), and each prints what follows it."""
    result, report = run_examples(module)
    assert result.failed == 0, report
    assert result.attempted == examples, (
        f"{module}: {examples} '>>>' lines, {result.attempted} run by doctest: an example outside a "
        "docstring or skipped never runs; make it a docstring example that runs, or delete it"
    )


IN_PROCESS = [(m, n) for m, n in MODULES if m not in WORKER_MODULES]


@pytest.mark.parametrize(("module", "examples"), IN_PROCESS, ids=[m for m, _ in IN_PROCESS])
def test_every_docstring_example_runs_and_shows_its_output(module, examples, monkeypatch):
    """Mutations: an example's shown output changed -> its module red; ``# doctest: +SKIP`` on one
    -> red (one fewer attempted); an example that starts a process outside WORKER_MODULES -> red."""

    def no_process(*args, **kwargs):
        raise AssertionError(f"{module}'s examples start a process: add it to WORKER_MODULES")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    check_examples(module, examples)


def test_the_worker_modules_have_examples():
    assert not WORKER_MODULES - {m for m, _ in MODULES}, WORKER_MODULES - {m for m, _ in MODULES}
