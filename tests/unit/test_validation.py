"""Validation reports every problem at once, each naming the key, the value and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, TypedDict

import pytest
from pydantic import Field
from tests.conftest import compose_config

from rlvr.config.gate import check
from rlvr.config.validation import check_targets
from rlvr.issues import ConfigValidationError, value_issues
from rlvr.pipeline.wiring import runtime_args


def build_errors(overrides, tmp_path):
    cfg = compose_config(overrides)
    with pytest.raises(ConfigValidationError) as info:
        check(cfg, tmp_path)
    return info.value


def test_unknown_task_suggests_close_names(tmp_path):
    err = build_errors(["model=tiny", "data.task=leg_countin"], tmp_path)
    [issue] = [i for i in err.issues if i.key == "data.task"]
    assert issue.value == "leg_countin"
    assert "leg_counting" in issue.fix


def test_all_errors_reported_at_once(tmp_path):
    err = build_errors(
        [
            "model=tiny",
            "data.task=basic_arithmetic",
            "data.eval_size=0",
            "training_loop.grpo.num_generations=1",
            "evaluation.ks=[4]",
        ],
        tmp_path,
    )
    keys = {i.key for i in err.issues}
    assert {"data.eval_size", "training_loop.grpo.num_generations", "evaluation.ks"} <= keys
    assert "3 configuration problem" in str(err) or len(err.issues) >= 3


def test_misspelt_argument_names_path_and_suggestion():
    cfg = compose_config(["model=tiny", "+data.trian_size=5"])
    issues = check_targets(cfg, runtime_args(cfg))
    [issue] = issues
    assert issue.key == "data.trian_size"
    assert "train_size" in issue.fix


def test_unknown_trl_field_is_caught_with_suggestion(tmp_path):
    err = build_errors(["model=tiny", "+training_loop.grpo.learning_rat=1e-5"], tmp_path)
    [issue] = [i for i in err.issues if i.key == "training_loop.grpo.learning_rat"]
    assert "learning_rate" in issue.fix


def test_trl_divisibility_rule_reported_before_model_load(tmp_path):
    err = build_errors(
        [
            "model=tiny",
            "training_loop.grpo.per_device_train_batch_size=6",
            "training_loop.grpo.gradient_accumulation_steps=1",  # a generation batch of 6
            "training_loop.grpo.num_generations=4",
        ],
        tmp_path,
    )
    assert any(i.key == "training_loop.grpo" and "divisible" in i.problem for i in err.issues)


@pytest.mark.parametrize("target", ["builtins.open", "os.system", "subprocess.run"])
def test_targets_outside_the_package_are_refused(target):
    cfg = compose_config(["model=tiny", f"data._target_={target}"])
    issues = check_targets(cfg)
    assert any(i.key == "data._target_" and i.value == target for i in issues)


def test_gpu_only_options_refused_on_cpu_and_4bit_is_not(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("machine has a GPU")
    err = build_errors(["model=unsloth_qwen2_5_1_5b"], tmp_path)
    assert [i.key for i in err.issues] == ["model"] and "CUDA" in err.issues[0].problem
    err = build_errors(["model=qwen2_5_1_5b", "model.quantization=4bit", "data.eval_size=0"], tmp_path)
    assert [i.key for i in err.issues] == ["data.eval_size"]  # bitsandbytes NF4 runs on CPU


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("data.train_size=lots", "data.train_size"),
        ("evaluation.temperature=hot", "evaluation.temperature"),
        ("evaluation.baseline=[1]", "evaluation.baseline"),
        ("+model.trust_remote_code=maybe", "model.trust_remote_code"),
        ("model.dtype=16", "model.dtype"),
    ],
)
def test_wrong_types_fail_at_load(override, key):
    cfg = compose_config(["model=tiny", override])
    issues = check_targets(cfg, runtime_args(cfg))
    assert [i.key for i in issues] == [key]
    assert "expects" in issues[0].problem


def test_type_check_accepts_valid_values():
    from rlvr.issues import value_issues

    def ok(value, annotation):
        return value_issues("k", value, annotation, "owner") == []

    assert ok(3, float) and ok(None, int | None) and ok([1], list[int]) and ok("a/b", Path)
    assert not ok(True, int) and not ok("3", int) and not ok({"a": 1}, list) and not ok("maybe", bool)
    [issue] = value_issues("k", [1, "x"], list[int], "owner")
    assert issue.key == "k[1]" and issue.value == "x" and "owner expects list[int]" in issue.problem


def test_inherited_options_of_subclasses_are_checked():
    cfg = compose_config(["model=tiny", "+model.trust_remote_cod=true"])
    issues = check_targets(cfg, runtime_args(cfg))
    [issue] = issues
    assert issue.key == "model.trust_remote_cod" and "trust_remote_code" in issue.fix


def test_a_declared_rule_is_named_with_key_value_rule_and_fix():
    """Choices and ranges declared in annotations come back in the ConfigIssue form, every part
    at once, with "did you mean" for a misspelt choice and the declaration's example and note."""
    from typing import Annotated, Literal

    from pydantic import Field

    from rlvr.issues import value_issues

    [mode] = value_issues("observers.wandb.mode", "ofline", Literal["auto", "offline", "online"], "W")
    assert mode.problem == "must be 'auto', 'offline' or 'online'" and "did you mean 'offline'" in mode.fix
    weight = Annotated[float, Field(gt=0, examples=[0.5], description="a task's weight")]
    issues = value_issues("data.tasks", {"a": 0, "b": 1, "c": "x"}, dict[str, weight] | None, "M")
    assert [(i.key, i.value) for i in issues] == [("data.tasks.a", 0), ("data.tasks.c", "x")]
    assert str(issues[0]) == (
        "data.tasks.a=0: must be > 0. Fix: set data.tasks.a to a value > 0, e.g. 0.5 (a task's weight)"
    )
    assert "has type str, M expects dict[str, float] | None" in issues[1].problem
    assert value_issues("k", 16, Literal["float32", "auto"], "HF")[0].problem.startswith("has type int")


def test_a_value_outside_its_declared_range_hides_no_other_rule_of_its_component(tmp_path):
    """The component is still built (ConfigIssue.builds), so the rule between its fields is reported too."""
    err = build_errors(["model=tiny", "evaluation.num_samples=0", "evaluation.ks=[9]"], tmp_path)
    assert [i.key for i in err.issues] == ["evaluation.num_samples", "evaluation.ks"]


def test_a_typed_node_is_judged_key_by_key_naming_each_fields_owner():
    """A ``TypedDict`` annotation (a training phase's node, rlvr.training_loop.settings) is judged key
    by key: a key it lacks with the close names, each value against its own annotation naming the
    owner its ``Field(title=...)`` gives, a bound as a rule (the component still builds), a required
    key left out. Mutation: the node branch of value_issues removed -> red (pydantic names the node)."""

    class Node(TypedDict, total=False):
        learning_rate: Annotated[float, Field(gt=0, examples=[1e-5], title="GRPOConfig.learning_rate")]
        beta: float

    found = {
        i.key: i
        for i in value_issues("g", {"learnin_rate": 1, "learning_rate": "fast", "beta": 0.1}, Node, "T")
    }
    assert set(found) == {"g.learnin_rate", "g.learning_rate"}
    assert (
        found["g.learnin_rate"].problem == "not a Node field"
        and "'learning_rate'" in found["g.learnin_rate"].fix
    )
    assert found["g.learning_rate"].problem == "has type str, GRPOConfig.learning_rate expects float"
    [bound] = value_issues("g", {"learning_rate": 0}, Node, "T")
    assert (bound.problem, bound.builds) == ("must be > 0", True) and "e.g. 1e-05" in bound.fix

    class Rounds(TypedDict):
        rounds: int

    [missing] = value_issues("r", {}, Rounds, "T")
    assert (missing.key, missing.problem) == ("r.rounds", "missing")


def test_the_phase_nodes_are_the_installed_trls_config_fields():
    """Every field of the locked TRL's SFTConfig / GRPOConfig is a key of its node, so a misspelt one
    gets "did you mean" and none is checked by a copy of TRL's list; the fields off the allowlist keep
    TRL's type and are refused when set (tests/unit/test_training_settings.py)."""
    import dataclasses
    import typing

    import trl

    from rlvr.training_loop.settings import GRPONode, RFTNode, SFTNode

    for node, config in ((SFTNode, trl.SFTConfig), (RFTNode, trl.SFTConfig), (GRPONode, trl.GRPOConfig)):
        names = {f.name for f in dataclasses.fields(config)}
        hints = typing.get_type_hints(node)
        assert names <= set(hints), sorted(names - set(hints))
    assert typing.get_type_hints(GRPONode)["beta"] == typing.get_type_hints(trl.GRPOConfig)["beta"]
    assert typing.get_type_hints(GRPONode)["deepspeed"] == typing.get_type_hints(trl.GRPOConfig)["deepspeed"]
