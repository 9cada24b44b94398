"""The prompt-family resolvers: values, registration, and what an attacker can (not) do with them."""

from __future__ import annotations

import contextlib
import sys

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf
from tests.conftest import compose_config

import rlvr  # noqa: F401  (registers the resolvers, as run_pipeline.py's imports do)
from rlvr import prompt_families as resolvers
from rlvr.config.gate import checked_config
from rlvr.issues import ConfigValidationError
from rlvr.prompt_families import FAMILIES, RESOLVER_NAMES, ResolverArgumentError, family_of, marker
from rlvr.security.trust import SAFE_RESOLVERS, check_resolvers


def test_markers_per_family():
    assert [marker("think", m) for m in resolvers.MARKER_NAMES] == [
        "<think>",
        "</think>",
        "<answer>",
        "</answer>",
    ]
    assert [marker("working_out", m) for m in resolvers.MARKER_NAMES] == [
        "<start_working_out>",
        "<end_working_out>",
        "<SOLUTION>",
        "</SOLUTION>",
    ]
    assert marker("plain", "reasoning_start") is None and marker("plain", "answer_end") == "</answer>"


@pytest.mark.parametrize(
    ("model", "fam"),
    [
        ("Qwen/Qwen3-0.6B", "think"),
        ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "think"),
        ("google/gemma-3-1b-it", "working_out"),
        ("/models/cache/gemma3-1b/", "working_out"),
        ("Qwen/Qwen2.5-0.5B-Instruct", "plain"),
        ("HuggingFaceTB/SmolLM2-135M-Instruct", "plain"),
    ],
)
def test_family_of_a_model(model, fam):
    assert family_of(model) == fam


def test_family_is_judged_on_the_models_own_name_not_its_folder():
    with pytest.raises(ResolverArgumentError, match="prompts.family"):
        family_of("/data/qwen3-runs/my-llama")


def test_registered_once_at_import_and_registering_again_changes_nothing():
    for name in RESOLVER_NAMES:
        assert OmegaConf.has_resolver(name)
    resolvers.register()  # OmegaConf raises on a second registration of a name; this must not
    cfg = OmegaConf.create({"m": "${rlvr.marker:think,reasoning_end}"})
    assert cfg.m == "</think>"


def test_the_allowed_list_names_exactly_these_resolvers_deliberately():
    from rlvr.runtime.hardware import FP32_CPU_RESOLVER

    custom = {n for n in SAFE_RESOLVERS if not n.startswith(("oc.", "now", "hydra"))}
    assert custom == {*RESOLVER_NAMES, FP32_CPU_RESOLVER}


def test_prompt_configs_select_markers_through_the_resolvers():
    for option, fam in [("answer_tags", "plain"), ("think", "think"), ("working_out", "working_out")]:
        prompt = instantiate(compose_config([f"prompts={option}"]).prompts)
        m = FAMILIES[fam]
        assert (prompt.family, prompt.answer_start, prompt.answer_end) == (fam, m.answer_start, m.answer_end)
        assert (prompt.reasoning_start, prompt.reasoning_end) == (m.reasoning_start, m.reasoning_end)
        assert all(x in (prompt.system or "") for x in (m.answer_start, m.answer_end))
    # One key switches all four markers, the system prompt that names them, and the hash.
    default = instantiate(compose_config([]).prompts)
    switched = instantiate(compose_config(["prompts.family=working_out"]).prompts)
    assert switched.markers == ("<start_working_out>", "<end_working_out>", "<SOLUTION>", "</SOLUTION>")
    assert switched.system == "Answer with <SOLUTION>N</SOLUTION>." and switched.hash != default.hash
    picked = compose_config(["model=gemma3_1b", "prompts.family='${rlvr.family_of:${model.name_or_path}}'"])
    assert instantiate(picked.prompts).family == "working_out"


def test_the_hash_covers_every_field():
    from rlvr.prompts import PromptTemplate

    base = dict(instruction="{question}", system="s", reasoning_start="<a>", reasoning_end="</a>", family="f")
    h = PromptTemplate(**base).hash
    for key, value in [
        ("system", "t"),
        ("reasoning_start", "<b>"),
        ("reasoning_end", "</b>"),
        ("answer_start", "<x>"),
        ("answer_end", "</x>"),
        ("family", "g"),
        ("instruction", "Q: {question}"),
    ]:
        assert PromptTemplate(**{**base, key: value}).hash != h, key


# -- the attacker's view ---------------------------------------------------------------------------------
HOSTILE = [
    "../../etc/passwd",
    "/etc/passwd",
    "${oc.env:HOME}",  # arrives as text when escaped in YAML (\${...})
    "__class__",
    "think,answer_start",
    "os.system",
    "",
    " think",
]


@pytest.mark.parametrize("arg", HOSTILE)
def test_arguments_outside_the_table_are_refused_and_never_echoed_back_as_a_value(arg):
    with pytest.raises(ResolverArgumentError):
        marker(arg, "answer_start")
    with pytest.raises(ResolverArgumentError):
        marker("think", arg)
    with pytest.raises(ResolverArgumentError):
        family_of(arg + "/x" if arg else arg)


def test_resolvers_can_only_return_fixed_strings_that_are_not_interpolations():
    values = [marker(f, m) for f in FAMILIES for m in resolvers.MARKER_NAMES] + [
        f for _, f in resolvers.MODEL_FAMILIES
    ]
    assert all(v is None or (isinstance(v, str) and "${" not in v and "\\" not in v) for v in values)


_AUDIT: dict[str, list[str] | None] = {"events": None}


def _hook(event: str, args: tuple) -> None:
    if _AUDIT["events"] is not None and not event.startswith(("object.", "sys._getframe", "code.__new__")):
        _AUDIT["events"].append(event)


def audited(fn) -> list[str]:
    """The audit events (PEP 578) Python raises while ``fn`` runs."""
    if not getattr(audited, "installed", False):
        sys.addaudithook(_hook)  # cannot be removed; inert outside audited()
        audited.installed = True
    _AUDIT["events"] = []
    try:
        fn()
    finally:
        events, _AUDIT["events"] = _AUDIT["events"], None
    return events


def test_resolvers_do_no_io_read_no_environment_and_import_nothing():
    import os

    assert "open" in audited(lambda: open(__file__).close())  # the hook sees I/O ...
    assert "os.listdir" in audited(lambda: os.listdir("."))

    def every_call() -> None:
        for arg in [*HOSTILE, "think", "working_out", "plain"]:
            with contextlib.suppress(ResolverArgumentError):
                marker(arg, "answer_start")
            with contextlib.suppress(ResolverArgumentError):
                family_of(arg or "x")

    assert audited(every_call) == []  # ... and the resolvers cause none


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("prompts.family=../../etc/passwd", "prompts.reasoning_start"),
        (r"prompts.family='\${oc.env:HOME}'", "prompts.reasoning_start"),
        ("prompts.answer_start='${rlvr.marker:think,${oc.env:HOME}}'", "prompts.answer_start"),
        ("prompts.answer_start='${rlvr.marker:think\\,answer_end,answer_start}'", "prompts.answer_start"),
    ],
)
def test_a_smuggled_argument_is_a_config_error_naming_the_key(monkeypatch, override, key):
    monkeypatch.setenv("HOME", "/root")
    cfg = compose_config([override])
    assert check_resolvers(cfg) == []  # the names are allowed; their arguments are what is judged
    with pytest.raises(ConfigValidationError) as err:
        checked_config(cfg)
    issue = err.value.issues[0]
    assert issue.key == key
    assert "families are" in issue.problem or "marker name" in issue.problem


def test_a_resolver_cannot_be_used_to_build_a_node_after_the_check():
    """Other resolvers stay refused beside ours, nested or not."""
    for value in ["${rlvr.marker:${oc.create:{a: 1}},answer_start}", "${rlvr.evil:think}"]:
        cfg = OmegaConf.create({"prompts": {"answer_start": value}})
        assert check_resolvers(cfg), value


def test_the_resolver_module_imports_nothing_that_reaches_files_environment_or_code():
    """Environment reads raise no audit event, so the module's imports are pinned too."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(resolvers))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert imported == {"__future__", "dataclasses", "omegaconf"}
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert not names & {"open", "eval", "exec", "compile", "__import__", "getattr_static", "globals"}
