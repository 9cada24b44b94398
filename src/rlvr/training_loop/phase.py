"""A training phase of the loop, and what every phase shares: the TRL config built from the phase's
settings (typed by rlvr.training_loop.settings, and checked by TRL's own validation), the trainer run with the pipeline's
callbacks, a resumed checkpoint restored, and :class:`TrainingRun` (what training reads of the run)
and :class:`TrainOutcome` (what it hands back). :class:`Phase` is the base of the SFT and GRPO phases
(rlvr.training_loop.loop) and of RFT (rlvr.training_loop.rft)."""

from __future__ import annotations

import copy
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from transformers import TrainerCallback

from rlvr import events as ev
from rlvr.issues import ConfigIssue, ConfigValidationError, refusals, value_issues
from rlvr.runtime import hardware
from rlvr.runtime.faults import CheckpointDamaged, StoppedEarly
from rlvr.runtime.secrets import error_text
from rlvr.training_loop.callbacks import EventBridge
from rlvr.training_loop.checkpoints import CompletionMarker, latest_checkpoint, resumed_step

# A phase's output_dir while its TRL config waits for a run (relative: under the run dir, where
# Phase.config puts it as the run's checkpoints/<phase>); TRL creates no folder when it is built.
PLACEHOLDER_DIR = Path("checkpoints")


def quiet(trainer: Any) -> Any:
    """Drop transformers' own progress bar and log printer: the console observer shows progress."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    return trainer


class _Started(TrainerCallback):
    """Notes that the trainer got past loading the checkpoint it resumes (``on_train_begin`` comes
    after the weights, optimizer and scheduler are loaded)."""

    def __init__(self) -> None:
        self.started = False

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.started = True


def _train(trainer: Any, phase: str, bridge: EventBridge, ckpt: Path | None, outcome: Any) -> Any:
    """Run one phase (resuming from ``ckpt`` if given) and record its steps, time and history."""
    start = time.perf_counter()
    started = _Started()
    trainer.add_callback(started)
    try:
        trainer.train(resume_from_checkpoint=str(ckpt) if ckpt else None)
    except Exception as exc:
        if ckpt is None or started.started:
            raise
        raise CheckpointDamaged(
            f"checkpoint {ckpt} could not be loaded ({error_text(exc)}), though its files passed the "
            f"completeness check. Continue from an older one with resume=<its path> (they are in "
            f"{ckpt.parent}), or move {ckpt.name} out of that folder and run resume=auto again."
        ) from exc
    # added up: an RFT phase trains once a round
    outcome.seconds[phase] = outcome.seconds.get(phase, 0.0) + time.perf_counter() - start
    outcome.steps[phase] = trainer.state.global_step
    outcome.history.extend(bridge.history)
    return trainer.model


def stop_unless_finished(key: str, step: int, max_steps: int, run: Any, displaced: list[str]) -> None:
    """A phase that ended before its ``max_steps`` without the pipeline's own stop (the guard's, which
    the training loop turns into PREEMPTED or StoppedByLauncher) raises :class:`StoppedEarly`: the run
    ends INTERRUPTED, never COMPLETED, and ``resume=auto`` continues from the checkpoint of the step it
    stopped at (the guard saves one when another callback stops the trainer). ``displaced``: the
    handlers that had replaced the pipeline's on its signals during the phase, named in the message."""
    from rlvr.training_loop.resume import continue_command

    guard = run.guard
    if step >= max_steps or (guard is not None and guard.stopping):
        return
    found = latest_checkpoint(run.run_dir)
    kept = f"resume=auto continues from {found[1]}" if found else "no complete checkpoint was saved"
    who = (
        f"; before that, {'; '.join(displaced)} had replaced the pipeline's stop handler" if displaced else ""
    )
    raise StoppedEarly(
        f"{key} stopped at step {step} of {max_steps}, and not by the pipeline's stop (SIGTERM or the "
        f"preemption warning through rlvr's handler){who}: something else stopped the trainer, so the "
        f"run is INTERRUPTED, not COMPLETED; {kept}. Fix: remove the setting or plugin that stops the "
        f"trainer or takes its signals ({key} fields such as enable_jit_checkpoint), then continue "
        f"with: {continue_command(run.run_dir)}"
    )


def _restore(trainer: Any, phase: str, ckpt: Path, step: int, outcome: Any) -> Any:
    """A checkpoint saved at the phase's last step: the phase is finished, so its weights are loaded
    and nothing is trained. (transformers 5.17's ``train(resume_from_checkpoint=)`` checks for the
    end only after a step, so it trained one step past ``max_steps``.) ``_load_from_checkpoint`` is the
    loader that method uses (full weights, sharded files or a PEFT adapter); there is no public one."""
    trainer._load_from_checkpoint(str(ckpt))
    outcome.seconds.setdefault(phase, 0.0)
    outcome.steps[phase] = step  # the checkpoint's own trainer state's (checkpoints.resumed_step)
    return trainer.model


@dataclass
class TrainOutcome:
    """What :meth:`TrainingLoop.run <rlvr.training_loop.loop.TrainingLoop.run>` returns (each phase adds
    its steps, time and history): a return value, which the run keeps
    (rlvr.pipeline.orchestrator.Run.outcome)."""

    model: Any
    steps: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)
    hardware: dict[str, str] = field(default_factory=dict)
    # a phase's micro-batch where the device changed the configured one (GRPO folding on a GPU)
    micro_batches: dict[str, int] = field(default_factory=dict)
    # a phase that stopped before its max_steps -> why (the run's report warns: rlvr.records.learning)
    stopped: dict[str, str] = field(default_factory=dict)


def _checkpointing_follows_model(args: Any, explicit: dict[str, Any], model: Any) -> Any:
    """TRL turns gradient checkpointing on by default; unless the training_loop sets it, follow ``model.gradient_checkpointing``.

    On a CPU the recomputation costs time and saves memory nobody needs: with it off, an SFT step of the
    embedded default went from 7.0 s to 5.3 s, and GRPO generation keeps its KV cache (benchmarks/learning.md).
    """
    if not {"gradient_checkpointing", "activation_checkpointing"} & explicit.keys():
        flag = getattr(model, "is_activation_checkpointing", None)
        if flag is None:
            flag = getattr(model, "is_gradient_checkpointing", False)
        args.gradient_checkpointing = bool(flag)
        if hasattr(args, "activation_checkpointing"):  # the newer name (transformers > 5.17): kept in step
            args.activation_checkpointing = bool(flag)
    return args


def trl_check_fix(key: str, fields: dict[str, Any], passes: Callable[[dict[str, Any]], bool]) -> str:
    """A fix for a combination TRL's config refused (its __post_init__ checks): values that TRL itself
    accepts, found by asking it (``passes(changes)``: whether the config builds with ``fields``
    changed so), nearest the configured ones first. TRL's message is the rule; its text is not read,
    so a reworded or new check of a later TRL still gets values that pass it."""
    groups = int(fields.get("num_generations") or 2)
    options = [
        f"{key}.num_generations={n}"
        for n in _nearest(range(2, max(2 * groups, 16) + 1), groups, lambda n: passes({"num_generations": n}))
    ]
    if "generation_batch_size" in fields:  # the batch is set on its own: values of it that pass
        batch = int(fields["generation_batch_size"] or 1)
        options += [
            f"{key}.generation_batch_size={b}"
            for b in _nearest(range(1, 2 * batch + 1), batch, lambda b: passes({"generation_batch_size": b}))
        ]
    elif "num_generations" in fields and not fields.get("steps_per_generation"):
        per_device = int(fields.get("per_device_train_batch_size") or 1)
        fitting = _nearest(
            range(per_device + 1, per_device * groups + 1),
            per_device,
            lambda b: passes({"per_device_train_batch_size": b}),
            count=1,
        )
        options += [f"{key}.per_device_train_batch_size={b} (whole groups of {groups})" for b in fitting]
    if not options:
        return f"change the {key} fields the message names so that the combination passes"
    return f"set {' or '.join(options)} (each passes {key}'s TRL config check)"


def _nearest(candidates: range, target: int, ok: Callable[[int], bool], count: int = 2) -> list[int]:
    """The first ``count`` candidates nearest ``target`` for which ``ok`` holds."""
    found: list[int] = []
    for value in sorted(candidates, key=lambda v: (abs(v - target), v)):
        if len(found) == count:
            break
        if value != target and ok(value):
            found.append(value)
    return found


class TrainingRun(Protocol):
    """The run as training reads it (the same for every phase): rlvr.pipeline.orchestrator.Run is the
    one implementation, the run object itself, handed to :meth:`TrainingLoop.run
    <rlvr.training_loop.loop.TrainingLoop.run>`; a test can hand over any object with these members."""

    tokenizer: Any
    train_dataset: Any
    run_dir: Path
    # The PreemptionGuard (SIGTERM -> checkpoint and stop), or None.
    guard: Any
    # A CurriculumSource (rlvr.data.curriculum) when GRPO's difficulty follows the model, else None.
    curriculum: Any

    @property
    def eval_every(self) -> int: ...  # evaluation.every_n_steps, as training starts

    @property  # The run's generation backend (evaluation.generator): RFT samples with it, as evaluation does.
    def generator(self) -> Any: ...

    def emit(self, event: Any) -> None: ...

    # on_weights(model, phase, step, next_phase=None): new weights, every ``eval_every`` steps of a phase
    # and when a phase hands them to the next (rlvr.evaluation.schedule.EvalSchedule.on_weights, which
    # decides what to evaluate); returns the evaluation made, or None.
    def on_weights(self, model: Any, phase: str, step: int, next_phase: str | None = None) -> Any: ...

    # Told each phase's trainer once built (rlvr.runtime.distributed.Distributed.attach): under FSDP / ZeRO-3
    # the full weights that rank 0 evaluates and saves are gathered through its accelerator.
    def attach(self, trainer: Any) -> None: ...

    # Whether the memory estimate of a micro-batch of ``batch`` sequences in ``phase`` fits the device
    # (rlvr.model.memory.fits_batch).
    def fits(self, batch: int, phase: str = "grpo") -> bool: ...


class Phase:
    """One TRL training phase: its config fields, its TRL config, its trainer, its run.

    Subclasses set ``name`` and ``config_cls`` and build their trainer in ``trainer()``.
    """

    name: str
    key: str

    # The phase's node as a type (rlvr.training_loop.settings): the config gate checks it, once, when it
    # binds the training loop's node (rlvr.config.validation); the phase does not check it again.
    node_type: Any = None

    def __init__(self, fields: dict[str, Any], seed: int, hardware: Callable[[], hardware.Hardware]):
        self.configured = dict(fields)  # the node as configured
        self.trl_fields = dict(fields)
        self.enabled = self.trl_fields.pop("enabled", True)  # a bool: the node's type
        self.seed = seed
        self._hardware = hardware

    @property
    def config_cls(self) -> type:
        raise NotImplementedError

    def _managed(self) -> dict[str, Any]:
        """Fields the pipeline sets for this phase beside the common ones."""
        return {}

    def _build(self, **changes: Any) -> Any:
        """``config_cls`` from the phase's fields (``changes`` over them), the pipeline's and the
        hardware's; its ``output_dir`` is :data:`PLACEHOLDER_DIR` until a run sets it (:meth:`config`)."""
        from rlvr.runtime.secrets import redact_pickles_of

        # transformers pickles this object into every checkpoint (training_args.bin): its fields are
        # pickled with secrets masked (a run name, a path read from the environment).
        redact_pickles_of(self.config_cls)
        return self.config_cls(
            output_dir=str(PLACEHOLDER_DIR / self.name),
            report_to="none",
            seed=self.seed,
            data_seed=self.seed,
            **self._managed(),
            **self._hardware().trainer_args(),
            **{**self.trl_fields, **changes},
        )

    @functools.cached_property
    def _built(self) -> Any:
        """The TRL config, or the ConfigIssue its own checks (``__post_init__``) raised: built once,
        when the training loop's validate() first asks (the config gate, right after it builds the
        loop), and read by every later reader (the pre-flight, the trainer). From then on the fields
        are read-only: a change would not reach the built arguments, so it raises instead."""
        self.trl_fields = MappingProxyType(self.trl_fields)  # type: ignore[assignment]
        try:
            return self._build()
        # TRL's (and transformers') checks between fields; arithmetic on a value off its bound
        # (num_generations=0), which the gate reports as that key's
        except (ValueError, TypeError, ArithmeticError) as exc:
            return ConfigIssue(
                self.key,
                "(combination)",
                f"rejected by {self.config_cls.__name__}: {exc}",
                trl_check_fix(self.key, self.trl_fields, self._passes),
            )

    def _passes(self, changes: dict[str, Any]) -> bool:
        """Whether TRL builds this phase's config with ``changes`` (a rejected config's fix)."""
        try:
            self._build(**changes)
        except (ValueError, TypeError, ArithmeticError):
            return False
        return True

    @property
    def args(self) -> Any:
        """The phase's TRL config (``trl.SFTConfig`` / ``trl.GRPOConfig``), built once; its output_dir
        is a placeholder (:meth:`config` gives a run's copy). A config TRL refused raises
        ConfigValidationError with the issue :meth:`validate` reports."""
        if isinstance(self._built, ConfigIssue):
            raise ConfigValidationError([self._built])
        return self._built

    def config(self, output_dir: Path) -> Any:
        """A copy of :attr:`args` that writes to ``output_dir``, for one trainer run. (Not
        ``dataclasses.replace``: that runs GRPOConfig's ``__post_init__`` again, which refuses the
        generation_batch_size and steps_per_generation it derived the first time.) Its fields are
        deep-copied: the run's device fitting changes its copy, never the built arguments the
        pre-flight reads. Not ``copy.deepcopy(args)``: that goes through the class's pickle hook,
        which masks secrets (redact_pickles_of), and the trainer must get the real values."""
        args = object.__new__(type(self.args))
        args.__dict__.update(copy.deepcopy(vars(self.args)))
        args.output_dir = str(output_dir)
        return args

    def replan(self, changes: dict[str, Any]) -> list[ConfigIssue]:
        """The phase with ``changes`` over its configured fields (a time budget's steps,
        rlvr.training_loop.budget): the changed keys judged against the node's type (allowlist, types,
        bounds; the rest of the node passed the gate as it stands), then TRL's own checks as its TRL
        config is built once more for every later reader. Returns the issues; with any, nothing changes."""
        configured = {**self.configured, **changes}
        issues = (
            value_issues(self.key, changes, self.node_type, self.key) if self.node_type is not None else []
        )
        built = None
        if not issues:
            try:
                built = self._build(**changes)
            except (ValueError, TypeError) as exc:
                issues = [
                    ConfigIssue(self.key, changes, f"rejected by {self.config_cls.__name__}: {exc}",
                                "change the settings the message names, or drop budget_minutes")
                ]  # fmt: skip
        if issues:
            return issues
        self.configured = configured
        self.trl_fields = MappingProxyType({**self.trl_fields, **changes})  # type: ignore[assignment]
        self.__dict__["_built"] = built  # the cached TRL config (functools.cached_property)
        return []

    def validate(self, build: bool = True) -> list[ConfigIssue]:
        """The fields the node refuses (not on the allowlist of rlvr.training_loop.settings; the gate
        reports them when it binds the node, and builds no phase with them), and TRL's own checks
        between fields (``build``), as :attr:`args` was built. The node's types and bounds are the
        gate's (its one check); a value off its bound still builds the loop (ConfigIssue.builds), and
        the gate leaves out TRL's verdict on a node it refused a key of (rlvr.config.gate)."""
        issues = refusals(self.key, self.trl_fields, self.node_type)
        if issues or not build:
            return issues
        if isinstance(self._built, ConfigIssue):
            issues.append(self._built)
        return issues

    def trainer(self, model: Any, args: Any, run: TrainingRun, callbacks: list[Any]) -> Any:
        raise NotImplementedError

    def fit_to_device(self, args: Any, run: TrainingRun, outcome: TrainOutcome) -> Any:
        """The TRL config as it runs on this device (unchanged unless a phase says otherwise)."""
        return args

    def args_and_bridge(self, model: Any, run: TrainingRun, outcome: TrainOutcome) -> tuple[Any, EventBridge]:
        """The TRL config as this phase's trainer runs it on this device, and the callback that turns
        its logs into the run's events (every phase's trainer, an RFT round's too)."""
        args = _checkpointing_follows_model(
            self.config(run.run_dir / "checkpoints" / self.name), self.trl_fields, model
        )
        args = self.fit_to_device(args, run, outcome)
        bridge = EventBridge(
            run.emit,
            self.name,
            args.max_steps,
            run.eval_every,
            lambda step: run.on_weights(model, self.name, step),
            extra_metrics=self.metrics,
            extra_events=self.events,
        )
        return args, bridge

    def metrics(self) -> dict[str, float]:
        """Metrics of this phase's own beside TRL's logs (added to every step's event)."""
        return {}

    def events(self) -> list[Any]:
        """Events this phase's components have ready at a logged step (emitted after its TrainStep)."""
        return []

    def callbacks(self, run: TrainingRun, checkpoint: Path | None) -> list[Any]:
        """This phase's own callbacks, run before a checkpoint is marked complete."""
        return []

    def run(self, model: Any, run: TrainingRun, outcome: TrainOutcome, checkpoint: Path | None) -> Any:
        """Train ``model`` (resuming from ``checkpoint`` if given), record it in ``outcome``; returns
        the trained model."""
        said = displaced_count(run)
        model, total = self.fit(model, run, outcome, checkpoint)
        self.settle(run, outcome, total, total, said)
        return model

    def fit(
        self,
        model: Any,
        run: TrainingRun,
        outcome: TrainOutcome,
        checkpoint: Path | None,
        own: list[Any] | None = None,
    ) -> tuple[Any, int]:
        """One trainer run, resuming from ``checkpoint`` if given: the one code path of every phase and
        of each RFT round (rlvr.training_loop.rft), so the callbacks' order, the guard's reclaim, a
        checkpoint that fails to load (CheckpointDamaged) and a checkpoint of the phase's last step
        (restored, not trained) are the same everywhere. ``own``: this trainer's own callbacks
        (default :meth:`callbacks`; an RFT round's end). Steps, seconds and history are added to
        ``outcome``. Returns the model and the phase's total steps."""
        args, bridge = self.args_and_bridge(model, run, outcome)
        # The guard before the marker: a save the guard asks for at a step saved before also first
        # drops that step's old marker (CompletionMarker.on_step_end).
        guard = [run.guard] if run.guard is not None else []
        own = self.callbacks(run, checkpoint) if own is None else own
        callbacks = [bridge, *own, *guard, CompletionMarker()]
        trainer = quiet(self.trainer(model, args, run, callbacks))
        if run.guard is not None:
            run.guard.reclaim()  # a handler the trainer put on SIGTERM as it was built (JIT checkpointing)
        run.attach(trainer)
        sharded = getattr(trainer, "is_deepspeed_enabled", False) or getattr(
            trainer, "is_fsdp_enabled", False
        )
        step = resumed_step(checkpoint, self.name, args.max_steps) if checkpoint is not None else None
        if checkpoint is not None and step is not None and step >= args.max_steps and not sharded:
            model = _restore(trainer, self.name, checkpoint, step, outcome)
        else:
            model = _train(trainer, self.name, bridge, checkpoint, outcome)
        total = args.max_steps if args.max_steps > 0 else trainer.state.max_steps  # > 0: set, not epochs
        return model, total

    def settle(self, run: TrainingRun, outcome: TrainOutcome, end: int, total: int, said: int) -> None:
        """The phase's end, after its last :meth:`fit`: its PhaseEnd event (step of ``total``), the
        handlers that replaced the pipeline's on its signals since ``said`` were counted, and the stop
        rule: training that ended before ``end`` (the phase's ``total``; the end of the RFT round it
        was in) without the pipeline's stop raises StoppedEarly."""
        step = outcome.steps[self.name]
        run.emit(ev.PhaseEnd(self.name, step, total, outcome.seconds[self.name]))
        displaced = run.guard.displaced[said:] if run.guard is not None else []
        for line in displaced:
            run.emit(ev.RunWarning(f"{self.key}: {line} replaced the pipeline's stop handler; taken back"))
        stop_unless_finished(self.key, step, end, run, displaced)


def displaced_count(run: TrainingRun) -> int:
    """How many displaced handlers the guard has named before a phase starts (settle's ``said``)."""
    return len(run.guard.displaced) if run.guard is not None else 0
