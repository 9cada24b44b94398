"""Several tasks in one run: reasoning-gym tasks and file datasets mixed by weight, each held out by content.

``data.tasks`` maps a task name to its weight, the share of the training questions it gets
(``{basic_arithmetic: 0.7, leg_counting: 0.3}``). A name listed in ``data.sources`` is that
data component (e.g. a FileData for a GSM8K file); any other name is a reasoning-gym task with
its generator parameters from ``data.task_params``. Every task keeps its own held-out split
under the product's one split rule (rlvr.data.identity) and gets ``eval_size`` evaluation
questions of its own, so the report can give each task an accuracy with a confidence interval.

Why not reasoning-gym's ``CompositeDataset``: it picks each item's task by a random draw, so a
task's share varies with the seed, and it holds only reasoning-gym tasks. Here the counts are
exact (largest remainder of ``weight * train_size``) and file datasets mix in too; entries keep
reasoning-gym's ``metadata.source_dataset``, the field CompositeDataset's scorer dispatches on
and the sandbox reads as well.
"""

from __future__ import annotations

import math
import random
from typing import Annotated, Any

from datasets import Dataset, concatenate_datasets
from pydantic import Field

from rlvr.data import identity, references
from rlvr.data.base import TaskData, eval_set_drawn_size_issues, eval_set_issues, with_eval_sets
from rlvr.data.files import FileData
from rlvr.data.reasoning_gym import ReasoningGymData, split_entries, to_dataset
from rlvr.issues import ConfigIssue, ConfigValidationError, suggest
from rlvr.prompts import PromptTemplate


def shares(weights: dict[str, float], total: int) -> dict[str, int]:
    """``total`` split in proportion to ``weights`` by largest remainder (exact sum, ties by order).

    >>> shares({"a": 0.7, "b": 0.3}, 10), shares({"a": 1, "b": 1, "c": 1}, 10)
    ({'a': 7, 'b': 3}, {'a': 4, 'b': 3, 'c': 3})
    """
    norm = sum(weights.values())
    exact = {k: w / norm * total for k, w in weights.items()}
    counts = {k: math.floor(v) for k, v in exact.items()}
    by_remainder = sorted(weights, key=lambda k: counts[k] - exact[k])  # stable: order breaks ties
    for k in by_remainder[: total - sum(counts.values())]:
        counts[k] += 1
    return counts


class MixtureData:
    """Weighted tasks in one training set, a held-out split per task.

    Args:
        tasks: task name -> weight (> 0); weights are normalised. Required (None is reported).
        train_size: training questions over all tasks, shared out by weight.
        eval_size: held-out questions per task.
        seed: data seed (reasoning-gym tasks draw eval from ``seed``, train from ``seed + 1``;
            the training rows of all tasks are shuffled together with it).
        task_params: reasoning-gym generator parameters per task name.
        sources: task name -> a data component for tasks that are not reasoning-gym tasks
            (a FileData); its own sizes are ignored in favour of the mixture's.
        eval_sets: extra evaluation sets (name -> data component), see rlvr.data.base.
    """

    def __init__(
        self,
        tasks: dict[str, Annotated[float, Field(gt=0, examples=[0.5], description="a task's weight")]] | None,
        train_size: int,
        eval_size: Annotated[int, Field(ge=1, examples=[100])],
        seed: int,
        task_params: dict[str, dict] | None,
        sources: dict[str, Any] | None,
        eval_sets: dict[str, Any] | None,
    ):
        self.tasks = dict(tasks or {})
        self.train_size = train_size
        self.eval_size = eval_size
        self.seed = seed
        self.task_params = dict(task_params or {})
        self.sources = dict(sources or {})
        self.eval_sets = dict(eval_sets or {})

    def _rg(self, task: str) -> ReasoningGymData:
        return ReasoningGymData(
            task, self.train_size, self.eval_size, self.seed, self.task_params, eval_sets=None
        )

    def validate(self) -> list[ConfigIssue]:
        issues = self._weight_issues() + self._unused_source_issues()
        for name in self.tasks:
            issues += self._source_issues(name) if name in self.sources else self._task_issues(name)
        return issues + self._size_issues() + eval_set_issues(self.eval_sets)

    def _weight_issues(self) -> list[ConfigIssue]:
        """data.tasks: at least one task (a weight's range is the signature's)."""
        issues = []
        if not self.tasks:
            issues.append(
                ConfigIssue(
                    "data.tasks",
                    self.tasks,
                    "no tasks to mix",
                    "set e.g. data.tasks='{basic_arithmetic: 0.7, leg_counting: 0.3}'",
                )
            )
        return issues

    def _unused_source_issues(self) -> list[ConfigIssue]:
        """data.sources entries that no task in data.tasks names."""
        return [
            ConfigIssue(
                f"data.sources.{name}",
                name,
                "is not in data.tasks, so it would never be used",
                f"add data.tasks.{name}=<weight> or remove the source ({suggest(name, self.tasks)})",
            )
            for name in self.sources
            if name not in self.tasks
        ]

    def _source_issues(self, name: str) -> list[ConfigIssue]:
        """A task of data.sources: a FileData named as its key, valid on its own."""
        source = self.sources[name]
        if not isinstance(source, FileData):
            return [
                ConfigIssue(
                    f"data.sources.{name}",
                    type(source).__name__,
                    "data.sources holds file datasets (rlvr.data.FileData)",
                    "name a reasoning-gym task in data.tasks and its parameters in data.task_params",
                )
            ]
        issues = []
        if source.name != name:
            issues.append(
                ConfigIssue(
                    f"data.sources.{name}.name",
                    source.name,
                    "must equal its key in data.sources (the task name of its questions)",
                    f"set data.sources.{name}.name={name}",
                )
            )
        # A source's own train_size / eval_size are not used: the mixture's shares are (data stage).
        return issues + _rekey(source.validate(sizes=False), "data", f"data.sources.{name}")

    def _task_issues(self, name: str) -> list[ConfigIssue]:
        """A reasoning-gym task: its name and data.task_params, as ReasoningGymData checks them."""
        issues = []
        for issue in self._rg(name).validate():
            if issue.key == "data.task":
                fix = (
                    f"{issue.fix.split(' (')[0]}; for a file dataset of this name add "
                    f"+data/source@data.sources.{name}=gsm8k data.sources.{name}.name={name} "
                    f"data.sources.{name}.path=<file> (or another source option)"
                )
                issues.append(ConfigIssue(f"data.tasks.{name}", name, issue.problem, fix))
            elif issue.key.startswith("data.task_params"):
                issues.append(issue)
        return issues

    def _size_issues(self) -> list[ConfigIssue]:
        """data.train_size covers every task."""
        issues = []
        if self.tasks and (not isinstance(self.train_size, int) or self.train_size < len(self.tasks)):
            issues.append(
                ConfigIssue(
                    "data.train_size",
                    self.train_size,
                    f"must be an integer >= the number of tasks ({len(self.tasks)})",
                    "raise data.train_size",
                )
            )
        return issues

    def _splits(
        self, name: str, n_train: int, check_only: bool = False
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(train, eval) entries of one task (``check_only``: rlvr.data.identity.draw's)."""
        if name in self.sources:
            source = self.sources[name]
            return (
                source.side("train", n_train, f"data.tasks.{name} (x data.train_size)"),
                source.side("test", self.eval_size, "data.eval_size"),
            )
        params = dict(self.task_params.get(name) or {})
        train = split_entries(
            name,
            params,
            "train",
            n_train,
            self.seed + 1,
            f"data.tasks.{name} (x data.train_size)",
            check_only,
        )
        return train, split_entries(
            name, params, "test", self.eval_size, self.seed, "data.eval_size", check_only
        )

    def drawn_size_issues(self) -> list[ConfigIssue]:
        """Each task's share of ``train_size`` and its ``eval_size`` judged by drawing (or reading)
        the task's sides as the data stage will (``validate_only``: no data stage follows to find a
        share the task cannot give). The gate asks only once ``validate`` found nothing."""
        issues = []
        for name, n_train in shares(self.tasks, self.train_size).items():
            try:
                self._splits(name, n_train, check_only=True)
            except ConfigValidationError as exc:
                issues += exc.issues
        return issues + eval_set_drawn_size_issues(self.eval_sets)

    def tasks_without_references(self) -> list[str]:
        """The mixed tasks whose training rows carry no reference answer (rlvr.data.references)."""
        return [
            name
            for name in self.tasks or {}
            if (
                getattr(self.sources[name], "tasks_without_references", list)()
                if name in self.sources
                else references.reasoning_gym_lacks_references(
                    name, dict(self.task_params.get(name) or {}), self.seed
                )
            )
        ]

    def load(self, prompt: PromptTemplate) -> TaskData:
        trains: list[Dataset] = []
        evals: list[Dataset] = []
        ids: list[str] = []
        for name, n_train in shares(self.tasks, self.train_size).items():
            train, held_out = self._splits(name, n_train)
            ids += identity.ids_of((name, e["question"]) for e in train)
            if train:
                trains.append(to_dataset(train, name, prompt))
            evals.append(to_dataset(held_out, name, prompt))
        params = {
            name: (
                {"path": str(self.sources[name].path), "weight": self.tasks[name]}
                if name in self.sources
                else {**dict(self.task_params.get(name) or {}), "weight": self.tasks[name]}
            )
            for name in self.tasks
        }
        data = TaskData(
            # Tasks interleaved in a seeded order, so every GRPO batch sees the mixture.
            train=_shuffled(concatenate_datasets(trains), self.seed),
            eval=concatenate_datasets(evals),
            tasks=list(self.tasks),
            seed=self.seed,
            manifest=identity.manifest(list(self.tasks), params, ids),
        )
        return with_eval_sets(data, self.eval_sets, prompt)


def _shuffled(dataset: Dataset, seed: int) -> Dataset:
    order = list(range(len(dataset)))
    random.Random(seed).shuffle(order)
    return dataset.select(order)


def _rekey(issues: list[ConfigIssue], old: str, new: str) -> list[ConfigIssue]:
    """A nested component reports keys as ``data.*``; say where it sits in this config."""
    return [
        ConfigIssue(new + i.key[len(old) :], i.value, i.problem, i.fix.replace(f"{old}.", f"{new}."))
        if i.key == old or i.key.startswith(old + ".")
        else i
        for i in issues
    ]
