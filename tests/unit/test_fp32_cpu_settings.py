"""``${rlvr.fp32_cpu:A,B}``: a setting whose value depends on whether the run trains in fp32 on a CPU
(rlvr.runtime.hardware.fp32_cpu_value), said on the console and in provenance.json."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf
from tests.conftest import compose_config

import rlvr  # noqa: F401  (registers the resolvers, as run_pipeline.py's imports do)
from rlvr.config.gate import check, checked_config
from rlvr.issues import ConfigValidationError
from rlvr.runtime.hardware import cpu_native_bf16

EXPRESSION = "training_loop.grpo.max_steps='${rlvr.fp32_cpu:3,5}'"


@pytest.mark.parametrize(
    ("precision", "steps"),
    [("fp32", 3), ("bf16", 5)],
)
def test_the_value_follows_the_runs_precision_on_a_cpu(precision, steps):
    cfg = checked_config(
        compose_config([EXPRESSION, "training_loop.device=cpu", f"training_loop.precision={precision}"])
    )
    assert cfg.training_loop.grpo.max_steps == steps


def test_auto_precision_takes_the_fp32_value_exactly_where_this_cpu_has_no_native_bf16():
    cfg = checked_config(compose_config([EXPRESSION, "training_loop.device=cpu"]))
    assert cfg.training_loop.grpo.max_steps == (5 if cpu_native_bf16() else 3)


def test_a_key_set_on_the_command_line_replaces_the_expression():
    cfg = checked_config(
        compose_config([EXPRESSION, "training_loop.grpo.max_steps=7", "training_loop.precision=fp32"])
    )
    assert cfg.training_loop.grpo.max_steps == 7


def _hardware_record(precision: str, run_dir) -> dict:
    """What the training loop the config gate built would record, for the expression on a CPU."""
    checked = check(
        compose_config([EXPRESSION, "training_loop.device=cpu", f"training_loop.precision={precision}"]),
        run_dir,
    )
    try:
        return checked.components["training_loop"].hardware_record()
    finally:
        checked.close()


def test_the_run_says_what_the_fp32_value_chose_and_only_on_an_fp32_cpu(tmp_path):
    """The config gate hands the training loop the keys the resolver chose (TrainingLoop.hardware_record:
    the console and provenance.json); on a run that does not train in fp32 on a CPU it says nothing.
    Mutation: _say_fp32_cpu_settings not called -> red."""
    record = _hardware_record("fp32", tmp_path / "fp32")
    assert "training_loop.grpo.max_steps=3 (${rlvr.fp32_cpu:3,5})" in record["fp32_cpu"]
    assert record["precision"] == "fp32"
    assert "fp32_cpu" not in _hardware_record("bf16", tmp_path / "bf16")


def test_its_arguments_come_back_as_written_never_resolved_again():
    """The attacker's view: text that looks like an interpolation in an argument is returned as text (the
    gate then refuses a resolved value that would rebuild one), and a nested resolver is judged by name."""
    escaped = OmegaConf.create(
        {
            "training_loop": {"device": "cpu", "precision": "fp32"},
            "x": "${rlvr.fp32_cpu:'\\${oc.env:HOME}',1}",
        }
    )
    assert escaped.x == "${oc.env:HOME}"  # text: nothing read from the environment
    cfg = compose_config(["training_loop.device=cpu", "training_loop.precision=fp32"])
    OmegaConf.update(cfg, "training_loop.grpo.max_steps", escaped._get_node("x")._value())
    with pytest.raises(ConfigValidationError, match="training_loop.grpo.max_steps"):
        checked_config(cfg)  # the gate refuses the text that would become an interpolation
    with pytest.raises(ConfigValidationError, match="now_what"):
        checked_config(compose_config(["training_loop.grpo.max_steps='${rlvr.fp32_cpu:${now_what:1},5}'"]))


@pytest.mark.parametrize(
    ("precision", "expected"),
    [("fp32", (160, 160, False, 8, 2)), ("bf16", (160, 160, False, 16, 4))],
)
def test_the_default_run_is_lighter_where_it_trains_in_fp32_on_a_cpu(precision, expected):
    """The fp32 path's lighter run (benchmarks/cpu_fp32.md): the same SFT, half the GRPO steps, two samples
    a question in the sampled evaluations; elsewhere the default as before."""
    cfg = checked_config(compose_config(["training_loop.device=cpu", f"training_loop.precision={precision}"]))
    sft, grpo = cfg.training_loop.sft, cfg.training_loop.grpo
    got = (
        sft.max_steps,
        sft.save_steps,
        sft.freeze_embeddings,
        grpo.max_steps,
        cfg.evaluation.sampled.num_samples,
    )
    assert got == expected
