"""JSONL metrics file: one JSON object per event line, flushed as it is written."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from rlvr import events as ev
from rlvr.config.errors import ConfigIssue
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
    """Appends every event to ``path`` inside the run directory.

    Args:
        path: metrics file name, relative to the run directory (absolute paths and ``..`` are
            refused: a config file must not choose where outside the run a line is appended).
    """

    def __init__(self, *, path: str):
        self.path = Path(path)
        self._raw = path
        self._fh: IO[str] | None = None

    def validate(self) -> list[ConfigIssue]:
        problem = config_path_problem(self._raw)
        if problem is None:
            return []
        return [
            ConfigIssue(
                "observers.jsonl.path",
                self._raw,
                problem,
                "name a file inside the run directory, e.g. metrics.jsonl; choose where runs go with "
                "hydra.run.dir on the command line",
            )
        ]

    def _write(self, kind: str, payload: dict[str, Any]) -> None:
        if self._fh is None:
            return
        record = {"event": kind, "time": round(time.time(), 3), **_jsonable(payload)}
        self._fh.write(json.dumps(record) + "\n")
        self._fh.flush()

    def on_pipeline_start(self, event: ev.PipelineStart) -> None:
        # Appended to on resume, so opened without following a link at any level below the run dir.
        self._fh = open_append(inside(event.run_dir, self._raw), event.run_dir)
        self._write("pipeline_start", {"run_dir": event.run_dir})

    def on_stage_start(self, event: ev.StageStart) -> None:
        self._write("stage_start", asdict(event))

    def on_stage_end(self, event: ev.StageEnd) -> None:
        self._write("stage_end", asdict(event))

    def on_train_step(self, event: ev.TrainStep) -> None:
        self._write("train_step", asdict(event))

    def on_evaluation(self, event: ev.EvalResult) -> None:
        self._write("evaluation", event.record())

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
        if self._fh is not None:
            self._fh.close()
            self._fh = None
