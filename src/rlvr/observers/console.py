"""Console observer: stage lines, rich progress bars for training and evaluation, a closing table.

Every step it prints counts within its training phase ("grpo step 2"), as TRL's trainer and the
``checkpoints/<phase>/checkpoint-N`` folders do; a stage evaluation's step (the run's total) is shown
as the step of the phase it followed.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from rlvr import events as ev
from rlvr.config.errors import ConfigIssue, ConfigValidationError
from rlvr.observers.base import Observer
from rlvr.stages import PHASES


class _Bar:
    def __init__(self, progress: Progress, task_id: Any):
        self.progress, self.task_id = progress, task_id

    def advance(self, n: int = 1) -> None:
        self.progress.advance(self.task_id, n)

    def close(self) -> None:
        self.progress.remove_task(self.task_id)


class ConsoleObserver(Observer):
    """Human-readable progress on the terminal.

    Args:
        log_every: print a metrics line every this many training steps.
    """

    def __init__(self, *, log_every: int):
        self.log_every = log_every
        self.console = Console(highlight=False)
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
        )
        self._bars: dict[str, Any] = {}
        self._started = False
        self._phase_steps: dict[str, int] = {}  # phases that ended, in run order
        self._last_step: ev.TrainStep | None = None

    def at(self, label: str, step: int) -> str:
        """Where evaluation ``label`` was made, counted within its phase. In-training evaluations
        (labelled by their phase) carry the phase's step; stage evaluations the run's total."""
        if label in PHASES:
            return f"{label} step {step}"
        if step == 0:
            return "before training"
        done = 0
        for phase, steps in self._phase_steps.items():
            done += steps
            if done == step:
                return f"{phase} step {steps}"
        return f"step {step} of all phases"  # phases an earlier attempt ran: not seen by this process

    def validate(self) -> list[ConfigIssue]:
        if self.log_every >= 1:
            return []
        return [ConfigIssue("observers.console.log_every", self.log_every, "must be >= 1", "set e.g. 5")]

    def _ensure_started(self) -> None:
        if not self._started:
            self._progress.start()
            self._started = True

    def progress(self, label: str, total: int) -> _Bar:
        self._ensure_started()
        return _Bar(self._progress, self._progress.add_task(label, total=total))

    def on_pipeline_start(self, event: ev.PipelineStart) -> None:
        self.console.print(f"[bold]rlvr[/bold] run directory: {event.run_dir}")

    def on_stage_start(self, event: ev.StageStart) -> None:
        self.console.print(f"[cyan]▶ {event.stage}[/cyan]")

    def on_stage_end(self, event: ev.StageEnd) -> None:
        color = "green" if event.status == "ok" else "red"
        self.console.print(f"[{color}]■ {event.stage} {event.status}[/{color}] ({event.seconds:.1f}s)")

    def on_phase_end(self, event: ev.PhaseEnd) -> None:
        self._phase_steps[event.phase] = event.steps

    def on_train_step(self, event: ev.TrainStep) -> None:
        self._last_step = event
        key = event.phase
        if key not in self._bars:
            self._bars[key] = self.progress(f"{event.phase} steps", event.max_steps)
        self._bars[key].advance(1)
        if event.step % self.log_every == 0 or event.step == event.max_steps:
            shown = {
                k: v
                for k, v in event.metrics.items()
                if k.split("/")[-1] in ("loss", "mean", "accuracy", "level")  # level: a curriculum
            }
            text = "  ".join(f"{k}={v:.4g}" for k, v in sorted(shown.items()))
            self.console.print(f"  {event.phase} step {event.step}/{event.max_steps}  {text}")
        if event.step >= event.max_steps:
            self._bars.pop(key).close()

    def on_evaluation(self, event: ev.EvalResult) -> None:
        summary = event.evaluation.summary
        if max(summary.pass_at_k, default=1) > 1:  # sampled: its accuracy is pass@1, named so
            at_k = ", ".join(f"pass@{k} {v:.1%}" for k, v in summary.pass_at_k.items())
            self.console.print(
                f"  eval {escape('[' + event.label + ']')} {self.at(event.label, event.step)}: {at_k} "
                f"(n={event.n})"
            )
            return
        self.console.print(
            f"  eval {escape('[' + event.label + ']')} {self.at(event.label, event.step)}: "
            f"accuracy {event.accuracy:.1%} "
            f"(95% CI {event.ci_low:.1%}-{event.ci_high:.1%}, n={event.n})"
        )
        for name, g in event.evaluation.groups().items():
            self.console.print(
                f"    {escape(name)}: {g.accuracy:.1%} (95% CI {g.ci_low:.1%}-{g.ci_high:.1%}, n={g.n})"
            )

    def on_checkpoint(self, event: ev.CheckpointSaved) -> None:
        self.console.print(f"  checkpoint ({event.phase} step {event.step}): {event.path}")

    def on_warning(self, event: ev.Warning_) -> None:
        # A step-numbered warning comes from the training phase that is running.
        phase = f"{self._last_step.phase} " if self._last_step is not None else ""
        where = f" ({phase}step {event.step})" if event.step is not None else ""
        self.console.print(f"[yellow]warning{where}: {escape(event.message)}[/yellow]")

    def on_error(self, event: ev.ErrorEvent) -> None:
        if isinstance(event.error, KeyboardInterrupt):
            last = self._last_step
            at = (
                f" at {last.phase} step {last.step}/{last.max_steps}"
                if last and event.stage == "train"
                else ""
            )
            self.console.print(f"[red]stopped by Ctrl-C in {event.stage}{at}[/red]")
            return
        # A configuration problem found while running says key, value and fix: its type adds nothing.
        kind = "" if isinstance(event.error, ConfigValidationError) else f"{type(event.error).__name__}: "
        self.console.print(f"[red]error in {event.stage}: {kind}{escape(str(event.error))}[/red]")

    def on_pipeline_end(self, event: ev.PipelineEnd) -> None:
        self.close()
        result = event.result
        evaluations, changes, files = (
            (result.evaluations, result.changes, result.files) if result else ([], [], {})
        )
        if evaluations:
            table = Table(title="Held-out accuracy")
            for col in ("stage", "at", "accuracy", "95% CI", "n"):
                table.add_column(col)
            for e in evaluations:
                at_k = e.evaluation.summary.pass_at_k
                sampled = max(at_k, default=1) > 1  # mean over the samples, not the first one
                table.add_row(
                    str(e.label),
                    self.at(str(e.label), e.step),
                    f"pass@1 {at_k[1]:.1%}" if sampled else f"{e.accuracy:.1%}",
                    "(paired below)" if sampled else f"{e.ci_low:.1%} - {e.ci_high:.1%}",
                    str(e.n),
                )
            self.console.print(table)
        if changes:
            self.console.print("What each stage changed, paired on the same questions (95% CI):")
            for change in changes:
                self.console.print(f"  {change.stage}: {escape(change.text)}")
        for note in result.notes if result else []:
            self.console.print(f"[yellow]Note:[/yellow] {escape(note)}")
        for phase, found in (result.throughput if result else {}).items():
            mfu = (
                f", MFU {found['mfu']:.1%} of {found['peak_tflops']:g} TFLOP/s"
                if found.get("mfu") is not None
                else ""
            )
            self.console.print(
                f"  {phase} throughput: {found['tokens_per_second']:,.0f} tokens/s{mfu} ({found['device']})"
            )
        for name, value in files.items():
            self.console.print(f"  {name}: {value}")
        self.console.print(f"[bold]pipeline {event.status}[/bold] in {event.seconds / 60:.1f} min")

    def close(self) -> None:
        if self._started:
            self._progress.stop()
            self._started = False
