"""PipelineOrchestrator: runs the lifecycle over the components the config gate (rlvr.config.gate)
built and passed, and the resume point it resolved; the work lives in the components.

Lifecycle (each step an ``on_stage_start``/``on_stage_end`` pair with timing), :data:`LIFECYCLE` in order:
observers up -> data -> model -> preflight (refusals that need the data and the tokenizer) -> place -> rewards
-> history (a resumed run: what its earlier attempts left, rlvr.records.run_history) -> baseline evaluation
-> budget (``budget_minutes``: the phases sized to it, rlvr.training_loop.budget) -> training (SFT warm
start, GRPO) -> final evaluation -> save -> report -> ``on_pipeline_end`` with the
:class:`~rlvr.events.RunResult`. On failure: ``on_error``, then ``on_pipeline_end("FAILED")``; observers
and verifier workers are always closed.
Each stage reads one :class:`RunContext`; under ``accelerate launch`` every rank runs them, rank 0 writes.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from rlvr import events as ev
from rlvr.data.base import prompt_length_issues
from rlvr.data.identity import MANIFEST, manifest_hash
from rlvr.evaluation.schedule import EvalSchedule
from rlvr.events import RunResult
from rlvr.issues import ConfigValidationError
from rlvr.model.final import save_final
from rlvr.model.loader import LoadedModel
from rlvr.model.memory import data_checks, fits_batch
from rlvr.observers.base import ObserverHub
from rlvr.pipeline.wiring import Components
from rlvr.records.learning import end_status, run_warnings, stage_changes
from rlvr.records.provenance import resolved_config, write_config_record, write_run_provenance
from rlvr.records.run_history import AttemptLog, RunHistory, history_of
from rlvr.runtime import distributed
from rlvr.runtime.disk import low_disk_hint
from rlvr.runtime.faults import RunFault
from rlvr.runtime.io import atomic_write_json, refuse_symlinks_in
from rlvr.stages import run_order
from rlvr.training_loop import budget
from rlvr.training_loop.checkpoints import Preempted, PreemptionGuard, write_fingerprint
from rlvr.training_loop.expectation import grpo_stage_note
from rlvr.training_loop.phase import Session, TrainOutcome
from rlvr.training_loop.resume import changed_settings, continues, fingerprint
from rlvr.training_loop.run_dir import fault_of, finish_run_dir

__all__ = ["Components", "PipelineOrchestrator", "RunResult"]


@dataclass
class RunContext:
    """What a run has so far: every stage reads it and adds its own result."""

    cfg: DictConfig
    run_dir: Path
    components: Components
    hub: ObserverHub
    guard: PreemptionGuard
    resume: tuple[str, Path] | None
    main: bool  # rank 0 (or the only process): writes files, observes, evaluates
    attempts: AttemptLog  # this attempt's entry in attempts.json (kept by rank 0)
    result: RunResult
    history: RunHistory = field(default_factory=RunHistory)  # what earlier attempts left that holds
    start: float = field(default_factory=time.perf_counter)
    config: dict[str, Any] = field(default_factory=dict)  # resolved, secrets masked
    data: Any = None
    # Set by the stage that makes them (absent before: an AttributeError names the field).
    loaded: LoadedModel = field(init=False)
    evals: EvalSchedule = field(init=False)  # once the model is loaded
    outcome: TrainOutcome = field(init=False)
    lengths: tuple[int, int] | None = None  # the longest training prompt and answer, in tokens
    plan: budget.Plan | None = None  # budget_minutes' (rlvr.training_loop.budget)
    stage_seconds: dict[str, float] = field(default_factory=dict)  # each stage's, as run so far

    @property
    def meta(self) -> dict[str, Any]:
        """What every evaluation file and the report record about the run."""
        return {
            "model": self.loaded.name,
            "tasks": self.data.tasks,
            "data_seed": self.data.seed,
            "seed": self.cfg.seed,
            "data_manifest_sha256": manifest_hash(self.data.manifest),
        }


# -- stages: each a function of the run context, in lifecycle order ---------------------------------


def write_records(ctx: RunContext) -> None:
    """The resolved config (rerunnable), the resume fingerprint, then ``on_pipeline_start``."""
    ctx.config = resolved_config(ctx.cfg)
    if ctx.main:
        ctx.run_dir.mkdir(parents=True, exist_ok=True)
        refuse_symlinks_in(ctx.run_dir)
        write_config_record(ctx.run_dir, ctx.config)
        write_fingerprint(ctx.run_dir, fingerprint(ctx.cfg))
    ctx.hub.emit(ev.PipelineStart(ctx.run_dir, ctx.config))


def load_data(ctx: RunContext) -> None:
    ctx.data = ctx.components.data.load(ctx.components.prompts)
    if ctx.main:
        atomic_write_json(ctx.run_dir / MANIFEST, ctx.data.manifest, root=ctx.run_dir)


def load_model(ctx: RunContext) -> None:
    """Load the model and its tokenizer; the prompt binds to the tokenizer (its chat template)."""
    from transformers import set_seed

    # Before loading: a fresh LoRA adapter's initial weights come from the global RNG, so
    # two runs of one config (or a run and its resume) start from the same adapter.
    set_seed(ctx.cfg.seed)
    ctx.loaded = ctx.components.model.load()
    ctx.components.prompts.bind(ctx.loaded.tokenizer)  # the prompt hash covers the chat template used


def preflight(ctx: RunContext) -> None:
    """Refusals that need the data and the tokenizer, before the model is placed: a prompt longer than
    the context, then the memory check again with the data's own lengths, each naming its numbers."""
    c = ctx.components
    too_long = prompt_length_issues(ctx.data, c.prompts, ctx.loaded.tokenizer, ctx.loaded.model)
    if too_long:
        raise ConfigValidationError(too_long)
    ctx.lengths, issues, warnings = data_checks(
        c.model, c.training_loop, c.distributed, ctx.data.train, ctx.loaded.tokenizer, c.prompts
    )
    for warning in warnings:
        ctx.hub.emit(ev.RunWarning(warning))
    if issues:
        raise ConfigValidationError(issues)


def place(ctx: RunContext) -> None:
    """The training loop places the model (device, adapter); then the evaluation schedule and the
    run's provenance (model, data, hardware, resume point)."""
    c = ctx.components
    ctx.loaded.model = c.training_loop.place(ctx.loaded.model)
    ctx.evals = EvalSchedule(
        c.evaluation,
        ctx.hub,
        ctx.loaded.tokenizer,
        ctx.data.eval,
        out_dir=ctx.run_dir / "eval",
        meta=ctx.meta,
        main=ctx.main,
        distributed=c.distributed,
    )
    if ctx.main:
        path = write_run_provenance(ctx.run_dir, ctx.config, ctx.meta, c, ctx.resume)
        ctx.result.files["provenance"] = str(path)


def check_rewards(ctx: RunContext) -> None:
    """The reward terms on a few gold answers: a broken term fails now, not after the SFT phase."""
    ctx.components.reward.check_on_gold(ctx.data.train)


def load_history(ctx: RunContext) -> None:
    """A continued run (``resume`` set): what its earlier attempts left that is still valid
    (rlvr.records.run_history) becomes part of this run's results; why a file is left out is logged."""
    c = ctx.components
    ctx.history = history_of(
        ctx.run_dir, ctx.attempts, c.evaluation, ctx.data.eval, ctx.meta, ctx.resume, c.observers
    )
    ctx.evals.continue_from(ctx.history)
    problems = [ctx.attempts.problem] if ctx.attempts.problem else []
    for note in [*problems, *ctx.history.notes]:
        ctx.hub.emit(ev.RunWarning(f"resume: {note}"))
    if ctx.history.evaluations:
        names = ", ".join(f"{e.label} step {e.step}" for e in ctx.history.evaluations)
        print(f"resume: reusing {len(ctx.history.evaluations)} evaluation(s) from earlier attempts: {names}")


def baseline_eval(ctx: RunContext) -> None:
    ctx.evals.baseline(ctx.loaded.model)


def _session(ctx: RunContext) -> Session:
    """What the run hands to training (and to the budget's calibration of it)."""
    c = ctx.components
    return Session(
        tokenizer=ctx.loaded.tokenizer,
        train_dataset=ctx.data.train,
        emit=ctx.hub.emit,
        on_weights=ctx.evals.on_weights,
        eval_every=c.evaluation.every_n_steps,
        run_dir=ctx.run_dir,
        guard=ctx.guard,
        curriculum=getattr(ctx.data, "curriculum", None),  # a TaskData-like object may lack it
        attach=c.distributed.attach if c.distributed is not None else None,
        fits=functools.partial(fits_batch, c.model, c.training_loop, c.distributed, ctx.lengths),
        generator=getattr(c.evaluation, "generator", None),  # an evaluation component may have none
    )


def plan_budget(ctx: RunContext) -> None:
    """``budget_minutes``: the phases sized to it now, or as the run this one continues planned them."""
    loop, elapsed = ctx.components.training_loop, lambda: time.perf_counter() - ctx.start
    ctx.plan = budget.prepare(
        ctx.cfg.budget_minutes, ctx.resume, loop, ctx.evals, ctx.loaded.model, _session(ctx), elapsed
    )


def train(ctx: RunContext) -> None:
    ctx.outcome = ctx.components.training_loop.run(ctx.loaded.model, _session(ctx), resume=ctx.resume)


def final_eval(ctx: RunContext) -> None:
    trained = sum(ctx.history.steps(ctx.outcome.steps).values())  # with phases of earlier attempts
    ctx.evals.final(ctx.outcome.model, ctx.outcome.steps, trained)


def save_model(ctx: RunContext) -> None:
    c = ctx.components
    final = save_final(ctx.outcome.model, ctx.loaded, ctx.data.manifest, ctx.run_dir, c.distributed, ctx.main)
    if final is not None:
        ctx.result.files["final model"] = str(final)


def write_report(ctx: RunContext) -> None:
    from rlvr.model.memory import memory_record
    from rlvr.records.report import write_report
    from rlvr.training_loop.throughput import attempt_summary

    c = ctx.components
    # The memory check's estimate beside the measured CUDA peak (this attempt's, rank 0's process).
    micro = ctx.outcome.micro_batches if hasattr(ctx, "outcome") else None
    memory = memory_record(c.model, c.training_loop, c.distributed, ctx.lengths, micro)
    note = grpo_stage_note(c.model, ctx.data.tasks, getattr(c.training_loop, "grpo_phase", None))
    ctx.result.warnings = run_warnings(ctx.outcome, ctx.history, ctx.evals.evaluations, c.reward)
    ctx.result.notes = [*ctx.result.warnings, *([note] if note else [])]
    ctx.result.throughput = attempt_summary(ctx.outcome)
    meta = {**ctx.meta, "status": end_status(ctx.result.warnings), "warnings": ctx.result.warnings}
    meta.update(memory=memory, throughput=ctx.result.throughput, notes=ctx.result.notes)
    seconds, attempt = time.perf_counter() - ctx.start, ctx.attempts.snapshot(meta["status"])
    if ctx.plan is not None:
        meta["budget"] = ctx.result.budget = budget.against(ctx.plan, ctx.stage_seconds, seconds, ctx.outcome)
    files = write_report(ctx.run_dir, ctx.evals.evaluations, ctx.outcome, meta, seconds, ctx.history, attempt)
    ctx.result.files.update(files)


@dataclass(frozen=True)
class LifecycleStage:  # a step of LIFECYCLE (an evaluation label is rlvr.stages.EvalLabel)
    name: str
    run: Callable[[RunContext], None]
    when: Callable[[RunContext], bool] = lambda ctx: True
    main_only: bool = False  # rank 0 alone: nothing in it is a collective


LIFECYCLE = (
    LifecycleStage("data", load_data),
    LifecycleStage("model", load_model),
    LifecycleStage("preflight", preflight),
    LifecycleStage("place", place),
    LifecycleStage("rewards", check_rewards),
    LifecycleStage("history", load_history, when=lambda ctx: ctx.attempts.continues, main_only=True),
    # Also on resume: the model is still the base model here (the trainer loads the checkpoint's
    # weights), so a baseline no earlier attempt left on disk is made now; one on disk is reused.
    # The evaluations run on every rank: under FSDP / ZeRO-3 each takes part in gathering the weights
    # rank 0 evaluates (EvalSchedule.evaluate); otherwise the other ranks return at once.
    LifecycleStage("baseline_eval", baseline_eval, when=lambda ctx: ctx.components.evaluation.baseline),
    LifecycleStage("budget", plan_budget, when=lambda ctx: budget.budget_of(ctx.cfg) is not None),
    LifecycleStage("train", train),
    LifecycleStage("final_eval", final_eval),
    LifecycleStage("save", save_model),
    LifecycleStage("report", write_report, main_only=True),
)


@dataclass
class PipelineOrchestrator:
    """Runs the lifecycle over built ``components`` (what the config gate passed, rlvr.config.gate.check),
    continuing from ``resume`` (phase, checkpoint) when set."""

    cfg: DictConfig
    run_dir: Path
    components: Components
    resume: tuple[str, Path] | None = None

    def run(self) -> RunResult:
        ctx = self._context()
        # Checkpoint-on-SIGTERM is single-process: with several ranks the launcher's SIGTERM ends all.
        on_sigterm = ctx.guard if distributed.world_size() == 1 else distributed.LauncherStop(ctx.guard)
        stage = "setup"
        try:
            on_sigterm.__enter__()
            write_records(ctx)
            for step in LIFECYCLE:
                if step.when(ctx) and (ctx.main or not step.main_only):
                    ctx.guard.stop_if_requested(step.name)  # a signal's stop (a launcher's too): made here
                    stage = step.name
                    with self._stage(ctx.hub, stage, ctx.stage_seconds):
                        step.run(ctx)
            ctx.result.files["metrics"] = str(self.run_dir / "metrics.jsonl")
            ctx.result.status = end_status(ctx.result.warnings)
            on_sigterm.finished = True  # completed: a stop during the prune below changes nothing
            if ctx.main:  # in the closing summary: what the run directory keeps and its size
                ctx.result.files["run directory"] = finish_run_dir(self.run_dir, self.cfg.keep_checkpoints)
        except BaseException as exc:
            fault = self._failed(ctx, stage, exc)
            if fault is not None:
                raise fault from exc
            raise
        finally:
            self._end(ctx)
            on_sigterm.__exit__()
        return ctx.result

    def _context(self) -> RunContext:
        c, main = self.components, distributed.is_main()
        resumed_from = str(self.resume[1]) if self.resume else None
        attempts = AttemptLog(
            self.run_dir,
            continues=continues(self.cfg),
            resumed_from=resumed_from,
            changed_settings=changed_settings(self.cfg, self.resume),
        )
        # Other ranks stay quiet; the attempt record is no configurable observer (a report needs it).
        hub = ObserverHub({**c.observers, "_attempts": attempts} if main else {})
        result = RunResult(status="FAILED", run_dir=self.run_dir)
        return RunContext(
            self.cfg, self.run_dir, c, hub, PreemptionGuard(), self.resume, main, attempts, result
        )

    def _failed(self, ctx: RunContext, stage: str, exc: BaseException) -> RunFault | None:
        """Report the failure to the observers; returns the fault the run ends with instead of
        ``exc`` (a full disk: what happened and the fix, in one message), or None."""
        if isinstance(exc, (KeyboardInterrupt, Preempted)):
            ctx.result.status = "PREEMPTED" if isinstance(exc, Preempted) else "INTERRUPTED"
            if isinstance(exc, Preempted):
                exc.hand_over = ctx.guard.hand_over()  # taken before run() restores the handlers
            ctx.hub.emit(ev.ErrorEvent(stage, exc))
            return None
        fault = fault_of(exc, stage, self.run_dir)
        ctx.result.status = getattr(fault, "status", "FAILED")  # a phase stopped early: INTERRUPTED
        if (hint := None if fault else low_disk_hint(self.run_dir)) is not None:
            ctx.hub.emit(ev.RunWarning(hint))
        ctx.hub.emit(ev.ErrorEvent(stage, fault or exc))
        if not ctx.main and not distributed.peer_lost(exc):  # the cause: rank 0 cannot report it
            distributed.print_error(fault or exc)
        return None if fault is exc else fault

    def _end(self, ctx: RunContext) -> None:
        """The run's result to the observers, then close them and the verifier workers."""
        result = ctx.result
        result.evaluations = run_order(ctx.evals.evaluations) if hasattr(ctx, "evals") else []
        result.changes = stage_changes(result.evaluations)
        ctx.hub.emit(ev.PipelineEnd(result.status, time.perf_counter() - ctx.start, result))
        with contextlib.suppress(Exception):
            ctx.components.verifier.close()
        ctx.hub.close()

    @staticmethod
    @contextlib.contextmanager
    def _stage(hub: ObserverHub, name: str, seconds: dict[str, float]) -> Iterator[None]:
        hub.emit(ev.StageStart(name))
        start = time.perf_counter()
        try:
            yield
        except BaseException:
            hub.emit(ev.StageEnd(name, time.perf_counter() - start, "failed"))
            raise
        seconds[name] = time.perf_counter() - start  # the budget's actual time (rlvr.training_loop.budget)
        hub.emit(ev.StageEnd(name, seconds[name]))
