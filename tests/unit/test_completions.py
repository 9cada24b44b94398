"""The completions tables' rows: sampled by the component that scored them, by seed, values aligned."""

from __future__ import annotations

from types import SimpleNamespace

from rlvr import events as ev
from rlvr.prompts import PromptTemplate
from rlvr.reward import FormatReward, LengthPenalty, RewardSet

PROMPT = PromptTemplate("{question}")


def _scored_batch(per_step: int, seed: int) -> tuple[RewardSet, list[str]]:
    """A reward set called on a generation batch of 10 as TRL calls it, at the step after global step 4."""
    terms = {
        "format": FormatReward(1.0, prompt=PROMPT),
        "length": LengthPenalty(0.5, free_chars=0, scale_chars=100, prompt=PROMPT),
    }
    rewards = RewardSet(terms, plugin_timeout_s=60.0, completions_per_step=per_step, seed=seed, prompt=PROMPT)
    texts = [f"<answer>{n}</answer>" + "x" * n if n % 2 else f"{n}" * n for n in range(10)]
    columns = {
        "prompts": [[{"role": "user", "content": f"q{n}"}] for n in range(10)],
        "task": ["t"] * 10,
        "answer": [str(n) for n in range(10)],
        "trainer_state": SimpleNamespace(global_step=4),
    }
    for function in rewards.functions:
        function([[{"role": "assistant", "content": t}] for t in texts], **columns)
    return rewards, texts


def test_the_reward_set_samples_the_configured_rows_of_a_batch_with_each_terms_value():
    rewards, texts = _scored_batch(per_step=3, seed=7)
    [event] = rewards.completions()
    assert (event.source, event.step, len(event.rows)) == ("grpo", 5, 3)
    for row in event.rows:
        n = int(row.prompt.removeprefix("user: q"))
        assert row.completion == texts[n] and row.reference == str(n)
        fmt = FormatReward(1.0, prompt=PROMPT)([texts[n]])[0]
        length = -min(1.0, len(texts[n]) / 100) + 0.0
        assert row.rewards == {"format": fmt, "length": length}
        assert row.score == fmt + 0.5 * length
        assert row.correct is None  # no term runs the verifier
    assert rewards.completions() == []  # drained


def test_sampling_follows_the_seed_and_zero_rows_is_none():
    def picked(seed: int) -> list[str]:
        return [row.prompt for row in _scored_batch(3, seed)[0].completions()[0].rows]

    assert picked(7) == picked(7)
    assert picked(7) != picked(8)
    assert _scored_batch(0, 7)[0].completions() == []


def test_as_text_reads_a_conversation_and_a_string():
    assert (
        ev.as_text([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])
        == "system: s\nuser: u"
    )
    assert ev.as_text("plain") == "plain"


def test_a_step_that_scored_several_batches_keeps_the_configured_rows():
    """Dynamic sampling refills a step's batch: its table still holds completions_per_step rows."""
    rewards, texts = _scored_batch(per_step=3, seed=7)
    for function in rewards.functions:  # a refill scored at the same step
        function(
            [[{"role": "assistant", "content": t}] for t in texts],
            prompts=[[{"role": "user", "content": f"r{n}"}] for n in range(10)],
            trainer_state=SimpleNamespace(global_step=4),
        )
    [event] = rewards.completions()
    assert (event.step, len(event.rows)) == (5, 3)
