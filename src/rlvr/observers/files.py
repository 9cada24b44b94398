"""JSONL files: the metrics file (one JSON object per event line) and the completions file (one line
per completions table row: rlvr.events.Completions), each flushed as it is written."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from rlvr import events as ev
from rlvr.issues import ConfigIssue
from rlvr.observers.base import Observer
from rlvr.runtime.io import config_path_problem, inside, open_append


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, BaseException):
        return f"{type(value).__name__}: {value}"
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


class JsonlObserver(Observer):
    """Appends every event to ``path`` and every completions table row to ``completions_path``,
    both inside the run directory.

    Args:
        path: metrics file name, relative to the run directory (absolute paths and ``..`` are
            refused: a config file must not choose where outside the run a line is appended).
        completions_path: completions file name, the same way: one line per sampled row
            (``source``, ``step``, prompt, completion, each reward term, score, verdict).
    """

    def __init__(self, *, path: str, completions_path: str):
        self.path = Path(path)
        self._raw, self._raw_completions = path, completions_path
        self._fh: IO[str] | None = None
        self._completions: IO[str] | None = None
        self._run_dir: Path | None = None

    def validate(self) -> list[ConfigIssue]:
        issues = []
        for key, raw, example in (
            ("path", self._raw, "metrics"),
            ("completions_path", self._raw_completions, "completions"),
        ):
            problem = config_path_problem(raw)
            if problem is not None:
                issues.append(
                    ConfigIssue(
                        f"observers.jsonl.{key}",
                        raw,
                        problem,
                        f"name a file inside the run directory, e.g. {example}.jsonl; choose where runs go "
                        "with hydra.run.dir on the command line",
                    )
                )
        return issues

    def _write(self, kind: str, payload: dict[str, Any]) -> None:
        if self._fh is None:
            return
        record = {"event": kind, "time": round(time.time(), 3), **_jsonable(payload)}
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()

    def on_pipeline_start(self, event: ev.PipelineStart) -> None:
        # Appended to on resume, so opened without following a link at any level below the run dir.
        self._fh = open_append(inside(event.run_dir, self._raw), event.run_dir)
        self._run_dir = event.run_dir
        self._write("pipeline_start", {"run_dir": event.run_dir})

    def on_stage_start(self, event: ev.StageStart) -> None:
        self._write("stage_start", asdict(event))

    def on_stage_end(self, event: ev.StageEnd) -> None:
        self._write("stage_end", asdict(event))

    def on_train_step(self, event: ev.TrainStep) -> None:
        self._write("train_step", asdict(event))

    def on_evaluation(self, event: ev.EvalResult) -> None:
        self._write("evaluation", event.record())

    def on_completions(self, event: ev.Completions) -> None:
        if self._run_dir is None:
            return
        if self._completions is None:  # opened with the first rows: a run without them has no file
            self._completions = open_append(inside(self._run_dir, self._raw_completions), self._run_dir)
        for row in event.rows:
            self._completions.write(
                json.dumps({"source": event.source, "step": event.step, **asdict(row)}) + "\n"
            )
        self._completions.flush()

    def on_phase_end(self, event: ev.PhaseEnd) -> None:
        self._write("phase_end", asdict(event))

    def on_checkpoint(self, event: ev.CheckpointSaved) -> None:
        self._write("checkpoint", asdict(event))

    def on_warning(self, event: ev.RunWarning) -> None:
        self._write("warning", asdict(event))

    def on_error(self, event: ev.ErrorEvent) -> None:
        self._write("error", {"stage": event.stage, "error": event.error})

    def on_pipeline_end(self, event: ev.PipelineEnd) -> None:
        self._write("pipeline_end", {"status": event.status, "seconds": event.seconds})

    def close(self) -> None:
        for fh in (self._fh, self._completions):
            if fh is not None:
                fh.close()
        self._fh = self._completions = None
