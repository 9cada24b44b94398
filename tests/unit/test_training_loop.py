"""TrainingLoop turns component config into TRL configs: checks that need no model."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from tests.conftest import make_eval_result, make_loop

from rlvr.training_loop.phase import _checkpointing_follows_model


@pytest.mark.parametrize("model_flag", [False, True])
def test_trl_gradient_checkpointing_follows_the_model(tmp_path, model_flag):
    loop = make_loop(sft={"max_steps": 1}, grpo={"max_steps": 1}, device="cpu")
    model = SimpleNamespace(is_activation_checkpointing=model_flag)
    for args in (loop.sft_phase.config(tmp_path), loop.grpo_phase.config(tmp_path)):
        assert args.gradient_checkpointing is True  # TRL's default, which the loop must override
        args = _checkpointing_follows_model(args, {}, model)
        assert args.gradient_checkpointing is model_flag
        # transformers after 5.17 also has the newer name; both must say the same
        assert getattr(args, "activation_checkpointing", model_flag) is model_flag


def test_explicit_training_loop_setting_wins(tmp_path):
    loop = make_loop(sft={"max_steps": 1, "gradient_checkpointing": True}, grpo={}, device="cpu")
    model = SimpleNamespace(is_activation_checkpointing=False)
    args = loop.sft_phase.config(tmp_path)
    assert _checkpointing_follows_model(args, loop.sft_phase.trl_fields, model).gradient_checkpointing


def test_the_grpo_phase_takes_its_weights_from_the_reward_set_it_was_built_with(tmp_path):
    loop = make_loop(sft={}, grpo={"max_steps": 1}, device="cpu")
    assert loop.grpo_phase.config(tmp_path).reward_weights == [0.5]


@pytest.mark.parametrize(("ours", "warns"), [(1.0, True), (0.5, False)])
def test_zero_variance_warning_uses_the_pipelines_group_check(ours, warns):
    from rlvr import events as ev
    from rlvr.training_loop.callbacks import EventBridge

    emitted = []
    bridge = EventBridge(
        emitted.append, "grpo", 10, extra_metrics=lambda: {"reward/zero_std_groups_frac": ours}
    )
    state = SimpleNamespace(global_step=1)
    bridge.on_step_begin(None, state, None)
    bridge.on_step_end(None, state, None)
    # TRL's own fraction says 0.0 (its float32 std check misses equal non-zero rewards).
    bridge.on_log(None, state, None, logs={"loss": 0.0, "frac_reward_zero_std": 0.0})
    warnings = [e for e in emitted if isinstance(e, ev.RunWarning)]
    assert bool(warnings) is warns
    assert any(isinstance(e, ev.TrainStep) for e in emitted)


def _eval(label, step):
    return make_eval_result(label, step, 100, 200)


@pytest.mark.parametrize(
    ("steps", "evals", "expected"),
    [
        ({}, [], None),  # nothing trained
        ({"sft": 240}, [_eval("sft", 80), _eval("sft", 240)], ("sft", 240)),  # SFT ended on an evaluation
        ({"sft": 250}, [_eval("sft", 80), _eval("sft", 240)], None),  # 10 more steps since
        # GRPO ran after it: the SFT evaluation at 240 no longer measures the final weights.
        ({"sft": 240, "grpo": 16}, [_eval("sft", 240), _eval("after_sft", 240)], None),
        ({"sft": 240, "grpo": 16}, [_eval("sft", 240), _eval("grpo", 8), _eval("grpo", 16)], ("grpo", 16)),
        ({"grpo": 16}, [_eval("grpo", 8)], None),
    ],
)
def test_an_evaluation_of_the_final_weights_is_found_for_reuse(steps, evals, expected):
    from rlvr.evaluation.schedule import eval_of_last_weights

    found = eval_of_last_weights(evals, steps)
    if expected is None:
        assert found is None
    else:
        assert (found.label, found.step) == expected


@pytest.mark.parametrize(
    ("rewards", "accuracies", "warns"),
    [
        ([0.2, 0.2, 0.8, 0.8, 0.9, 0.9], [0.5, 0.3, 0.2], True),  # reward up, accuracy down: hacking?
        ([0.2, 0.2, 0.8, 0.8, 0.9, 0.9], [0.3, 0.5, 0.6], False),  # both up: learning
        ([0.8, 0.8, 0.2, 0.2, 0.1, 0.1], [0.5, 0.3, 0.2], False),  # both down: not hacking
    ],
)
def test_reward_up_accuracy_down_warning(rewards, accuracies, warns):
    """Driven in the Trainer's own callback order: step begin, step end (evaluation), log."""
    from rlvr import events as ev
    from rlvr.training_loop.callbacks import EventBridge

    emitted = []
    acc = dict(zip([2, 4, 6], accuracies, strict=True))
    bridge = EventBridge(
        emitted.append, "grpo", 6, eval_every=2,
        evaluate=lambda step: make_eval_result("grpo", step, round(acc[step] * 100), 100),
    )  # fmt: skip
    for step, reward in enumerate(rewards, start=1):
        state = SimpleNamespace(global_step=step)
        bridge.on_step_begin(None, state, None)
        bridge.on_step_end(None, state, None)
        bridge.on_log(None, state, None, logs={"reward": reward})
    hacking = [e for e in emitted if isinstance(e, ev.RunWarning) and "reward hacking" in e.message]
    assert bool(hacking) is warns


def test_signal_settings_name_unknown_missing_and_mistyped_keys_and_refuse_dynamic_sampling_across_processes():
    """training_loop.signal's keys are a type (SignalNode, bound by the config gate); what the launch
    cannot honour is SignalSettings'. Mutation: TrainingLoop's ``signal`` annotated dict[str, Any] -> red."""
    from tests.conftest import compose_config

    from rlvr.config.validation import check_targets
    from rlvr.pipeline.wiring import runtime_args
    from rlvr.training_loop.grpo_signal import SignalSettings

    cfg = compose_config(
        ["~training_loop.signal.skip_zero_advantage", "+training_loop.signal.skip_zero_advantag=true",
         "training_loop.signal.dynamic_sampling=yes", "training_loop.signal.max_rounds=0"]
    )  # fmt: skip
    found = {i.key: i for i in check_targets(cfg, runtime_args(cfg)) if i.key.startswith("training_loop")}
    assert {k: i.problem.split(" (")[0] for k, i in found.items()} == {
        "training_loop.signal.skip_zero_advantag": "not a SignalNode field",
        "training_loop.signal.skip_zero_advantage": "missing",
        "training_loop.signal.dynamic_sampling": "has type str, SignalNode.dynamic_sampling expects bool",
        "training_loop.signal.max_rounds": "must be >= 1",
    }
    assert "skip_zero_advantage" in found["training_loop.signal.skip_zero_advantag"].fix
    good = {"skip_zero_advantage": True, "dynamic_sampling": False, "max_rounds": 4}
    assert SignalSettings.validate(good, processes=1) == []
    assert SignalSettings.validate({**good, "dynamic_sampling": "yes"}, processes=2) == []  # the gate's
    [multi] = SignalSettings.validate({**good, "dynamic_sampling": True}, processes=2)
    assert multi.key == "training_loop.signal.dynamic_sampling" and "one process" in multi.problem


def test_skipping_keeps_as_many_rows_as_asked_so_every_process_gathers_the_same_count():
    """Under several processes each keeps the largest signal-row count among them: TRL gathers per-row
    metrics across processes (gloo aborted on 4 rows against 3), so the rest is filled with the first
    zero-advantage rows, which add nothing to the loss and count in its normaliser."""
    import torch

    from rlvr.training_loop.grpo_signal import SCALE_KEY, drop_zero_advantage

    batch = {
        "advantages": torch.tensor([0.0, 1.0, 0.0, -1.0, 0.0, 0.0]),
        "completion_mask": torch.ones(6, 3, dtype=torch.long),
        "completion_ids": torch.arange(18).reshape(6, 3),
        "num_items_in_batch": torch.tensor(18),
    }
    alone = drop_zero_advantage(batch, "grpo")
    assert alone["advantages"].tolist() == [1.0, -1.0] and alone[SCALE_KEY] == 2 / 6
    padded = drop_zero_advantage(batch, "grpo", min_rows=4)
    # the signal rows and the first two zero rows, in batch order
    assert padded["completion_ids"][:, 0].tolist() == [0, 3, 6, 9]
    assert padded["advantages"].tolist() == [0.0, 1.0, 0.0, -1.0] and padded[SCALE_KEY] == 4 / 6
    assert drop_zero_advantage(batch, "dapo", min_rows=4)[SCALE_KEY] == 1.0
    # a micro-batch without signal keeps one row when one is asked for, none otherwise
    flat = {**batch, "advantages": torch.zeros(6)}
    assert drop_zero_advantage(flat, "grpo", min_rows=1)["completion_ids"][:, 0].tolist() == [0]
    assert drop_zero_advantage(flat, "grpo")["advantages"].numel() == 0
    assert drop_zero_advantage(batch, "grpo", min_rows=2)["advantages"].tolist() == [1.0, -1.0]


def test_sft_leaves_the_frozen_parts_untrained_and_gives_them_back(monkeypatch):
    """freeze_embeddings / frozen_layers: only those parameters lose their gradient during SFT's fit
    (so its optimizer never holds them), and every one trains again after it, an error included.
    Mutations: frozen() skips the layers -> red; fit() does not restore -> red."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlvr.training_loop.phase import Phase

    model = LlamaForCausalLM(
        LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=4,
                    num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True)
    )  # fmt: skip
    loop = make_loop(
        sft={"max_steps": 1, "freeze_embeddings": True, "frozen_layers": 3}, grpo={}, device="cpu"
    )
    seen = {}

    def fake_fit(
        self, model, run, outcome, checkpoint, own=None
    ):  # the trainer sees the model as fit leaves it
        seen.update({name: p.requires_grad for name, p in model.named_parameters()})
        raise RuntimeError("a trainer that fails")

    monkeypatch.setattr(Phase, "fit", fake_fit)
    with pytest.raises(RuntimeError):
        loop.sft_phase.fit(model, None, None, None)
    frozen = {n for n, trains in seen.items() if not trains}
    assert frozen == {
        n
        for n, _ in model.named_parameters()
        if "embed_tokens" in n or n.startswith(tuple(f"model.layers.{i}." for i in range(3)))
    }
    assert any(n.startswith("model.layers.3.") for n in seen) and all(
        seen[n] for n in seen if n.startswith("model.layers.3.")
    )
    assert all(p.requires_grad for p in model.parameters())  # trained again in the phases after
    too_many = make_loop(sft={"max_steps": 1, "frozen_layers": 5}, grpo={}, device="cpu")
    with pytest.raises(
        ValueError, match=r"training_loop\.sft\.frozen_layers=5: this model has 4 decoder layers"
    ):
        too_many.sft_phase.frozen(model)
    assert torch.is_grad_enabled()


@pytest.mark.parametrize(("precision", "applies"), [("fp32", True), ("bf16", False)])
def test_fp32_cpu_freezing_applies_where_sft_trains_in_fp32_and_is_said(precision, applies):
    """training_loop.sft.fp32_cpu replaces the freezing on a CPU that trains in fp32 only, and the
    record the console and provenance.json say names it. Mutation: freezing() ignores the precision -> red."""
    loop = make_loop(
        sft={"max_steps": 1, "fp32_cpu": {"freeze_embeddings": True, "frozen_layers": 2}},
        grpo={}, device="cpu", precision=precision,
    )  # fmt: skip
    chosen, source = loop.sft_phase.freezing()
    assert (chosen["frozen_layers"], source) == ((2, "training_loop.sft.fp32_cpu") if applies else (0, None))
    said = loop.hardware_record().get("sft_frozen")
    assert (said is not None and "lowest 2 decoder layers" in said and "fp32_cpu" in said) is applies


def test_the_fp32_cpu_node_takes_only_the_freezing_keys():
    """A typo inside training_loop.sft.fp32_cpu is named with its key, as at the node's top level.
    Mutation: fp32_cpu typed dict[str, Any] -> red."""
    from rlvr.issues import value_issues
    from rlvr.training_loop.settings import SFTNode

    assert value_issues("training_loop.sft", {"fp32_cpu": {"frozen_layers": 3}}, SFTNode, "T") == []
    [issue] = value_issues("training_loop.sft", {"fp32_cpu": {"frozen_layer": 3}}, SFTNode, "T")
    assert issue.key == "training_loop.sft.fp32_cpu.frozen_layer"
    [issue] = value_issues("training_loop.sft", {"fp32_cpu": {"frozen_layers": -1}}, SFTNode, "T")
    assert issue.key == "training_loop.sft.fp32_cpu.frozen_layers"
