"""The shared prompt object and the reward terms (TRL's reward-function contract)."""

from __future__ import annotations

import json

import pytest
import reasoning_gym
from tests.conftest import verifier_pool

from rlvr.prompts import PromptTemplate
from rlvr.reward import CorrectnessReward, FormatReward, LengthPenalty, RewardSet

PROMPT = PromptTemplate(instruction="{question}\nAnswer inside <answer></answer>.")


def test_extraction_reads_the_first_closed_answer_like_evaluation_does():
    """Evaluation stops generating at the first </answer>; rollouts do not. Both must read one answer."""
    assert PROMPT.extract("<answer>1</answer> then <answer> 2 </answer>") == "1"
    assert PROMPT.extract("<answer> 2 </answer>") == "2"
    assert PROMPT.extract("no tag at all") is None


def test_reward_and_evaluation_score_the_same_answer_of_one_completion():
    from rlvr.evaluation.generation import _cut_at_stop

    entry = _entries("basic_arithmetic", min_digits=1, max_digits=1)[0]
    rollout = f"<answer>{entry['answer']}</answer> wait, <answer>{int(entry['answer']) + 1}</answer>"
    evaluated, _ = _cut_at_stop(rollout, (PROMPT.close_tag,))  # what evaluation's generator returns
    with verifier_pool(num_workers=0) as pool:
        reward = CorrectnessReward(1.0, partial_credit=False, prompt=PROMPT, verifier=pool)
        assert reward([rollout], task=["basic_arithmetic"], entry=[json.dumps(entry)]) == [1.0]
    assert PROMPT.extract(evaluated) == PROMPT.extract(rollout) == entry["answer"]


def test_messages_and_gold_format():
    msgs = PROMPT.messages("What is 2+2?")
    assert msgs == [{"role": "user", "content": "What is 2+2?\nAnswer inside <answer></answer>."}]
    assert PROMPT.format_answer("4") == "<answer>4</answer>"
    assert PROMPT.extract(PROMPT.format_answer("4")) == "4"


def test_hash_is_stable_and_sensitive():
    same = PromptTemplate(instruction="{question}\nAnswer inside <answer></answer>.")
    other = PromptTemplate(instruction="{question}\nReply inside <answer></answer>.")
    assert PROMPT.hash == same.hash
    assert PROMPT.hash != other.hash
    assert len(PROMPT.hash) == 12


def test_instruction_without_placeholder_is_refused():
    with pytest.raises(ValueError, match="question"):
        PromptTemplate(instruction="Solve it.")


def _entries(task, n=4, **params):
    ds = reasoning_gym.create_dataset(task, size=n, seed=3, **params)
    return [json.loads(json.dumps(ds[i], default=list)) for i in range(n)]


def test_correctness_reward_uses_task_verifier_and_survives_bad_answers():
    entries = _entries("basic_arithmetic", min_digits=1, max_digits=1)
    with verifier_pool(num_workers=0) as pool:
        reward = CorrectnessReward(weight=1.0, partial_credit=False, prompt=PROMPT, verifier=pool)
        completions = [
            [{"role": "assistant", "content": f"<answer>{entries[0]['answer']}</answer>"}],
            [{"role": "assistant", "content": "<answer>not a number</answer>"}],
            [{"role": "assistant", "content": "no tags"}],
            f"<answer>{entries[3]['answer']}</answer>",
        ]
        scores = reward(completions, task=["basic_arithmetic"] * 4, entry=[json.dumps(e) for e in entries])
    assert scores == [1.0, 0.0, 0.0, 1.0]


def test_format_and_length_terms():
    fmt = FormatReward(1.0, prompt=PROMPT, verifier=None)
    length = LengthPenalty(1.0, free_chars=5, scale_chars=5, prompt=PROMPT, verifier=None)
    assert fmt(["<answer>3</answer>", "<answer>3</answer><answer>4</answer>", "3"]) == [1.0, 0.0, 0.0]
    assert length(["abc", "x" * 10]) == [0.0, -1.0]


def test_reward_set_exposes_functions_weights_and_names():
    with verifier_pool(num_workers=0) as pool:
        terms = {"correctness": CorrectnessReward(1.0, partial_credit=False, prompt=PROMPT, verifier=pool)}
        rs = RewardSet(
            {**terms, "fmt": FormatReward(0.25, prompt=PROMPT, verifier=None)},
            plugin_timeout_s=60.0,
            completions_per_step=0,
            seed=0,
            prompt=PROMPT,
            verifier=pool,
        )
    assert rs.weights == [1.0, 0.25]
    assert [f.__name__ for f in rs.functions] == ["correctness", "fmt"]
    zero = RewardSet(
        {"a": FormatReward(0.0, prompt=PROMPT, verifier=None)},
        plugin_timeout_s=60.0,
        completions_per_step=0,
        seed=0,
        prompt=PROMPT,
        verifier=None,
    )
    assert zero.validate()  # all-zero weights are refused


def test_a_correctness_term_without_a_scorer_does_not_exist():
    with pytest.raises(ValueError, match="verifier"):
        CorrectnessReward(1.0, partial_credit=False, prompt=PROMPT, verifier=None)


def test_terms_are_checked_on_gold_answers_before_training():
    """RewardSet.check_on_gold (the pipeline's "rewards" stage) calls every term as TRL will, on the
    gold answers: a term that breaks the contract fails there, not at GRPO's first step."""
    from datasets import Dataset

    entries = _entries("basic_arithmetic", min_digits=1, max_digits=1)
    data = Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": e["question"]}] for e in entries],
            "answer": [e["answer"] for e in entries],
            "task": ["basic_arithmetic"] * 4,
            "entry": [json.dumps(e) for e in entries],
        }
    )

    class Scalar(FormatReward):
        def __call__(self, completions, **_):
            return 1.0  # one number for the whole batch: breaks TRL's contract

    class Columns(FormatReward):
        seen: dict = {}

        def __call__(self, completions, **columns):
            Columns.seen = columns
            return super().__call__(completions)

    with verifier_pool(num_workers=0) as pool:
        good = {
            "correctness": CorrectnessReward(1.0, partial_credit=False, prompt=PROMPT, verifier=pool),
            "cols": Columns(1.0, prompt=PROMPT, verifier=pool),
        }
        RewardSet(
            good, plugin_timeout_s=60.0, completions_per_step=0, seed=0, prompt=PROMPT, verifier=pool
        ).check_on_gold(data)
        assert Columns.seen["task"] == ["basic_arithmetic"] * 4 and len(Columns.seen["entry"]) == 4
        broken = RewardSet(
            {"scalar": Scalar(1.0, prompt=PROMPT, verifier=pool)},
            plugin_timeout_s=60.0,
            completions_per_step=0,
            seed=0,
            prompt=PROMPT,
            verifier=pool,
        )
        with pytest.raises(RuntimeError, match="reward.terms.scalar returned float"):
            broken.check_on_gold(data)


@pytest.mark.parametrize(
    ("partial_credit", "expected"), [(False, [1.0, 0.0, 0.0]), (True, [1.0, 0.5, 1 / 3])]
)
def test_correctness_is_exact_unless_partial_credit(partial_credit, expected):
    # reasoning-gym's generic verifier scores len(gold)/len(answer) when gold is a substring,
    # so a sign error ("-3" for 3) would earn 0.5; the default reward counts only exact answers.
    entry = json.dumps({"question": "Calculate 1 + 2.", "answer": "3", "metadata": {}})
    with verifier_pool(num_workers=0) as pool:
        reward = CorrectnessReward(1.0, partial_credit=partial_credit, prompt=PROMPT, verifier=pool)
        scores = reward(
            ["<answer>3</answer>", "<answer>-3</answer>", "<answer>-13</answer>"],
            task=["basic_arithmetic"] * 3,
            entry=[entry] * 3,
        )
    assert scores == pytest.approx(expected)


def test_reward_set_counts_groups_without_variance_on_weighted_totals():
    # TRL's frac_reward_zero_std misses an all-equal group at 1.0 + 0.2 (float32 std 1.3e-7);
    # the reward set compares weighted totals per group instead.
    terms = {
        "fmt": FormatReward(0.2, prompt=PROMPT, verifier=None),
        "length": LengthPenalty(0.7, free_chars=18, scale_chars=10, prompt=PROMPT, verifier=None),
    }
    rs = RewardSet(terms, plugin_timeout_s=60.0, completions_per_step=0, seed=0, prompt=PROMPT, verifier=None)
    rs.group_size = 2
    batch = ["<answer>1</answer>", "<answer>2</answer>", "<answer>1</answer>", "<answer>123456</answer>"]
    for fn in rs.functions:  # TRL calls each term once on the whole generation batch
        fn(batch)
    assert rs.counters()["reward/zero_std_groups_frac"] == 0.5
    assert "reward/zero_std_groups_frac" not in rs.counters()  # reported once per batch
