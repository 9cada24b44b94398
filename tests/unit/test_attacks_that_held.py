"""Attacks that already failed on 2026-11-22 (issue 15's "what held"): kept failing by these tests."""

from __future__ import annotations

import pytest
from tests.conftest import ROOT

from rlvr.config.hydra_check import preflight
from rlvr.issues import ConfigValidationError


def test_a_foreign_searchpath_only_adds_configs_that_are_checked_like_any_other(tmp_path):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "evil.yaml").write_text(
        "# @package _global_\nobservers:\n  y: \"${oc.create:{_target_: os.system, _args_: ['touch x']}}\"\n"
    )
    args = [f"hydra.searchpath=[file://{tmp_path}]", "experiment=evil"]
    with pytest.raises(ConfigValidationError, match="oc.create"):
        preflight(args, ROOT / "run_pipeline.py", "conf", "config")


def test_a_chat_template_cannot_escape_its_sandbox(tmp_path):
    """A model directory's chat template is Jinja run by transformers in a sandbox: no file access."""
    from jinja2.exceptions import SecurityError
    from transformers import AutoTokenizer

    from rlvr.model.embedded import ensure_default_model
    from rlvr.prompts import PromptTemplate

    marker = tmp_path / "escaped"
    tok = AutoTokenizer.from_pretrained(ensure_default_model())
    tok.chat_template = "{{ cycler.__init__.__globals__.os.popen('touch " + str(marker) + "').read() }}"
    with pytest.raises(SecurityError):
        PromptTemplate("{question}").render(tok, [{"role": "user", "content": "hi"}])
    assert not marker.exists()
