"""PipelineOrchestrator: wires components from config and runs the lifecycle; the work lives in components.

Lifecycle (each step an ``on_stage_start``/``on_stage_end`` pair with timing), :data:`STAGES` in order:
validate -> observers up -> data -> model -> rewards -> history (a resumed run: what its earlier
attempts left, rlvr.run_history) -> baseline evaluation -> training (SFT warm start, GRPO) -> final
evaluation -> save -> report -> ``on_pipeline_end`` with the :class:`~rlvr.events.RunResult`.
On failure: ``on_error``, then ``on_pipeline_end("FAILED")``; observers and verifier workers are
always closed.

Each stage is a few lines of one :class:`RunContext` (what the run has so far); the policies live
with their components: what is evaluated when, and what is reused (rlvr.evaluation.schedule),
resume and the settings fingerprint (rlvr.training_loop.resume), the final model (rlvr.model.final).
Runtime collaborators are passed at instantiation (the prompt and the verifier to rewards and
evaluation, the prompt and the reward set to the training loop), so every built component is
complete. Under ``accelerate launch`` every rank runs the stages; rank 0 alone writes files,
observes and evaluates (rlvr.distributed).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from rlvr import distributed
from rlvr import events as ev
from rlvr.config.errors import ConfigIssue, ConfigValidationError
from rlvr.config.gate import config_issues, refuse
from rlvr.config.memory import fits_batch
from rlvr.data import references
from rlvr.data.base import prompt_length_issues
from rlvr.data.identity import MANIFEST, manifest_hash
from rlvr.disk import finish_run_dir, keep_checkpoints_issues, low_disk_hint
from rlvr.evaluation.schedule import EvalSchedule, run_order, stage_changes
from rlvr.events import RunResult
from rlvr.faults import DiskFull, RunFault, disk_fault
from rlvr.io import atomic_write_json, atomic_write_text, refuse_symlinks_in
from rlvr.model.final import save_final
from rlvr.model.loader import LoadedModel
from rlvr.observers.base import ObserverHub
from rlvr.run_history import AttemptLog, RunHistory
from rlvr.secrets import redact
from rlvr.training_loop.checkpoints import Preempted, PreemptionGuard, write_fingerprint
from rlvr.training_loop.expectation import grpo_stage_note
from rlvr.training_loop.loop import Session, TrainOutcome
from rlvr.training_loop.resume import (
    continue_command,
    continues,
    fingerprint,
    resolve_resume,
    run_dir_issues,
)

__all__ = ["Components", "PipelineOrchestrator", "RunResult"]

COMPONENT_KEYS = ("data", "model", "prompts", "reward", "verifier", "training_loop", "evaluation")
# Built first: the others receive them at instantiation.
COLLABORATOR_KEYS = ("prompts", "verifier")


@dataclass
class Components:
    data: Any
    model: Any
    prompts: Any
    reward: Any
    verifier: Any
    training_loop: Any
    evaluation: Any
    observers: dict[str, Any]
    distributed: Any = None  # rlvr.distributed.Distributed; None = one process


def _instantiate(node: DictConfig, runtime: dict[str, Any] | None = None, recursive: bool = True) -> Any:
    """``instantiate`` with Hydra's wrapper removed, so a component's own ConfigValidationError
    reaches the collector and a bug keeps its original exception and traceback.

    ``runtime`` objects go to the constructor directly, not through Hydra's config merge (which
    would turn a dataclass such as PromptTemplate into a dict).
    """
    try:
        if runtime is None:
            return instantiate(node, _convert_="all")
        return instantiate(node, _convert_="all", _partial_=True, _recursive_=recursive)(**runtime)
    except InstantiationException as exc:
        if exc.__cause__ is not None:
            raise exc.__cause__ from None
        raise


def runtime_args(cfg: DictConfig) -> dict[str, set[str]]:
    """Per config path, the arguments the orchestrator passes at instantiation (absent from YAML on
    purpose); :func:`rlvr.config.validation.check_targets` counts them as provided."""
    terms = OmegaConf.select(cfg, "reward.terms", default=None)
    terms = terms if isinstance(terms, DictConfig) else {}  # anything else: check_targets names it
    return {
        "reward": {"prompt", "scorer"},
        **{f"reward.terms.{name}": {"prompt", "scorer"} for name in terms},
        "evaluation": {"prompt", "scorer"},
        "training_loop": {"prompt", "rewards"},
    }


def _build(key: str, node: DictConfig, built: dict[str, Any]) -> Any:
    """Instantiate component ``key`` with the runtime objects it takes (None when one of them could
    not be built: its own issues are reported instead)."""
    prompt, scorer, rewards = built.get("prompts"), built.get("verifier"), built.get("reward")
    if key == "reward":
        if prompt is None or scorer is None:
            return None
        run = {"prompt": prompt, "scorer": scorer}
        terms = {name: _instantiate(term, run) for name, term in (node.get("terms") or {}).items()}
        return _instantiate(node, {**run, "terms": terms}, recursive=False)
    if key == "evaluation":
        return (
            None
            if prompt is None or scorer is None
            else _instantiate(node, {"prompt": prompt, "scorer": scorer})
        )
    if key == "training_loop":
        # Built even when the prompt or the reward set could not be (None stands in): its own
        # config mistakes are then reported with theirs, and build() raises before anything runs.
        return _instantiate(node, {"prompt": prompt, "rewards": rewards})
    return _instantiate(node)


def build_component(key: str, node: DictConfig, built: dict[str, Any]) -> Any:
    """:func:`_build` for the other apps: the benchmark builds its components with the pipeline's rules."""
    return _build(key, node, built)


def _success_term_issues(data: Any, reward: Any) -> list[ConfigIssue]:
    """A curriculum moves on the verifier's verdicts, which only a correctness-type term computes."""
    if not getattr(data, "needs_success_term", False) or reward is None or reward.success_term():
        return []
    return [
        ConfigIssue(
            "reward.terms",
            sorted(reward.terms),
            "a curriculum (data=curriculum) measures success with the task's verifier, and no term runs it",
            "add one: +reward/terms@reward.terms.correctness=correctness (or answer_match)",
        )
    ]


def resolved_config(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config as plain data with secrets masked (what runs save and trackers receive)."""
    return redact(OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False))


_T = TypeVar("_T")


def _after(value: _T | None, stage: str) -> _T:
    """A RunContext field a stage sets, read by a later stage (the stage order guarantees it)."""
    if value is None:
        raise RuntimeError(f"read before the {stage} stage set it")
    return value


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
    # What earlier attempts of this run left that is still valid (empty for a fresh run).
    history: RunHistory = field(default_factory=RunHistory)
    start: float = field(default_factory=time.perf_counter)
    config: dict[str, Any] = field(default_factory=dict)  # resolved, secrets masked
    data: Any = None
    loaded: LoadedModel | None = None
    evals: EvalSchedule | None = None  # once the model is loaded
    outcome: TrainOutcome | None = None
    lengths: tuple[int, int] | None = None  # the longest training prompt and answer, in tokens

    @property
    def meta(self) -> dict[str, Any]:
        """What every evaluation file and the report record about the run."""
        return {
            "model": _after(self.loaded, "model").name,
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
        # A rerun from this file (--config-dir <run_dir> --config-name config_resolved) gets Hydra's
        # defaults, so the one Hydra setting the trust rules require travels with the record.
        record = {**ctx.config, "hydra": {"output_subdir": None}}
        atomic_write_text(ctx.run_dir / "config_resolved.yaml", OmegaConf.to_yaml(record), root=ctx.run_dir)
        write_fingerprint(ctx.run_dir, fingerprint(ctx.cfg))
    ctx.hub.emit(ev.PipelineStart(ctx.run_dir, ctx.config))


def load_data(ctx: RunContext) -> None:
    ctx.data = ctx.components.data.load(ctx.components.prompts)
    if ctx.main:
        atomic_write_json(ctx.run_dir / MANIFEST, ctx.data.manifest, root=ctx.run_dir)


def load_model(ctx: RunContext) -> None:
    """Load and place the model, then record provenance (model, data, hardware, resume point)."""
    from transformers import set_seed

    c = ctx.components
    # Before loading: a fresh LoRA adapter's initial weights come from the global RNG, so
    # two runs of one config (or a run and its resume) start from the same adapter.
    set_seed(ctx.cfg.seed)
    ctx.loaded = loaded = c.model.load()
    c.prompts.bind(loaded.tokenizer)  # from here the prompt hash covers the chat template used
    # Before any generation: a prompt longer than the context is refused with the numbers.
    too_long = prompt_length_issues(ctx.data, c.prompts, loaded.tokenizer, loaded.model)
    if too_long:
        raise ConfigValidationError(too_long)
    _memory_check(ctx)
    loaded.model = c.training_loop.place(loaded.model)
    ctx.evals = EvalSchedule(
        c.evaluation,
        ctx.hub,
        loaded.tokenizer,
        ctx.data.eval,
        out_dir=ctx.run_dir / "eval",
        meta=ctx.meta,
        main=ctx.main,
        distributed=c.distributed,
    )
    if ctx.main:
        ctx.result.files["provenance"] = _write_provenance(ctx)


def _memory_check(ctx: RunContext) -> None:
    """The memory pre-flight again, with the longest prompt and answer the run will train on
    (tokenized by the model's own chat template) in place of the budget it assumed before the data
    was loaded; a refusal stops the run before any step, naming the terms."""
    from rlvr.config.memory import data_lengths, run_checks

    c = ctx.components
    # a plugin's prompt object may have no SFT target format: the answer's own text is the bound then
    ctx.lengths = data_lengths(
        ctx.data.train, _after(ctx.loaded, "model").tokenizer, getattr(c.prompts, "format_answer", str)
    )
    issues, warnings = run_checks(c.model, c.training_loop, c.distributed, ctx.lengths)
    for warning in warnings:
        ctx.hub.emit(ev.Warning_(warning))
    refuse(issues)


def _write_provenance(ctx: RunContext) -> str:
    from rlvr.provenance import write_provenance

    c = ctx.components
    extra = {
        **ctx.meta,
        "prompt_hash": c.prompts.hash,
        "hardware": c.training_loop.hardware.record(),
        "resumed_from": str(ctx.resume[1]) if ctx.resume else None,
    }
    if c.distributed is not None:
        extra["distributed"] = c.distributed.record()
    return str(write_provenance(ctx.run_dir, ctx.config, extra))


def check_rewards(ctx: RunContext) -> None:
    """The reward terms on a few gold answers: a broken term fails now, not after the SFT phase."""
    ctx.components.reward.check_on_gold(ctx.data.train)


def load_history(ctx: RunContext) -> None:
    """A continued run (``resume`` set): what its earlier attempts left that is still valid
    (rlvr.run_history) becomes part of this run's results; why a file is left out is logged."""
    from rlvr.observers.files import JsonlObserver

    jsonl = next((o.path for o in ctx.components.observers.values() if isinstance(o, JsonlObserver)), None)
    sampled = ctx.components.evaluation.sampled_view()
    ctx.history = RunHistory.load(
        ctx.run_dir,
        ctx.attempts.earlier,
        ctx.components.evaluation.identity(ctx.data.eval, ctx.meta),
        ctx.resume,
        None if jsonl is None else ctx.run_dir / jsonl,
        sampled_identity=None if sampled is None else sampled.identity(ctx.data.eval, ctx.meta),
    )
    _after(ctx.evals, "model").continue_from(ctx.history)
    problems = [ctx.attempts.problem] if ctx.attempts.problem else []
    for note in [*problems, *ctx.history.notes]:
        ctx.hub.emit(ev.Warning_(f"resume: {note}"))
    if ctx.history.evaluations:
        names = ", ".join(f"{e.label} step {e.step}" for e in ctx.history.evaluations)
        print(f"resume: reusing {len(ctx.history.evaluations)} evaluation(s) from earlier attempts: {names}")


def baseline_eval(ctx: RunContext) -> None:
    _after(ctx.evals, "model").baseline(_after(ctx.loaded, "model").model)


def train(ctx: RunContext) -> None:
    c = ctx.components
    loaded = _after(ctx.loaded, "model")
    session = Session(
        tokenizer=loaded.tokenizer,
        train_dataset=ctx.data.train,
        emit=ctx.hub.emit,
        on_weights=_after(ctx.evals, "model").on_weights,
        eval_every=c.evaluation.every_n_steps,
        run_dir=ctx.run_dir,
        guard=ctx.guard,
        curriculum=getattr(ctx.data, "curriculum", None),  # a TaskData-like object may lack it
        attach=c.distributed.attach if c.distributed is not None else None,
        fits=functools.partial(fits_batch, c.model, c.training_loop, c.distributed, ctx.lengths),
        generator=getattr(c.evaluation, "generator", None),  # an evaluation component may have none
    )
    ctx.outcome = c.training_loop.run(loaded.model, session, resume=ctx.resume)


def final_eval(ctx: RunContext) -> None:
    outcome = _after(ctx.outcome, "train")
    trained = sum(ctx.history.steps(outcome.steps).values())  # with phases of earlier attempts
    _after(ctx.evals, "model").final(outcome.model, outcome.steps, trained)


def save_model(ctx: RunContext) -> None:
    c = ctx.components
    outcome, loaded = _after(ctx.outcome, "train"), _after(ctx.loaded, "model")
    final = save_final(outcome.model, loaded, ctx.data.manifest, ctx.run_dir, c.distributed, ctx.main)
    if final is not None:
        ctx.result.files["final model"] = str(final)


def _throughput(ctx: RunContext) -> dict[str, Any]:
    """Tokens/s and MFU per phase of this attempt (rlvr.training_loop.throughput)."""
    from rlvr.training_loop.throughput import summary

    outcome = ctx.outcome
    if outcome is None or not outcome.history:
        return {}
    name = None
    if (outcome.hardware or {}).get("device") == "cuda":
        import torch

        name = torch.cuda.get_device_name(0)
    return summary(outcome.history, outcome.model, name)


def write_report(ctx: RunContext) -> None:
    from rlvr.config.memory import memory_record
    from rlvr.report import write_report

    c = ctx.components
    # The pre-flight's estimate beside the measured CUDA peak (this attempt's, rank 0's process).
    micro = ctx.outcome.micro_batches if ctx.outcome is not None else None
    memory = memory_record(c.model, c.training_loop, c.distributed, ctx.lengths, micro)
    note = grpo_stage_note(c.model, ctx.data.tasks, getattr(c.training_loop, "grpo_phase", None))
    ctx.result.notes = [note] if note else []
    ctx.result.throughput = _throughput(ctx)
    ctx.result.files.update(
        write_report(
            ctx.run_dir,
            _after(ctx.evals, "model").evaluations,
            ctx.outcome,
            {**ctx.meta, "memory": memory, "throughput": ctx.result.throughput, "notes": ctx.result.notes},
            time.perf_counter() - ctx.start,
            history=ctx.history,
            attempt=ctx.attempts.snapshot("COMPLETED"),
        )
    )


@dataclass(frozen=True)
class Stage:
    name: str
    run: Callable[[RunContext], None]
    when: Callable[[RunContext], bool] = lambda ctx: True
    main_only: bool = False  # rank 0 alone: nothing in it is a collective


STAGES = (
    Stage("data", load_data),
    Stage("model", load_model),
    Stage("rewards", check_rewards),
    Stage("history", load_history, when=lambda ctx: ctx.attempts.continues, main_only=True),
    # Also on resume: the model is still the base model here (the trainer loads the checkpoint's
    # weights), so a baseline no earlier attempt left on disk is made now; one on disk is reused.
    # The evaluations run on every rank: under FSDP / ZeRO-3 each takes part in gathering the weights
    # rank 0 evaluates (EvalSchedule.evaluate); otherwise the other ranks return at once.
    Stage("baseline_eval", baseline_eval, when=lambda ctx: ctx.components.evaluation.baseline),
    Stage("train", train),
    Stage("final_eval", final_eval),
    Stage("save", save_model),
    Stage("report", write_report, main_only=True),
)


class PipelineOrchestrator:
    """Builds, validates and runs the components named in ``cfg``."""

    def __init__(self, cfg: DictConfig, run_dir: Path):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.components: Components | None = None
        self.resume: tuple[str, Path] | None = None

    # -- build + validate ---------------------------------------------------------------------------
    def build(self) -> Components:
        """Instantiate every component (constructors are cheap) and validate all; raise with every issue.

        Config mistakes are collected from every component that could be built (target checks,
        constructor checks, each component's validate()) and raised together as one
        ConfigValidationError. Anything else a constructor or validate() raises is a bug and
        propagates with its traceback.
        """
        missing = [k for k in (*COMPONENT_KEYS, "observers") if k not in self.cfg]
        if missing:
            raise ConfigValidationError(
                ConfigIssue(k, None, "component config missing", f"add '{k}' to the defaults list")
                for k in missing
            )
        self.resume, resume_issues = resolve_resume(self.cfg, self.run_dir)
        issues = (
            config_issues(self.cfg, runtime_args(self.cfg))
            + resume_issues
            + run_dir_issues(self.cfg, self.run_dir, self.resume)
            + keep_checkpoints_issues(self.cfg.keep_checkpoints)
        )
        broken = {
            issue.key.split(".")[0]
            if not issue.key.startswith("observers.")
            else ".".join(issue.key.split(".")[:2])
            for issue in issues
        }
        built: dict[str, Any] = {}
        keys = [*COLLABORATOR_KEYS, *(k for k in COMPONENT_KEYS if k not in COLLABORATOR_KEYS)]
        nodes = [(key, self.cfg[key]) for key in keys]
        nodes += [(f"observers.{name}", self.cfg.observers[name]) for name in self.cfg.observers]
        if "distributed" in self.cfg:
            nodes.append(("distributed", self.cfg.distributed))
        for key, node in nodes:
            if key in broken:
                continue
            if key.startswith("observers."):
                # An observer only writes (a run name, tags, a project): it is built from its settings
                # with secrets masked, so none reaches a tracker's files or servers.
                node = OmegaConf.create(redact(OmegaConf.to_container(node, resolve=True)))
            try:
                component = _build(key, node, built)
            except ConfigValidationError as exc:
                issues.extend(exc.issues)
                continue
            if component is not None:
                built[key] = component
        for component in built.values():
            if hasattr(component, "validate"):
                issues.extend(component.validate())
        issues.extend(_success_term_issues(built.get("data"), built.get("reward")))
        issues.extend(references.stage_issues(built.get("data"), built.get("training_loop")))
        if "distributed" in built:
            issues.extend(built["distributed"].model_issues(built.get("model")))
        if not issues and "model" in built and "training_loop" in built:
            from rlvr.config.memory import run_checks

            memory, warnings = run_checks(built["model"], built["training_loop"], built.get("distributed"))
            issues.extend(memory)
            for warning in warnings:
                print(f"warning: {warning}", file=sys.stderr)
        refuse(issues)
        observers = {k.split(".", 1)[1]: v for k, v in built.items() if k.startswith("observers.")}
        self.components = Components(
            **{k: built[k] for k in COMPONENT_KEYS}, observers=observers, distributed=built.get("distributed")
        )
        return self.components

    # -- run ----------------------------------------------------------------------------------------
    def run(self) -> RunResult:
        ctx = self._context(self.components or self.build())
        # Checkpoint-on-SIGTERM is a single-process feature: with several ranks the launcher's
        # SIGTERM ends them all, and resume=auto continues from the last periodic checkpoint.
        on_sigterm = ctx.guard if distributed.world_size() == 1 else distributed.LauncherStop()
        stage = "setup"
        try:
            on_sigterm.__enter__()
            write_records(ctx)
            for step in STAGES:
                if step.when(ctx) and (ctx.main or not step.main_only):
                    stage = step.name
                    with self._stage(ctx.hub, stage):
                        step.run(ctx)
            ctx.result.files["metrics"] = str(self.run_dir / "metrics.jsonl")
            ctx.result.status = "COMPLETED"
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

    def _context(self, c: Components) -> RunContext:
        main = distributed.is_main()
        resumed_from = str(self.resume[1]) if self.resume else None
        attempts = AttemptLog(self.run_dir, continues=continues(self.cfg), resumed_from=resumed_from)
        # Other ranks stay quiet: their events go nowhere, rank 0 reports for the run. The attempt
        # record is not a configurable observer: a resumed run's report depends on it.
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
        fault = exc if isinstance(exc, RunFault) else None
        if fault is None and isinstance(exc, Exception):
            fault = disk_fault(exc, stage, self.run_dir, continue_command(self.run_dir))
        if isinstance(fault, DiskFull):
            # The log file is on the full disk too: logging would print its own "--- Logging error ---"
            # traceback for every record it cannot write, burying the one message.
            logging.raiseExceptions = False
        hint = None if fault else low_disk_hint(self.run_dir)
        if hint:
            ctx.hub.emit(ev.Warning_(hint))
        ctx.hub.emit(ev.ErrorEvent(stage, fault or exc))
        if not ctx.main and not distributed.peer_lost(exc):  # the cause: rank 0 cannot report it
            distributed.print_error(fault or exc)
        return None if fault is exc else fault

    def _end(self, ctx: RunContext) -> None:
        """The run's result to the observers, then close them and the verifier workers."""
        result = ctx.result
        result.evaluations = run_order(ctx.evals.evaluations) if ctx.evals is not None else []
        result.changes = stage_changes(result.evaluations)
        ctx.hub.emit(ev.PipelineEnd(result.status, time.perf_counter() - ctx.start, result))
        with contextlib.suppress(Exception):
            ctx.components.verifier.close()
        ctx.hub.close()

    @staticmethod
    @contextlib.contextmanager
    def _stage(hub: ObserverHub, name: str) -> Iterator[None]:
        hub.emit(ev.StageStart(name))
        start = time.perf_counter()
        try:
            yield
        except BaseException:
            hub.emit(ev.StageEnd(name, time.perf_counter() - start, "failed"))
            raise
        hub.emit(ev.StageEnd(name, time.perf_counter() - start))
