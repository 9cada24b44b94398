"""A capped evaluation covers what its headline names (SECURITY.md "Numbers that change meaning").

``evaluation.max_examples`` / ``evaluation.sampled.max_examples`` used to take the first N rows of
the concatenated held-out set: in a mixture the later tasks and every extra evaluation set dropped
out, while the report still named them all.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest
from datasets import Dataset
from tests.conftest import make_evaluator

from rlvr.evaluation.evaluator import stratified


def held_out(*parts: tuple[str, str, int]) -> Dataset:
    """Rows as rlvr.data.base concatenates them: the training tasks' own, then each extra set."""
    rows = [(task, eval_set, f"{task}-{i}") for task, eval_set, n in parts for i in range(n)]
    return Dataset.from_dict(
        {
            "task": [t for t, _, _ in rows],
            "eval_set": [s for _, s, _ in rows],
            "question": [q for _, _, q in rows],
        }
    )


def covered(dataset: Dataset) -> Counter:
    return Counter(zip(dataset["eval_set"], dataset["task"], strict=True))


def test_a_capped_evaluation_takes_every_task_and_set_in_proportion():
    data = held_out(("a", "", 60), ("b", "", 30), ("c", "forgetting", 10))
    rows = make_evaluator(max_examples=20).rows(data)
    assert covered(rows) == {("", "a"): 12, ("", "b"): 6, ("forgetting", "c"): 2}
    # the first questions of each group, in dataset order (deterministic: a resume sees the same)
    assert rows["question"] == [f"a-{i}" for i in range(12)] + [f"b-{i}" for i in range(6)] + ["c-0", "c-1"]


def test_the_sampled_evaluation_is_capped_the_same_way():
    data = held_out(("a", "", 50), ("b", "", 50))
    evaluator = make_evaluator(
        max_examples=None, sampled={"num_samples": 2, "temperature": 1.0, "max_examples": 10}
    )
    assert covered(evaluator.sampled_view().rows(data)) == {("", "a"): 5, ("", "b"): 5}
    assert len(evaluator.rows(data)) == 100


def test_a_cap_below_the_number_of_groups_still_takes_one_of_each():
    data = held_out(("a", "", 5), ("b", "", 5), ("c", "", 5))
    assert covered(make_evaluator(max_examples=2).rows(data)) == {
        ("", "a"): 1,
        ("", "b"): 1,
        ("", "c"): 1,
    }


@pytest.mark.parametrize("seed", range(20))
def test_shares_add_up_and_stay_within_each_group(seed):
    rng = random.Random(seed)
    sizes = [rng.randint(1, 40) for _ in range(rng.randint(1, 6))]
    labels = [g for g, size in enumerate(sizes) for _ in range(size)]
    rng.shuffle(labels)  # groups need not be contiguous
    n = rng.randint(len(sizes), len(labels))
    picked = stratified(labels, n)
    counts = Counter(labels[i] for i in picked)
    assert len(picked) == n and picked == sorted(set(picked))
    assert all(1 <= counts[g] <= size for g, size in enumerate(sizes))
    # proportional: a group's count is its exact share rounded, or 1 for a share below one; each
    # such raise is paid by a larger share, which then stays within two of its own
    for g, size in enumerate(sizes):
        exact = n * size / len(labels)
        assert abs(counts[g] - exact) < 2 or (exact < 1 and counts[g] == 1)
