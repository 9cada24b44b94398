"""Attacks that already failed on 2026-11-22 (issue 15's "what held"): kept failing by these tests."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from tests.conftest import ROOT

from rlvr.config.hydra_check import screen_command_line
from rlvr.issues import ConfigValidationError


def test_a_foreign_searchpath_only_adds_configs_that_are_checked_like_any_other(tmp_path):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "evil.yaml").write_text(
        "# @package _global_\nobservers:\n  y: \"${oc.create:{_target_: os.system, _args_: ['touch x']}}\"\n"
    )
    args = [f"hydra.searchpath=[file://{tmp_path}]", "experiment=evil"]
    with pytest.raises(ConfigValidationError, match="oc.create"):
        screen_command_line(args, ROOT / "run_pipeline.py", "conf", "config")


def _jinja_uses(path: Path) -> list[str]:
    """Where a module imports jinja2 (``import``, ``from``, or ``importlib.import_module("jinja2...")``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value] if node.value.split(".")[0] == "jinja2" else []
        found += [f"{path.name}:{node.lineno} {n}" for n in names if n.split(".")[0] == "jinja2"]
    return found


def test_rlvr_renders_chat_templates_only_through_transformers():
    """A model folder's chat template is Jinja its author wrote. rlvr renders it only through
    ``tokenizer.apply_chat_template`` (PromptTemplate.render, the one prompt path of training and
    evaluation), which runs it in transformers' sandboxed environment; no module of rlvr builds a
    Jinja environment of its own, where ``{{ cycler.__init__.__globals__.os.popen(...) }}`` would
    run. (It replaces a test that a hostile template raised SecurityError through render: that
    tested transformers' sandbox, which transformers tests; the folder's own defences, a planted or
    edited template refused and the prompt hash covering the template, are
    tests/unit/test_cached_model.py's.) Mutation: ``import jinja2`` in rlvr/prompts.py -> red."""
    src = ROOT / "src" / "rlvr"
    uses = [use for path in sorted(src.rglob("*.py")) for use in _jinja_uses(path)]
    assert not uses, f"render chat templates through tokenizer.apply_chat_template instead: {uses}"
    render = ast.unparse(
        next(
            node
            for node in ast.walk(ast.parse((src / "prompts.py").read_text(encoding="utf-8")))
            if isinstance(node, ast.FunctionDef) and node.name == "render"
        )
    )
    assert "tokenizer.apply_chat_template(" in render, render
