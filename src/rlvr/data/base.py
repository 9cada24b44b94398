"""The contract every data component fulfils, and extra evaluation sets beside the held-out split.

Extra evaluation sets (``data.eval_sets: {name: <data component>}``) watch what training does
elsewhere: another task (forgetting), a harder difficulty of the training task
(generalisation), a file. Each is the test side of its component under the one split rule, so
none can hold a training question. Their rows join ``TaskData.eval`` with the set's name in
the ``eval_set`` column (empty for the training tasks' own held-out rows); the evaluation keeps
the headline accuracy on the training tasks and reports each set apart (rlvr.evaluation.results).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from datasets import Dataset, concatenate_datasets

from rlvr.config.errors import ConfigIssue
from rlvr.prompts import PromptTemplate

COLUMNS = ("question", "answer", "task", "entry", "prompt")
EVAL_SET_COLUMN = "eval_set"


@dataclass
class TaskData:
    """Train and held-out eval splits plus what identifies them in results files."""

    train: Dataset
    eval: Dataset
    tasks: list[str]
    seed: int
    manifest: dict[str, Any]
    """What training will see (rlvr.data.identity.manifest), saved beside the model."""
    curriculum: Any = None
    """A CurriculumSource (rlvr.data.curriculum) when GRPO's difficulty follows the model, else None."""


class DataComponent(Protocol):
    def validate(self) -> list[ConfigIssue]: ...

    def load(self, prompt: PromptTemplate) -> TaskData: ...


def with_eval_sets(data: TaskData, eval_sets: dict[str, Any], prompt: PromptTemplate) -> TaskData:
    """``data`` with each extra set's held-out rows appended to ``data.eval``, tagged by name."""
    if not eval_sets:
        return data
    parts = [data.eval.add_column(EVAL_SET_COLUMN, [""] * len(data.eval))]
    for name, component in eval_sets.items():
        rows = component.eval_split(prompt, f"data.eval_sets.{name}.eval_size")
        parts.append(rows.add_column(EVAL_SET_COLUMN, [name] * len(rows)))
    data.eval = concatenate_datasets(parts)
    return data


def eval_set_issues(eval_sets: dict[str, Any]) -> list[ConfigIssue]:
    """Each extra set's own validate(), its keys moved under ``data.eval_sets.<name>``."""
    issues = []
    for name, component in eval_sets.items():
        if not hasattr(component, "eval_split"):
            issues.append(
                ConfigIssue(
                    f"data.eval_sets.{name}",
                    type(component).__name__,
                    "is not a data component with an eval_split()",
                    "use rlvr.data.ReasoningGymData or rlvr.data.FileData",
                )
            )
            continue
        for issue in component.validate():
            key = issue.key.replace("data.", f"data.eval_sets.{name}.", 1)
            issues.append(ConfigIssue(key, issue.value, issue.problem, issue.fix))
    return issues
