"""Benchmark: N models x M tasks, each (model, task) cell evaluated once, saved atomically, resumable.

Every cell uses the same PromptTemplate, extraction and sandboxed verifiers as
training, on a fixed test set per task (same seed for every model). Cells are
grouped by model so each model loads once per worker. With several CUDA
devices, models go to devices round-robin, one worker process per device; on
CPU one process generates in batches.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from rlvr.benchmark.results import CellFingerprint, CellResult, CellStore, SampleRecord, write_reports
from rlvr.config_errors import ConfigIssue, ConfigValidationError, suggest
from rlvr.data.reasoning_gym import generate_entries, task_names, to_dataset

log = logging.getLogger(__name__)
MODEL_CONF_DIR = Path(__file__).resolve().parents[3] / "conf" / "model"


@dataclass(frozen=True)
class Cell:
    model: str
    task: str


def model_component(spec: str, conf_dir: Path = MODEL_CONF_DIR) -> Any:
    """A model component for ``spec``: a conf/model option name, else an HF id / local dir / adapter dir.

    The config group is the registry: ``smollm2_135m`` or ``tiny`` compose conf/model/<spec>.yaml.
    """
    if (conf_dir / f"{spec}.yaml").is_file():
        from hydra import compose, initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra

        if GlobalHydra.instance().is_initialized():  # inside the Hydra app: its search path has conf/
            cfg = compose(config_name="config", overrides=[f"model={spec}"])
        else:
            with initialize_config_dir(config_dir=str(conf_dir.parent), version_base="1.3"):
                cfg = compose(config_name="config", overrides=[f"model={spec}"])
        return instantiate(cfg.model, _convert_="all")
    from rlvr.models import HFModel

    return HFModel(name_or_path=spec)


def assign_devices(models: Sequence[str], devices: Sequence[str]) -> dict[str, list[str]]:
    """Round-robin models over devices (a model's cells stay on one device, so it loads once)."""
    plan: dict[str, list[str]] = {d: [] for d in devices}
    for i, model in enumerate(models):
        plan[devices[i % len(devices)]].append(model)
    return plan


def visible_devices(devices: str | list[str]) -> list[str]:
    """``auto`` -> every CUDA device, else ``["cpu"]``; a list is taken as given."""
    if devices != "auto":
        return list(devices)
    import torch

    n = torch.cuda.device_count()
    return [f"cuda:{i}" for i in range(n)] if n else ["cpu"]


class Benchmark:
    """Evaluate ``models`` x ``tasks`` and write per-task and all-task JSON plus charts.

    Args:
        models: conf/model option names, HF ids, local dirs, or training checkpoints (LoRA adapters auto-detected).
        tasks: reasoning-gym task names.
        task_params: optional generator parameters per task (``{basic_arithmetic: {max_digits: 1}}``).
        num_examples: test questions per task.
        output_dir: where cells/, results_*.json and charts go; reruns resume from cells/.
        devices: ``auto`` or an explicit list such as ``[cuda:0, cuda:1]``.
        seed: test-set seed shared by every model.
    """

    def __init__(
        self,
        models: list[str],
        tasks: list[str],
        num_examples: int,
        output_dir: str,
        seed: int,
        task_params: dict[str, dict[str, Any]] | None = None,
        devices: str | list[str] = "auto",
    ):
        self.models = list(models)
        self.tasks = list(tasks)
        self.task_params = dict(task_params or {})
        self.num_examples = num_examples
        self.output_dir = Path(output_dir)
        self.devices = devices
        self.seed = seed

    def validate(self) -> list[ConfigIssue]:
        issues = []
        known = task_names()
        for task in self.tasks:
            if task not in known:
                issues.append(
                    ConfigIssue("benchmark.tasks", task, "not a reasoning-gym task", suggest(task, known))
                )
        for task in self.task_params:
            if task not in self.tasks:
                issues.append(
                    ConfigIssue(
                        f"benchmark.task_params.{task}",
                        task,
                        "task not in benchmark.tasks",
                        "add it to benchmark.tasks or remove its params",
                    )
                )
        if not self.models:
            issues.append(ConfigIssue("benchmark.models", [], "no models", "benchmark.models=[smollm2_135m]"))
        for spec in self.models:
            path = Path(spec)
            looks_local = spec.startswith((".", "/", "~")) or (len(path.parts) > 2)
            if (
                looks_local
                and not (MODEL_CONF_DIR / f"{spec}.yaml").is_file()
                and not path.expanduser().exists()
            ):
                issues.append(
                    ConfigIssue(
                        "benchmark.models",
                        spec,
                        "local path does not exist",
                        "check the path (a checkpoint dir or outputs/.../final)",
                    )
                )
        if self.num_examples < 1:
            issues.append(
                ConfigIssue("benchmark.num_examples", self.num_examples, "must be >= 1", "set e.g. 100")
            )
        return issues

    def cells(self) -> list[Cell]:
        return [Cell(m, t) for m in self.models for t in self.tasks]

    def fingerprint(self, evaluator: Any, prompt: Any) -> CellFingerprint:
        return CellFingerprint(
            prompt_hash=prompt.hash,
            seed=self.seed,
            num_examples=self.num_examples,
            k=evaluator.num_samples,
            generation={k: getattr(evaluator, k) for k in ("temperature", "max_new_tokens")},
        )

    def run_models(
        self, models: list[str], device: str, evaluator: Any, prompt: Any, progress: Any = None
    ) -> None:
        """Evaluate every unfinished cell of ``models`` on ``device`` (one worker's share)."""
        store = CellStore(self.output_dir)
        fingerprint = self.fingerprint(evaluator, prompt)
        for spec in models:
            todo = [t for t in self.tasks if not store.done(spec, t, fingerprint)]
            if not todo:
                log.info("all cells of %s already done; skipping", spec)
                continue
            loaded = model_component(spec).load()
            loaded.model.to(device)
            for task in todo:
                params = self.task_params.get(task, {})
                entries = generate_entries(task, params, self.num_examples, self.seed)
                dataset = to_dataset(entries, task, prompt)
                started = datetime.now(timezone.utc).isoformat(timespec="seconds")
                t0 = time.perf_counter()
                result = evaluator.evaluate_questions(loaded.model, loaded.tokenizer, dataset)
                wall = time.perf_counter() - t0
                per_sample = wall / max(1, len(result.samples))
                cell = CellResult(
                    model=spec,
                    task=task,
                    prompt_hash=prompt.hash,
                    seed=self.seed,
                    num_examples=self.num_examples,
                    k=evaluator.num_samples,
                    summary=result.summary,
                    samples=[
                        SampleRecord(
                            index=r.index,
                            question=r.question,
                            completions=r.completions,
                            answers=r.answers,
                            scores=r.scores,
                            seconds=round(per_sample, 4),
                            reference=r.reference,
                        )
                        for r in result.samples
                    ],
                    samples_per_second=result.samples_per_second,
                    wall_seconds=wall,
                    started=started,
                    finished=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    generation=fingerprint.generation,
                )
                store.save(cell)
                if progress is not None:
                    progress(cell)
            del loaded


def _worker(cfg_yaml: str, models: list[str], device: str) -> None:
    """Entry of one device's worker process (spawned, so CUDA initialises cleanly in each)."""
    cfg = OmegaConf.create(cfg_yaml)
    bench, evaluator, prompt, verifier = _build(cfg)
    try:
        bench.run_models(models, device, evaluator, prompt)
    finally:
        verifier.close()


def _build(cfg: DictConfig) -> tuple[Benchmark, Any, Any, Any]:
    from rlvr.pipeline.validation import check_targets

    issues = check_targets(cfg)
    if issues:
        raise ConfigValidationError(issues)
    bench = instantiate(cfg.benchmark, _convert_="all")
    evaluator = instantiate(cfg.evaluation, _convert_="all")
    prompt = instantiate(cfg.prompts, _convert_="all")
    verifier = instantiate(cfg.verifier, _convert_="all")
    issues = bench.validate() + evaluator.validate()
    if issues:
        verifier.close()
        raise ConfigValidationError(issues)
    evaluator.bind(prompt, verifier)
    return bench, evaluator, prompt, verifier


def run(cfg: DictConfig) -> list[Path]:
    """The benchmark app (``python run_pipeline.py --config-name benchmark ...``)."""
    bench, evaluator, prompt, verifier = _build(cfg)
    if cfg.validate_only:
        verifier.close()
        print("configuration OK")
        return []
    devices = visible_devices(bench.devices)
    plan = {d: ms for d, ms in assign_devices(bench.models, devices).items() if ms}
    total = len(bench.cells())
    done = [0]

    def report(cell: CellResult) -> None:
        done[0] += 1
        s = cell.summary
        print(
            f"[{done[0]}/{total}] {cell.model} | {cell.task}: accuracy {s.accuracy:.1%} "
            f"({s.ci_low:.1%}-{s.ci_high:.1%}), {cell.samples_per_second:.2f} samples/s",
            flush=True,
        )

    try:
        if len(plan) == 1:
            [(device, models)] = plan.items()
            bench.run_models(models, device, evaluator, prompt, report)
        else:
            import multiprocessing as mp

            ctx = mp.get_context("spawn")
            cfg_yaml = OmegaConf.to_yaml(cfg, resolve=True)
            procs = [ctx.Process(target=_worker, args=(cfg_yaml, ms, d)) for d, ms in plan.items()]
            for p in procs:
                p.start()
            for p in procs:
                p.join()
            failed = [p.exitcode for p in procs if p.exitcode]
            if failed:
                raise RuntimeError(
                    f"{len(failed)} device worker(s) failed; finished cells are kept, rerun to resume"
                )
    finally:
        verifier.close()
    paths = write_reports(CellStore(bench.output_dir), bench.output_dir)
    for p in paths:
        print(p)
    return paths
