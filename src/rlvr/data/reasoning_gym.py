"""Any reasoning-gym task by name, with its generator parameters, as train/eval datasets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated, Any

import pyarrow as pa
import reasoning_gym
from datasets import Dataset
from pydantic import Field
from reasoning_gym.factory import DATASETS

from rlvr.data import identity, references
from rlvr.data.base import TaskData, eval_set_drawn_size_issues, eval_set_issues, with_eval_sets
from rlvr.issues import ConfigIssue, ConfigValidationError, suggest
from rlvr.prompts import PromptTemplate
from rlvr.verifier.entries import from_json_safe, to_json_safe


def task_names() -> list[str]:
    return sorted(DATASETS)


def generate_entries(task: str, params: dict[str, Any], size: int, seed: int) -> Iterator[dict[str, Any]]:
    """``size`` reasoning-gym entries, one at a time (a draw keeps only the ones it picks, so asking a
    small task for many questions does not hold every draw in memory); the same (task, params, size,
    seed) always gives the same sequence."""
    dataset = reasoning_gym.create_dataset(task, size=size, seed=seed, **params)
    for i in range(size):
        # JSON-safe now (losslessly: rlvr.verifier.entries) so a draw, the dataset column and the
        # verifier sandbox all hold the same value, and the worker rebuilds the generator's objects.
        yield to_json_safe(dataset[i], f"{task} item {i} (seed {seed})")


def split_entries(
    task: str, params: dict[str, Any], split: str, size: int, seed: int, key: str, check_only: bool = False
) -> list[dict[str, Any]]:
    """``size`` entries of one side of the content-hash split (rlvr.data.identity).

    The test side is de-duplicated (an evaluation's n counts distinct questions); the train side
    keeps the task's own distribution. Evaluation, in-training evaluation and every benchmark
    cell take their questions from here, so none of them can hold a training question.
    """
    return identity.draw(
        lambda count, s: generate_entries(task, params, count, s),
        task,
        split,
        size,
        seed,
        distinct=split == "test",
        key=key,
        check_only=check_only,
    )


def to_dataset(entries: list[dict[str, Any]], task: str, prompt: PromptTemplate) -> Dataset:
    """The rows of ``entries``; an entry without a reference answer keeps None (rlvr.data.references)."""
    return Dataset.from_dict(
        {
            "question": [e["question"] for e in entries],
            # A string column even when every row has None (mixtures concatenate it with others).
            "answer": pa.array(
                [None if (a := from_json_safe(e["answer"])) is None else str(a) for e in entries], pa.string()
            ),
            "task": [task] * len(entries),
            # allow_nan=False: an entry that skipped to_json_safe fails here, not in a verifier.
            "entry": [json.dumps(e, allow_nan=False) for e in entries],
            "prompt": [prompt.messages(e["question"]) for e in entries],
        }
    )


# A number of questions drawn (data.train_size, data.eval_size); subclasses declare theirs with it too.
Size = Annotated[int, Field(ge=1, examples=[100])]


class ReasoningGymData:
    """One reasoning-gym task; eval questions are held out by content (rlvr.data.identity), so no
    evaluation or benchmark of this task can contain a training question, whatever the seeds.

    Args:
        task: reasoning-gym task name (``basic_arithmetic``, ``leg_counting``, ...).
        task_params: generator parameters per task name (its ``*Config`` fields); a task that is
            not listed uses reasoning-gym's defaults, so ``data.task=<other>`` works from the CLI.
        train_size: number of training questions.
        eval_size: number of held-out questions.
        seed: data seed; eval draws from ``seed`` and train from ``seed + 1`` (which questions
            each may hold is decided by content, not by seed).
        eval_sets: extra evaluation sets, name -> data component (rlvr.data.base); e.g. a harder
            difficulty of this task, or another task to watch forgetting.
    """

    def __init__(
        self,
        task: str,
        train_size: Size,
        eval_size: Size,
        seed: int,
        task_params: dict[str, dict] | None,
        eval_sets: dict[str, Any] | None,
    ):
        self.task = task
        self.eval_sets = dict(eval_sets or {})
        self.task_params = dict(task_params or {})
        self.params = dict(self.task_params.get(task) or {})
        self.train_size = train_size
        self.eval_size = eval_size
        self.seed = seed

    def validate(self) -> list[ConfigIssue]:
        issues = []
        if self.task not in DATASETS:
            return [
                ConfigIssue(
                    "data.task",
                    self.task,
                    "not a reasoning-gym task",
                    f"{suggest(self.task, DATASETS)} ({len(DATASETS)} tasks exist; "
                    "list them with `python -c 'import reasoning_gym.factory as f; print(sorted(f.DATASETS))'`)",
                )
            ]
        try:
            reasoning_gym.create_dataset(self.task, size=1, seed=self.seed, **self.params)
        except Exception as exc:  # reasoning-gym raises TypeError/AssertionError for bad params
            _, config_cls = DATASETS[self.task]
            fields = sorted(getattr(config_cls, "__dataclass_fields__", {}))
            issues.append(
                ConfigIssue(
                    f"data.task_params.{self.task}",
                    self.params,
                    f"rejected by reasoning-gym's {self.task} generator ({type(exc).__name__}: {exc})",
                    f"use only these keys with valid values: {', '.join(fields)}",
                )
            )
        return issues + eval_set_issues(self.eval_sets)

    def drawn_size_issues(self, eval_only: bool = False) -> list[ConfigIssue]:
        """``eval_size`` and ``train_size`` (only ``eval_size`` for an extra evaluation set) judged by
        drawing each side as the data stage will, with its seeds: a size the task's question space
        cannot give is a config issue naming the key. The gate runs it for ``validate_only``, where no
        data stage follows to find it (rlvr.config.gate)."""
        sides = [("test", self.eval_size, self.seed, "data.eval_size")]
        if not eval_only:
            sides.append(("train", self.train_size, self.seed + 1, "data.train_size"))
        issues = []
        for split, size, seed, key in sides:
            try:
                split_entries(self.task, self.params, split, size, seed, key, check_only=True)
            except ConfigValidationError as exc:
                issues += exc.issues
        return issues + eval_set_drawn_size_issues(self.eval_sets)

    def tasks_without_references(self) -> list[str]:
        """This task if its entries carry no reference answer (rlvr.data.references)."""
        return (
            [self.task]
            if references.reasoning_gym_lacks_references(self.task, self.params, self.seed)
            else []
        )

    def eval_split(self, prompt: PromptTemplate, key: str = "data.eval_size") -> Dataset:
        """The held-out questions only (what an extra evaluation set needs)."""
        return to_dataset(
            split_entries(self.task, self.params, "test", self.eval_size, self.seed, key), self.task, prompt
        )

    def load(self, prompt: PromptTemplate) -> TaskData:
        eval_entries = split_entries(
            self.task, self.params, "test", self.eval_size, self.seed, "data.eval_size"
        )
        train_entries = split_entries(
            self.task, self.params, "train", self.train_size, self.seed + 1, "data.train_size"
        )
        data = TaskData(
            train=to_dataset(train_entries, self.task, prompt),
            eval=to_dataset(eval_entries, self.task, prompt),
            tasks=[self.task],
            seed=self.seed,
            manifest=identity.manifest(
                [self.task],
                {self.task: self.params},
                identity.ids_of((self.task, e["question"]) for e in train_entries),
            ),
        )
        return with_eval_sets(data, self.eval_sets, prompt)
