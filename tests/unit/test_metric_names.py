"""One name per metric (issue 56 item 8), against a real GRPO phase of the tiny model (TRL's own
GRPOTrainer, rlvr's TrainingLoop): ``grpo/frac_reward_zero_std`` and ``grpo/reward/zero_std_groups_frac``
were one metric under two names, as were ``grpo/step_time`` and ``grpo/step_seconds``.

The run's reward is a parity of the completion's length, so groups of two are flat about half the
time and the flat share varies from step to step: two names for one metric carry the same varying
series, which no two different metrics do by chance over the steps. Its weight is 0.5, as the default
format term's: at weight 1 a single term's mean is the total's (a coincidence of this set, not of names)."""

from __future__ import annotations

import itertools
from typing import Any

import datasets
import pytest
from tests.conftest import SIGNAL, tiny_model
from tests.stand_in_run import StandInRun

from rlvr import events as ev
from rlvr.prompts import PromptTemplate
from rlvr.reward import RewardSet
from rlvr.reward.terms import _Term, completion_text
from rlvr.training_loop import TrainingLoop
from rlvr.training_loop.callbacks import TRL_NAMES, EventBridge

STEPS = 6
GRPO = {"max_steps": STEPS, "num_generations": 2, "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1,
        "max_completion_length": 6, "learning_rate": 1e-3, "logging_steps": 1, "save_strategy": "no",
        "temperature": 1.0, "beta": 0.0}  # fmt: skip


class Parity(_Term):
    """1.0 for a completion of an odd number of characters, else 0.0: flat groups come and go."""

    name = "parity"

    def __call__(self, completions: list[Any], **_: Any) -> list[float]:
        return [float(len(completion_text(c)) % 2) for c in completions]


@pytest.fixture(scope="module")
def grpo_run(tmp_path_factory):
    """(TRL's raw logs of each step, the metrics of each TrainStep the pipeline emitted)."""
    loaded = tiny_model().load()
    prompt = PromptTemplate("{question}")
    rewards = RewardSet({"parity": Parity(0.5, prompt=prompt)}, plugin_timeout_s=60.0, completions_per_step=0,
                        seed=0, prompt=prompt)  # fmt: skip
    loop = TrainingLoop(prompt=prompt, rewards=rewards, signal=SIGNAL, rft={"enabled": False}, seed=0,
                        device="cpu", precision="auto", sft={"enabled": False}, grpo=GRPO)  # fmt: skip
    rows = [{"prompt": prompt.messages(f"{i}+1"), "answer": str(i + 1)} for i in range(32)]
    raw: list[dict[str, Any]] = []
    on_log = EventBridge.on_log

    def recording(self, args, state, control, logs=None, **kwargs):
        if logs is not None and "train_runtime" not in logs:
            raw.append(dict(logs))
        return on_log(self, args, state, control, logs=logs, **kwargs)

    events: list[Any] = []
    session = StandInRun(
        tokenizer=loaded.tokenizer,
        train_dataset=datasets.Dataset.from_list(rows),
        emit=events.append,
        on_weights=lambda *a, **k: None,
        eval_every=0,
        run_dir=tmp_path_factory.mktemp("grpo"),
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(EventBridge, "on_log", recording)
        loop.run(loaded.model, session)
    steps = [e.metrics for e in events if isinstance(e, ev.TrainStep) and e.phase == "grpo"]
    assert len(steps) == STEPS and len(raw) == STEPS
    return raw, steps


def test_every_rename_is_a_name_trl_logs_and_only_ours_is_emitted(grpo_run):
    raw, steps = grpo_run
    for trl_name, ours in TRL_NAMES.items():
        assert all(trl_name in logs for logs in raw), (
            f"TRL no longer logs {trl_name!r}: drop it from TRL_NAMES"
        )
        assert all(f"grpo/{ours}" in m for m in steps)
        assert not any(f"grpo/{trl_name}" in m for m in steps), f"grpo/{trl_name} is still emitted"
    # the two the issue found, by name
    assert not any({"grpo/frac_reward_zero_std", "grpo/step_time"} & set(m) for m in steps)


def test_the_renamed_metrics_measure_what_ours_measure(grpo_run):
    """TRL's flat-group share is ours on this run (rewards 0/1: exact in float32); its step_time
    times the training_step calls inside the step the bridge times whole."""
    raw, steps = grpo_run
    shares = [m["grpo/reward/zero_std_groups_frac"] for m in steps]
    assert [logs["frac_reward_zero_std"] for logs in raw] == pytest.approx(shares)
    assert len(set(shares)) > 1, shares  # the series varies: the duplicate check below can see it
    for logs, m in zip(raw, steps, strict=True):
        assert 0 < logs["step_time"] <= m["grpo/step_seconds"]


def test_no_two_emitted_names_carry_the_same_value_every_step(grpo_run):
    _, steps = grpo_run
    names = sorted(set.intersection(*(set(m) for m in steps)))
    series = {n: [m[n] for m in steps] for n in names}
    varying = {n: s for n, s in series.items() if len(set(s)) > 1}  # a constant (0 KL at beta 0) says nothing
    same = [(a, b) for a, b in itertools.combinations(varying, 2) if varying[a] == pytest.approx(varying[b])]
    assert same == [], f"one metric under two names: {same}"
    assert "grpo/reward/zero_std_groups_frac" in varying and "grpo/step_seconds" in varying
