"""A new user's mistakes get a fix that names the value to type: the close config-group option, a
num_generations that divides the batch, and whether a plugin is missing from Python or misspelt."""

from __future__ import annotations

import pytest
from tests.conftest import ROOT

from rlvr.config.hydra_check import screen_command_line
from rlvr.issues import ConfigValidationError
from rlvr.security.trust import PLUGINS_ENV, judge_target
from rlvr.training_loop.phase import trl_check_fix

SCRIPT = ROOT / "run_pipeline.py"
PLUGIN_DIR = ROOT / "tests" / "plugins"


def test_a_misspelt_group_option_names_the_close_one():
    [(line, issue)] = screen_command_line(["model=smollm", "validate_only=true"], SCRIPT, "conf", "config")
    assert line == "model=smollm" and (issue.key, issue.value) == ("model", "smollm")
    assert "did you mean model=smollm2_135m?" in issue.fix
    assert "tiny" in issue.fix  # the options, as Hydra would list them


def test_a_group_option_added_as_a_term_keeps_the_override_key_in_its_fix():
    [(_, issue)] = screen_command_line(["+reward/terms@reward.terms.c=correctnes"], SCRIPT, "conf", "config")
    assert "did you mean +reward/terms@reward.terms.c=correctness" in issue.fix


def test_an_option_missing_from_an_experiment_file_names_the_close_one(tmp_path):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /model: smollm\n"
    )
    with pytest.raises(ConfigValidationError) as exc:
        screen_command_line(["--config-dir", str(tmp_path), "experiment=mine"], SCRIPT, "conf", "config")
    [issue] = exc.value.issues
    assert "did you mean model=smollm2_135m?" in issue.fix


@pytest.mark.parametrize(
    ("fields", "fitting"),
    [
        ({"per_device_train_batch_size": 16, "gradient_accumulation_steps": 4}, 18),
        ({"per_device_train_batch_size": 5, "gradient_accumulation_steps": 1}, 6),
    ],
)
def test_a_num_generations_that_does_not_divide_the_batch_gets_values_that_pass_trl(
    tmp_path, fields, fitting
):
    from trl import GRPOConfig

    def config(**changes):
        return GRPOConfig(
            output_dir=str(tmp_path),
            report_to=[],
            use_cpu=True,
            bf16=False,
            **{**fields, "num_generations": 3, **changes},
        )

    def passes(changes):
        try:
            config(**changes)
        except ValueError:
            return False
        return True

    assert not passes({})  # TRL refuses the configured combination
    fix = trl_check_fix("training_loop.grpo", {**fields, "num_generations": 3}, passes)
    assert f"training_loop.grpo.per_device_train_batch_size={fitting}" in fix, fix
    suggested = [int(v) for v in __import__("re").findall(r"num_generations=(\d+)", fix)]
    assert suggested and 3 not in suggested
    for n in suggested:  # each value the fix names passes TRL's own check
        assert config(num_generations=n).num_generations == n
    assert config(per_device_train_batch_size=fitting).per_device_train_batch_size == fitting


def test_an_unknown_trl_rejection_still_says_what_to_change():
    fix = trl_check_fix("training_loop.grpo", {}, lambda changes: False)  # no value TRL accepts
    assert "see the message" not in fix and "training_loop.grpo" in fix


def test_a_plugin_python_cannot_import_is_not_blamed_on_a_typo(monkeypatch):
    monkeypatch.setenv(PLUGINS_ENV, "my_rewards")  # allowed, but installed nowhere and on no path
    issue = judge_target("k", "my_rewards.score")
    assert "'my_rewards' is not importable from this Python" in issue.problem
    assert "typo" not in issue.fix and "PYTHONPATH" in issue.fix and "pip install -e" in issue.fix


def test_a_misspelt_name_in_an_importable_plugin_gets_the_close_names(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    monkeypatch.setenv(PLUGINS_ENV, "rlvr_example_plugin")
    attr = judge_target("k", "rlvr_example_plugin.rewards.EvenAnswerRewrd")
    assert "has no 'EvenAnswerRewrd'" in attr.problem and "did you mean 'EvenAnswerReward'" in attr.fix
    module = judge_target("k", "rlvr_example_plugin.reward.EvenAnswerReward")
    assert "rlvr_example_plugin has no 'reward'" in module.problem and "'rewards'" in module.fix
    assert judge_target("k", "rlvr_example_plugin.rewards.EvenAnswerReward") is None
