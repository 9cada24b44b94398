"""What earlier attempts of a run left in its run directory, reloaded for the report of a resumed run.

A run stopped by a preemption, a time limit or a kill and continued with ``resume=auto`` is one run
in several attempts (processes). The report of the attempt that finishes must cover them all:

- ``attempts.json``: one entry per attempt (start, end, status, the checkpoint it resumed from, the
  training phases it ran with their steps and seconds), written by :class:`AttemptLog` while the
  attempt runs. An attempt killed without warning keeps the time of its last recorded event as its
  end and is marked ``KILLED``.
- ``eval/*.json``: the evaluations (baseline, periodic, after SFT) made before the interruption. An
  evaluation is reused only if it measured this run's weights on the path the resumed run continues
  (the base model, steps up to the checkpoint it resumed from, a phase finished before it) with this
  run's identity (model, tasks, seeds, data manifest, prompt hash, sampling, the same questions);
  every file left out is named with the reason.
- ``metrics.jsonl`` (when the JSONL observer is on): the earlier attempts' training curves, for the plot.

The orchestrator loads a :class:`RunHistory` once the model is known and the report merges it with
what the last attempt computed; nothing already on disk is evaluated again.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rlvr import events as ev
from rlvr.evaluation.results import Evaluation
from rlvr.observers.base import Observer
from rlvr.runtime.io import atomic_write_json
from rlvr.stages import PHASES, SAMPLED_SUFFIX, on_resumed_path, run_order

ATTEMPTS = "attempts.json"
# Each attempt names the config record it ran under (sha256 of config_resolved.yaml as written), and
# the report copies the last attempt: rlvr.records.sweep_report ties a report to its config by it.
CONFIG_SHA256 = "config_sha256"
# How often a long phase refreshes the attempt's "last seen" time on disk (a killed attempt's end).
HEARTBEAT_SECONDS = 30.0


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="seconds")


def read_attempts(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / ATTEMPTS
    if not path.is_file():
        return []
    data = json.loads(path.read_text())
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of attempts, got {type(data).__name__}")
    return data


class AttemptLog(Observer):
    """Keeps this attempt's entry in ``attempts.json`` current: start, phases ended, last event, end.

    Not a configurable observer: the orchestrator always attaches it (rank 0), because the report
    of a resumed run depends on it. ``continues`` = this attempt continues the run recorded in the
    directory (``resume`` set); a fresh run starts a new record. ``changed_settings``: the settings
    this attempt changed from the checkpoint it resumed (``key: saved -> now``, allowed by
    ``resume_allow_changes``; rlvr.training_loop.resume.changed_settings), kept in its entry.
    """

    def __init__(
        self,
        run_dir: Path,
        continues: bool,
        resumed_from: str | None,
        changed_settings: list[str] | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.continues = continues
        self.resumed_from = resumed_from
        self.changed_settings = list(changed_settings or [])
        self.earlier: list[dict[str, Any]] = []
        self.problem: str | None = None  # why the earlier attempts could not be read
        self._start = time.time()
        self.entry: dict[str, Any] = {}
        self._written = 0.0

    def on_pipeline_start(self, event: ev.PipelineStart) -> None:
        try:
            earlier = read_attempts(self.run_dir) if self.continues else []
        except (OSError, ValueError) as exc:  # a damaged record loses the earlier attempts, not the run
            self.problem = (
                f"{ATTEMPTS} is unreadable ({type(exc).__name__}: {exc}): the earlier attempts' wall time "
                "and phases are left out of the report"
            )
            earlier = []
        for attempt in earlier:
            if attempt.get("status") == "RUNNING":  # it never recorded its end: killed (SIGKILL, node lost)
                attempt["status"] = "KILLED"
        now = self._start = time.time()
        self.earlier = earlier
        config = self.run_dir / "config_resolved.yaml"  # written just before pipeline_start
        self.entry = {
            "attempt": len(earlier) + 1,
            "started_at": _iso(now),
            "ended_at": _iso(now),
            "seconds": 0.0,
            "status": "RUNNING",
            "resumed_from": self.resumed_from,
            "changed_settings": self.changed_settings,
            CONFIG_SHA256: hashlib.sha256(config.read_bytes()).hexdigest() if config.is_file() else None,
            "phases": {},
        }
        self._write(now)

    def snapshot(self, status: str | None = None) -> dict[str, Any]:
        """This attempt's entry as of now (``status`` overrides RUNNING, e.g. for the report)."""
        now = time.time()
        entry = dict(self.entry) or {"attempt": len(self.earlier) + 1, "started_at": _iso(self._start)}
        entry.update(ended_at=_iso(now), seconds=round(now - self._start, 1))
        if status:
            entry["status"] = status
        return entry

    def _write(self, now: float) -> None:
        self._written = now
        atomic_write_json(self.run_dir / ATTEMPTS, [*self.earlier, self.snapshot()], root=self.run_dir)

    def _touch(self, force: bool = True) -> None:
        now = time.time()
        if self.entry and (force or now - self._written >= HEARTBEAT_SECONDS):
            self._write(now)

    def on_phase_end(self, event: ev.PhaseEnd) -> None:
        self.entry["phases"][event.phase] = {
            "steps": event.steps,
            "max_steps": event.max_steps,
            "seconds": round(event.seconds, 1),
        }
        self._touch()

    def on_train_step(self, event: ev.TrainStep) -> None:
        self._touch(force=False)

    def on_checkpoint(self, event: ev.CheckpointSaved) -> None:
        self._touch()

    def on_evaluation(self, event: ev.EvalResult) -> None:
        self._touch()

    def on_stage_end(self, event: ev.StageEnd) -> None:
        self._touch()

    def on_pipeline_end(self, event: ev.PipelineEnd) -> None:
        if self.entry:
            self.entry["status"] = event.status
            self._touch()


def _mismatch(payload: dict[str, Any], identity: dict[str, Any]) -> str | None:
    """Why an evaluation file is not this run's (None = it is): the first differing identity field."""
    from rlvr.data.identity import ids_of, set_hash

    for key, want in identity.items():
        got: Any
        if key == "question_set":
            got = set_hash(ids_of((s["task"], s["question"]) for s in payload.get("samples", [])))
        else:
            got = payload.get(key)
        if got != want:
            if got is None:
                return f"it records no {key} (written by an older version), this run's is {want!r}"
            return f"its {key} is {got!r}, this run's is {want!r}"
    return None


def reload_evaluations(
    eval_dir: Path,
    identity: dict[str, Any],
    resume: tuple[str, int] | None,
    sampled_identity: dict[str, Any] | None = None,
) -> tuple[list[ev.EvalResult], list[str]]:
    """The evaluation files in ``eval_dir`` a resumed run reuses, in run order, and one note per file
    it leaves out (why). ``identity`` is what the run's evaluator would write (Evaluator.identity),
    ``sampled_identity`` what its sampled view would (None: evaluation.sampled is off)."""
    found, notes = [], []
    for path in sorted(Path(eval_dir).glob("*.json")) if Path(eval_dir).is_dir() else []:
        try:
            payload = json.loads(path.read_text())
            label, step = payload["label"], int(payload["step"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            notes.append(f"{path.name}: not reused, unreadable ({type(exc).__name__}: {exc})")
            continue
        sampled = label.endswith(SAMPLED_SUFFIX)
        if not on_resumed_path(label.removesuffix(SAMPLED_SUFFIX), step, resume):
            notes.append(
                f"{path.name}: not reused, it measured weights after the resume point "
                f"({'a fresh start' if resume is None else f'{resume[0]} checkpoint-{resume[1]}'}); "
                "the resumed run evaluates that step again"
            )
            continue
        expected = sampled_identity if sampled else identity
        if expected is None:
            notes.append(f"{path.name}: not reused, evaluation.sampled is off in this run")
            continue
        why = _mismatch(payload, expected)
        if why:
            notes.append(f"{path.name}: not reused, {why}")
            continue
        try:
            evaluation = Evaluation.from_dict(payload)
        except ValueError as exc:
            notes.append(f"{path.name}: not reused, {exc}")
            continue
        found.append(ev.EvalResult(label, step, evaluation, path))
    return run_order(found), notes


def read_train_history(metrics: Path | None, resume: tuple[str, int] | None) -> list[dict[str, float]]:
    """Training metrics (``{"step": n, "<phase>/...": x}`` rows) of the earlier attempts recorded in
    the JSONL metrics file, limited to the resumed path; the last attempt's own rows are not read
    (the current attempt has started its segment of the file when this runs)."""
    if metrics is None or not metrics.is_file() or resume is None:
        return []
    segments: list[list[dict[str, Any]]] = []
    for line in metrics.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # the last line of a killed attempt may be cut
            continue
        if record.get("event") == "pipeline_start":
            segments.append([])
        elif segments:
            segments[-1].append(record)
    rows: dict[tuple[str, int], dict[str, float]] = {}
    for segment in segments[:-1]:  # a later attempt's row of the same step replaces an earlier one
        for r in segment:
            if r.get("event") == "train_step" and on_resumed_path(r["phase"], r["step"], resume):
                rows[(r["phase"], r["step"])] = {"step": r["step"], **r["metrics"]}
    return [rows[k] for k in sorted(rows, key=lambda k: (PHASES.index(k[0]), k[1]))]


@dataclass
class RunHistory:
    """What earlier attempts of this run left that the resumed run keeps (empty for a fresh run)."""

    attempts: list[dict[str, Any]] = field(default_factory=list)
    evaluations: list[ev.EvalResult] = field(default_factory=list)
    history: list[dict[str, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @classmethod
    def load(
        cls,
        run_dir: Path,
        attempts: list[dict[str, Any]],
        identity: dict[str, Any],
        resume: tuple[str, Path] | None,
        metrics: Path | None = None,
        sampled_identity: dict[str, Any] | None = None,
    ) -> RunHistory:
        """``attempts`` = the earlier attempts (AttemptLog.earlier); ``identity`` = what this run's
        evaluations record (Evaluator.identity), ``sampled_identity`` its sampled ones; ``resume`` =
        (phase, checkpoint directory) the run continues from, or None (a restart from scratch);
        ``metrics`` = the JSONL metrics file."""
        point = (resume[0], int(resume[1].name.rsplit("-", 1)[1])) if resume else None
        evaluations, notes = reload_evaluations(Path(run_dir) / "eval", identity, point, sampled_identity)
        return cls(attempts, evaluations, read_train_history(metrics, point), notes)

    def find(self, label: str, step: int) -> ev.EvalResult | None:
        """The reused evaluation of ``label`` at ``step``, if an earlier attempt made it."""
        return next((e for e in self.evaluations if (e.label, e.step) == (label, step)), None)

    def _earlier_phases(self) -> list[dict[str, dict[str, Any]]]:
        return [a.get("phases") or {} for a in self.attempts]

    def steps(self, current: dict[str, int]) -> dict[str, int]:
        """Steps per phase of the whole run: this attempt's (a resumed phase's count includes the
        steps before the checkpoint), else the newest earlier attempt's for a phase it did not run."""
        out: dict[str, int] = {}
        for phase in PHASES:
            if phase in current:
                out[phase] = current[phase]
                continue
            earlier = [p[phase]["steps"] for p in self._earlier_phases() if phase in p]
            if earlier:
                out[phase] = earlier[-1]
        return out

    def train_seconds(self, current: dict[str, float]) -> dict[str, float]:
        """Seconds spent in each phase, summed over the attempts that recorded it (an attempt killed
        mid-phase recorded no phase time; its time is in its wall time)."""
        out: dict[str, float] = {}
        for phase in PHASES:
            spent = [p[phase]["seconds"] for p in self._earlier_phases() if phase in p]
            if phase in current:
                spent.append(current[phase])
            if spent:
                out[phase] = sum(spent)
        return out

    def train_history(self, current: list[dict[str, float]]) -> list[dict[str, float]]:
        """The earlier attempts' training rows followed by this attempt's, SFT before GRPO."""

        def phase(row: dict[str, float]) -> int:
            return 0 if any(k.startswith("sft/") for k in row) else 1

        return sorted([*self.history, *current], key=lambda r: (phase(r), r["step"]))


def history_of(
    run_dir: Path,
    attempts: AttemptLog,
    evaluation: Any,
    eval_data: Any,
    meta: dict[str, Any],
    resume: tuple[str, Path] | None,
    observers: dict[str, Any],
) -> RunHistory:
    """:meth:`RunHistory.load` for a continued run: its evaluations judged against this run's
    ``evaluation`` component's identity (and its sampled view's), its curves from the JSONL observer's
    file when one is on."""
    from rlvr.observers.files import JsonlObserver

    jsonl = next((o.path for o in observers.values() if isinstance(o, JsonlObserver)), None)
    sampled = evaluation.sampled_view()
    return RunHistory.load(
        run_dir,
        attempts.earlier,
        evaluation.identity(eval_data, meta),
        resume,
        None if jsonl is None else run_dir / jsonl,
        sampled_identity=None if sampled is None else sampled.identity(eval_data, meta),
    )
