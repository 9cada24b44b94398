"""The training recipe: one :class:`Run` object holds a run's state, torchtune-shaped
(:meth:`Run.setup`, :meth:`Run.train`, :meth:`Run.cleanup`); the work lives in the components the
config gate (rlvr.config.gate) built and passed, and in the resume point it resolved.

Lifecycle (each step an ``on_stage_start``/``on_stage_end`` pair with timing), :data:`LIFECYCLE` in order:
observers up -> setup: data -> model -> preflight (refusals that need the data and the tokenizer) -> place
-> rewards -> history (a resumed run: what its earlier attempts left, rlvr.records.run_history); train:
baseline evaluation -> budget (``budget_minutes``: the phases sized to it, rlvr.training_loop.budget) ->
training (SFT warm start, GRPO) -> final evaluation -> save -> report; cleanup: ``on_pipeline_end``
with the :class:`~rlvr.events.RunResult`. On failure: ``on_error``, then ``on_pipeline_end("FAILED")``;
observers and verifier workers are always closed. Each stage is a function of the one :class:`Run`;
under ``accelerate launch`` every rank runs them, rank 0 writes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
from rlvr.pipeline.wiring import COMPONENT_KEYS, observers_of
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
from rlvr.training_loop.phase import TrainOutcome
from rlvr.training_loop.resume import changed_settings, continues, fingerprint
from rlvr.training_loop.run_dir import fault_of, finish_run_dir

if TYPE_CHECKING:
    from rlvr.data.base import DataComponent
    from rlvr.evaluation.evaluator import Evaluator
    from rlvr.model.loader import HFModel
    from rlvr.model.unsloth import UnslothModel
    from rlvr.observers.base import Observer
    from rlvr.prompts import PromptTemplate
    from rlvr.reward.terms import RewardSet
    from rlvr.runtime.distributed import Distributed
    from rlvr.training_loop.loop import TrainingLoop
    from rlvr.verifier.sandbox import VerifierPool

__all__ = ["Run", "RunResult"]


@contextlib.contextmanager
def stage(hub: ObserverHub, name: str, seconds: dict[str, float] | None = None) -> Iterator[None]:
    """One lifecycle stage: ``on_stage_start``, then ``on_stage_end`` with its time (and ``failed``
    when it raised); ``seconds`` keeps each stage's (the budget's actual time). The training run's
    stages and the benchmark's (rlvr.benchmark.runner) are both timed here."""
    hub.emit(ev.StageStart(name))
    start = time.perf_counter()
    try:
        yield
    except BaseException:
        hub.emit(ev.StageEnd(name, time.perf_counter() - start, "failed"))
        raise
    took = time.perf_counter() - start
    if seconds is not None:
        seconds[name] = took
    hub.emit(ev.StageEnd(name, took))


# -- stages: each a function of the one run, in lifecycle order ---------------------------------


def write_records(run: Run) -> None:
    """The resolved config (rerunnable), the resume fingerprint, then ``on_pipeline_start``."""
    run.config = resolved_config(run.cfg)
    if run.main:
        run.run_dir.mkdir(parents=True, exist_ok=True)
        refuse_symlinks_in(run.run_dir)
        write_config_record(run.run_dir, run.config)
        write_fingerprint(run.run_dir, fingerprint(run.cfg))
    run.hub.emit(ev.PipelineStart(run.run_dir, run.config))


def load_data(run: Run) -> None:
    run.task_data = run.data.load(run.prompts)
    run.train_dataset = run.task_data.train
    run.curriculum = getattr(run.task_data, "curriculum", None)  # a TaskData-like object may lack it
    if run.main:
        atomic_write_json(run.run_dir / MANIFEST, run.task_data.manifest, root=run.run_dir)


def load_model(run: Run) -> None:
    """Load the model and its tokenizer; the prompt binds to the tokenizer (its chat template)."""
    from transformers import set_seed

    # Before loading: a fresh LoRA adapter's initial weights come from the global RNG, so
    # two runs of one config (or a run and its resume) start from the same adapter.
    set_seed(run.cfg.seed)
    run.loaded = run.model.load()
    run.tokenizer = run.loaded.tokenizer
    run.prompts.bind(run.tokenizer)  # the prompt hash covers the chat template used


def preflight(run: Run) -> None:
    """Refusals needing the data and tokenizer: a prompt past the context, SFT's target, the memory check."""
    refused = prompt_length_issues(run.task_data, run.prompts, run.loaded.tokenizer, run.loaded.model)
    refused += run.training_loop.see_data(run.task_data.train, run.loaded.tokenizer)  # SFT's target
    if refused:
        raise ConfigValidationError(refused)
    run.lengths, issues, warnings = data_checks(
        run.model, run.training_loop, run.distributed, run.task_data.train, run.loaded.tokenizer, run.prompts
    )
    for warning in warnings:
        run.hub.emit(ev.RunWarning(warning))
    if issues:
        raise ConfigValidationError(issues)


def place(run: Run) -> None:
    """The training loop places the model (device, adapter); then the evaluation schedule and the
    run's provenance (model, data, hardware, resume point)."""
    run.loaded.model = run.training_loop.place(run.loaded.model)
    run.evals = EvalSchedule(
        run.evaluation,
        run.hub,
        run.loaded.tokenizer,
        run.task_data.eval,
        out_dir=run.run_dir / "eval",
        meta=run.meta,
        main=run.main,
        distributed=run.distributed,
    )
    if run.main:
        path = write_run_provenance(run.run_dir, run.config, run.meta, run, run.resume)
        run.result.files["provenance"] = str(path)


def check_rewards(run: Run) -> None:
    """The reward terms on a few gold answers: a broken term fails now, not after the SFT phase."""
    run.reward.check_on_gold(run.task_data.train)


def load_history(run: Run) -> None:
    """A continued run (``resume`` set): what its earlier attempts left that is still valid
    (rlvr.records.run_history) becomes part of this run's results; why a file is left out is logged."""
    run.history = history_of(
        run.run_dir, run.attempts, run.evaluation, run.task_data.eval, run.meta, run.resume, run.observers
    )
    run.evals.continue_from(run.history)
    problems = [run.attempts.problem] if run.attempts.problem else []
    for note in [*problems, *run.history.notes]:
        run.hub.emit(ev.RunWarning(f"resume: {note}"))
    if run.history.evaluations:
        names = ", ".join(f"{e.label} step {e.step}" for e in run.history.evaluations)
        print(f"resume: reusing {len(run.history.evaluations)} evaluation(s) from earlier attempts: {names}")


def baseline_eval(run: Run) -> None:
    run.evals.baseline(run.loaded.model)


def plan_budget(run: Run) -> None:
    """``budget_minutes``: the phases sized to it now, or as the run this one continues planned them."""
    loop, elapsed = run.training_loop, lambda: time.perf_counter() - run.start
    run.plan = budget.prepare(
        run.cfg.budget_minutes, run.resume, loop, run.evals, run.loaded.model, run, elapsed
    )


def run_training(run: Run) -> None:
    run.outcome = run.training_loop.run(run.loaded.model, run, resume=run.resume)


def final_eval(run: Run) -> None:
    trained = sum(run.history.steps(run.outcome.steps).values())  # with phases of earlier attempts
    run.evals.final(run.outcome.model, run.outcome.steps, trained)


def save_model(run: Run) -> None:
    final = save_final(
        run.outcome.model, run.loaded, run.task_data.manifest, run.run_dir, run.distributed, run.main
    )
    if final is not None:
        run.result.files["final model"] = str(final)


def write_report(run: Run) -> None:
    from rlvr.model.memory import memory_record
    from rlvr.records.report import write_report
    from rlvr.training_loop.throughput import attempt_summary

    # The memory check's estimate beside the measured CUDA peak (this attempt's, rank 0's process).
    micro = run.outcome.micro_batches if hasattr(run, "outcome") else None
    memory = memory_record(run.model, run.training_loop, run.distributed, run.lengths, micro)
    note = grpo_stage_note(run.model, run.task_data.tasks, getattr(run.training_loop, "grpo_phase", None))
    run.result.warnings = run_warnings(run.outcome, run.history, run.evals.evaluations, run.reward)
    run.result.notes = [*run.result.warnings, *([note] if note else [])]
    run.result.throughput = attempt_summary(run.outcome)
    meta = {**run.meta, "status": end_status(run.result.warnings), "warnings": run.result.warnings}
    meta.update(memory=memory, throughput=run.result.throughput, notes=run.result.notes)
    seconds, attempt = time.perf_counter() - run.start, run.attempts.snapshot(meta["status"])
    if run.plan is not None:
        meta["budget"] = run.result.budget = budget.against(run.plan, run.stage_seconds, seconds, run.outcome)
    files = write_report(run.run_dir, run.evals.evaluations, run.outcome, meta, seconds, run.history, attempt)
    run.result.files.update(files)


@dataclass(frozen=True)
class LifecycleStage:  # a step of LIFECYCLE (an evaluation label is rlvr.stages.EvalLabel)
    name: str
    run: Callable[[Run], None]
    when: Callable[[Run], bool] = lambda run: True
    main_only: bool = False  # rank 0 alone: nothing in it is a collective


class Run:
    """One training run: the components the config gate built (``components``, keyed as the gate
    built them: rlvr.pipeline.wiring.TRAINING, an observer as ``observers.<name>``) as attributes,
    the checkpoint it continues from (``resume``: phase, path) and everything its stages make (the
    loaded data and model, the evaluation schedule, the training outcome, the result). The one container
    of a run's state (torchtune's recipe ``self``), handed to training as is (training_loop.phase.TrainingRun)."""

    # The components (rlvr.pipeline.wiring.COMPONENT_KEYS), then what the stages make. Set by the
    # stage that makes them (absent before: an AttributeError names the attribute).
    data: DataComponent
    model: HFModel | UnslothModel
    prompts: PromptTemplate
    reward: RewardSet
    verifier: VerifierPool
    training_loop: TrainingLoop
    evaluation: Evaluator
    task_data: Any  # the data component's TaskData (load_data)
    loaded: LoadedModel
    # What training reads (rlvr.training_loop.phase.TrainingRun), beside run_dir and guard and the methods
    # below: set by load_data and load_model.
    train_dataset: Any
    curriculum: Any
    tokenizer: Any
    evals: EvalSchedule  # once the model is placed
    outcome: TrainOutcome

    def __init__(
        self,
        cfg: DictConfig,
        run_dir: Path,
        components: dict[str, Any],
        resume: tuple[str, Path] | None = None,
    ):
        self.cfg, self.run_dir, self.resume = cfg, run_dir, resume
        for key in COMPONENT_KEYS:
            setattr(self, key, components[key])
        self.observers: dict[str, Observer] = observers_of(components)
        self.distributed: Distributed | None = components.get("distributed")  # None: one process
        self.main = distributed.is_main()  # rank 0 (or the only process): writes files, observes, evaluates
        self.guard = PreemptionGuard()
        self.result = RunResult(status="FAILED", run_dir=run_dir)
        self.history = RunHistory()  # what earlier attempts left that holds (load_history)
        self.config: dict[str, Any] = {}  # resolved, secrets masked (write_records)
        self.lengths: tuple[int, int] | None = None  # the longest training prompt and answer, in tokens
        self.plan: budget.Plan | None = None  # budget_minutes' (rlvr.training_loop.budget)
        self.stage_seconds: dict[str, float] = {}  # each stage's, as run so far
        self.stage_name = "setup"  # the stage running (an error names it)
        self.start = time.perf_counter()
        self.attempts = AttemptLog(  # this attempt's entry in attempts.json (kept by rank 0)
            run_dir,
            continues=continues(cfg),
            resumed_from=str(resume[1]) if resume else None,
            changed_settings=changed_settings(cfg, resume),
        )
        # Other ranks stay quiet; the attempt record is no configurable observer (a report needs it).
        self.hub = ObserverHub({**self.observers, "_attempts": self.attempts} if self.main else {})

    @property
    def meta(self) -> dict[str, Any]:
        """What every evaluation file and the report record about the run."""
        return {
            "model": self.loaded.name,
            "tasks": self.task_data.tasks,
            "data_seed": self.task_data.seed,
            "seed": self.cfg.seed,
            "data_manifest_sha256": manifest_hash(self.task_data.manifest),
        }

    # -- what training reads of the run besides its attributes (rlvr.training_loop.phase.TrainingRun)

    @property
    def eval_every(self) -> int:  # read when training starts: the budget stage may have changed it
        return self.evaluation.every_n_steps

    @property
    def generator(self) -> Any:  # an evaluation component may have none
        return getattr(self.evaluation, "generator", None)

    def emit(self, event: Any) -> None:
        self.hub.emit(event)

    def on_weights(self, model: Any, phase: str, step: int, next_phase: str | None = None) -> Any:
        return self.evals.on_weights(model, phase, step, next_phase)

    def attach(self, trainer: Any) -> None:
        if self.distributed is not None:
            self.distributed.attach(trainer)

    def fits(self, batch: int, phase: str = "grpo") -> bool:
        return fits_batch(self.model, self.training_loop, self.distributed, self.lengths, batch, phase)

    def run(self) -> RunResult:
        """:meth:`setup`, :meth:`train`, then :meth:`cleanup` whatever happened; a failure is reported
        to the observers first (``on_error``)."""
        # Checkpoint-on-SIGTERM is single-process: with several ranks the launcher's SIGTERM ends all.
        on_sigterm = self.guard if distributed.world_size() == 1 else distributed.LauncherStop(self.guard)
        try:
            on_sigterm.__enter__()
            self.setup()
            self.train()
            on_sigterm.finished = True  # completed: a stop during the prune below changes nothing
            if self.main:  # in the closing summary: what the run directory keeps and its size
                self.result.files["run directory"] = finish_run_dir(self.run_dir, self.cfg.keep_checkpoints)
        except BaseException as exc:
            fault = self._failed(exc)
            if fault is not None:
                raise fault from exc
            raise
        finally:
            self.cleanup()
            on_sigterm.__exit__()
        return self.result

    def setup(self) -> None:
        """The run's records and ``on_pipeline_start``, then :data:`SETUP`'s stages: data and model
        loaded, checked and placed."""
        write_records(self)
        self._stages(SETUP)

    def train(self) -> None:
        """:data:`TRAIN`'s stages: the evaluations around training, the model saved, the report."""
        self._stages(TRAIN)
        self.result.files["metrics"] = str(self.run_dir / "metrics.jsonl")
        self.result.status = end_status(self.result.warnings)

    def cleanup(self) -> None:
        """The run's result to the observers (``on_pipeline_end``), then close them and the verifier
        workers."""
        result = self.result
        result.evaluations = run_order(self.evals.evaluations) if hasattr(self, "evals") else []
        result.changes = stage_changes(result.evaluations)
        self.hub.emit(ev.PipelineEnd(result.status, time.perf_counter() - self.start, result))
        with contextlib.suppress(Exception):
            self.verifier.close()
        self.hub.close()

    def _stages(self, stages: tuple[LifecycleStage, ...]) -> None:
        for step in stages:
            if step.when(self) and (self.main or not step.main_only):
                self.guard.stop_if_requested(step.name)  # a signal's stop (a launcher's too): made here
                self.stage_name = step.name
                with stage(self.hub, step.name, self.stage_seconds):
                    step.run(self)

    def _failed(self, exc: BaseException) -> RunFault | None:
        """Report the failure to the observers; returns the fault the run ends with instead of
        ``exc`` (a full disk: what happened and the fix, in one message), or None."""
        if isinstance(exc, (KeyboardInterrupt, Preempted)):
            self.result.status = "PREEMPTED" if isinstance(exc, Preempted) else "INTERRUPTED"
            if isinstance(exc, Preempted):
                exc.hand_over = self.guard.hand_over()  # taken before run() restores the handlers
            self.hub.emit(ev.ErrorEvent(self.stage_name, exc))
            return None
        fault = fault_of(exc, self.stage_name, self.run_dir)
        self.result.status = getattr(fault, "status", "FAILED")  # a phase stopped early: INTERRUPTED
        if (hint := None if fault else low_disk_hint(self.run_dir)) is not None:
            self.hub.emit(ev.RunWarning(hint))
        self.hub.emit(ev.ErrorEvent(self.stage_name, fault or exc))
        if not self.main and not distributed.peer_lost(exc):  # the cause: rank 0 cannot report it
            distributed.print_error(fault or exc)
        return None if fault is exc else fault


# Run.setup's stages, then Run.train's: LIFECYCLE.
SETUP = (
    LifecycleStage("data", load_data),
    LifecycleStage("model", load_model),
    LifecycleStage("preflight", preflight),
    LifecycleStage("place", place),
    LifecycleStage("rewards", check_rewards),
    LifecycleStage("history", load_history, when=lambda run: run.attempts.continues, main_only=True),
)
TRAIN = (
    # Also on resume: the model is still the base model here (the trainer loads the checkpoint's
    # weights), so a baseline no earlier attempt left on disk is made now; one on disk is reused.
    # The evaluations run on every rank: under FSDP / ZeRO-3 each takes part in gathering the weights
    # rank 0 evaluates (EvalSchedule.evaluate); otherwise the other ranks return at once.
    LifecycleStage("baseline_eval", baseline_eval, when=lambda run: run.evaluation.baseline),
    LifecycleStage("budget", plan_budget, when=lambda run: budget.budget_of(run.cfg) is not None),
    LifecycleStage("train", run_training),
    LifecycleStage("final_eval", final_eval),
    LifecycleStage("save", save_model),
    LifecycleStage("report", write_report, main_only=True),
)
LIFECYCLE = SETUP + TRAIN
