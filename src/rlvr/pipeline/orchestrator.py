"""PipelineOrchestrator: wires components from config and runs the lifecycle; the work lives in components.

Lifecycle (each step an ``on_stage_start``/``on_stage_end`` pair with timing):
validate -> observers up -> data -> model -> rewards -> history (a resumed run: what its earlier
attempts left, rlvr.run_history) -> baseline evaluation -> training (SFT warm start, GRPO,
in-training evaluation) -> final evaluation -> save -> report -> ``on_pipeline_end(status)``.
On failure: ``on_error``, then ``on_pipeline_end("FAILED")``; observers and verifier workers are
always closed.

Each stage is a function of one :class:`RunContext` (what the run has so far); the orchestrator
only orders them. Runtime collaborators are passed at instantiation (the prompt and the verifier
to rewards and evaluation, the prompt and the reward set to the training loop), so every built
component is complete. Under ``accelerate launch`` every rank runs the stages; rank 0 alone writes
files, observes and evaluates (rlvr.distributed).
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from rlvr import distributed
from rlvr import events as ev
from rlvr.config_errors import ConfigIssue, ConfigValidationError
from rlvr.data.identity import MANIFEST, manifest_hash
from rlvr.disk import finish_run_dir, keep_checkpoints_issues
from rlvr.evaluation.evaluator import SAMPLED_LABELS
from rlvr.io import atomic_write_json, atomic_write_text, refuse_symlinks_in, run_records_in
from rlvr.models.loader import QUANTIZATION_FILE
from rlvr.observers.base import ObserverHub
from rlvr.pipeline.gate import config_issues, refuse
from rlvr.run_history import AttemptLog, RunHistory, run_order
from rlvr.secrets import redact
from rlvr.training.checkpoints import (
    FINGERPRINT,
    Preempted,
    PreemptionGuard,
    check_fingerprint,
    latest_checkpoint,
    phase_of,
    write_fingerprint,
)
from rlvr.training.loop import Session, TrainOutcome

# Settings that must not change when a run is resumed (resume_allow_changes=true overrides).
CRITICAL_KEYS = (
    "model",
    "data.task",
    "data.task_params",
    "data.tasks",
    "data.name",
    "data.path",
    "seed",
    "training_loop.grpo.num_generations",
)
COMPONENT_KEYS = ("data", "model", "prompts", "reward", "verifier", "training_loop", "evaluation")
# Built first: the others receive them at instantiation.
COLLABORATOR_KEYS = ("prompts", "verifier")
# The run's own file of the weights hash of every rank (written by rank 0 beside the final model).
RANK_WEIGHTS = "rank_weights.json"


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


@dataclass
class RunResult:
    status: str
    run_dir: Path
    evaluations: list[ev.EvalResult] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)


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
    purpose); :func:`rlvr.pipeline.validation.check_targets` counts them as provided."""
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


def _sharded_quantization_issues(model: Any, setup: Any) -> list[ConfigIssue]:
    """Under FSDP / ZeRO-3 rank 0 rebuilds the model from gathered weights (rlvr.distributed.full_copy)
    in the dtype they arrive in; a bitsandbytes-quantised base would need the same quantisation
    rebuilt around its packed tensors, which the copy does not do."""
    quantization = getattr(model, "quantization", None)
    if setup is None or not quantization or not setup.sharded:
        return []
    return [
        ConfigIssue(
            "model.quantization",
            quantization,
            f"{setup.strategy} shards the weights and rank 0 evaluates and saves an unquantised copy "
            "rebuilt from the gathered weights; a quantised base cannot be rebuilt that way",
            "use distributed=ddp or distributed=deepspeed_zero2 for QLoRA (each GPU holds the 4-bit "
            "base), or model.quantization=null",
        )
    ]


def low_disk_hint(run_dir: Path, min_free: int = 256 * 2**20) -> str | None:
    """A hint when a failure is probably a full disk: torch reports it as e.g. "unexpected pos"."""
    path = run_dir
    while not path.exists() and path != path.parent:
        path = path.parent
    free = shutil.disk_usage(path).free
    if free >= min_free:
        return None
    return (
        f"only {free / 2**20:.0f} MiB free on the disk holding {run_dir}: the error below is likely a full "
        "disk (a checkpoint of the 135M default with optimizer state takes about 1.6 GB). Free space, lower "
        "training_loop.sft.save_total_limit / training_loop.grpo.save_total_limit, or set hydra.run.dir "
        "to a larger disk; resume=auto continues from the newest complete checkpoint."
    )


def resolved_config(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config as plain data with secrets masked (what runs save and trackers receive)."""
    return redact(OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False))


def _stage_changes(evaluations: list[ev.EvalResult]) -> list[dict[str, Any]]:
    from rlvr.report import stage_changes

    return stage_changes(evaluations)


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
    # What earlier attempts of this run left that is still valid (empty for a fresh run).
    history: RunHistory = field(default_factory=RunHistory)
    start: float = field(default_factory=time.perf_counter)
    config: dict[str, Any] = field(default_factory=dict)  # resolved, secrets masked
    data: Any = None
    loaded: Any = None
    outcome: TrainOutcome | None = None
    result: RunResult | None = None

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

    def evaluate(
        self, model: Any, label: str, step: int, reuse: ev.EvalResult | None = None
    ) -> ev.EvalResult | None:
        """Evaluate ``model`` on the held-out split (rank 0 only; other ranks get None); ``reuse`` =
        an evaluation of these same weights (greedy decoding repeats it exactly), recorded under
        ``label`` without generating. One an earlier attempt of this run made (``self.history``) is
        returned as it is: it is already among the run's evaluations.

        Every rank calls it at the same points. Under FSDP / ZeRO-3 every rank then takes part in
        gathering the full weights, always (whether rank 0 reuses an evaluation is known on rank 0
        only, and a gather skipped on some ranks would hang the others), and rank 0 evaluates a
        full-weight copy (rlvr.distributed.Distributed.on_rank0)."""
        setup = self.components.distributed
        if setup is not None:
            return setup.on_rank0(
                model, lambda full: self._evaluate_here(full, label, step, reuse), f"evaluating {label}"
            )
        return self._evaluate_here(model, label, step, reuse) if self.main else None

    def _evaluate_here(
        self, model: Any, label: str, step: int, reuse: ev.EvalResult | None
    ) -> ev.EvalResult | None:
        earlier = self.history.find(label, step)
        if earlier is not None:
            self._evaluate_sampled(model, label, step)  # unless an earlier attempt made that one too
            return earlier
        evaluation = self.components.evaluation
        if reuse is not None:
            path = evaluation.relabel(reuse.path, label, step) if reuse.path else None
            event = dataclasses.replace(reuse, label=label, step=step, path=path)
        else:
            event = self._generate_and_score(evaluation, model, label, step)
        self.hub.emit(event)
        self.result.evaluations.append(event)
        self._evaluate_sampled(model, label, step)
        return event

    def _generate_and_score(self, evaluation: Any, model: Any, label: str, step: int) -> ev.EvalResult:
        n = len(self.data.eval)
        bar = self.hub.progress(
            f"eval {label}", n if evaluation.max_examples is None else min(n, evaluation.max_examples)
        )
        try:
            return evaluation.evaluate(
                model,
                self.loaded.tokenizer,
                self.data.eval,
                label,
                step,
                self.run_dir / "eval",
                self.meta,
                bar,
            )
        finally:
            bar.close()

    def _evaluate_sampled(self, model: Any, label: str, step: int) -> None:
        """The GRPO stage's start (after SFT) and end (final) sampled at the training temperature
        (``evaluation.sampled``), so the report pairs what GRPO optimises, not only greedy accuracy.
        The final one only when its start was sampled in this run: no GRPO stage, nothing to pair."""
        view = self.components.evaluation.sampled_view()
        if view is None or label not in SAMPLED_LABELS:
            return
        if label == "final" and not any(e.label == "after_sft_sampled" for e in self.result.evaluations):
            return
        if any(e.label == f"{label}_sampled" and e.step == step for e in self.result.evaluations):
            return  # reloaded from an earlier attempt of this run (rlvr.run_history)
        event = self._generate_and_score(view, model, f"{label}_sampled", step)
        self.hub.emit(event)
        self.result.evaluations.append(event)


# -- stages: each a function of the run context, in lifecycle order ---------------------------------


def write_records(ctx: RunContext) -> None:
    """The resolved config (rerunnable), the resume fingerprint, then ``on_pipeline_start``."""
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
    ctx.loaded = c.model.load()
    ctx.loaded.model = c.training_loop.place(ctx.loaded.model)
    if not ctx.main:
        return
    from rlvr.provenance import write_provenance

    extra = {
        **ctx.meta,
        "prompt_hash": c.prompts.hash,
        "hardware": c.training_loop.hardware.record(),
        "resumed_from": str(ctx.resume[1]) if ctx.resume else None,
    }
    if c.distributed is not None:
        extra["distributed"] = c.distributed.record()
    ctx.result.files["provenance"] = str(write_provenance(ctx.run_dir, ctx.config, extra))


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
    ctx.result.evaluations.extend(ctx.history.evaluations)
    if ctx.attempts.problem:
        ctx.hub.emit(ev.Warning_(f"resume: {ctx.attempts.problem}"))
    for note in ctx.history.notes:
        ctx.hub.emit(ev.Warning_(f"resume: {note}"))
    if ctx.history.evaluations:
        names = ", ".join(f"{e.label} step {e.step}" for e in ctx.history.evaluations)
        print(f"resume: reusing {len(ctx.history.evaluations)} evaluation(s) from earlier attempts: {names}")


def baseline_eval(ctx: RunContext) -> None:
    ctx.evaluate(ctx.loaded.model, "baseline", 0)


def train(ctx: RunContext) -> None:
    c = ctx.components
    session = Session(
        tokenizer=ctx.loaded.tokenizer,
        train_dataset=ctx.data.train,
        emit=ctx.hub.emit,
        evaluate=ctx.evaluate,
        eval_every=c.evaluation.every_n_steps,
        run_dir=ctx.run_dir,
        guard=ctx.guard,
        curriculum=getattr(ctx.data, "curriculum", None),  # a TaskData-like object may lack it
        attach=c.distributed.attach if c.distributed is not None else None,
    )
    ctx.outcome = c.training_loop.run(ctx.loaded.model, session, resume=ctx.resume)


def final_eval(ctx: RunContext) -> None:
    """The final weights' evaluation, reusing one of the same weights if training ended on one."""
    trained = sum(ctx.history.steps(ctx.outcome.steps).values())  # with phases of earlier attempts
    same_weights = ctx.history.eval_of_last_weights(ctx.outcome) or next(
        (e for e in ctx.result.evaluations if e.label == "baseline" and not trained), None
    )
    ctx.evaluate(ctx.outcome.model, "final", trained, same_weights)


def save_model(ctx: RunContext) -> None:
    """``final/``: weights (or adapter), tokenizer, data manifest. With several replicated processes,
    first check that every rank ended with the same weights; under FSDP / ZeRO-3 (each rank holds a
    shard, no two alike) every rank gathers and rank 0 saves the full-weight copy."""
    setup = ctx.components.distributed
    model = ctx.outcome.model
    if setup is not None and setup.sharded:
        setup.on_rank0(model, lambda full: _write_final(ctx, full, None), "saving the final model")
        return
    hashes = setup.gather_hashes(model) if setup is not None else None
    if hashes and len(set(hashes)) > 1:
        raise RuntimeError(f"the ranks ended training with different weights (sha256 per rank: {hashes})")
    if ctx.main:
        _write_final(ctx, model, hashes)


def _write_final(ctx: RunContext, model: Any, hashes: list[str] | None) -> None:
    final_dir = ctx.run_dir / "final"
    atomic_write_json(final_dir / MANIFEST, ctx.data.manifest, root=ctx.run_dir)
    model.save_pretrained(final_dir)
    ctx.loaded.tokenizer.save_pretrained(final_dir)
    if ctx.loaded.quantization:  # the adapter's base is quantised: say so, for whoever loads it
        atomic_write_json(
            final_dir / QUANTIZATION_FILE, {"quantization": ctx.loaded.quantization}, root=ctx.run_dir
        )
    if hashes and len(hashes) > 1:
        atomic_write_json(
            final_dir / RANK_WEIGHTS, {"world_size": len(hashes), "sha256": hashes}, root=ctx.run_dir
        )
    ctx.result.files["final model"] = str(final_dir)


def write_report(ctx: RunContext) -> None:
    from rlvr.preflight import memory_record
    from rlvr.report import write_report

    c = ctx.components
    # The pre-flight's estimate beside the measured CUDA peak (this attempt's, rank 0's process).
    memory = memory_record(c.model, c.training_loop, c.distributed)
    ctx.result.files.update(
        write_report(
            ctx.run_dir,
            ctx.result.evaluations,
            ctx.outcome,
            {**ctx.meta, "memory": memory},
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
    # rank 0 evaluates (RunContext.evaluate); otherwise the other ranks return at once.
    Stage("baseline_eval", baseline_eval, when=lambda ctx: ctx.components.evaluation.baseline),
    Stage("train", train),
    Stage("final_eval", final_eval),
    Stage("save", save_model),
    Stage("report", write_report, main_only=True),
)


def fingerprint(cfg: DictConfig) -> dict[str, Any]:
    """The critical settings, secrets masked: the record on disk and the comparison on resume agree."""
    return redact(
        {
            k: OmegaConf.to_container(OmegaConf.create({"v": OmegaConf.select(cfg, k)}))["v"]
            for k in CRITICAL_KEYS
        }
    )


class PipelineOrchestrator:
    """Builds, validates and runs the components named in ``cfg``."""

    def __init__(self, cfg: DictConfig, run_dir: Path):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.components: Components | None = None
        self.resume: tuple[str, Path] | None = None

    def fingerprint(self) -> dict[str, Any]:
        return fingerprint(self.cfg)

    def resolve_resume(self) -> list[ConfigIssue]:
        """``resume``: null (fresh run), ``auto`` (newest complete checkpoint in the run dir, else a
        fresh run) or a checkpoint path (which must exist)."""
        value = OmegaConf.select(self.cfg, "resume", default=None)
        if value in (None, "", False):
            return []
        if value == "auto":
            # The newest complete checkpoint, or a fresh run when there is none yet: the same command
            # starts a SLURM array task or a cloud VM and continues it after a requeue or a restart.
            found = latest_checkpoint(self.run_dir)
            if found is None:
                print(f"resume=auto: no complete checkpoint under {self.run_dir}/checkpoints, starting fresh")
                return []
            self.resume = found
        else:
            path = Path(str(value))  # resume=123 names a folder too
            if not path.is_dir():
                return [
                    ConfigIssue(
                        "resume",
                        value,
                        "checkpoint directory does not exist",
                        "pass an existing <run_dir>/checkpoints/<phase>/checkpoint-N or resume=auto",
                    )
                ]
            try:
                self.resume = (phase_of(path), path)
            except ValueError as exc:
                return [ConfigIssue("resume", value, str(exc), "pick a complete checkpoint")]
        # The settings are compared with the run that OWNS the checkpoint (<run>/checkpoints/<phase>/
        # checkpoint-N), whether it was found by resume=auto or given as a path; the checkpoint's own
        # copy of its run's fingerprint first (rlvr.training.checkpoints).
        owner = self.resume[1].parent.parent.parent
        diffs = check_fingerprint(
            owner,
            self.fingerprint(),
            bool(OmegaConf.select(self.cfg, "resume_allow_changes", default=False)),
            checkpoint=self.resume[1],
        )
        if diffs:
            return [
                ConfigIssue(
                    "resume",
                    value,
                    "critical settings differ from the run being resumed: " + "; ".join(diffs),
                    "restore them, or set resume_allow_changes=true",
                )
            ]
        return []

    def run_dir_issues(self) -> list[ConfigIssue]:
        """A fresh run never starts in a directory holding another run's records (it would rewrite
        its fingerprint and mix its metrics); a continued run (``resume`` set) only in one whose
        fingerprint matches its settings, found checkpoint or not: ``resume=auto`` in a run that
        died before its first checkpoint starts afresh, and must not adopt another run's directory.
        Checked on rank 0 (the other ranks would see the records rank 0 is writing)."""
        if not distributed.is_main() or not self.run_dir.is_dir():
            return []
        found = run_records_in(self.run_dir)
        if not found:
            return []
        resume = OmegaConf.select(self.cfg, "resume", default=None)
        if resume in (None, "", False):
            return [
                ConfigIssue(
                    "hydra.run.dir",
                    str(self.run_dir),
                    f"holds another run ({', '.join(found)}); a fresh run here would overwrite its "
                    "records and settings fingerprint",
                    "choose a new hydra.run.dir, or continue that run with resume=auto and its settings",
                )
            ]
        if (
            self.resume is not None
            and self.resume[1].parent.parent.parent.resolve() == self.run_dir.resolve()
        ):
            return []  # resolve_resume compared the settings with the checkpoint's own fingerprint
        allow = bool(OmegaConf.select(self.cfg, "resume_allow_changes", default=False))
        diffs = check_fingerprint(self.run_dir, self.fingerprint(), allow)
        if (self.run_dir / FINGERPRINT).is_file() and diffs:
            return [
                ConfigIssue(
                    "hydra.run.dir",
                    str(self.run_dir),
                    "holds a run with other critical settings: " + "; ".join(diffs),
                    "restore them, choose a new hydra.run.dir, or set resume_allow_changes=true",
                )
            ]
        return []

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
        issues = (
            config_issues(self.cfg, runtime_args(self.cfg))
            + self.resolve_resume()
            + self.run_dir_issues()
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
        issues.extend(_sharded_quantization_issues(built.get("model"), built.get("distributed")))
        if not issues and "model" in built and "training_loop" in built:
            from rlvr.preflight import run_checks

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
        c = self.components or self.build()
        main = distributed.is_main()
        attempts = AttemptLog(
            self.run_dir,
            continues=OmegaConf.select(self.cfg, "resume", default=None) not in (None, "", False),
            resumed_from=str(self.resume[1]) if self.resume else None,
        )
        # Other ranks stay quiet: their events go nowhere, rank 0 reports for the run. The attempt
        # record is not a configurable observer: a resumed run's report depends on it.
        hub = ObserverHub({**c.observers, "_attempts": attempts} if main else {})
        guard = PreemptionGuard()
        # Checkpoint-on-SIGTERM is a single-process feature: with several ranks the launcher's
        # SIGTERM ends them all, and resume=auto continues from the last periodic checkpoint.
        on_sigterm = guard if distributed.world_size() == 1 else distributed.LauncherStop()
        ctx = RunContext(self.cfg, self.run_dir, c, hub, guard, self.resume, main, attempts)
        ctx.result = result = RunResult(status="FAILED", run_dir=self.run_dir)
        stage = "setup"
        try:
            on_sigterm.__enter__()
            ctx.config = resolved_config(self.cfg)
            write_records(ctx)
            for step in STAGES:
                if not step.when(ctx) or (step.main_only and not main):
                    continue
                stage = step.name
                with self._stage(hub, stage):
                    step.run(ctx)
            result.files["metrics"] = str(self.run_dir / "metrics.jsonl")
            result.status = "COMPLETED"
            if main:
                print(finish_run_dir(self.run_dir, self.cfg.keep_checkpoints))
        except (KeyboardInterrupt, Preempted) as exc:
            result.status = "PREEMPTED" if isinstance(exc, Preempted) else "INTERRUPTED"
            if isinstance(exc, Preempted):
                exc.hand_over = guard.hand_over()  # taken before the finally below restores the handlers
            hub.emit(ev.ErrorEvent(stage, exc))
            raise
        except BaseException as exc:
            hint = low_disk_hint(self.run_dir)
            if hint:
                hub.emit(ev.Warning_(hint))
            hub.emit(ev.ErrorEvent(stage, exc))
            if not main and not distributed.peer_lost(exc):  # the cause: rank 0 cannot report it
                distributed.print_error(exc)
            raise
        finally:
            result.evaluations = run_order(result.evaluations)
            summary = {
                "evaluations": [e.record() for e in result.evaluations],
                "changes": _stage_changes(result.evaluations),
                "files": result.files,
            }
            hub.emit(ev.PipelineEnd(result.status, time.perf_counter() - ctx.start, summary))
            with contextlib.suppress(Exception):
                c.verifier.close()
            hub.close()
            on_sigterm.__exit__()
        return result

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
