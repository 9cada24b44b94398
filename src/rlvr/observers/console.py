"""Console observer: stage lines, a progress bar per training phase and per evaluation, a closing table.

On a terminal rich draws the bars (count, rate, elapsed, ETA); on anything else (a pipe, a CI log,
``nohup``) a live bar would print nothing until it ends, so the observer prints plain lines instead:
each ``log_every``-th step with its step time and ETA, and each evaluation's start and its time. Every
step's line also goes to the run's log file (rlvr.runtime.logs.PROGRESS), which keeps what the console skips.

Steps read as the run's files do: an evaluation's step is the one in its file name
(``eval/<label>_step<N>.json``) and in report.md. In-training evaluations and training steps count
within their phase (as TRL and ``checkpoints/<phase>/checkpoint-N`` do); a stage evaluation
(``after_sft``, ``final``) counts the run's steps over all phases, split into phases where known.
"""

from __future__ import annotations

import logging
import time
from typing import Annotated, Any

from pydantic import Field
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from rlvr import events as ev
from rlvr.evaluation.results import constant_gain
from rlvr.issues import ConfigValidationError
from rlvr.observers.base import Observer
from rlvr.runtime.logs import PROGRESS
from rlvr.stages import PHASES

progress_log = logging.getLogger(PROGRESS)


def budget_text(record: dict[str, Any]) -> str:
    """``budget_minutes``' planned against actual time, a line a part (rows of
    rlvr.training_loop.budget.planned_vs_actual)."""

    def minutes(seconds: float | None) -> str:
        return "-" if seconds is None else f"{seconds / 60:.1f} min"

    lines = [f"  budget {record['budget_minutes']:g} min, planned -> actual:"]
    lines += [
        f"    {r['part']}: {minutes(r['planned_s'])} -> {minutes(r['actual_s'])}" for r in record["rows"]
    ]
    return "\n".join(lines)


def rate_text(seconds_per_item: float, unit: str) -> str:
    """``2.5 s/step`` for slow items, ``4.0 questions/s`` for fast ones (``unit``: singular).

    >>> rate_text(2.5, "step"), rate_text(0.25, "question")
    ('2.5 s/step', '4.0 questions/s')
    """
    if seconds_per_item >= 1:
        return f"{seconds_per_item:.1f} s/{unit}"
    return f"{1 / seconds_per_item:.1f} {unit}s/s"


def clock(seconds: float) -> str:
    """``1:02:03`` / ``2:03``: a duration as a person reads it.

    >>> clock(3723), clock(123.4), clock(5)
    ('1:02:03', '2:03', '0:05')
    """
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class _RateColumn(ProgressColumn):
    """The task's rate in its own unit (rich's speed columns speak bytes)."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(rate_text(1 / speed, task.fields["unit"]) if speed else "", style="progress.data.speed")


class _Bar:
    """One bar: drawn by rich on a terminal (``progress``), only counted elsewhere; it times its items
    from the first one it counts, so a start-up pause does not skew the rate."""

    def __init__(self, progress: Progress | None, label: str, total: int, unit: str, done: int = 0):
        self.progress, self.label, self.total, self.unit = progress, label, total, unit
        self.task_id = progress.add_task(label, total=total, completed=done, unit=unit) if progress else None
        self.done, self.started = done, time.monotonic()
        self.closed: float | None = None
        self._first: tuple[float, int] | None = None  # (time, count) at the first advance

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self._first is None:
            self._first = (time.monotonic(), self.done)
        if self.progress is not None:
            self.progress.advance(self.task_id, n)

    def seconds_per_item(self) -> float | None:
        if self._first is None or self.done <= self._first[1]:
            return None
        return (time.monotonic() - self._first[0]) / (self.done - self._first[1])

    def seconds(self) -> float:
        """From the bar's start to its close (or now)."""
        return (self.closed or time.monotonic()) - self.started

    def close(self) -> None:
        self.closed = time.monotonic()
        if self.progress is not None:
            self.progress.remove_task(self.task_id)


class ConsoleObserver(Observer):
    """Human-readable progress on the terminal (plain lines where the console is not one).

    Args:
        log_every: print a metrics line every this many training steps.
    """

    def __init__(self, *, log_every: Annotated[int, Field(ge=1, examples=[5])]):
        self.log_every = log_every
        self.console = Console(highlight=False)
        self.console.soft_wrap = not self.live  # a log file's lines are not cut at 80 columns
        self._progress: Progress | None = None  # started with the first bar, on an interactive console
        self._bars: dict[str, _Bar] = {}  # open training bars by phase
        self._eval_bars: dict[str, _Bar] = {}  # the last bar of each evaluation label
        self._phase_steps: dict[str, int] = {}  # phases that ended, in run order
        self._last_step: ev.TrainStep | None = None
        self._expected: set[str] = set()  # phases whose expected time was said

    @property
    def live(self) -> bool:
        """Whether rich can redraw bars in place (a terminal; TTY_INTERACTIVE=0/1 overrides)."""
        return self.console.is_interactive

    def phases_of(self, label: str, step: int) -> str:
        """How a stage evaluation's step (the run's, over all phases) splits into the phases this
        process saw end: `` (sft 4 + grpo 3)``; `` (all phases)`` when an earlier attempt ran some."""
        if label in PHASES or step == 0:
            return ""
        parts, done = [], 0
        for phase, steps in self._phase_steps.items():
            parts.append(f"{phase} {steps}")
            done += steps
            if done == step:
                return f" ({' + '.join(parts)})"
        return " (all phases)"

    def _bar(self, label: str, total: int, unit: str, done: int = 0) -> _Bar:
        if self.live and self._progress is None:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                _RateColumn(),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self._progress.start()
        return _Bar(self._progress if self.live else None, label, total, unit, done)

    def progress(self, label: str, total: int, unit: str = "item") -> _Bar:
        bar = self._bar(label, total, unit)
        if label.startswith("eval "):
            self._eval_bars[label] = bar
        progress_log.info("%s: %d %ss", label, total, unit)
        if not self.live:  # no bar to watch: say what the wait is for
            self.console.print(f"  {escape(label)}: {total} {unit}s...")
        return bar

    def on_pipeline_start(self, event: ev.PipelineStart) -> None:
        self.console.print(f"[bold]rlvr[/bold] run directory: {event.run_dir}")

    def on_stage_start(self, event: ev.StageStart) -> None:
        self.console.print(f"[cyan]▶ {event.stage}[/cyan]")

    def on_stage_end(self, event: ev.StageEnd) -> None:
        color = "green" if event.status == "ok" else "red"
        self.console.print(f"[{color}]■ {event.stage} {event.status}[/{color}] ({event.seconds:.1f}s)")

    def on_phase_end(self, event: ev.PhaseEnd) -> None:
        self._phase_steps[event.phase] = event.steps
        if event.phase in self._bars:  # stopped early (a preemption): the bar ends with it
            self._bars.pop(event.phase).close()

    def step_line(self, event: ev.TrainStep, bar: _Bar) -> str:
        """``grpo step 3/8  2.1 s/step  ETA 0:11  grpo/loss=...``: the rate since the phase's first
        step this process saw (the step's own time before a second one)."""
        per_step = bar.seconds_per_item() or event.metrics.get(f"{event.phase}/step_seconds")
        timing = ""
        if per_step:
            timing = f"  {rate_text(per_step, 'step')}"
            if event.step < event.max_steps:
                timing += f"  ETA {clock(per_step * (event.max_steps - event.step))}"
        shown = {
            k: v
            for k, v in event.metrics.items()
            if k.split("/")[-1] in ("loss", "mean", "accuracy", "level")  # level: a curriculum
        }
        text = "  ".join(f"{k}={v:.4g}" for k, v in sorted(shown.items()))
        return f"{event.phase} step {event.step}/{event.max_steps}{timing}  {text}".rstrip()

    def on_train_step(self, event: ev.TrainStep) -> None:
        self._last_step = event
        if event.phase not in self._bars:  # a resumed phase starts at its checkpoint's step
            self._bars[event.phase] = self._bar(
                f"{event.phase} steps", event.max_steps, "step", event.step - 1
            )
        bar = self._bars[event.phase]
        bar.advance(1)
        self._say_expected_time(event, bar)
        line = self.step_line(event, bar)
        progress_log.info(line)
        if event.step % self.log_every == 0 or event.step == event.max_steps:
            self.console.print(f"  {escape(line)}")
        if event.step >= event.max_steps:
            self._bars.pop(event.phase).close()

    def _say_expected_time(self, event: ev.TrainStep, bar: _Bar) -> None:
        """Once per phase, as soon as a step after the first is timed (the first holds the warm-up:
        compilation, caches), the phase's expected time on this machine, on a line of its own and
        whatever ``log_every`` says (issue 56 item 9): before an hour is committed, not after it."""
        per_step = bar.seconds_per_item()
        left = event.max_steps - event.step
        if event.phase in self._expected or per_step is None or left <= 0:
            return
        self._expected.add(event.phase)
        ends = time.strftime("%H:%M", time.localtime(time.time() + per_step * left))
        line = (
            f"expected time: {event.phase} {rate_text(per_step, 'step')} on this machine (timed after its "
            f"first step), {left} more steps: about {clock(per_step * left)}, ending near {ends}"
        )
        progress_log.info(line)
        self.console.print(f"[bold]{escape(line)}[/bold]")

    def _eval_time(self, label: str) -> str:
        """`` in 0:12 (1.3 questions/s)`` for an evaluation generated now; a reused one had no bar."""
        bar = self._eval_bars.pop(f"eval {label}", None)
        if bar is None:
            return " (reused: same weights)"
        seconds = bar.seconds()
        rate = f", {rate_text(seconds / bar.done, bar.unit)}" if bar.done and seconds > 0 else ""
        return f" in {clock(seconds)}{rate}"

    def on_evaluation(self, event: ev.EvalResult) -> None:
        summary = event.evaluation.summary
        at = f"eval {escape(event.label)} step {event.step}{self.phases_of(event.label, event.step)}"
        took = self._eval_time(event.label)
        if max(summary.pass_at_k, default=1) > 1:  # sampled: its accuracy is pass@1, named so
            at_k = ", ".join(f"pass@{k} {v:.1%}" for k, v in summary.pass_at_k.items())
            line = f"{at}: {at_k} (n={event.n}){took}"
        else:
            line = (
                f"{at}: accuracy {event.accuracy:.1%} "
                f"(95% CI {event.ci_low:.1%}-{event.ci_high:.1%}, n={event.n}){took}"
            )
        progress_log.info(line)
        self.console.print(f"  {line}")
        if max(summary.pass_at_k, default=1) > 1:
            return
        for name, g in event.evaluation.groups().items():
            self.console.print(
                f"    {escape(name)}: {g.accuracy:.1%} (95% CI {g.ci_low:.1%}-{g.ci_high:.1%}, n={g.n})"
            )

    def on_checkpoint(self, event: ev.CheckpointSaved) -> None:
        self.console.print(f"  checkpoint ({event.phase} step {event.step}): {event.path}")

    def on_warning(self, event: ev.RunWarning) -> None:
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
            for col in ("stage", "step", "accuracy", "95% CI", "n"):
                table.add_column(col)
            for e in evaluations:
                at_k = e.evaluation.summary.pass_at_k
                sampled = max(at_k, default=1) > 1  # mean over the samples, not the first one
                table.add_row(
                    str(e.label),
                    f"{e.step}{self.phases_of(str(e.label), e.step)}",
                    f"pass@1 {at_k[1]:.1%}" if sampled else f"{e.accuracy:.1%}",
                    "(paired below)" if sampled else f"{e.ci_low:.1%} - {e.ci_high:.1%}",
                    str(e.n),
                )
            self.console.print(table)
        if changes:
            self.console.print("What each stage changed, paired on the same questions (95% CI):")
            by_label = {e.label: e.evaluation for e in evaluations}
            for change in changes:
                why = (  # a gain that is a constant answer's frequency is flagged where it is read
                    constant_gain(by_label[change.before], by_label[change.after], change.change)
                    if change.before in by_label and change.after in by_label
                    else None
                )
                flag = f" [yellow]Degenerate:[/yellow] {escape(why)}" if why else ""
                self.console.print(f"  {change.stage}: {escape(change.text)}{flag}")
        notes, warnings = (result.notes, result.warnings) if result else ([], [])
        for note in notes:
            kind = "Warning" if note in warnings else "Note"  # what the run did not learn
            self.console.print(f"[yellow]{kind}:[/yellow] {escape(note)}")
        for phase, found in (result.throughput if result else {}).items():
            mfu = (
                f", MFU {found['mfu']:.1%} of {found['peak_tflops']:g} TFLOP/s"
                if found.get("mfu") is not None
                else ""
            )
            self.console.print(
                f"  {phase} throughput: {found['tokens_per_second']:,.0f} tokens/s{mfu} ({found['device']})"
            )
        if result is not None and result.budget:
            self.console.print(escape(budget_text(result.budget)))
        for name, value in files.items():
            self.console.print(f"  {name}: {value}")
        self.console.print(f"[bold]pipeline {event.status}[/bold] in {event.seconds / 60:.1f} min")

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
