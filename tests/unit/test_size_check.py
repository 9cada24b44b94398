"""A size the task cannot give is refused in seconds (issue 56 item 6): a distinct draw stops as soon as
its budget can no longer reach the request (rlvr.data.identity.reach), and never refuses one it can."""

from __future__ import annotations

import random

import pytest

from rlvr.data import identity
from rlvr.data.reasoning_gym import generate_entries

# The embedded default's task (conf/data/basic_arithmetic.yaml).
DEFAULT = {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 1, "operators": ["+", "-"]}


def counted(generate):
    """``generate`` with a count of every entry it yields."""
    drawn = []

    def wrapped(count, seed):
        for entry in generate(count, seed):
            drawn.append(1)
            yield entry

    return wrapped, drawn


def test_a_held_out_size_the_task_cannot_give_is_refused_early():
    """``validate_only=true data.eval_size=50000``: basic_arithmetic holds about 28k distinct held-out
    questions within the 600,000-draw budget, and the draw used to find that out by drawing all of it
    (925,000 draws with its restart); now it stops once the rate of new questions
    says the budget cannot reach 50,000."""
    generate, drawn = counted(lambda count, seed: generate_entries("basic_arithmetic", DEFAULT, count, seed))
    with pytest.raises(ValueError) as refused:
        identity.draw(generate, "basic_arithmetic", "test", 50_000, 42, distinct=True, key="data.eval_size")
    text = str(refused.value)
    assert "data.eval_size=50000: task 'basic_arithmetic' gave only" in text
    assert "draw's budget of 600,000 draws would reach at most about" in text
    assert len(drawn) <= 100_000, f"{len(drawn)} draws before refusing (the whole budget is 600,000)"


def uniform(space: int):
    """A task of ``space`` equally likely questions."""

    def generate(count, seed):
        rng = random.Random(seed)
        for _ in range(count):
            yield {"question": f"q{rng.randrange(space)}"}

    return generate


def test_a_size_the_budget_can_reach_is_never_refused_by_the_bound():
    """At the edge: 25,000 equally likely questions hold about 5,000 on the test side, and within the
    budget (max(20,000, 12 x size) draws) the draw fills 4,300 but not 4,400 (so did the draw before
    the bound: the same verdicts). The early bound lets 4,300 run to the end."""
    picked = identity.draw(uniform(25_000), "t", "test", 4_300, 0, distinct=True, key="data.eval_size")
    assert len(picked) == 4_300 and len({e["question"] for e in picked}) == 4_300
    with pytest.raises(ValueError, match="data.eval_size=4400"):
        identity.draw(uniform(25_000), "t", "test", 4_400, 0, distinct=True, key="data.eval_size")


def test_reach_is_what_the_draw_can_still_add():
    """No question seen once: nothing new is coming (the bound is what is held, plus the margin);
    every draw new so far: the rest of the budget could still be all new."""
    assert identity.reach(picked=100, once=0, drawn=10_000, budget=20_000) < 110
    assert identity.reach(picked=1_000, once=1_000, drawn=1_000, budget=20_000) >= 20_000


def test_a_training_side_check_stops_once_its_share_holds_the_size():
    """validate_only judged ``data.train_size=500000`` by drawing all of it (19 s and 0.9 GB); a
    training side keeps repeats, so its share of the draws decides: PROBE_DRAWS draws tell.
    Mutation: the ``check_only`` stop removed -> red."""
    generate, drawn = counted(uniform(10**6))
    identity.draw(generate, "t", "train", 500_000, 1, distinct=False, key="data.train_size", check_only=True)
    assert len(drawn) == identity.PROBE_DRAWS + 1  # the one that found the probe over


def test_a_training_side_too_rare_for_its_size_is_still_refused_when_only_checked():
    """98 of a task's 100 questions are on the test side: 2% of draws are training questions, too few
    for 2,000 of them in 24,000 draws; the check refuses it as the full draw does. Mutation: ``enough``
    without the share (always true) -> red."""
    test_side = [f"q{i}" for i in range(10_000) if identity.split_of("t", f"q{i}") == "test"][:98]
    train_side = [f"q{i}" for i in range(10_000) if identity.split_of("t", f"q{i}") == "train"][:2]
    questions = test_side + train_side

    def generate(count, seed):
        rng = random.Random(seed)
        for _ in range(count):
            yield {"question": rng.choice(questions)}

    for check_only in (False, True):
        with pytest.raises(ValueError, match="data.train_size=2000: task 't' gave only"):
            identity.draw(
                generate, "t", "train", 2_000, 1, distinct=False, key="data.train_size", check_only=check_only
            )
