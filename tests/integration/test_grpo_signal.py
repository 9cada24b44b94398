"""GRPO on the tiny model with rewards that vary: skipping is exact, dynamic sampling refills, updates point uphill.

Each run builds the pipeline's GRPO trainer (rlvr.training_loop.trainer.RLVRGRPOTrainer) on the cached
tiny checkpoint, with a reward that has variance in half of the prompt
groups and none in the other half. Plain SGD at learning rate 1 without gradient clipping makes the
weight change equal to minus the gradient, so two runs' updates can be compared directly (clipped, the
update kept only the gradient's direction, and a loss scaled by the same factor in every micro-batch
passed as exact).
"""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr.training_loop import grpo_signal
from rlvr.training_loop.grpo_signal import SignalSettings
from rlvr.training_loop.trainer import RLVRGRPOTrainer

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore")]

GROUP = 4


@pytest.fixture(scope="module")
def tiny():
    from tests.conftest import tiny_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tiny_model(seed=42).model_path()  # conf/model/tiny.yaml's model
    tokenizer = AutoTokenizer.from_pretrained(path)
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), tokenizer


def varied_reward(completions, kind, **_):
    """Characters mod 5 for prompts of kind "varied" (groups with variance), 1.2 for "flat" ones (not
    exact in float32: TRL's own advantages for such a group are about 1e-3, not 0)."""
    return [float(len(c) % 5) if k == "varied" else 1.2 for c, k in zip(completions, kind, strict=True)]


def dataset(n=16, flat_share=0.5):
    from datasets import Dataset

    kinds = ["flat" if i < n * flat_share else "varied" for i in range(n)]
    return Dataset.from_dict({"prompt": [f"Question {i}: say something." for i in range(n)], "kind": kinds})


def run(
    tiny,
    tmp_path,
    *,
    skip=False,
    dynamic=False,
    max_rounds=1,
    loss_type="dapo",
    steps=1,
    data=None,
    reward=varied_reward,
    callbacks=None,
    **args,
):
    from trl import GRPOConfig

    model, tokenizer = tiny
    model = copy.deepcopy(model)
    fields = dict(
        output_dir=str(tmp_path / f"{loss_type}-{skip}-{dynamic}"),
        report_to="none",
        use_cpu=True,
        bf16=False,
        seed=0,
        max_steps=steps,
        learning_rate=1.0,
        optim="sgd",
        lr_scheduler_type="constant",
        max_grad_norm=0.0,  # no clipping: the update is the gradient itself
        per_device_train_batch_size=8,
        gradient_accumulation_steps=2,
        num_generations=GROUP,
        max_completion_length=8,
        beta=0.0,
        loss_type=loss_type,
        save_strategy="no",
        logging_steps=1,
        gradient_checkpointing=False,
        dataloader_num_workers=0,
    )
    if loss_type == "luspo":
        fields["importance_sampling_level"] = "sequence"
    fields.update(args)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    warnings = []
    trainer = RLVRGRPOTrainer(
        model=model,
        reward_funcs=reward,
        callbacks=callbacks,
        args=GRPOConfig(**fields),
        train_dataset=data if data is not None else dataset(),
        processing_class=tokenizer,
        signal=SignalSettings(skip_zero_advantage=skip, dynamic_sampling=dynamic, max_rounds=max_rounds),
        warn=warnings.append,
    )
    trainer.train()
    delta = {k: (v.detach() - before[k]) for k, v in model.named_parameters()}
    return delta, trainer, warnings


def assert_same_update(a, b):
    total = sum(float(d.abs().sum()) for d in a.values())
    assert total > 0, "the step did not change the weights: the test would pass for any skip"
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-6, msg=f"update of {name} differs")


@pytest.mark.parametrize("loss_type", sorted(grpo_signal.LOSS_TYPES))
def test_skipping_zero_advantage_completions_leaves_the_update_unchanged(tiny, tmp_path, loss_type):
    full, _, _ = run(tiny, tmp_path, loss_type=loss_type)
    skipped, trainer, warnings = run(tiny, tmp_path, loss_type=loss_type, skip=True)
    assert trainer.skipping and not warnings
    assert trainer.state.log_history[0]["signal/rows_skipped"] > 0  # some completions were never forwarded
    assert_same_update(full, skipped)


def test_a_batch_without_signal_is_not_forwarded_and_changes_nothing(tiny, tmp_path):
    flat = dataset(flat_share=1.0)
    # groups of 8 rewards of 1.2: TRL's float32 mean is off in the last bit, its advantages about 1e-3
    # (without rlvr's flat-group zeroing these rows were forwarded and the weights moved)
    delta, trainer, _ = run(tiny, tmp_path, skip=True, data=flat, num_generations=8)
    assert all(float(d.abs().sum()) == 0.0 for d in delta.values())
    assert trainer.state.log_history[0]["signal/rows_skipped"] == 8  # both micro-batches of 8 rows


def test_skipping_is_refused_with_a_reason_where_it_would_change_the_update(tiny, tmp_path):
    _, trainer, warnings = run(tiny, tmp_path, skip=True, beta=0.04)
    assert not trainer.skipping
    assert len(warnings) == 1 and "beta=0.04" in warnings[0]


def test_dynamic_sampling_fills_the_batch_with_groups_that_carry_signal(tiny, tmp_path):
    # 3 of 4 prompts are flat: TRL's own batch holds 1 informative group of 4 on average
    data = dataset(n=16, flat_share=0.75)
    _, trainer, warnings = run(tiny, tmp_path, skip=True, dynamic=True, max_rounds=8, data=data, steps=2)
    logs = [h for h in trainer.state.log_history if "signal/groups_kept" in h]
    assert len(logs) == 2 and not warnings
    for log in logs:
        assert log["signal/groups_kept"] == 4
        assert log["signal/rounds"] > 1 and log["signal/groups_generated"] > 4


def test_dynamic_sampling_says_when_the_round_cap_leaves_groups_without_signal(tiny, tmp_path):
    flat = dataset(flat_share=1.0)
    _, trainer, warnings = run(tiny, tmp_path, skip=True, dynamic=True, max_rounds=2, data=flat)
    log = next(h for h in trainer.state.log_history if "signal/groups_kept" in h)
    assert log["signal/groups_kept"] == 0 and log["signal/rounds"] == 2 and log["signal/cap_hit"] == 1
    assert len(warnings) == 1 and "max_rounds=2" in warnings[0] and "0 of 4 groups" in warnings[0]


def test_a_sigterm_during_a_step_ends_the_dynamic_sampling_rounds(tiny, tmp_path):
    """SIGTERM is deferred to the end of the step, and a step of dynamic sampling on groups without
    signal ran up to max_rounds rounds (unbounded before): a pending stop now ends the rounds.
    Mutation: the ``not self._stop_pending()`` condition removed from the loop -> red (64 rounds)."""
    import os
    import signal

    from rlvr.training_loop.checkpoints import PreemptionGuard

    def flat_and_stopped(completions, **_):
        os.kill(os.getpid(), signal.SIGTERM)  # the scheduler's SIGTERM, while the step's first round scores
        return [1.2] * len(completions)  # no reward variance: dynamic sampling would go on

    previous = signal.getsignal(signal.SIGTERM)
    try:
        with PreemptionGuard() as guard:
            _, trainer, _ = run(
                tiny,
                tmp_path,
                dynamic=True,
                max_rounds=grpo_signal.MAX_ROUNDS,
                data=dataset(flat_share=1.0),
                reward=flat_and_stopped,
                callbacks=[guard],
                steps=3,
            )
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert guard.requested and trainer.state.global_step == 1  # stopped at the end of the first step
    log = next(h for h in trainer.state.log_history if "signal/rounds" in h)
    assert log["signal/rounds"] == 1


def test_a_grpo_step_raises_the_likelihood_of_completions_with_positive_advantage(tiny, tmp_path):
    """The update's direction: sum of advantage x change in log-likelihood over the batch is positive
    (the advantages recorded are those the loss reads, after rlvr's flat-group zeroing).

    Broken on purpose (advantages negated before the loss), the sum turned negative.
    """
    seen = {}

    class Recording(RLVRGRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            seen.update(
                {
                    k: out[k].clone()
                    for k in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask")
                }
            )
            seen["advantages"] = out["advantages"].clone()
            seen["before"] = self._logps(out)
            return out

        def _logps(self, out):
            ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
            mask = torch.cat([out["prompt_mask"], out["completion_mask"]], 1)
            with torch.no_grad():
                logps, _, _ = self._get_per_token_logps_and_entropies(
                    self.model, ids, mask, out["completion_ids"].size(1)
                )
            return (logps * out["completion_mask"]).sum(1)

    model, tokenizer = tiny
    from trl import GRPOConfig

    model = copy.deepcopy(model)
    trainer = Recording(
        model=model,
        reward_funcs=varied_reward,
        args=GRPOConfig(
            output_dir=str(tmp_path / "direction"),
            report_to="none",
            use_cpu=True,
            bf16=False,
            seed=0,
            max_steps=1,
            learning_rate=0.05,
            optim="sgd",
            per_device_train_batch_size=8,
            gradient_accumulation_steps=2,
            num_generations=GROUP,
            max_completion_length=8,
            beta=0.0,
            save_strategy="no",
            gradient_checkpointing=False,
        ),  # fmt: skip
        train_dataset=dataset(flat_share=0.0),
        processing_class=tokenizer,
        signal=SignalSettings(skip_zero_advantage=True, dynamic_sampling=False, max_rounds=1),
    )
    trainer.train()
    model.eval()
    after = trainer._logps(seen)
    uphill = float((seen["advantages"] * (after - seen["before"])).sum())
    assert uphill > 0, f"advantage-weighted change in log-likelihood {uphill}"
