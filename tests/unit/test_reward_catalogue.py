"""The reward catalogue: every term on completions with known values, every conf/reward/terms file
as a drop-in, per-term names as TRL logs them, and a user's own reward from the example plugin."""

from __future__ import annotations

import json
import time

import pytest
import reasoning_gym
from hydra.utils import instantiate
from omegaconf import OmegaConf
from tests.conftest import CONF, ROOT, compose_config, verifier_pool

from rlvr.config.validation import check_targets
from rlvr.pipeline.wiring import runtime_args
from rlvr.prompt_families import FAMILIES
from rlvr.prompts import PromptTemplate
from rlvr.reward import (
    AnswerMatchReward,
    ApproxFormatReward,
    FormatReward,
    FunctionReward,
    NumericToleranceReward,
    OverlongPenalty,
    RewardSet,
)
from rlvr.reward.catalogue import parse_number
from rlvr.security.trust import PLUGINS_ENV

PLUGIN_DIR = ROOT / "tests" / "plugins"
TERM_FILES = sorted(f.stem for f in (CONF / "reward" / "terms").glob("*.yaml"))


def family(name: str) -> PromptTemplate:
    m = FAMILIES[name]
    return PromptTemplate(
        "{question}",
        answer_start=m.answer_start,
        answer_end=m.answer_end,
        reasoning_start=m.reasoning_start,
        reasoning_end=m.reasoning_end,
        family=name,
    )


PLAIN, THINK, WORKING_OUT = family("plain"), family("think"), family("working_out")


def build_rewards(cfg, prompt, verifier=None) -> RewardSet:
    """The reward set with its collaborators passed at instantiation, as the orchestrator does."""
    run = {"prompt": prompt, "verifier": verifier if verifier is not None else verifier_pool(num_workers=0)}
    # Partial, then called: Hydra's config merge would turn the PromptTemplate dataclass into a dict.
    terms = {n: instantiate(t, _convert_="all", _partial_=True)(**run) for n, t in cfg.reward.terms.items()}
    return instantiate(cfg.reward, _convert_="all", _partial_=True, _recursive_=False)(**run, terms=terms)


def _entries(n=3):
    ds = reasoning_gym.create_dataset("basic_arithmetic", size=n, seed=5, min_digits=1, max_digits=1)
    return [json.loads(json.dumps(ds[i], default=list)) for i in range(n)]


# -- answer matching ------------------------------------------------------------------------------------
def test_answer_match_gives_the_configured_values_for_right_wrong_and_missing_answers():
    entries = _entries()
    gold = [e["answer"] for e in entries]
    completions = [
        f"<start_working_out>easy<end_working_out><SOLUTION>{gold[0]}</SOLUTION>",
        f"<SOLUTION>{int(gold[1]) + 1}</SOLUTION>",
        f"the answer is {gold[2]}",  # right number, but no answer markers: nothing to check
    ]
    with verifier_pool(num_workers=0) as pool:
        term = AnswerMatchReward(
            correct_reward=3.0,
            wrong_penalty=-1.0,
            no_answer_reward=-2.0,
            weight=1.0,
            prompt=WORKING_OUT,
            verifier=pool,
        )
        out = term(completions, task=["basic_arithmetic"] * 3, entry=[json.dumps(e) for e in entries])
    assert out == [3.0, -1.0, -2.0]


def test_answer_match_refuses_a_penalty_above_the_reward():
    issues = AnswerMatchReward(
        prompt=PLAIN,
        verifier=verifier_pool(num_workers=0),
        correct_reward=-1.0,
        wrong_penalty=3.0,
        no_answer_reward=0.0,
        weight=1.0,
    ).validate("k")
    assert [i.key for i in issues] == ["k.correct_reward"]


# -- strict and approximate format ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("prompt", "completion", "expected"),
    [
        (PLAIN, "some thought <answer>4</answer>", 1.0),
        (PLAIN, "<answer>4</answer>\n", 1.0),
        (PLAIN, "<answer> </answer>", 0.0),  # empty answer
        (PLAIN, "<answer>4</answer> and more", 0.0),  # text after the answer
        (PLAIN, "<answer>3</answer><answer>4</answer>", 0.0),  # two answers
        (THINK, "<think>2+2 is 4</think>\n<answer>4</answer>", 1.0),
        (THINK, "<answer>4</answer>", 0.0),  # reasoning block missing
        (THINK, "so <think>x</think><answer>4</answer>", 0.0),  # text before the reasoning
        (THINK, "<answer>4</answer><think>x</think>", 0.0),  # wrong order
        (THINK, "<think>x</think><think>y</think><answer>4</answer>", 0.0),  # reasoning twice
        (WORKING_OUT, "<start_working_out>2+2<end_working_out><SOLUTION>4</SOLUTION>", 1.0),
        (WORKING_OUT, "<think>2+2</think><answer>4</answer>", 0.0),  # another family's markers
    ],
)
def test_strict_format(prompt, completion, expected):
    term = FormatReward(1.0, prompt=prompt)
    assert term([completion]) == [expected]


def test_approximate_format_gives_partial_credit_per_marker_present_once():
    term = ApproxFormatReward(present_once=0.5, otherwise=-1.0, weight=1.0, prompt=WORKING_OUT)
    completions = [
        "<start_working_out>a<end_working_out><SOLUTION>4</SOLUTION>",  # 4 x 0.5
        "<start_working_out>a<SOLUTION>4</SOLUTION>",  # 3 x 0.5 - 1
        "<SOLUTION>4</SOLUTION><SOLUTION>5</SOLUTION>",  # -1 -1 (missing) -1 -1 (twice)
        [{"role": "assistant", "content": "<SOLUTION>4</SOLUTION>"}],  # conversational: -1 -1 +0.5 +0.5
    ]
    assert term(completions) == [2.0, 0.5, -4.0, -1.0]
    assert (
        ApproxFormatReward(prompt=PLAIN, present_once=0.0, otherwise=0.5, weight=1.0).validate("k")[0].key
        == "k.present_once"
    )


# -- numeric tolerance ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("1,000", 1000.0),
        ("50%", 0.5),
        ("$1,234.50", 1234.5),
        ("\\frac{3}{4}", 0.75),
        ("\\boxed{-7}", -7.0),
        ("1/0", None),
        ("seven", None),
        ("2^10", None),
        ("x = 3", None),
        (None, None),
    ],
)
def test_numbers_are_read_by_math_verify_after_the_screen(text, number):
    assert parse_number(text) == number


def test_numeric_answers_that_would_hang_sympy_or_reach_its_eval_are_not_parsed():
    start = time.perf_counter()
    for hostile in ["9^9^9^9", "9**9**9**9", "99999!", "__import__('os').system('true')", "1" * 500]:
        assert parse_number(hostile) is None
    assert time.perf_counter() - start < 1.0


def test_numeric_tolerance_relative_absolute_and_abstaining():
    term = NumericToleranceReward(rel_tol=0.01, abs_tol=0.5, weight=1.0, prompt=PLAIN)
    completions = [
        "<answer>1,000</answer>",  # == 1000
        "<answer>1009</answer>",  # 0.9% off: inside rel_tol
        "<answer>1011</answer>",  # 1.1% off: outside
        "<answer>3.4</answer>",  # gold 3: inside abs_tol 0.5
        "<answer>3.6</answer>",  # gold 3: outside both
        "no answer",
        "<answer>blue</answer>",  # gold is not a number: abstain
    ]
    gold = ["1000", "1000", "1000", "3", "3", "3", "red"]
    assert term(completions, answer=gold) == [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, None]
    cfg = compose_config(["+reward/terms@reward.terms.numeric=numeric", "reward.terms.numeric.rel_tol=-1"])
    assert [(i.key, i.problem) for i in check_targets(cfg, runtime_args(cfg))] == [
        ("reward.terms.numeric.rel_tol", "must be >= 0")
    ]


# -- overlong -------------------------------------------------------------------------------------------
def test_overlong_penalty_is_zero_then_linear_to_minus_one_in_tokens():
    term = OverlongPenalty(prompt=PLAIN, max_tokens=20, buffer_tokens=8, weight=1.0)
    ids = [[1] * n for n in (5, 12, 13, 16, 20, 25)]
    assert term(["x"] * 6, completion_ids=ids) == [0.0, 0.0, -0.125, -0.5, -1.0, -1.0]
    assert term(["x", "y"]) == [None, None]  # outside a GRPO step there are no token ids: abstain
    assert (
        OverlongPenalty(prompt=PLAIN, max_tokens=4, buffer_tokens=8, weight=1.0).validate("k")[0].key
        == "k.buffer_tokens"
    )


# -- the config drop-ins --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", TERM_FILES)
def test_every_term_file_is_a_drop_in_and_scores_the_gold_answer_best_for_every_family(name):
    """Each conf/reward/terms file joins any reward set under any name; on the SFT target of every
    prompt family (prompt.format_answer) it gives its best value: rewards and SFT share the template."""
    cfg = compose_config([f"+reward/terms@reward.terms.t_{name}={name}"])
    assert check_targets(cfg, runtime_args(cfg)) == []
    node = OmegaConf.to_container(cfg.reward.terms[f"t_{name}"], resolve=True)
    entry = _entries(1)[0]
    best = {
        "correctness": 1.0,
        "answer_match": node.get("correct_reward"),
        "format": 1.0,
        "numeric": 1.0,
        "length": 0.0,
        "overlong": None,  # no token ids outside GRPO
    }
    with verifier_pool(num_workers=0) as pool:
        for fam in FAMILIES:
            prompt = family(fam)
            # The collaborators as the orchestrator passes them at instantiation.
            term = instantiate(node, _partial_=True)(prompt=prompt, verifier=pool)
            gold = prompt.format_answer(entry["answer"])
            out = term([gold], task=["basic_arithmetic"], entry=[json.dumps(entry)], answer=[entry["answer"]])
            expected = node["present_once"] * len(prompt.markers) if name == "format_approx" else best[name]
            assert out == [expected], (fam, gold)


def test_shipped_reward_sets_compose_and_name_each_term_as_trl_logs_it():
    from trl.trainer.utils import get_callable_name

    for option in sorted(f.stem for f in (CONF / "reward").glob("*.yaml")):
        cfg = compose_config([f"reward={option}"])
        assert check_targets(cfg, runtime_args(cfg)) == [], option
        rewards = build_rewards(cfg, PLAIN)
        assert rewards.validate() == []
        # TRL logs rewards/<name>/mean for each function: the names are the config's keys.
        assert [get_callable_name(f) for f in rewards.functions] == list(cfg.reward.terms)
    seed = compose_config(["reward=seed", "training_loop.grpo.max_completion_length=40"])
    assert list(seed.reward.terms) == ["answer_match", "format", "format_approx", "numeric", "overlong"]
    assert (
        seed.reward.terms.answer_match.correct_reward == 3.0
        and seed.reward.terms.answer_match.wrong_penalty == -1.0
    )
    assert seed.reward.terms.overlong.max_tokens == 40  # one home: the GRPO completion budget


# -- a user's own reward from a plugin package ----------------------------------------------------------
PLUGIN_TERM = (
    "+reward.terms.variety={_target_: rlvr.reward.FunctionReward, weight: 0.25, "
    "function: {_target_: rlvr_example_plugin.rewards.distinct_words, _partial_: true}}"
)


def test_a_plugin_reward_function_runs_as_a_term_only_when_its_package_is_named(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    monkeypatch.delenv(PLUGINS_ENV, raising=False)
    cfg = compose_config([PLUGIN_TERM])
    refused = check_targets(cfg, runtime_args(cfg))
    assert [i.key for i in refused] == ["reward.terms.variety.function._target_"]
    monkeypatch.setenv(PLUGINS_ENV, "rlvr_example_plugin")
    assert check_targets(cfg, runtime_args(cfg)) == []
    rewards = build_rewards(cfg, PLAIN)
    assert isinstance(rewards.terms["variety"], FunctionReward) and rewards.weights == [1.0, 0.2, 0.25]
    variety = rewards.functions[-1]
    # Called as GRPOTrainer calls reward functions.
    out = variety(
        prompts=["p"] * 3, completions=["a b a b", "one two", ""], completion_ids=[[1]] * 3, task=["t"] * 3
    )
    assert variety.__name__ == "variety" and out == [0.5, 1.0, None]


def test_reward_set_sums_weighted_terms_skipping_abstentions():
    """What reward/zero_std_groups_frac is computed from: a None (abstain) adds nothing, as in TRL."""
    fmt = FormatReward(weight=2.0, prompt=PLAIN)
    values = iter([[None, 0.0], [None, 2.0], [None, 1.0]])
    partial = FunctionReward(function=lambda completions, **_: next(values), weight=1.0, prompt=PLAIN)
    rewards = RewardSet(
        {"format": fmt, "partial": partial},
        plugin_timeout_s=60.0,
        completions_per_step=0,
        seed=0,
        prompt=PLAIN,
        verifier=None,
    )
    rewards.group_size = 2
    f, g = rewards.functions
    f(["<answer>1</answer>", "<answer>1</answer>"])
    assert g(["a", "b"]) == [None, 0.0]
    assert rewards.counters()["reward/zero_std_groups_frac"] == 1.0  # 2.0 and 2.0 + 0.0
    # Values where weighted and unweighted totals disagree, both ways (weights ignored: red).
    f(["<answer>1</answer>", "no"])
    g(["a", "b"])
    assert rewards.counters()["reward/zero_std_groups_frac"] == 1.0  # 2*1 and 2*0 + 2 (unweighted 1, 2)
    f(["<answer>1</answer>", "no"])
    g(["a", "b"])
    assert rewards.counters()["reward/zero_std_groups_frac"] == 0.0  # 2*1 and 2*0 + 1 (unweighted 1, 1)
