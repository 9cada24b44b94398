"""On-disk format of benchmark results: one atomic, resumable file per (model, task) cell, plus reports.

Layout under a benchmark root::

    root/cells/<slug(model)>__<task>.json     one finished cell (CellResult.to_dict())

and, written by :func:`write_reports` into an output directory (each run replaces them: a report
is recomputed from the cells the run asked for, so one directory holds one unambiguous report)::

    results_<task>.json                        {"kind": "task", ...}: every model on one task
    results_all_tasks.json                     {"kind": "all_tasks", ...}: every task + per-model average
    paired_comparison.md                       each pair of models on the same questions (diff, CI, McNemar)

(:func:`rlvr.benchmark.plot.draw_files` draws each beside it as ``.png``.)

A cell file only exists once the cell has finished (writes are atomic), so a crashed benchmark
resumes by skipping the cells for which :meth:`CellStore.done` is true.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from rlvr.evaluation.metrics import AccuracySummary, average_interval
from rlvr.evaluation.results import Evaluation, answer_spread, constant_gain, paired, per_question_accuracy
from rlvr.runtime.io import atomic_write_json, atomic_write_text
from rlvr.runtime.safe_json import loads

log = logging.getLogger(__name__)

FORMAT_VERSION = 2
TIMESTAMP_FORMAT = "%Y%m%d_%H%M%S"
KIND_CELL: Final = "cell"
KIND_TASK: Final = "task"
KIND_ALL_TASKS: Final = "all_tasks"

_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def slug(name: str, max_len: int = 60) -> str:
    """Filesystem-safe, collision-free name: a readable part plus a short hash of the exact input.

    The hash is what keeps "a/b" and "a_b" apart once both have become "a_b".

    >>> slug("Qwen/Qwen2.5-0.5B-Instruct")
    'Qwen_Qwen2.5-0.5B-Instruct-4b05be1d'
    """
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")[:max_len] or "x"
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:8]
    return f"{readable}-{digest}"


def safe_task_name(task: str) -> str:
    """The task name itself when it is already safe in a file name, else its :func:`slug`."""
    return task if _SAFE_NAME.fullmatch(task) else slug(task)


def _canonical(obj: Any) -> Any:
    # Compare what would be on disk: tuples become lists, and 1 == 1.0 after the round trip.
    return json.loads(json.dumps(obj, sort_keys=True))


@dataclass(frozen=True)
class CellFingerprint:
    """Everything that changes a cell's number; a stored cell is reused only if all of it matches."""

    prompt_hash: str
    seed: int
    num_examples: int
    k: int
    generation: dict[str, Any] = field(default_factory=dict, hash=False)
    """Generation settings (max_new_tokens, temperature, ...) as the caller configured them."""
    task_params: dict[str, Any] = field(default_factory=dict, hash=False)
    test_set: str = ""
    """Hash of the ordered question ids the cell is measured on (rlvr.data.identity.set_hash)."""
    model_weights: str = ""
    """Hash of the model's weight and config files (or of its config, for a generated model)."""
    verifier: dict[str, Any] = field(default_factory=dict, hash=False)
    split_rule: int = 0
    prompt_text_hash: str = ""
    """The prompt without the model's chat template (rlvr.prompts.PromptTemplate.text_hash): the same for
    every model given the same prompt, where ``prompt_hash`` differs by each family's template. Empty
    in a cell stored before it existed (such a cell is measured again: its fingerprint differs)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def differences(self, other: CellFingerprint) -> list[str]:
        mine, theirs = _canonical(self.to_dict()), _canonical(other.to_dict())
        return [
            f"{k}: {mine.get(k)!r} -> {theirs.get(k)!r}"
            for k in sorted(set(mine) | set(theirs))
            if mine.get(k) != theirs.get(k)
        ]

    def matches(self, other: CellFingerprint) -> bool:
        return not self.differences(other)


@dataclass
class CellResult:
    """One model on one task: the fingerprint it was measured under, the evaluation, timing, overlap."""

    model: str
    """Model as the user named it (hub id, local path or alias); never rewritten."""
    task: str
    fingerprint: CellFingerprint
    evaluation: Evaluation
    wall_seconds: float
    started: str
    """ISO 8601 timestamp."""
    finished: str
    """ISO 8601 timestamp."""
    train_overlap: int | None = None
    """How many of the cell's test questions the model was trained on (None: no training manifest)."""
    run_id: str | None = None
    """The benchmark run that measured this cell (a random id per run)."""
    reused: bool = False
    """Set when a report is built: the cell was not measured by the run writing the report, but read
    back from its file (its stored answers re-scored). Not stored in the cell file."""

    def __post_init__(self) -> None:
        # Accept the JSON forms too, so from_dict and callers holding dicts share one path.
        if isinstance(self.fingerprint, dict):
            self.fingerprint = CellFingerprint(**self.fingerprint)
        if isinstance(self.evaluation, dict):
            self.evaluation = Evaluation.from_dict(self.evaluation)

    @property
    def summary(self) -> AccuracySummary:
        return self.evaluation.summary

    @property
    def samples_per_second(self) -> float:
        return self.evaluation.samples_per_second

    @property
    def prompt_hash(self) -> str:
        return self.fingerprint.prompt_hash

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": KIND_CELL,
            "format_version": FORMAT_VERSION,
            "model": self.model,
            "task": self.task,
            "fingerprint": self.fingerprint.to_dict(),
            "train_overlap": self.train_overlap,
            "run_id": self.run_id,
            "wall_seconds": self.wall_seconds,
            "started": self.started,
            "finished": self.finished,
            "evaluation": self.evaluation.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CellResult:
        """Inverse of :meth:`to_dict`; the summary is recomputed from the per-sample scores and a
        stored summary that disagrees makes the cell unusable (ValueError)."""
        if not isinstance(data, dict):
            raise ValueError(f"a cell must be a JSON object, got {type(data).__name__}")
        if data.get("kind", KIND_CELL) != KIND_CELL:
            raise ValueError(f"expected kind {KIND_CELL!r}, got {data.get('kind')!r}")
        version = data.get("format_version", FORMAT_VERSION)
        if version != FORMAT_VERSION:
            raise ValueError(
                f"cell format_version {version} is not supported (this code reads {FORMAT_VERSION})"
            )
        names = ("model", "task", "fingerprint", "evaluation", "wall_seconds", "started", "finished")
        missing = [name for name in names if name not in data]
        if missing:
            raise ValueError(f"cell is missing {missing}")
        try:
            return cls(
                **{name: data[name] for name in names},
                train_overlap=data.get("train_overlap"),
                run_id=data.get("run_id"),
            )
        except TypeError as e:  # e.g. a fingerprint with unknown or missing fields
            raise ValueError(f"malformed cell: {e}") from e


def read_cell_file(path: str | os.PathLike[str]) -> CellResult:
    """Load one cell file; errors name the file and what is wrong with it."""
    path = Path(path)
    try:
        data = loads(path.read_text(encoding="utf-8"), path)  # JsonRefused: a ValueError naming the file
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a readable JSON file ({e})") from e
    try:
        return CellResult.from_dict(data)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from e


class CellStore:
    """Finished cells of one benchmark, one JSON file each under ``root/cells/``."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.cells_dir = self.root / "cells"

    def path(self, model: str, task: str) -> Path:
        return self.cells_dir / f"{slug(model)}__{safe_task_name(task)}.json"

    def save(self, cell: CellResult) -> Path:
        return atomic_write_json(self.path(cell.model, cell.task), cell.to_dict())

    def load(self, model: str, task: str) -> CellResult:
        """The stored cell; FileNotFoundError if absent, ValueError if unreadable or mismatched."""
        path = self.path(model, task)
        cell = read_cell_file(path)
        if (cell.model, cell.task) != (model, task):
            raise ValueError(
                f"{path}: holds model {cell.model!r} / task {cell.task!r}, expected {model!r} / {task!r}"
            )
        return cell

    def done(self, model: str, task: str, fingerprint: CellFingerprint) -> bool:
        """True only if the cell's file exists, its summary is what its samples give, and it was
        produced under ``fingerprint``; otherwise says why it will be recomputed."""
        try:
            cell = self.load(model, task)
        except FileNotFoundError:
            return False
        except ValueError as e:
            log.warning("recomputing %s on %s: stored cell is unusable: %s", model, task, e)
            return False
        diffs = cell.fingerprint.differences(fingerprint)
        if diffs:
            log.warning("recomputing %s on %s: %s", model, task, "; ".join(diffs))
            return False
        return True

    def __iter__(self) -> Iterator[CellResult]:
        """Finished cells in file-name order; unreadable files are skipped with a warning."""
        if not self.cells_dir.is_dir():
            return
        for path in sorted(self.cells_dir.glob("*.json")):
            try:
                yield read_cell_file(path)
            except (OSError, ValueError) as e:
                log.warning("skipping unreadable cell file: %s", e)

    def cells(self) -> list[CellResult]:
        return list(self)

    def requested(self, models: Iterable[str], tasks: Iterable[str]) -> list[CellResult]:
        """The stored cells of exactly these models x tasks (other files in cells/ are not reported)."""
        found = []
        for model in models:
            for task in tasks:
                try:
                    found.append(self.load(model, task))
                except (FileNotFoundError, ValueError) as e:
                    log.warning("no usable result for %s on %s: %s", model, task, e)
        return found


def _format_timestamp(timestamp: str | datetime | None) -> str:
    if timestamp is None:
        return datetime.now().strftime(TIMESTAMP_FORMAT)
    if isinstance(timestamp, datetime):
        return timestamp.strftime(TIMESTAMP_FORMAT)
    try:
        datetime.strptime(timestamp, TIMESTAMP_FORMAT)
    except ValueError as e:
        raise ValueError(
            f"timestamp {timestamp!r} must have the form YYYYmmdd_HHMMSS (e.g. 20250101_120000)"
        ) from e
    return timestamp


def _prompt_chosen(cell: CellResult) -> str:
    """The prompt a cell was measured with, its chat template left out (a cell stored before
    ``prompt_text_hash`` existed: its full hash)."""
    return cell.fingerprint.prompt_text_hash or cell.prompt_hash


def model_entry(cell: CellResult) -> dict[str, Any]:
    """A cell as it appears under ``"models"`` in the reports: its summary plus speed and settings."""
    return {
        **cell.summary.to_dict(),
        "samples_per_second": cell.samples_per_second,
        "wall_seconds": cell.wall_seconds,
        "num_examples": cell.fingerprint.num_examples,
        "k": cell.fingerprint.k,
        "seed": cell.fingerprint.seed,
        "train_overlap": cell.train_overlap,
        # read back from an earlier run's cell file (its answers re-scored), not measured by this run
        "reused": cell.reused,
        "measured": cell.finished,
        # the prompt as this model rendered it, its chat template included (the task's prompt_hash
        # leaves the template out: one prompt for every model)
        "prompt_hash": cell.prompt_hash,
        # how varied its answers are beside the gold answers; "degenerate" says what is wrong (issue 56)
        "answers": answer_spread(cell.evaluation).to_dict(),
    }


def degenerate_cells(cells: Iterable[CellResult]) -> list[str]:
    """A warning for each cell whose answers are degenerate (rlvr.evaluation.results.AnswerSpread):
    one answer to every question, or far fewer distinct answers than the gold answers have."""
    found = []
    for cell in cells:
        problem = answer_spread(cell.evaluation).problem()
        if problem:
            found.append(f"Degenerate outputs: {cell.model} on {cell.task}: {problem}")
    return found


def _average_ci(by_task: dict[str, dict[str, CellResult]], model: str) -> tuple[float, float]:
    """The interval of ``model``'s average over the tasks it has results for, from its per-question records."""
    per_task = [
        list(per_question_accuracy(models[model].evaluation).values())
        for models in by_task.values()
        if model in models
    ]
    return average_interval(per_task)


def paired_comparisons(cells: list[CellResult]) -> list[dict[str, Any]]:
    """Each pair of models of one task (in the given order) on the same questions: ``b`` minus ``a``
    in accuracy with its 95% CI and the exact McNemar p (rlvr.evaluation.results.paired, the training
    report's paired change). A pair measured on different questions is listed with a ``note``."""
    rows = []
    for i, a in enumerate(cells):
        for b in cells[i + 1 :]:
            try:
                change = paired(a.evaluation, b.evaluation)
            except ValueError as e:
                rows.append({"a": a.model, "b": b.model, "note": f"not paired: {e}"})
                continue
            why = constant_gain(a.evaluation, b.evaluation, change)
            rows.append(
                {"a": a.model, "b": b.model, **change.to_dict(), **({"degenerate": why} if why else {})}
            )
    return rows


def paired_markdown(all_report: dict[str, Any]) -> str:
    """The paired comparisons of an all-tasks report as a markdown table (empty with one model)."""
    lines = [
        "| task | A | B | A acc | B acc | B - A (points) | 95% CI | A right, B wrong | A wrong, B right "
        "| McNemar p | n |",
        "|---" * 11 + "|",
    ]
    degenerate: list[str] = []
    for task, entry in all_report.get("tasks", {}).items():
        for r in entry.get("paired", []):
            if "note" in r:
                lines.append(
                    f"| {task} | {r['a']} | {r['b']} | " + " | ".join([""] * 6) + f" | {r['note']} | |"
                )
                continue
            flips = (r["right_to_wrong"], r["wrong_to_right"], f"{r['p_value']:.3g}")
            lines.append(
                f"| {task} | {r['a']} | {r['b']} | {r['before']:.1%} | {r['after']:.1%} | "
                f"{r['delta'] * 100:+.1f} | [{r['ci_low'] * 100:+.1f}, {r['ci_high'] * 100:+.1f}] | "
                + (" | ".join(map(str, flips)) if r["binary"] else "- | - | - (sample means)")
                + f" | {r['n']} |"
            )
            if r.get("degenerate"):  # a gain that is a constant answer's frequency, said under its row
                degenerate.append(f"- {task}, {r['b']} - {r['a']}: {r['degenerate']}")
    if len(lines) == 2:
        return ""
    head = (
        "Paired comparison on the same questions: B - A in points with a 95% CI, and the exact McNemar "
        "test of the questions one model got right and the other wrong.\n\n"
    )
    warned = [f"- {w}" for w in all_report.get("warnings", [])] + degenerate
    if warned:
        lines += ["", "Degenerate outputs (a difference they make is no evidence of skill):", "", *warned]
    return head + "\n".join(lines) + "\n"


def build_reports(
    cells: Iterable[CellResult], timestamp: str
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """The per-task reports (by task) and the all-tasks report, as JSON-ready dicts.

    Raises ValueError when a (model, task) pair appears twice or when the models of one task
    were evaluated with different prompts, since such a comparison would not be fair. The prompt is
    compared without the chat template (``prompt_text_hash``): two model families render one prompt
    each in its own template, and that is the comparison asked for, not a stale cell.
    """
    by_task: dict[str, dict[str, CellResult]] = {}
    for cell in cells:
        models = by_task.setdefault(cell.task, {})
        if cell.model in models:
            raise ValueError(
                f"model {cell.model!r} appears twice for task {cell.task!r}; pass each cell once"
            )
        models[cell.model] = cell

    task_reports: dict[str, dict[str, Any]] = {}
    for task, models in by_task.items():
        hashes = {_prompt_chosen(cell) for cell in models.values()}
        if len(hashes) > 1:
            detail = ", ".join(f"{m}: {_prompt_chosen(c)}" for m, c in models.items())
            raise ValueError(
                f"task {task!r} mixes prompt hashes ({detail}); rerun the stale cells with the current "
                "prompt or report only cells made with the same prompt"
            )
        task_reports[task] = {
            "kind": KIND_TASK,
            "format_version": FORMAT_VERSION,
            "task": task,
            "timestamp": timestamp,
            "prompt_hash": hashes.pop(),
            "models": {model: model_entry(cell) for model, cell in models.items()},
            "paired": paired_comparisons(list(models.values())),
        }

    # A model's average covers the tasks it has results for; average_tasks says which.
    per_model: dict[str, list[tuple[str, float]]] = {}
    for task, models in by_task.items():
        for model, cell in models.items():
            per_model.setdefault(model, []).append((task, cell.summary.accuracy))
    all_report = {
        "kind": KIND_ALL_TASKS,
        "format_version": FORMAT_VERSION,
        "timestamp": timestamp,
        "tasks": {
            task: {
                "prompt_hash": report["prompt_hash"],
                "models": report["models"],
                "paired": report["paired"],
            }
            for task, report in task_reports.items()
        },
        "average": {model: sum(a for _, a in accs) / len(accs) for model, accs in per_model.items()},
        # 95% bootstrap interval over questions (rlvr.evaluation.metrics.average_interval)
        "average_ci": {
            model: dict(zip(("ci_low", "ci_high"), _average_ci(by_task, model), strict=True))
            for model in per_model
        },
        "average_tasks": {model: [t for t, _ in accs] for model, accs in per_model.items()},
        # cells whose answers are degenerate (one answer to every question, or far too few kinds)
        "warnings": degenerate_cells(c for models in by_task.values() for c in models.values()),
        # cells this run did not measure: read back from earlier runs' files, answers re-scored
        "reused": {
            model: [task for task, models in by_task.items() if model in models and models[model].reused]
            for model in per_model
        },
    }
    return task_reports, all_report


def write_reports(
    store_or_cells: CellStore | Iterable[CellResult],
    out_dir: str | os.PathLike[str],
    timestamp: str | datetime | None = None,
) -> list[Path]:
    """Write the per-task and all-tasks JSON reports; return their paths (the all-tasks one last).

    ``timestamp`` (recorded in each report) is a ``%Y%m%d_%H%M%S`` string or a datetime (default:
    now). Models keep the order in which their cells come. No cells means nothing is written.
    """
    stamp = _format_timestamp(timestamp)
    task_reports, all_report = build_reports(store_or_cells, stamp)
    if not task_reports:
        log.warning("no finished cells: no reports written")
        return []
    out = Path(out_dir)
    written = [
        atomic_write_json(out / f"results_{safe_task_name(task)}.json", report)
        for task, report in task_reports.items()
    ]
    written.append(atomic_write_json(out / "results_all_tasks.json", all_report))
    table = paired_markdown(all_report)
    if table:
        written.insert(len(written) - 1, atomic_write_text(out / "paired_comparison.md", table))
    else:  # one model: no pairs, and no table of an earlier run left to be read as this one's
        (out / "paired_comparison.md").unlink(missing_ok=True)
    return written
