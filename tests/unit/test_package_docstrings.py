"""Each package's docstring names every module it holds (issue 57 item 5): a package docstring that
describes the layout before a move, or leaves out a module added since, is red here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "rlvr"
PACKAGES = sorted(p.parent for p in SRC.glob("*/__init__.py"))


def unnamed_modules(package: Path) -> list[str]:
    """The modules of ``package`` its docstring does not name (as ``name``, a dotted path ending in it,
    or the word itself)."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    modules = sorted(p.stem for p in package.glob("*.py") if not p.stem.startswith("_"))
    return [m for m in modules if not re.search(rf"(?<![\w]){re.escape(m)}(?![\w])", doc)]


@pytest.mark.parametrize("package", PACKAGES, ids=[p.name for p in PACKAGES])
def test_a_package_docstring_names_each_of_its_modules(package):
    assert not unnamed_modules(package), (
        f"rlvr.{package.name}'s docstring does not name {unnamed_modules(package)}: say what each holds"
    )


def test_a_module_the_docstring_leaves_out_is_named(tmp_path):
    """The check can fail: a module added beside those the docstring names is reported."""
    (tmp_path / "__init__.py").write_text('"""Holds ``alpha``."""\n')
    (tmp_path / "alpha.py").write_text("")
    (tmp_path / "beta.py").write_text("")
    assert unnamed_modules(tmp_path) == ["beta"]
