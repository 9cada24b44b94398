"""One data identity for the whole product: a question's split is a property of its content.

reasoning-gym seeds item i of a dataset with ``Random(seed + i)``, so datasets built from
nearby seeds share items, and small task spaces repeat questions across any two samples.
So whether a question may be trained on is decided here, from a hash of the task name and
the question text, never from the seeds or sizes two commands happened to use: training
only ever sees ``train``-side questions, every evaluation and every benchmark only
``test``-side ones, so they cannot meet whatever the seeds. A trained model carries a
manifest of its training questions (:func:`manifest`), and the benchmark counts any
overlap with its test set (a model trained elsewhere, or by an older rule).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from rlvr.issues import ConfigIssue, ConfigValidationError

TEST_FRACTION = 0.2
SPLIT_RULE: dict[str, Any] = {
    "version": 1,
    "hash": "sha256(task + '\\n' + question.strip())",
    "test_if": "int(first 8 hex digits, 16) < test_fraction * 2**32",
    "test_fraction": TEST_FRACTION,
}
MANIFEST = "data_manifest.json"
# A draw that sees this many questions in a row that it cannot use (other side, or seen) stops: the
# task's question space is exhausted. A task with room left gives a usable one every ~5 draws.
STALL_DRAWS = 5_000
# Every this many draws a distinct draw asks whether its budget can still fill the request (:func:`reach`):
# a task whose space is large but too small for the request is refused in seconds, not after the whole
# budget (50,000 held-out basic_arithmetic questions: docs/data.md "Held-out data").
CHECK_EVERY = 2_000
# A size check of a training side (``check_only``: validate_only) stops after this many draws once the
# side's share of them says the budget holds the size: a training side keeps repeats, so only its share
# can fall short (500,000 training questions: 19 s and 0.9 GB to draw in full).
PROBE_DRAWS = 20_000


def question_id(task: str, question: str) -> str:
    return hashlib.sha256(f"{task}\n{question.strip()}".encode()).hexdigest()


def split_of(task: str, question: str) -> str:
    """``"test"`` or ``"train"``: fixed for a (task, question) pair, forever (for this rule version)."""
    return "test" if int(question_id(task, question)[:8], 16) < TEST_FRACTION * 2**32 else "train"


def draw(
    generate: Callable[[int, int], Iterable[dict[str, Any]]],
    task: str,
    split: str,
    size: int,
    seed: int,
    distinct: bool,
    key: str,
    check_only: bool = False,
) -> list[dict[str, Any]]:
    """``size`` entries of ``split`` from ``generate(count, seed)``, drawing more as needed.

    ``distinct`` drops repeated questions (evaluation sets: n must count distinct evidence);
    training keeps the task's natural distribution, repeats included. Raises ValueError naming
    ``key`` when the task's question space cannot fill ``size``. ``check_only``: only whether it can
    (a training side may then return fewer entries, once PROBE_DRAWS draws show its share suffices).
    """
    share = TEST_FRACTION if split == "test" else 1 - TEST_FRACTION
    count = max(64, int(size / share * 1.3))
    budget = max(20_000, size * 12)
    while True:
        seen: dict[str, int] = {}  # question -> times drawn (this side only)
        picked: list[dict[str, Any]] = []
        drawn = since_new = once = 0  # once: questions of this side drawn exactly once so far
        for entry in generate(count, seed):  # consumed one at a time: only picked entries are kept
            if distinct and drawn and drawn % CHECK_EVERY == 0:
                most = reach(len(picked), once, drawn, budget)
                if most < size:
                    raise _too_small(
                        key, size, task, picked, split, drawn, share, distinct, bound=(most, once, budget)
                    )
            if (
                check_only
                and not distinct
                and drawn == PROBE_DRAWS
                and enough(len(picked), drawn, budget, size)
            ):
                return picked
            drawn += 1
            q = entry["question"]
            side = split_of(task, q) == split
            if side and distinct:
                times = seen.get(q, 0)
                once += 1 if times == 0 else -1 if times == 1 else 0
                seen[q] = times + 1
            if not side or (distinct and seen[q] > 1):
                since_new += 1
                # The task's question space is used up: no new question in this many draws (the
                # split side alone would give one about every 1/share draws). Say so now, not after
                # `budget` draws: a large size on a small task would take hours to refuse.
                if since_new >= STALL_DRAWS:
                    raise _too_small(key, size, task, picked, split, drawn, share, distinct, exhausted=True)
                continue
            since_new = 0
            picked.append(entry)
            if len(picked) == size:
                return picked
        if count >= budget:
            raise _too_small(key, size, task, picked, split, drawn, share, distinct, exhausted=False)
        count = min(budget, count * 4)


def enough(picked: int, drawn: int, budget: int, size: int) -> bool:
    """Whether a side picked ``picked`` times in ``drawn`` draws fills ``size`` within ``budget``
    draws when repeats count: its share of the draws, three standard deviations low, times the budget."""
    return (picked - 3 * math.sqrt(picked)) / drawn * budget >= size


def reach(picked: int, once: int, drawn: int, budget: int) -> float:
    """The most distinct questions a draw could hold by the end of its ``budget``, high side: ``picked``
    so far, plus the rest of the budget times the chance that a draw is a new question of this side.
    That chance is about the share of draws whose question was seen exactly once (Good-Turing:
    ``once / drawn``, which if anything overstates it), and it only falls as the draw goes on, so the
    rest of the budget adds at most that many per draw; three standard deviations of both counts
    are added, so a request this refuses is out of reach, not merely unlikely."""
    rate = (once + 3 * math.sqrt(once) + 3) / drawn
    more = rate * (budget - drawn)
    return picked + more + 3 * math.sqrt(more)


def _too_small(
    key: str,
    size: int,
    task: str,
    picked: list,
    split: str,
    drawn: int,
    share: float,
    distinct: bool,
    exhausted: bool = False,
    bound: tuple[float, int, int] | None = None,
) -> ConfigValidationError:
    why = f", none new in the last {STALL_DRAWS}: the task holds no more" if exhausted else ""
    if bound is not None:
        most, once, budget = bound
        why = (
            f" so far, and at the rate new ones still come ({once} of them drawn only once: Good-Turing) "
            f"the draw's budget of {budget:,} draws would reach at most about {most:,.0f}"
        )
    return ConfigValidationError(
        [
            ConfigIssue(
                key,
                size,
                f"task {task!r} gave only {len(picked)} {'distinct ' if distinct else ''}"
                f"{split}-side questions in {drawn} draws{why} (the {split} side is "
                f"{share:.0%} of the task's questions by content hash)",
                f"lower {key}, or widen the task's parameters so it has more distinct questions",
            )
        ]
    )


def ids_of(task_questions: Iterable[tuple[str, str]]) -> list[str]:
    return [question_id(t, q) for t, q in task_questions]


def set_hash(ids: Iterable[str]) -> str:
    """A short identity of an ordered question set (what a benchmark cell was measured on)."""
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]


def manifest(tasks: list[str], task_params: dict[str, Any], train_ids: Iterable[str]) -> dict[str, Any]:
    """What a model was trained on: the split rule and the ids of its training questions."""
    ids = sorted(set(train_ids))
    return {
        "split_rule": SPLIT_RULE,
        "tasks": tasks,
        "task_params": task_params,
        "num_train_questions": len(ids),
        "train_question_ids": ids,
    }


def manifest_hash(data_manifest: dict[str, Any]) -> str:
    """A short identity of a manifest (split rule, tasks, generator parameters, training question ids):
    what an evaluation file records, so a resumed run reuses only evaluations made for its own data."""
    canonical = json.dumps(data_manifest, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def find_manifest(model_dir: str | Path) -> Path | None:
    """The manifest of a model directory: ``final/`` holds one; a checkpoint's is its run's."""
    path = Path(model_dir).expanduser()
    for folder in [path, *list(path.parents)[:3]]:
        if (folder / MANIFEST).is_file():
            return folder / MANIFEST
    return None


def trained_ids(model_dir: str | Path) -> set[str] | None:
    """Training question ids recorded for a model, or None when it has no manifest (e.g. a base model)."""
    found = find_manifest(model_dir)
    if found is None:
        return None
    return set(json.loads(found.read_text())["train_question_ids"])
