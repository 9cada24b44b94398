"""A new user's config mistakes, through the real entry point: each is named (key, value, fix), none
ends in a traceback, and one mistake never hides another in the same command (issue 25, item 7)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests import in_process

pytestmark = pytest.mark.integration


def refused(tmp_path: Path, *overrides: str, config: str = "config") -> str:
    cmd = [
        f"--config-name={config}",
        "validate_only=true",
        f"hydra.run.dir={tmp_path / 'run'}",
        *overrides,
    ]
    proc = in_process.run(cmd)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.stderr


def test_a_word_where_a_number_goes_is_named_with_the_trl_field_type(tmp_path):
    err = refused(
        tmp_path, "training_loop.grpo.learning_rate=fast", "training_loop.grpo.num_generations=[2,3]"
    )
    assert (
        "training_loop.grpo.learning_rate='fast': has type str, GRPOConfig.learning_rate expects float" in err
    )
    assert "training_loop.grpo.num_generations=[2, 3]: has type list" in err


def test_an_incomplete_new_reward_term_is_named_with_its_close_match(tmp_path):
    err = refused(tmp_path, "+reward.terms.formatt.weight=0.5")
    assert "reward.terms.formatt={'weight': 0.5}: is not a component (no _target_)" in err
    assert "did you mean 'format'?" in err


def test_a_misspelt_key_without_plus_is_named_and_hides_nothing(tmp_path):
    # As the README writes overrides: no '+'. Hydra alone stops at the first unknown key.
    err = refused(
        tmp_path,
        "training_loop.grpo.learnin_rate=1e-5",
        "trainng_loop.seed=3",
        "training_loop.precision=fp8",
        "training_loop.grpo.max_steps=-3",
    )
    assert "5 configuration problem(s)" not in err and "4 configuration problem(s)" in err, err
    assert "training_loop.grpo.learnin_rate='1e-5': the config has no key 'learnin_rate'" in err
    assert "did you mean 'learning_rate'?" in err and "+training_loop.grpo.learnin_rate=1e-5" in err
    assert "did you mean 'training_loop'?" in err
    assert "training_loop.precision='fp8': must be 'auto', 'bf16', 'fp16' or 'fp32'" in err
    assert "training_loop.grpo.max_steps=-3: must be > 0" in err


def test_a_bad_precision_does_not_hide_a_field_typo(tmp_path):
    err = refused(tmp_path, "training_loop.precision=fp8", "+training_loop.sft.learnin_rate=1e-5")
    assert "training_loop.precision='fp8'" in err
    assert "training_loop.sft.learnin_rate=1e-05: not a SFTConfig field" in err


def test_run_settings_of_the_wrong_shape_are_named(tmp_path):
    err = refused(
        tmp_path,
        "validate_only=maybe",
        "resume=123",
        "training_loop.sft.enabled=maybe",
        "observers.console.log_every=0",
        "reward.terms=5",
    )
    assert "validate_only='maybe': has type str, the run expects bool" in err
    assert "resume=123: checkpoint directory does not exist" in err
    assert "training_loop.sft.enabled='maybe': has type str, training_loop.sft.enabled expects bool" in err
    assert "observers.console.log_every=0: must be >= 1" in err
    assert "reward.terms=5: has type int" in err


def test_the_benchmark_reports_a_misspelt_key_with_its_other_problems(tmp_path):
    err = refused(tmp_path, "benchmark.modelz=[a]", "evaluation.max_new_tokens=-1", config="benchmark")
    assert "benchmark.modelz='[a]': the config has no key 'modelz' under benchmark" in err
    assert "did you mean 'models'?" in err
    assert "evaluation.max_new_tokens=-1" in err


def test_a_sweep_refuses_a_misspelt_key_before_any_point_runs(tmp_path):
    cmd = [
        "-m",
        "validate_only=true",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "seed=1,2",
        "training_loop.grpo.learnin_rate=1e-5",
    ]
    proc = in_process.run(cmd)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "did you mean 'learning_rate'?" in proc.stderr
    assert not (tmp_path / "sweep").exists()


def test_a_config_group_given_a_number_or_null_lists_its_options(tmp_path):
    err = refused(tmp_path, "model=3", "experiment=null", "training_loop.grpo.per_device_train_batch_size=0")
    assert "model=3: is a config group" in err and "'smollm2_135m'" in err
    assert "experiment=None: is a config group" in err and "~experiment" in err
    assert "training_loop.grpo.per_device_train_batch_size=0: must be > 0" in err
