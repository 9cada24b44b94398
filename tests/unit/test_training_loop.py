"""GRPOLoop turns component config into TRL configs: checks that need no model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from rlvr.training.loop import GRPOLoop, _checkpointing_follows_model


@pytest.mark.parametrize("model_flag", [False, True])
def test_trl_gradient_checkpointing_follows_the_model(tmp_path, model_flag):
    loop = GRPOLoop(sft={"max_steps": 1, "use_cpu": True}, grpo={"max_steps": 1, "use_cpu": True})
    model = SimpleNamespace(is_activation_checkpointing=model_flag)
    for args in (loop.sft_config(tmp_path), loop.grpo_config(tmp_path)):
        assert args.activation_checkpointing is True  # TRL's default, which the loop must override
        args = _checkpointing_follows_model(args, {}, model)
        assert args.activation_checkpointing is args.gradient_checkpointing is model_flag


def test_explicit_training_loop_setting_wins(tmp_path):
    loop = GRPOLoop(sft={"max_steps": 1, "use_cpu": True, "gradient_checkpointing": True}, grpo={})
    model = SimpleNamespace(is_activation_checkpointing=False)
    assert _checkpointing_follows_model(loop.sft_config(tmp_path), loop.sft, model).gradient_checkpointing
