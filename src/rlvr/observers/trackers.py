"""Experiment trackers: W&B (offline unless a key is configured) and TensorBoard, both imported lazily."""

from __future__ import annotations

import importlib.util
import os
from typing import TYPE_CHECKING, Any, Literal

from rlvr import events as ev
from rlvr.events import COMPLETED_STATUSES
from rlvr.issues import ConfigIssue
from rlvr.observers.base import Observer
from rlvr.runtime.io import config_path_problem, inside

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter


class WandbObserver(Observer):
    """Logs metrics, the completions tables (``completions/<source>``) and the secret-free config to
    Weights & Biases.

    Args:
        project: W&B project name.
        mode: "offline", "online", or "auto" (online only when WANDB_API_KEY is set).
        entity, tags, name: passed to ``wandb.init``.
    """

    def __init__(
        self,
        *,
        project: str,
        mode: Literal["auto", "offline", "online"],
        entity: str | None,
        name: str | None,
        tags: list[str] | None,
    ):
        self.project, self.mode, self.entity, self.name = project, mode, entity, name
        self.tags = list(tags or [])
        self._run: Any = None

    def validate(self) -> list[ConfigIssue]:
        issues = []
        if importlib.util.find_spec("wandb") is None:
            issues.append(
                ConfigIssue(
                    "observers.wandb",
                    "wandb",
                    "package not installed",
                    "pip install 'rlvr[tracking]' or remove it with ~observers.wandb",
                )
            )
        return issues

    def resolved_mode(self) -> str:
        if self.mode == "auto":
            return "online" if os.environ.get("WANDB_API_KEY") else "offline"
        return self.mode

    def on_pipeline_start(self, event: ev.PipelineStart) -> None:
        import wandb

        self._run = wandb.init(
            project=self.project,
            entity=self.entity,
            name=self.name,
            tags=self.tags,
            mode=self.resolved_mode(),
            dir=str(event.run_dir),
            config=event.config,
            reinit="finish_previous",
            # No command line, code, git diff or machine metadata in the run files: the config above
            # is the record, secret-free; argv could hold anything a user typed. No console capture
            # either: W&B would wrap the console's write and see text before rlvr.runtime.secrets masks it
            # (the run's log file holds the console).
            settings=wandb.Settings(
                x_disable_meta=True, disable_git=True, save_code=False, disable_code=True, console="off"
            ),
        )

    def on_train_step(self, event: ev.TrainStep) -> None:
        if self._run is not None:
            self._run.log({**event.metrics, f"{event.phase}/step": event.step})

    def on_evaluation(self, event: ev.EvalResult) -> None:
        if self._run is not None:
            groups = {
                f"eval/{event.label}/{k}/accuracy": g.accuracy for k, g in event.evaluation.groups().items()
            }
            self._run.log({f"eval/{event.label}/accuracy": event.accuracy, **groups, "eval/step": event.step})

    def on_completions(self, event: ev.Completions) -> None:
        """A ``completions/<source>`` table: step, prompt, completion, each reward term, score, verdict."""
        if self._run is None:
            return
        import wandb

        terms = list(dict.fromkeys(t for row in event.rows for t in row.rewards))
        columns = ["step", "task", "prompt", "completion", "answer", "reference"]
        table = wandb.Table(columns=[*columns, *(f"reward/{t}" for t in terms), "score", "correct"])
        for row in event.rows:
            table.add_data(
                event.step, *(getattr(row, c) for c in columns[1:]),
                *(row.rewards.get(t) for t in terms), row.score, row.correct,
            )  # fmt: skip
        self._run.log({f"completions/{event.source}": table})

    def on_pipeline_end(self, event: ev.PipelineEnd) -> None:
        self.close(exit_code=0 if event.status in COMPLETED_STATUSES else 1)

    def close(self, exit_code: int = 0) -> None:
        if self._run is not None:
            self._run.finish(exit_code=exit_code)
            self._run = None


def tag(phase: str, metric: str) -> str:
    """``phase/metric`` once: a step's metrics already carry their phase (rlvr.training_loop.callbacks).

    >>> tag("rft", "rft/loss"), tag("grpo", "reward/mean")
    ('rft/loss', 'grpo/reward/mean')
    """
    return metric if metric.startswith(f"{phase}/") else f"{phase}/{metric}"


class TensorBoardObserver(Observer):
    """Scalars for TensorBoard under ``<run_dir>/<log_dir>`` (``log_dir`` relative, never out of the run)."""

    def __init__(self, *, log_dir: str):
        self.log_dir = log_dir
        self._writer: SummaryWriter | None = None

    def validate(self) -> list[ConfigIssue]:
        issues = []
        problem = config_path_problem(self.log_dir)
        if problem is not None:
            issues.append(
                ConfigIssue(
                    "observers.tensorboard.log_dir",
                    self.log_dir,
                    problem,
                    "name a folder inside the run directory, e.g. tensorboard",
                )
            )
        if importlib.util.find_spec("tensorboard") is None:
            issues.append(
                ConfigIssue(
                    "observers.tensorboard",
                    "tensorboard",
                    "package not installed",
                    "pip install 'rlvr[tracking]' or remove it with ~observers.tensorboard",
                )
            )
        return issues

    def on_pipeline_start(self, event: ev.PipelineStart) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(inside(event.run_dir, self.log_dir)))

    def on_train_step(self, event: ev.TrainStep) -> None:
        if self._writer is not None:
            for key, value in event.metrics.items():
                self._writer.add_scalar(tag(event.phase, key), value, event.step)

    def on_evaluation(self, event: ev.EvalResult) -> None:
        if self._writer is not None:
            self._writer.add_scalar(f"eval/{event.label}/accuracy", event.accuracy, event.step)
            for name, g in event.evaluation.groups().items():
                self._writer.add_scalar(f"eval/{event.label}/{name}/accuracy", g.accuracy, event.step)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
