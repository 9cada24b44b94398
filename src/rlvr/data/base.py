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

from rlvr.issues import ConfigIssue
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


def eval_set_drawn_size_issues(eval_sets: dict[str, Any]) -> list[ConfigIssue]:
    """Each extra set's ``eval_size`` judged by drawing it (``drawn_size_issues``, where a component
    has one), its key moved under ``data.eval_sets.<name>``."""
    issues = []
    for name, component in eval_sets.items():
        for issue in getattr(component, "drawn_size_issues", lambda eval_only: [])(eval_only=True):
            key = issue.key.replace("data.", f"data.eval_sets.{name}.", 1)
            issues.append(ConfigIssue(key, issue.value, issue.problem, issue.fix))
    return issues


def _sets(data: TaskData) -> list[tuple[str, str, Dataset]]:
    """(config key, which set, rows) of every prompt set the run uses."""
    out = [("data", "training questions", data.train)]
    if EVAL_SET_COLUMN not in getattr(data.eval, "column_names", ()):  # a plain list has no extra sets
        return [*out, ("data", "held-out questions", data.eval)]
    names = data.eval[EVAL_SET_COLUMN]
    for name in dict.fromkeys(names):
        rows = data.eval.select([i for i, n in enumerate(names) if n == name])
        if not name:
            out.append(("data", "held-out questions", rows))
        else:  # a curriculum's level_<L> sets come from data.eval_levels
            out.append(
                ("data.eval_levels" if name.startswith("level_") else f"data.eval_sets.{name}", name, rows)
            )
    return out


def prompt_length_issues(
    data: TaskData, prompt: PromptTemplate, tokenizer: Any, model: Any
) -> list[ConfigIssue]:
    """Sets whose longest prompt, as the model sees it, is longer than the model's context
    (``config.max_position_embeddings``). Such a prompt is truncated or overruns the position
    table, and each evaluation of it ran 50-100x slower while the only warning went to the log
    file: refused before any work, with the numbers.
    """
    context = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if not isinstance(context, int):
        return []
    issues = []
    for key, which, rows in _sets(data):
        if not len(rows) or "prompt" not in getattr(rows, "column_names", ()):  # no chat prompts to measure
            continue
        texts = [prompt.render(tokenizer, m) for m in rows["prompt"]]
        lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
        longest = max(lengths)
        if longest > context:
            issues.append(
                ConfigIssue(
                    key,
                    which,
                    f"{sum(n > context for n in lengths)} of {len(lengths)} prompts of {which!r} are longer "
                    f"than the model's context: the longest has {longest} tokens "
                    f"({len(texts[lengths.index(longest)])} characters), the context {context}",
                    "drop this set or lower its difficulty (task parameters, data.eval_levels), shorten "
                    "the prompt template, or use a model with a longer context",
                )
            )
    return issues
