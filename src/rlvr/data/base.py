"""The contract every data component fulfils."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from datasets import Dataset

from rlvr.config_errors import ConfigIssue
from rlvr.prompts import PromptTemplate

COLUMNS = ("question", "answer", "task", "entry", "prompt")


@dataclass
class TaskData:
    """Train and held-out eval splits plus what identifies them in results files."""

    train: Dataset
    eval: Dataset
    tasks: list[str]
    seed: int
    manifest: dict[str, Any]
    """What training will see (rlvr.data.identity.manifest), saved beside the model."""


class DataComponent(Protocol):
    def validate(self) -> list[ConfigIssue]: ...

    def load(self, prompt: PromptTemplate) -> TaskData: ...
