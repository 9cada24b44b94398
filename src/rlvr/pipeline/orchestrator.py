"""PipelineOrchestrator: wires components from config and runs the lifecycle; the work lives in components.

Lifecycle (each step an ``on_stage_start``/``on_stage_end`` pair with timing):
validate -> observers up -> data -> model -> rewards -> baseline evaluation ->
training (SFT warm start, GRPO, in-training evaluation) -> final evaluation ->
save -> report -> ``on_pipeline_end(status)``. On failure: ``on_error``, then
``on_pipeline_end("FAILED")``; observers and verifier workers are always closed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from rlvr import events as ev
from rlvr.config_errors import ConfigIssue, ConfigValidationError
from rlvr.data.identity import MANIFEST
from rlvr.disk import finish_run_dir, keep_checkpoints_issues
from rlvr.io import atomic_write_json, atomic_write_text, refuse_symlinks_in
from rlvr.models.loader import QUANTIZATION_FILE
from rlvr.observers.base import ObserverHub
from rlvr.pipeline.validation import check_targets
from rlvr.secrets import redact
from rlvr.training.checkpoints import (
    Preempted,
    PreemptionGuard,
    check_fingerprint,
    latest_checkpoint,
    phase_of,
    write_fingerprint,
)

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


@dataclass
class RunResult:
    status: str
    run_dir: Path
    evaluations: list[ev.EvalResult] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)


def _instantiate(node: DictConfig) -> Any:
    """``instantiate`` with Hydra's wrapper removed, so a component's own ConfigValidationError
    reaches the collector and a bug keeps its original exception and traceback."""
    try:
        return instantiate(node, _convert_="all")
    except InstantiationException as exc:
        if exc.__cause__ is not None:
            raise exc.__cause__ from None
        raise


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


class PipelineOrchestrator:
    """Builds, validates and runs the components named in ``cfg``."""

    def __init__(self, cfg: DictConfig, run_dir: Path):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.components: Components | None = None
        self.resume: tuple[str, Path] | None = None

    def fingerprint(self) -> dict[str, Any]:
        return {
            k: OmegaConf.to_container(OmegaConf.create({"v": OmegaConf.select(self.cfg, k)}))["v"]
            for k in CRITICAL_KEYS
        }

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
            path = Path(value)
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
        # checkpoint-N), whether it was found by resume=auto or given as a path.
        owner = self.resume[1].parent.parent.parent
        diffs = check_fingerprint(
            owner,
            self.fingerprint(),
            bool(OmegaConf.select(self.cfg, "resume_allow_changes", default=False)),
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
            check_targets(self.cfg)
            + self.resolve_resume()
            + keep_checkpoints_issues(self.cfg.keep_checkpoints)
        )
        broken = {
            issue.key.split(".")[0]
            if not issue.key.startswith("observers.")
            else ".".join(issue.key.split(".")[:2])
            for issue in issues
        }
        built: dict[str, Any] = {}
        nodes = [(key, self.cfg[key]) for key in COMPONENT_KEYS]
        nodes += [(f"observers.{name}", self.cfg.observers[name]) for name in self.cfg.observers]
        for key, node in nodes:
            if key in broken:
                continue
            try:
                built[key] = _instantiate(node)
            except ConfigValidationError as exc:
                issues.extend(exc.issues)
        for component in built.values():
            if hasattr(component, "validate"):
                issues.extend(component.validate())
        if not issues and "model" in built and "training_loop" in built:
            from rlvr.preflight import run_checks

            memory, warnings = run_checks(built["model"], built["training_loop"])
            issues.extend(memory)
            for warning in warnings:
                print(f"warning: {warning}", file=sys.stderr)
        if issues:
            raise ConfigValidationError(issues)
        observers = {k.split(".", 1)[1]: v for k, v in built.items() if k.startswith("observers.")}
        self.components = Components(**{k: built[k] for k in COMPONENT_KEYS}, observers=observers)
        return self.components

    # -- run ----------------------------------------------------------------------------------------
    def run(self) -> RunResult:
        c = self.components or self.build()
        hub = ObserverHub(c.observers)
        result = RunResult(status="FAILED", run_dir=self.run_dir)
        start = time.perf_counter()
        stage = "setup"
        guard = PreemptionGuard()
        try:
            guard.__enter__()
            self.run_dir.mkdir(parents=True, exist_ok=True)
            refuse_symlinks_in(self.run_dir)
            config = resolved_config(self.cfg)
            # A rerun from this file (--config-dir <run_dir> --config-name config_resolved) gets Hydra's
            # defaults, so the one Hydra setting the trust rules require travels with the record.
            record = {**config, "hydra": {"output_subdir": None}}
            atomic_write_text(
                self.run_dir / "config_resolved.yaml", OmegaConf.to_yaml(record), root=self.run_dir
            )
            write_fingerprint(self.run_dir, self.fingerprint())
            hub.emit(ev.PipelineStart(self.run_dir, config))

            stage = "data"
            with self._stage(hub, stage):
                data = c.data.load(c.prompts)
                atomic_write_json(self.run_dir / MANIFEST, data.manifest, root=self.run_dir)
            stage = "model"
            with self._stage(hub, stage):
                from transformers import set_seed

                # Before loading: a fresh LoRA adapter's initial weights come from the global RNG, so
                # two runs of one config (or a run and its resume) start from the same adapter.
                set_seed(self.cfg.seed)
                loaded = c.model.load()
                loaded.model = c.training_loop.place(loaded.model)
            stage = "rewards"
            with self._stage(hub, stage):
                c.reward.bind(c.prompts, c.verifier)
                c.evaluation.bind(c.prompts, c.verifier)

            meta = {"model": loaded.name, "tasks": data.tasks, "data_seed": data.seed, "seed": self.cfg.seed}
            from rlvr.provenance import write_provenance

            result.files["provenance"] = str(
                write_provenance(
                    self.run_dir,
                    config,
                    {
                        **meta,
                        "prompt_hash": c.prompts.hash,
                        "hardware": c.training_loop.hardware.record(),
                        "resumed_from": str(self.resume[1]) if self.resume else None,
                    },
                )
            )

            def evaluate(
                model: Any, label: str, step: int, reuse: ev.EvalResult | None = None
            ) -> ev.EvalResult:
                """Evaluate ``model`` on the held-out split; ``reuse`` = an evaluation of these same
                weights (greedy decoding repeats it exactly), recorded under ``label`` without generating."""
                if reuse is not None:
                    path = c.evaluation.relabel(reuse.path, label, step) if reuse.path else None
                    event = dataclasses.replace(reuse, label=label, step=step, path=path)
                    hub.emit(event)
                    result.evaluations.append(event)
                    return event
                bar = hub.progress(
                    f"eval {label}",
                    len(data.eval)
                    if c.evaluation.max_examples is None
                    else min(len(data.eval), c.evaluation.max_examples),
                )
                try:
                    event = c.evaluation.evaluate(
                        model, loaded.tokenizer, data.eval, label, step, self.run_dir / "eval", meta, bar
                    )
                finally:
                    bar.close()
                hub.emit(event)
                result.evaluations.append(event)
                return event

            if c.evaluation.baseline and self.resume is None:
                stage = "baseline_eval"
                with self._stage(hub, stage):
                    evaluate(loaded.model, "baseline", 0)
            stage = "train"
            with self._stage(hub, stage):
                outcome = c.training_loop.run(
                    model=loaded.model,
                    tokenizer=loaded.tokenizer,
                    train_dataset=data.train,
                    rewards=c.reward,
                    prompt=c.prompts,
                    emit=hub.emit,
                    evaluate=evaluate,
                    eval_every=c.evaluation.every_n_steps,
                    run_dir=self.run_dir,
                    resume=self.resume,
                    guard=guard,
                )
            stage = "final_eval"
            with self._stage(hub, stage):
                trained = sum(outcome.steps.values())
                same_weights = outcome.eval_of_last_weights() or next(
                    (e for e in result.evaluations if e.label == "baseline" and not trained), None
                )
                evaluate(outcome.model, "final", trained, same_weights)
            stage = "save"
            with self._stage(hub, stage):
                final_dir = self.run_dir / "final"
                atomic_write_json(final_dir / MANIFEST, data.manifest, root=self.run_dir)
                outcome.model.save_pretrained(final_dir)
                loaded.tokenizer.save_pretrained(final_dir)
                if loaded.quantization:  # the adapter's base is quantised: say so, for whoever loads it
                    atomic_write_json(
                        final_dir / QUANTIZATION_FILE,
                        {"quantization": loaded.quantization},
                        root=self.run_dir,
                    )
                result.files["final model"] = str(final_dir)
            stage = "report"
            with self._stage(hub, stage):
                from rlvr.report import write_report

                result.files.update(
                    write_report(self.run_dir, result.evaluations, outcome, meta, time.perf_counter() - start)
                )
            result.files["metrics"] = str(self.run_dir / "metrics.jsonl")
            result.status = "COMPLETED"
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
            raise
        finally:
            summary = {
                "evaluations": [e.record() for e in result.evaluations],
                "changes": _stage_changes(result.evaluations),
                "files": result.files,
            }
            hub.emit(ev.PipelineEnd(result.status, time.perf_counter() - start, summary))
            with contextlib.suppress(Exception):
                c.verifier.close()
            hub.close()
            guard.__exit__()
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
