"""Benchmark: N models x M tasks, each (model, task) cell evaluated once, saved atomically, resumable.

Every cell uses the same PromptTemplate, extraction and sandboxed verifiers as
training, on a fixed test set per task (same seed for every model). Cells are
grouped by model so each model loads once per worker. With several CUDA
devices, models go to devices round-robin, one worker process per device; on
CPU one process generates in batches.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from rlvr.benchmark.results import CellFingerprint, CellResult, CellStore, write_reports
from rlvr.config_errors import ConfigIssue, ConfigValidationError, suggest
from rlvr.data import identity
from rlvr.data.reasoning_gym import split_entries, task_names, to_dataset
from rlvr.models import HFModel
from rlvr.models.loader import adapter_base

log = logging.getLogger(__name__)
MODEL_CONF_DIR = Path(__file__).resolve().parents[3] / "conf" / "model"


@dataclass(frozen=True)
class Cell:
    model: str
    task: str


_OPTION = re.compile(r"[A-Za-z0-9_]+")
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")


def spec_kind(spec: str, conf_dir: Path = MODEL_CONF_DIR) -> str | None:
    """``option`` (a conf/model name), ``local`` (an existing model directory), ``hub`` (org/name), or
    None. An option is a plain identifier, so a spec can never name a path into conf/."""
    if _OPTION.fullmatch(spec) and (conf_dir / f"{spec}.yaml").is_file():
        return "option"
    if Path(spec).expanduser().is_dir():
        return "local"
    if _HUB_ID.fullmatch(spec) and ".." not in spec:
        return "hub"
    return None


def model_component(spec: str, conf_dir: Path = MODEL_CONF_DIR) -> Any:
    """A model component for ``spec``: a conf/model option composed like training's (and checked by
    the same target rules before it is instantiated), else an HF model by local dir or hub id."""
    kind = spec_kind(spec, conf_dir)
    if kind is None:
        raise ConfigValidationError([_spec_issue(spec)])
    if kind == "option":
        from hydra import compose, initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra

        from rlvr.pipeline.validation import check_targets

        if GlobalHydra.instance().is_initialized():  # inside the Hydra app: its search path has conf/
            cfg = compose(config_name="config", overrides=[f"model={spec}"])
        else:
            with initialize_config_dir(config_dir=str(conf_dir.parent), version_base="1.3"):
                cfg = compose(config_name="config", overrides=[f"model={spec}"])
        node = OmegaConf.create({"model": OmegaConf.to_container(cfg.model, resolve=True)})
        issues = check_targets(node)
        if issues:
            raise ConfigValidationError(issues)
        return instantiate(node.model, _convert_="all")
    from rlvr.models import HFModel

    return HFModel(name_or_path=spec)


def _spec_issue(spec: str) -> ConfigIssue:
    return ConfigIssue(
        "benchmark.models",
        spec,
        "neither a conf/model option name, an existing model directory, nor a hub id (org/name)",
        "use e.g. smollm2_135m, outputs/<date>/<time>/final or Qwen/Qwen2.5-0.5B-Instruct",
    )


def weights_hash(component: Any) -> str:
    """Hash of what decides a model's outputs: its weight and config files, or, for a model that
    is generated rather than loaded (the tiny random model), its own settings."""
    path = Path(component.model_path()) if hasattr(component, "model_path") else None
    if path is None or not path.is_dir():
        settings = {k: v for k, v in vars(component).items() if not k.startswith("_")}
        return (
            "config:"
            + hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]
        )
    digest = hashlib.sha256()
    for file in sorted(path.iterdir()):
        if file.is_file() and file.suffix in {".safetensors", ".bin", ".json", ".gguf", ".model", ".txt"}:
            digest.update(file.name.encode())
            with file.open("rb") as fh:
                for chunk in iter(lambda fh=fh: fh.read(1 << 20), b""):
                    digest.update(chunk)
    base = adapter_base(path)
    if base is not None:  # an adapter's outputs depend on its base model too
        digest.update(weights_hash(HFModel(name_or_path=base)).encode())
    return digest.hexdigest()[:16]


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
        task_params: optional generator parameters per task (``{basic_arithmetic: {max_digits: 1}}``);
            entries for tasks not in ``tasks`` are ignored.
        num_examples: test questions per task (distinct, all on the held-out side of the split rule).
        output_dir: where cells/, results_*.json and charts go; reruns resume from cells/.
        devices: ``auto`` or an explicit list such as ``[cuda:0, cuda:1]``.
        seed: test-set seed shared by every model.
        allow_train_overlap: evaluate a model on test questions it was trained on (flagged in every
            output) instead of refusing.
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
        allow_train_overlap: bool = False,
    ):
        self.models = list(models)
        self.tasks = list(tasks)
        self.task_params = dict(task_params or {})
        self.num_examples = num_examples
        self.output_dir = Path(output_dir)
        self.devices = devices
        self.seed = seed
        self.allow_train_overlap = allow_train_overlap

    def validate(self) -> list[ConfigIssue]:
        issues = []
        known = task_names()
        for task in self.tasks:
            if task not in known:
                issues.append(
                    ConfigIssue("benchmark.tasks", task, "not a reasoning-gym task", suggest(task, known))
                )
        if not self.models:
            issues.append(ConfigIssue("benchmark.models", [], "no models", "benchmark.models=[smollm2_135m]"))
        for spec in self.models:
            kind = spec_kind(spec)
            if kind is None:
                issues.append(_spec_issue(spec))
            elif kind == "option":  # its own checks, before any cell runs (e.g. unsloth without CUDA)
                issues += [
                    replace(i, key=f"benchmark.models[{spec}]: {i.key}")
                    for i in model_component(spec).validate()
                ]
        if self.num_examples < 1:
            issues.append(
                ConfigIssue("benchmark.num_examples", self.num_examples, "must be >= 1", "set e.g. 100")
            )
        return issues

    def cells(self) -> list[Cell]:
        return [Cell(m, t) for m in self.models for t in self.tasks]

    def test_set(self, task: str, prompt: Any) -> Any:
        """The task's benchmark questions: distinct, held out by content, the same for every model."""
        params = self.task_params.get(task, {})
        entries = split_entries(task, params, "test", self.num_examples, self.seed, "benchmark.num_examples")
        return to_dataset(entries, task, prompt)

    def fingerprint(
        self, evaluator: Any, prompt: Any, verifier: Any, task: str, questions: list[str], weights: str
    ) -> CellFingerprint:
        return CellFingerprint(
            prompt_hash=prompt.hash,
            seed=self.seed,
            num_examples=self.num_examples,
            k=evaluator.num_samples,
            generation={k: getattr(evaluator, k) for k in ("temperature", "max_new_tokens", "backend")},
            task_params=self.task_params.get(task, {}),
            test_set=identity.set_hash(identity.ids_of((task, q) for q in questions)),
            model_weights=weights,
            verifier={
                k: getattr(verifier, k, None)
                for k in ("timeout_s", "memory_limit_mb", "max_answer_chars", "failure_reward")
            },
            split_rule=identity.SPLIT_RULE["version"],
        )

    def train_overlap(self, spec: str, task: str, questions: list[str]) -> int | None:
        """How many of ``questions`` the model's training manifest lists; refused unless allowed."""
        if spec_kind(spec) != "local":
            return None
        trained = identity.trained_ids(spec)
        if trained is None:
            return None
        overlap = sum(qid in trained for qid in identity.ids_of((task, q) for q in questions))
        if overlap and not self.allow_train_overlap:
            raise ConfigValidationError(
                [
                    ConfigIssue(
                        "benchmark.models",
                        spec,
                        f"was trained on {overlap} of the {len(questions)} {task} test questions "
                        f"(its {identity.MANIFEST}); its accuracy would not be held-out accuracy",
                        "benchmark it on other tasks or parameters, or set benchmark.allow_train_overlap=true "
                        "to measure anyway (flagged in every output)",
                    )
                ]
            )
        if overlap:
            log.warning(
                "%s saw %d of the %d %s test questions in training (allowed)",
                spec,
                overlap,
                len(questions),
                task,
            )
        return overlap

    def run_models(
        self, models: list[str], device: str, evaluator: Any, prompt: Any, verifier: Any, progress: Any = None
    ) -> None:
        """Evaluate every unfinished cell of ``models`` on ``device`` (one worker's share)."""
        store = CellStore(self.output_dir)
        test_sets = {task: self.test_set(task, prompt) for task in self.tasks}
        for spec in models:
            component = model_component(spec)
            weights = weights_hash(component)
            plan = {}
            for task, dataset in test_sets.items():
                questions = list(dataset["question"])
                overlap = self.train_overlap(spec, task, questions)
                fingerprint = self.fingerprint(evaluator, prompt, verifier, task, questions, weights)
                if not store.done(spec, task, fingerprint):
                    plan[task] = (fingerprint, overlap)
            if not plan:
                log.info("all cells of %s already done; skipping", spec)
                continue
            loaded = component.load()
            if not getattr(loaded.model, "hf_device_map", None):  # a dispatching loader (unsloth) placed it
                loaded.model.to(device)
            for task, (fingerprint, overlap) in plan.items():
                started = datetime.now(timezone.utc).isoformat(timespec="seconds")
                t0 = time.perf_counter()
                result = evaluator.evaluate_questions(loaded.model, loaded.tokenizer, test_sets[task])
                cell = CellResult(
                    model=spec,
                    task=task,
                    fingerprint=fingerprint,
                    evaluation=result,
                    wall_seconds=time.perf_counter() - t0,
                    started=started,
                    finished=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    train_overlap=overlap,
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
        bench.run_models(models, device, evaluator, prompt, verifier)
    finally:
        verifier.close()


def _build(cfg: DictConfig) -> tuple[Benchmark, Any, Any, Any]:
    from rlvr.pipeline.gate import config_issues, refuse

    issues = config_issues(cfg, {"evaluation": {"prompt", "scorer"}})
    if issues:
        raise ConfigValidationError(issues)
    bench = instantiate(cfg.benchmark, _convert_="all")
    prompt = instantiate(cfg.prompts, _convert_="all")
    verifier = instantiate(cfg.verifier, _convert_="all")
    # A partial, then the runtime objects: Hydra would turn the PromptTemplate dataclass into a dict.
    evaluator = instantiate(cfg.evaluation, _convert_="all", _partial_=True)(prompt=prompt, scorer=verifier)
    issues = bench.validate() + evaluator.validate()
    try:
        refuse(issues)
    except ConfigValidationError:
        verifier.close()
        raise
    return bench, evaluator, prompt, verifier


def run(cfg: DictConfig) -> list[Path]:
    """The benchmark app (``python run_pipeline.py --config-name benchmark ...``)."""
    from rlvr.logs import library_output_to_log_file

    library_output_to_log_file()
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
        flag = f"  TRAINED ON {cell.train_overlap} OF THESE QUESTIONS" if cell.train_overlap else ""
        print(
            f"[{done[0]}/{total}] {cell.model} | {cell.task}: accuracy {s.accuracy:.1%} "
            f"({s.ci_low:.1%}-{s.ci_high:.1%}), {cell.samples_per_second:.2f} samples/s{flag}",
            flush=True,
        )

    try:
        if len(plan) == 1:
            [(device, models)] = plan.items()
            bench.run_models(models, device, evaluator, prompt, verifier, report)
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
    unused = sorted(set(bench.task_params) - set(bench.tasks))
    if unused:
        print(f"note: benchmark.task_params for {unused} ignored (not in benchmark.tasks)")
    paths = write_reports(CellStore(bench.output_dir).requested(bench.models, bench.tasks), bench.output_dir)
    for p in paths:
        print(p)
    return paths
