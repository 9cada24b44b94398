"""Benchmark: N models x M tasks, each (model, task) cell evaluated once, saved atomically, resumable.

The models are conf/model nodes that Hydra composes under ``benchmark.models`` (conf/benchmark.yaml
says how to add one), built by the pipeline's own component builder. Every cell uses the same
PromptTemplate, extraction and sandboxed verifiers as training, on a fixed test set per task (same
seed for every model). Cells are grouped by model so each model loads once per worker. With
several CUDA devices, models go to devices round-robin, one worker process per device; on CPU one
process generates in batches.

A cell stored by an earlier run is reused only when its fingerprint matches and its stored answers,
scored again by this run's verifier on the regenerated test questions, give its stored scores; every
report marks it reused (SECURITY.md "Benchmark"): a reused number was not measured by this run.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from omegaconf import DictConfig, OmegaConf
from pydantic import Field

from rlvr.benchmark.results import CellFingerprint, CellResult, CellStore, degenerate_cells, write_reports
from rlvr.data import identity
from rlvr.data.reasoning_gym import split_entries, task_names, to_dataset
from rlvr.evaluation.results import answer_spread
from rlvr.issues import ConfigIssue, ConfigValidationError, suggest
from rlvr.model import HFModel
from rlvr.model.loader import adapter_base

if TYPE_CHECKING:
    from rlvr.config.gate import GateResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cell:
    model: str
    task: str


def _under(name: str, issue: ConfigIssue) -> ConfigIssue:
    """A model's own issue (``model.dtype``) at its place here (``benchmark.models.<name>.dtype``)."""
    head, _, rest = issue.key.partition(".")
    if head != "model":
        return replace(issue, key=f"benchmark.models.{name}: {issue.key}")
    return replace(issue, key=".".join(["benchmark.models", name, *([rest] if rest else [])]))


# The files that decide a model's outputs; .jinja: a chat template beside tokenizer_config.json
# (transformers prefers that file).
HASHED_SUFFIXES = frozenset({".safetensors", ".bin", ".json", ".gguf", ".model", ".txt", ".jinja"})


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
        if file.is_file() and file.suffix in HASHED_SUFFIXES:
            digest.update(file.name.encode())
            with file.open("rb") as fh:
                for chunk in iter(functools.partial(fh.read, 1 << 20), b""):
                    digest.update(chunk)
    base = adapter_base(path)
    if base is not None:  # an adapter's outputs depend on its base model too
        digest.update(weights_hash(HFModel(name_or_path=base)).encode())
    return digest.hexdigest()[:16]


def tokenizer_of(component: Any) -> Any:
    """The tokenizer a model component will load (its base model's, for a LoRA adapter), read
    without the weights: the benchmark's prompt hash covers the chat template it applies."""
    from transformers import AutoTokenizer

    path = component.model_path()
    kwargs = {"trust_remote_code": getattr(component, "trust_remote_code", False)}
    if getattr(component, "gguf_file", None):
        kwargs["gguf_file"] = component.gguf_file
    return AutoTokenizer.from_pretrained(adapter_base(path) or path, **kwargs)


def rescore_problem(cell: CellResult, rows: Any, evaluator: Any) -> str | None:
    """None when ``cell``'s stored answers, extracted again from its stored completions and scored
    by ``evaluator``'s verifier against the test questions ``rows``, give exactly its stored answers
    and scores; else what differs. A cell file edited to all-correct is caught here unless its
    completions were rewritten too, which is why a reused cell is marked in every report."""
    from rlvr.verifier import ScoreRequest

    samples = cell.evaluation.samples
    if len(samples) != len(rows):
        return f"{len(samples)} stored questions, the test set has {len(rows)}"
    requests, stored = [], []
    for i, sample in enumerate(samples):
        expected = (rows["task"][i], rows["question"][i], rows["answer"][i])
        if (sample.index, sample.task, sample.question, sample.reference) != (i, *expected):
            return f"stored question {i} is not test question {i}"
        entry = json.loads(rows["entry"][i])
        for text in sample.completions:
            requests.append(
                ScoreRequest(task=sample.task, answer=evaluator.prompt.extract(text), entry=entry)
            )
        stored += list(zip(sample.answers, sample.scores, strict=False))
        if not (len(sample.answers) == len(sample.scores) == len(sample.completions)):
            return f"stored question {i} has {len(sample.completions)} completions but {len(sample.scores)} scores"
    fresh = [
        (req.answer, score.value)
        for req, score in zip(requests, evaluator.verifier.score(requests), strict=True)
    ]
    wrong = sum(a != b for a, b in zip(fresh, stored, strict=True))
    return f"{wrong} of {len(fresh)} stored answers do not score as stored" if wrong else None


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
        models: model components by name (conf/model nodes; the name labels their results).
        only: the names this run evaluates (a fan-out job's share); None: all of ``models``.
        tasks: reasoning-gym task names.
        task_params: generator parameters per task (``{basic_arithmetic: {max_digits: 1}}``);
            entries for tasks not in ``tasks`` are ignored.
        num_examples: test questions per task (distinct, all on the held-out side of the split rule).
        output_dir: where cells/, results_*.json and charts go; reruns resume from cells/ (null: the
            run's directory, set by run()).
        devices: ``auto`` or an explicit list such as ``[cuda:0, cuda:1]``.
        seed: test-set seed shared by every model.
        allow_train_overlap: evaluate a model on test questions it was trained on (flagged in every
            output) instead of refusing.
    """

    def __init__(
        self,
        models: dict[str, Any],
        only: list[str] | None,
        tasks: list[str],
        task_params: dict[str, dict[str, Any]] | None,
        num_examples: Annotated[int, Field(ge=1, examples=[100])],
        output_dir: str | None,
        devices: str | list[str],
        seed: int,
        allow_train_overlap: bool,
    ):
        self.models = dict(models)
        self.names = list(models) if only is None else list(only)
        self.tasks = list(tasks)
        self.task_params = dict(task_params or {})
        self.num_examples = num_examples
        # null: this run's directory, which run() sets before it builds (the gate builds to judge)
        self.output_dir = Path(output_dir) if output_dir is not None else None
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
            issues.append(
                ConfigIssue(
                    "benchmark.models",
                    {},
                    "no models",
                    "add one: '+model@benchmark.models.base=smollm2_135m'",
                )
            )
        for name in self.names:
            if name not in self.models:
                issues.append(
                    ConfigIssue(
                        "benchmark.only",
                        name,
                        "not a name in benchmark.models",
                        f"{suggest(name, self.models)} (names: {sorted(self.models)})",
                    )
                )
        for name, model in self.models.items():  # before any cell runs (e.g. unsloth without CUDA)
            issues += [_under(name, issue) for issue in model.validate()]
            if getattr(model, "random_weights", False):  # a shape model (rlvr.model.loader.ShapeModel)
                issues.append(
                    ConfigIssue(
                        f"benchmark.models.{name}",
                        getattr(model, "architecture", name),
                        "a shape model has random weights: its accuracy measures nothing",
                        "benchmark trained models; measure a shape's memory and speed with run_pipeline.py model=shape",
                    )
                )
        return issues

    def cells(self) -> list[Cell]:
        return [Cell(m, t) for m in self.names for t in self.tasks]

    @property
    def out(self) -> Path:
        """The output directory (run() sets it to the run directory when the config says null)."""
        if self.output_dir is None:
            raise ValueError("benchmark.output_dir is unset: run() sets it before it evaluates")
        return self.output_dir

    def test_set(self, task: str, prompt: Any) -> Any:
        """The task's benchmark questions: distinct, held out by content, the same for every model."""
        params = self.task_params.get(task, {})
        entries = split_entries(task, params, "test", self.num_examples, self.seed, "benchmark.num_examples")
        return to_dataset(entries, task, prompt)

    def fingerprint(
        self,
        evaluator: Any,
        prompt_hash: str,
        verifier: Any,
        task: str,
        questions: list[str],
        weights: str,
        prompt_text_hash: str = "",
    ) -> CellFingerprint:
        return CellFingerprint(
            prompt_hash=prompt_hash,
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
            prompt_text_hash=prompt_text_hash,
        )

    def train_overlap(self, name: str, path: Path, task: str, questions: list[str]) -> int | None:
        """How many of ``questions`` the training manifest of the model at ``path`` lists; refused unless allowed."""
        trained = identity.trained_ids(path) if path.is_dir() else None
        if trained is None:
            return None
        overlap = sum(qid in trained for qid in identity.ids_of((task, q) for q in questions))
        if overlap and not self.allow_train_overlap:
            raise ConfigValidationError(
                [
                    ConfigIssue(
                        f"benchmark.models.{name}",
                        str(path),
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
                name,
                overlap,
                len(questions),
                task,
            )
        return overlap

    def reusable(
        self, store: CellStore, name: str, task: str, fingerprint: CellFingerprint, rows: Any, evaluator: Any
    ) -> bool:
        """A stored cell under ``fingerprint`` whose stored answers score as stored (rescore_problem)."""
        if not store.done(name, task, fingerprint):
            return False
        problem = rescore_problem(store.load(name, task), rows, evaluator)
        if problem:
            log.warning("recomputing %s on %s: its stored answers were re-scored: %s", name, task, problem)
        return problem is None

    def run_models(
        self,
        names: list[str],
        device: str,
        evaluator: Any,
        prompt: Any,
        verifier: Any,
        progress: Any = None,
        run_id: str | None = None,
    ) -> None:
        """Evaluate every unfinished cell of the models ``names`` on ``device`` (one worker's share);
        the cells it measures record ``run_id``."""
        store = CellStore(self.out)
        test_sets = {task: self.test_set(task, prompt) for task in self.tasks}
        for name in names:
            component = self.models[name]
            weights = weights_hash(component)
            prompt_hash = prompt.hash_for(tokenizer_of(component))
            path = Path(component.model_path())
            plan = {}
            for task, dataset in test_sets.items():
                questions = list(dataset["question"])
                overlap = self.train_overlap(name, path, task, questions)
                fingerprint = self.fingerprint(
                    evaluator, prompt_hash, verifier, task, questions, weights, prompt.text_hash
                )
                if not self.reusable(store, name, task, fingerprint, evaluator.rows(dataset), evaluator):
                    plan[task] = (fingerprint, overlap)
            if not plan:
                log.info("all cells of %s already done; skipping", name)
                continue
            loaded = component.load()
            prompt.bind(loaded.tokenizer)  # the template it renders with (a loader may fix it up)
            if prompt.hash != prompt_hash:
                plan = {t: (replace(f, prompt_hash=prompt.hash), o) for t, (f, o) in plan.items()}
            if not getattr(loaded.model, "hf_device_map", None):  # a dispatching loader (unsloth) placed it
                loaded.model.to(device)
            for task, (fingerprint, overlap) in plan.items():
                started = datetime.now(timezone.utc).isoformat(timespec="seconds")
                t0 = time.perf_counter()
                result = evaluator.evaluate_questions(loaded.model, loaded.tokenizer, test_sets[task])
                cell = CellResult(
                    model=name,
                    task=task,
                    fingerprint=fingerprint,
                    evaluation=result,
                    wall_seconds=time.perf_counter() - t0,
                    started=started,
                    finished=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    train_overlap=overlap,
                    run_id=run_id,
                )
                store.save(cell)
                if progress is not None:
                    progress(cell)
            del loaded


def _worker(cfg_yaml: str, names: list[str], device: str, run_id: str) -> None:
    """Entry of one device's worker process (spawned, so CUDA initialises cleanly in each)."""
    cfg = OmegaConf.create(cfg_yaml)
    bench, evaluator, prompt, verifier = _build(cfg)
    try:
        bench.run_models(names, device, evaluator, prompt, verifier, run_id=run_id)
    finally:
        verifier.close()


def _build(cfg: DictConfig) -> tuple[Benchmark, Any, Any, Any]:
    """The benchmark, its evaluator, prompt and verifier, built as the pipeline builds its components
    (rlvr.pipeline.wiring; the models, as conf/model nodes, with the benchmark). The config gate
    (rlvr.config.gate.check) has judged them."""
    from rlvr.pipeline.wiring import build_all

    built = build_all(cfg, BUILDS)
    if built.issues:  # a caller that skipped the gate
        if "verifier" in built.components:
            built.components["verifier"].close()
        raise ConfigValidationError(built.issues)
    c = built.components
    return c["benchmark"], c["evaluation"], c["prompts"], c["verifier"]


def _progress(total: int) -> Callable[[CellResult], None]:
    """One console line per finished cell: ``[2/6] tiny | leg_counting: accuracy 50.0% (...)``."""
    done = itertools.count(1)

    def report(cell: CellResult) -> None:
        s = cell.summary
        flag = f"  TRAINED ON {cell.train_overlap} OF THESE QUESTIONS" if cell.train_overlap else ""
        print(
            f"[{next(done)}/{total}] {cell.model} | {cell.task}: accuracy {s.accuracy:.1%} "
            f"({s.ci_low:.1%}-{s.ci_high:.1%}), {cell.samples_per_second:.2f} samples/s{flag}",
            flush=True,
        )

    return report


def results_table(cells: Sequence[CellResult]) -> Any:
    """A model x task rich table of the cells: ``accuracy [95% CI] n=``, ``*`` on a reused cell,
    ``!`` on one whose questions the model was trained on and ``~`` on one whose answers are degenerate
    (rlvr.evaluation.results.AnswerSpread); a mean column over several tasks."""
    from rich.table import Table

    models = list(dict.fromkeys(c.model for c in cells))
    tasks = list(dict.fromkeys(c.task for c in cells))
    by = {(c.model, c.task): c for c in cells}
    table = Table(
        title="Benchmark accuracy (pass@1, 95% CI; * reused, ! trained on these questions, ~ degenerate answers)"
    )
    for column in ("model", *tasks, *(["mean"] if len(tasks) > 1 else [])):
        table.add_column(column, overflow="fold")
    for model in models:
        row, accs = [model], []
        for task in tasks:
            cell = by.get((model, task))
            if cell is None:
                row.append("-")
                continue
            s = cell.summary
            accs.append(s.accuracy)
            marks = ("*" if cell.reused else "") + ("!" if cell.train_overlap else "")
            marks += "~" if answer_spread(cell.evaluation).problem() else ""
            row.append(f"{s.accuracy:.1%} [{s.ci_low:.0%}-{s.ci_high:.0%}] n={s.n}{marks}")
        if len(tasks) > 1:
            row.append(f"{sum(accs) / len(accs):.1%}" if len(accs) == len(tasks) else "-")
        table.add_row(*row)
    return table


def run(checked: GateResult) -> list[Path]:
    """The benchmark app (``python run_pipeline.py --config-name benchmark ...``), over what the config
    gate built and passed (rlvr.config.gate.check). It emits the training run's lifecycle events to
    the observers the config names (none by default): ``on_pipeline_start``, the stages ``evaluate``
    and ``report`` (rlvr.pipeline.orchestrator.stage), ``on_error`` on a failure, ``on_pipeline_end``."""
    from rlvr import events as ev
    from rlvr.observers.base import ObserverHub
    from rlvr.pipeline.orchestrator import stage
    from rlvr.pipeline.wiring import observers_of
    from rlvr.records.provenance import resolved_config
    from rlvr.runtime.logs import library_output_to_log_file

    library_output_to_log_file()
    cfg, c = checked.cfg, checked.components
    bench, verifier = c["benchmark"], c["verifier"]
    if bench.output_dir is None:  # null: this run's directory (conf/benchmark.yaml)
        bench.output_dir = checked.run_dir
        cfg.benchmark.output_dir = str(checked.run_dir)  # the device workers build from the config
    if cfg.validate_only:
        verifier.close()
        print("configuration OK")
        return []
    hub, start, status, name = ObserverHub(observers_of(c)), time.perf_counter(), "FAILED", "evaluate"
    try:
        hub.emit(ev.PipelineStart(checked.run_dir, resolved_config(cfg)))
        with stage(hub, "evaluate"):
            run_id = _evaluate(cfg, bench, c)
        name = "report"
        with stage(hub, "report"):
            paths = _report(bench, run_id)
        status = "COMPLETED"
    except BaseException as exc:
        status = "INTERRUPTED" if isinstance(exc, KeyboardInterrupt) else "FAILED"
        hub.emit(ev.ErrorEvent(name, exc))
        raise
    finally:
        hub.emit(ev.PipelineEnd(status, time.perf_counter() - start))
        hub.close()
    return paths


def _evaluate(cfg: DictConfig, bench: Benchmark, c: dict[str, Any]) -> str:
    """Every unfinished cell, on each visible device; returns the id the cells this run measured carry
    (any other cell is reused)."""
    evaluator, prompt, verifier = c["evaluation"], c["prompts"], c["verifier"]
    devices = visible_devices(bench.devices)
    plan = {d: ms for d, ms in assign_devices(bench.names, devices).items() if ms}
    report = _progress(len(bench.cells()))
    run_id = secrets.token_hex(8)
    try:
        if len(plan) == 1:
            [(device, models)] = plan.items()
            bench.run_models(models, device, evaluator, prompt, verifier, report, run_id)
        else:
            import multiprocessing as mp

            ctx = mp.get_context("spawn")
            cfg_yaml = OmegaConf.to_yaml(cfg, resolve=True)
            procs = [ctx.Process(target=_worker, args=(cfg_yaml, ms, d, run_id)) for d, ms in plan.items()]
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
    return run_id


def _report(bench: Benchmark, run_id: str) -> list[Path]:
    """The reports, plots and table over every requested cell (this run's and reused ones)."""
    unused = sorted(set(bench.task_params) - set(bench.tasks))
    if unused:
        print(f"note: benchmark.task_params for {unused} ignored (not in benchmark.tasks)")
    from rlvr.benchmark import plot  # matplotlib is slow to import and only needed here

    cells = CellStore(bench.out).requested(bench.names, bench.tasks)
    for cell in cells:
        cell.reused = cell.run_id != run_id
        if cell.reused:
            s = cell.summary
            print(
                f"[reused] {cell.model} | {cell.task}: accuracy {s.accuracy:.1%} ({s.ci_low:.1%}-{s.ci_high:.1%}), "
                f"measured {cell.finished} by an earlier run; its stored answers re-scored, not regenerated",
                flush=True,
            )
    reports = write_reports(cells, bench.out)
    paths = reports + plot.draw_files([p for p in reports if p.suffix == ".json"])
    from rich.console import Console
    from rich.markup import escape

    console = Console(highlight=False)
    if not console.is_terminal:  # a log file: the table at its own width, not cut at 80 columns
        console.width = 200
    console.print(results_table(cells))
    if paired := next((p for p in reports if p.name == "paired_comparison.md"), None):
        print(paired.read_text(encoding="utf-8"))  # its degenerate cells' warnings at its end
    else:
        for warning in degenerate_cells(cells):
            console.print(f"[yellow]Warning:[/yellow] {escape(warning)}")
    for path in paths:
        print(path)
    return paths


# What the benchmark app builds (rlvr.pipeline.wiring), and the config gate judges (rlvr.config.gate):
# a device worker builds BUILDS, the app its observers too (where the config names any).
BUILDS = ("prompts", "verifier", "evaluation", "benchmark")
run.components = (*BUILDS, "observers")  # type: ignore[attr-defined]
