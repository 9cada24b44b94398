"""A run for tests that train without the pipeline: the members training reads of the run
(rlvr.training_loop.phase.TrainingRun), whose one implementation is rlvr.pipeline.orchestrator.Run.
Tests that call the training loop or a phase directly hand this over instead of a whole Run (which
would load data and a model through its components)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class StandInRun:
    tokenizer: Any
    train_dataset: Any
    emit: Callable[[Any], None]
    on_weights: Callable[..., Any]
    eval_every: int
    run_dir: Path
    guard: Any = None
    curriculum: Any = None
    attach: Callable[[Any], None] = lambda trainer: None
    # No memory estimate: nothing larger than the configured micro-batch is taken to fit.
    fits: Callable[..., bool] = lambda batch, phase="grpo": False
    generator: Any = None
