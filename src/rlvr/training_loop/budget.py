"""``budget_minutes``: the run sized to a wall-clock budget, evaluations included.

Before training (after the baseline evaluation), :func:`calibrate` times a few real steps and one
checkpoint of each enabled phase with the phase's own trainer on the run's own model and data, and one
batch of each kind of evaluation. :func:`plan` then scales every phase's ``max_steps`` by one factor
(the configured ratio of time between the phases stays) and ``evaluation.every_n_steps`` with them
(the number of in-training evaluations stays), so that the predicted run, from the pipeline's start to
its report, fits the budget less :data:`MARGIN`; it never trains more than configured. The plan
changes the config's values through the same typed nodes and TRL config as configured values
(:meth:`rlvr.training_loop.phase.Phase.replan`), is said on the console before training, recorded in
the run directory (:data:`PLAN_FILE`, and in provenance.json) and reused, not made again, by a run that
resumes a checkpoint of it; the report sets it against the actual time (:func:`planned_vs_actual`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import json
import math
import statistics
import tempfile
import time
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from transformers import TrainerCallback

from rlvr.issues import ConfigIssue, ConfigValidationError, value_issues
from rlvr.runtime import distributed
from rlvr.runtime.io import atomic_write_json

KEY = "budget_minutes"
PLAN_FILE = "budget_plan.json"
# Held back from the budget for what the plan does not time: writing the report and its chart, the
# console and W&B, and a machine whose load changes while the run goes on (other processes on it).
MARGIN = 0.05
# Steps timed per phase, after WARMUP_STEPS untimed ones (allocations, kernel choices, the data loader);
# the calibration's time counts against the budget. A GRPO step generates a whole batch of rollouts and
# trains on all of them (_time_phase), so one is its upper bound. SFT's steps vary with their rows'
# lengths, and on a CPU each new padded length first builds its kernels (oneDNN): measured on the 2-core
# EPYC (bf16, 2026-12-02), steps 2-5 of a run took 4.2-7.2 s and its steady steps 2.6-3.2 s, so a timing
# of steps 2-4 planned SFT at about twice its time. SFT is timed on steps 5-8, by their median.
TIMED_STEPS = {"sft": 4, "grpo": 1}
WARMUP_STEPS = {"sft": 4, "grpo": 1}


# -- what is measured ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PhaseTiming:
    """One phase timed on this machine (:func:`calibrate`), in seconds."""

    setup: float  # building the phase's trainer (its dataset's tokenisation)
    first_step: float  # the first step, warm-up included
    step: float  # the mean of the later steps
    save: float  # one checkpoint (weights and optimizer state)
    steps_timed: int


@dataclass(frozen=True)
class EvalTiming:
    """One evaluation of each kind, predicted from one timed batch of it."""

    greedy_batch: float  # seconds for one batch of greedy generation and scoring
    greedy_batches: int  # batches in one greedy evaluation of the held-out questions
    sampled_batch: float = 0.0  # the same for evaluation.sampled (0: off)
    sampled_batches: int = 0
    # The completion length the batches were timed at where SFT runs first (its reference answers'
    # longest, in tokens: :func:`reference_tokens`); None: the evaluator's max_new_tokens.
    completion_tokens: int | None = None

    @property
    def greedy(self) -> float:
        return self.greedy_batch * self.greedy_batches

    @property
    def sampled(self) -> float:
        return self.sampled_batch * self.sampled_batches


@dataclass(frozen=True)
class PhaseShape:
    """A phase's configured step count, checkpoint interval (None: no checkpoints by steps) and
    warmup (``warmup_steps``; below 1 a fraction of max_steps, which scales by itself)."""

    name: str
    key: str
    max_steps: int
    save_steps: int | None
    warmup_steps: float


# -- the plan ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PhasePlan:
    configured_steps: int
    steps: int
    evaluations: int  # in-training evaluations during the phase
    checkpoints: int
    timing: PhaseTiming
    seconds: float  # predicted: steps, in-training evaluations, checkpoints (the phase's own clock)


@dataclass(frozen=True)
class Plan:
    """The budget's plan: the changes it makes to the config, and the time it predicts for each part
    of the run (``stages``: ``before_training`` was measured, the others predicted)."""

    budget_minutes: float
    margin: float
    scale: float  # every phase's max_steps times this (1: the configured run fits)
    phases: dict[str, PhasePlan]
    every_n_steps: tuple[int, int]  # configured, planned
    evals: EvalTiming
    stages: dict[str, float]
    changes: dict[str, tuple[Any, Any]]  # config key -> (configured, planned)
    created: str = ""

    @property
    def predicted(self) -> float:
        return sum(self.stages.values())

    def record(self) -> dict[str, Any]:
        """The plan as JSON data (:data:`PLAN_FILE`, provenance.json, report.json)."""
        data = dataclasses.asdict(self)
        data["predicted_seconds"] = round(self.predicted, 1)
        data["changes"] = {k: list(v) for k, v in self.changes.items()}
        return data

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> Plan:
        phases = {
            name: PhasePlan(**{**p, "timing": PhaseTiming(**p["timing"])})
            for name, p in data["phases"].items()
        }
        return cls(
            budget_minutes=data["budget_minutes"],
            margin=data["margin"],
            scale=data["scale"],
            phases=phases,
            every_n_steps=(data["every_n_steps"][0], data["every_n_steps"][1]),
            evals=EvalTiming(**data["evals"]),
            stages=dict(data["stages"]),
            changes={k: (v[0], v[1]) for k, v in data["changes"].items()},
            created=data.get("created", ""),
        )


@dataclass(frozen=True)
class _Sized:
    """The run at one scale: each phase's steps, the evaluation interval, checkpoints and warmup."""

    steps: dict[str, int]
    every: int
    warmup: dict[str, float] = field(default_factory=dict)


def _sized(shapes: list[PhaseShape], every: int, scale: float) -> _Sized:
    """The phases at ``scale`` (at most 1), at least one step each. The interval scales with them, so a
    phase has the in-training evaluations it was configured with; a phase whose configured steps end on
    an evaluation ends on one again (its last weights evaluated once, reused after it: SFT's by the
    after-SFT evaluation, the last phase's by the final one). A warmup longer than the new phase is
    scaled with it. A phase configured without an in-training evaluation (GRPO's 16 steps, every 160)
    gets none: the interval stays longer than it."""
    steps = {shape.name: max(1, math.floor(scale * shape.max_steps)) for shape in shapes}
    planned_every = 0
    if every > 0:
        unevaluated = [steps[s.name] + 1 for s in shapes if s.max_steps < every]
        planned_every = max(1, math.floor(scale * every), *unevaluated)
        for shape in shapes:
            evals = shape.max_steps // every
            if evals and shape.max_steps % every == 0:
                steps[shape.name] = min(shape.max_steps, evals * planned_every)
    warmup = {}
    for shape in shapes:
        n = steps[shape.name]
        if shape.warmup_steps >= 1 and shape.warmup_steps >= n:
            warmup[shape.name] = float(max(0, min(math.floor(scale * shape.warmup_steps), n - 1)))
    return _Sized(steps, planned_every, warmup)


def _checkpoints(steps: int, save_steps: int | None) -> int:
    # transformers also saves at a phase's last step when it is no multiple of save_steps
    if not save_steps:
        return 0
    return steps // save_steps + (1 if steps % save_steps else 0)


def _predict(
    sized: _Sized,
    shapes: list[PhaseShape],
    timings: dict[str, PhaseTiming],
    evals: EvalTiming,
    sampled: bool,
    spent: float,
) -> tuple[dict[str, PhasePlan], dict[str, float]]:
    """Each phase's plan and the predicted seconds of each part of the run, for ``sized``."""
    phases, setups = {}, 0.0
    for shape in shapes:
        t, n = timings[shape.name], sized.steps[shape.name]
        n_evals = n // sized.every if sized.every else 0
        n_saves = _checkpoints(n, shape.save_steps)
        seconds = t.first_step + (n - 1) * t.step + n_evals * evals.greedy + n_saves * t.save
        phases[shape.name] = PhasePlan(shape.max_steps, n, n_evals, n_saves, t, seconds)
        setups += t.setup
    names = [s.name for s in shapes]
    ends_evaluated = {name: bool(sized.every) and sized.steps[name] % sized.every == 0 for name in names}
    # SFT handing its weights to a later phase: the after-SFT evaluation (reused when SFT's last step was
    # evaluated) and its sampled twin (rlvr.evaluation.schedule.EvalSchedule.on_weights).
    handover = names[0] == "sft" and len(names) > 1
    between = (
        (0.0 if ends_evaluated["sft"] else evals.greedy) + (evals.sampled if sampled else 0.0)
        if handover
        else 0.0
    )
    final = (0.0 if ends_evaluated[names[-1]] else evals.greedy) + (
        evals.sampled if sampled and handover else 0.0
    )
    stages = {
        "before_training": spent,
        "train": setups + sum(p.seconds for p in phases.values()) + between,
        "final_eval": final,
        # the final model without optimizer state: at most a checkpoint's time
        "save": max(t.save for t in timings.values()),
    }
    return phases, stages


def plan(
    minutes: float,
    spent: float,
    shapes: list[PhaseShape],
    every: int,
    timings: dict[str, PhaseTiming],
    evals: EvalTiming,
    sampled: bool,
    margin: float = MARGIN,
) -> Plan:
    """The largest scale (at most 1) of the phases' steps whose predicted run fits ``minutes`` less
    ``margin``, ``spent`` seconds being gone already (found by bisection: whole steps, at least one a
    phase); raise ConfigValidationError, with the numbers, when not even the smallest run fits."""
    target = minutes * 60 * (1 - margin)

    def predicted(scale: float) -> tuple[_Sized, dict[str, PhasePlan], dict[str, float]]:
        sized = _sized(shapes, every, scale)
        return (sized, *_predict(sized, shapes, timings, evals, sampled, spent))

    def fits(scale: float) -> bool:
        return sum(predicted(scale)[2].values()) <= target

    if fits(1.0):
        scale = 1.0
    elif not fits(0.0):  # one step of each phase (and its evaluations) is already too much
        _, phases, stages = predicted(0.0)
        raise ConfigValidationError([_too_small(minutes, margin, stages, phases, evals)])
    else:  # the largest scale that fits: the prediction grows with it
        low, high = 0.0, 1.0
        for _ in range(50):
            middle = (low + high) / 2
            low, high = (middle, high) if fits(middle) else (low, middle)
        scale = low
    sized, phases, stages = predicted(scale)
    changes: dict[str, tuple[Any, Any]] = {}
    for shape in shapes:
        if sized.steps[shape.name] != shape.max_steps:
            changes[f"{shape.key}.max_steps"] = (shape.max_steps, sized.steps[shape.name])
        if shape.name in sized.warmup:
            changes[f"{shape.key}.warmup_steps"] = (shape.warmup_steps, sized.warmup[shape.name])
    if sized.every != every:
        changes["evaluation.every_n_steps"] = (every, sized.every)
    return Plan(minutes, margin, round(scale, 6), phases, (every, sized.every), evals, stages, changes)


def _too_small(
    minutes: float, margin: float, stages: dict[str, float], phases: dict[str, PhasePlan], evals: EvalTiming
) -> ConfigIssue:
    need = sum(stages.values())
    least = math.ceil(need / 60 / (1 - margin) * 10) / 10
    parts = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in stages.items())
    steps = ", ".join(
        f"{name} {p.steps} step(s) at {p.timing.step:.1f} s with {p.evaluations} evaluation(s)"
        for name, p in phases.items()
    )
    steps += f"; an evaluation: greedy {evals.greedy:.0f} s" + (
        f", sampled {evals.sampled:.0f} s" if evals.sampled_batches else ""
    )
    return ConfigIssue(
        KEY,
        minutes,
        f"the run does not fit: with the fewest steps that keep its evaluations ({steps}) it is predicted "
        f"at {need:.0f} s ({parts}; measured on this machine), more than the {minutes * 60 * (1 - margin):.0f} s "
        f"the budget leaves after its {margin:.0%} margin; nothing was trained",
        f"set {KEY}={least:g} or more, or make the evaluations cheaper (evaluation.max_examples, "
        "evaluation.sampled.max_examples, evaluation.every_n_steps=0, evaluation.baseline=false)",
    )


# -- before the model loads: what cannot be planned ---------------------------------------------------


def budget_of(cfg: DictConfig) -> float | None:
    """``budget_minutes`` (None: no budget; the config gate checked its type and bound: RunSettings)."""
    return OmegaConf.select(cfg, KEY, default=None)


def shapes_of(loop: Any) -> list[PhaseShape]:
    """The enabled phases' configured shapes, in run order (:func:`config_issues` refused the others)."""
    shapes = []
    for phase in loop.phases:
        if phase.enabled:
            args = phase.args
            save = args.save_steps if args.save_strategy == "steps" else None  # a str enum
            save = int(save) if save and save >= 1 else None  # below 1: a fraction of max_steps
            warmup = float(phase.trl_fields.get("warmup_steps", 0) or 0)
            shapes.append(PhaseShape(phase.name, phase.key, int(args.max_steps), save, warmup))
    return shapes


def config_issues(cfg: DictConfig, components: dict[str, Any]) -> list[ConfigIssue]:
    """What a budget cannot plan, refused by the config gate before anything loads: a phase that
    is not sized by ``max_steps`` (RFT's rounds, each sampling first; a phase trained by epochs), no
    phase at all, several processes (the calibration times one)."""
    minutes, loop = budget_of(cfg), components.get("training_loop")
    if minutes is None or loop is None:
        return []
    phases = getattr(loop, "phases", None)
    if phases is None:
        return [
            ConfigIssue(
                "training_loop",
                type(loop).__name__,
                f"{KEY} sizes the phases of rlvr.training_loop.loop.TrainingLoop, and this training loop has none",
                f"use training_loop=sft_grpo (or grpo, sft), or drop {KEY}",
            )
        ]
    issues = []
    enabled = [p for p in phases if p.enabled is True]
    for phase in enabled:
        if phase.name == "rft":
            issues.append(
                ConfigIssue(
                    f"{phase.key}.enabled",
                    True,
                    f"{KEY} sizes phases by their max_steps; RFT's length is its rounds, each of which samples "
                    "the model before it trains, and the budget's calibration times no round",
                    f"training_loop.{phase.name}.enabled=false (training_loop=sft_grpo), or drop {KEY}",
                )
            )
            continue
        steps = phase.trl_fields.get("max_steps")
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            issues.append(
                ConfigIssue(
                    f"{phase.key}.max_steps",
                    steps,
                    f"{KEY} scales each phase's max_steps, and this phase sets none",
                    f"set {phase.key}.max_steps (e.g. 100), or drop {KEY}",
                )
            )
    if not enabled:
        issues.append(
            ConfigIssue(KEY, minutes, "no training phase is enabled: there are no steps to size",
                        f"enable a phase (training_loop.grpo.enabled=true), or drop {KEY}")
        )  # fmt: skip
    if distributed.world_size() > 1:
        issues.append(
            ConfigIssue(
                KEY,
                minutes,
                f"a run of {distributed.world_size()} processes: the budget's calibration times one process",
                f"run on one process, or drop {KEY}",
            )
        )
    return issues


def resume_issues(cfg: DictConfig, resume: tuple[str, Path] | None) -> list[ConfigIssue]:
    """A budgeted run continuing a checkpoint reuses the plan its run recorded: that plan must be there
    (the checkpoint's scheduler and step count follow it)."""
    minutes = budget_of(cfg)
    if minutes is None or resume is None:
        return []
    owner = resume[1].parent.parent.parent  # <run>/checkpoints/<phase>/checkpoint-N
    try:
        read_plan(owner)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [
            ConfigIssue(
                KEY,
                minutes,
                f"resuming {resume[1]} reuses the budget plan its run recorded ({owner / PLAN_FILE}), and it "
                f"cannot be read ({type(exc).__name__}: {exc}); a new plan would change the checkpoint's step count",
                f"drop {KEY} to continue with the configured steps (and resume_allow_changes=true), or start a "
                "new run (a new hydra.run.dir)",
            )
        ]
    return []


# -- measuring ----------------------------------------------------------------------------------------


class _Clock(TrainerCallback):
    """Step and checkpoint times of a calibration trainer: a step is the time between the ends of two
    optimizer steps (logging and data loading included, as in a run); a checkpoint, from the end of the
    step it follows to the save's end."""

    def __init__(self) -> None:
        self.ends: list[float] = []
        self.saves: list[float] = []

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.ends = [time.perf_counter()]

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.ends.append(time.perf_counter())

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.saves.append(time.perf_counter() - self.ends[-1])


@contextlib.contextmanager
def rng_kept() -> Iterator[None]:
    """Python's, numpy's and torch's random states as they were before (a run without a budget draws
    from the same streams)."""
    import random

    import numpy as np
    import torch

    states = (random.getstate(), np.random.get_state(), torch.random.get_rng_state())
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.random.set_rng_state(states[2])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


@contextlib.contextmanager
def weights_kept(model: Any) -> Iterator[None]:
    """The model's trainable weights (and train/eval mode) as they were, bit for bit: a calibration
    trainer's optimizer steps change them. Copies only what an optimizer can change (a LoRA run: the
    adapter), not a second whole model as a deep copy would hold beside the trainer's optimizer."""
    import torch

    kept = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    training = model.training
    try:
        yield
    finally:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name in kept:
                    p.copy_(kept[name])
                p.grad = None
        model.train(training)


class _Quiet:
    """The run as a timed phase reads it (rlvr.training_loop.phase.TrainingRun): its tokenizer, data,
    generator and memory estimate, with nothing reaching the run (no events, no evaluations, no guard,
    no curriculum, no attached trainer) and ``run_dir`` a throwaway folder."""

    def __init__(self, run: Any, folder: Path):
        self.tokenizer, self.train_dataset, self.generator = run.tokenizer, run.train_dataset, run.generator
        self.fits, self.run_dir, self.eval_every, self.guard, self.curriculum = (
            run.fits,
            folder,
            0,
            None,
            None,
        )

    def emit(self, event: Any) -> None:
        pass

    def on_weights(self, model: Any, phase: str, step: int, next_phase: str | None = None) -> None:
        return None

    def attach(self, trainer: Any) -> None:
        pass


def _time_phase(phase: Any, model: Any, run: Any, completion_tokens: int | None = None) -> PhaseTiming:
    """A few steps of ``phase`` with its own trainer and TRL config (device fitting included), into a
    throwaway folder, with one checkpoint at the last step; none of it reaches the run (no events, no
    evaluations, no checkpoint of the run's; the weights and random states are restored). GRPO's
    rollouts are generated to at most ``completion_tokens`` (:func:`reference_tokens`) where given."""
    from transformers.trainer_utils import SaveStrategy

    from rlvr.training_loop.phase import TrainOutcome, quiet

    timed = copy.copy(phase)
    if hasattr(phase, "signal_configured"):
        # Every rollout forwarded and backpropagated: the base model's rollouts mostly carry no signal,
        # which a trained model's do, and a skipped rollout costs nothing (an upper bound of the step).
        timed.signal_configured = {**phase.signal_configured, "skip_zero_advantage": False}
    steps = WARMUP_STEPS.get(phase.name, 1) + TIMED_STEPS.get(phase.name, 1)
    clock = _Clock()
    with tempfile.TemporaryDirectory(prefix=".budget-calibration-", dir=run.run_dir) as folder:
        quiet_run = _Quiet(run, Path(folder))
        args, _ = timed.args_and_bridge(model, quiet_run, TrainOutcome(model=model))
        args.max_steps, args.save_steps = steps, steps
        args.save_strategy, args.save_total_limit = SaveStrategy.STEPS, None
        if completion_tokens is not None and hasattr(args, "max_completion_length"):
            args.max_completion_length = min(args.max_completion_length, completion_tokens)
        start = time.perf_counter()
        trainer = quiet(timed.trainer(model, args, quiet_run, [clock]))
        setup = time.perf_counter() - start
        trainer.train()
        del trainer
    gaps = [b - a for a, b in zip(clock.ends, clock.ends[1:], strict=False)]
    later = gaps[-TIMED_STEPS.get(phase.name, 1) :] if len(gaps) > 1 else gaps
    return PhaseTiming(
        setup=round(setup, 3),
        first_step=round(gaps[0], 3),
        step=round(statistics.median(later), 3),
        save=round(max(clock.saves, default=0.0), 3),
        steps_timed=len(later),
    )


def reference_tokens(loop: Any, tokenizer: Any, dataset: Any) -> int | None:
    """The length, in tokens, of the longest reference completion of ``dataset`` as SFT trains on it
    (the SFT phase's ``completion``: the answer, after its working with ``target: worked``; one token
    more for where a tokenizer joins it differently in context), where the run's first enabled phase is
    SFT; else None.

    Every evaluation after the baseline, and every GRPO rollout, is of a model that SFT has taught to
    answer in that form and stop at the closing tag (the generation's stop string); the base model the
    calibration times runs to ``max_new_tokens`` instead. Measured on the 2-core EPYC (2026-11-29): the
    evaluations timed on the base model's length ran about 3x faster after SFT (docs/budget.md)."""
    phases = [p for p in getattr(loop, "phases", []) if p.enabled]
    if not phases or phases[0].name != "sft" or getattr(phases[0], "prompt", None) is None:
        return None
    entries = dataset["entry"] if "entry" in dataset.column_names else [None] * len(dataset)
    rows = [(str(a), e) for a, e in zip(dataset["answer"], entries, strict=True) if a is not None]
    if not rows:
        return None
    encoded = tokenizer([phases[0].completion(a, e) for a, e in rows], add_special_tokens=False)
    return max(len(ids) for ids in encoded["input_ids"]) + 1


def _time_evaluations(
    evaluator: Any, model: Any, tokenizer: Any, eval_data: Any, completion_tokens: int | None = None
) -> EvalTiming:
    """One batch of a greedy evaluation and one of a sampled one (``evaluation.sampled``), generated
    and scored as an evaluation does, at the batch size it uses on this device, with completions of at
    most ``completion_tokens`` where given (:func:`reference_tokens`); no file is written."""
    from rlvr.evaluation.evaluator import cuda_batch

    if completion_tokens is not None and completion_tokens < evaluator.max_new_tokens:
        evaluator = copy.copy(evaluator)
        evaluator.max_new_tokens = completion_tokens
    else:
        completion_tokens = None

    on_cuda = getattr(getattr(model, "device", None), "type", None) == "cuda"
    batch = (
        cuda_batch(model, evaluator.cuda_batch_size, evaluator.max_new_tokens)
        if on_cuda
        else evaluator.batch_size
    )
    rows = evaluator.rows(eval_data)
    greedy = evaluator.evaluate_questions(model, tokenizer, rows.select(range(min(batch, len(rows)))))
    timing = EvalTiming(
        round(greedy.seconds, 3), math.ceil(len(rows) / batch), completion_tokens=completion_tokens
    )
    view = evaluator.sampled_view()
    if view is None:
        return timing
    per_batch = max(1, batch // view.num_samples)  # questions per batch (rlvr.evaluation.generation)
    rows = view.rows(eval_data)
    sampled = view.evaluate_questions(model, tokenizer, rows.select(range(min(per_batch, len(rows)))))
    return dataclasses.replace(
        timing, sampled_batch=round(sampled.seconds, 3), sampled_batches=math.ceil(len(rows) / per_batch)
    )


def calibrate(
    loop: Any, model: Any, run: Any, evaluator: Any, eval_data: Any
) -> tuple[dict[str, PhaseTiming], EvalTiming]:
    """Each enabled phase and each kind of evaluation timed on ``model`` (weights and random states
    restored after: :func:`weights_kept`, :func:`rng_kept`). The reward set's buffers of the GRPO
    steps timed (their completions rows and counters) are drained, so the run's first step reports
    its own."""
    tokens = reference_tokens(loop, run.tokenizer, evaluator.rows(eval_data))
    with rng_kept():
        evals = _time_evaluations(evaluator, model, run.tokenizer, eval_data, tokens)
        timings = {}
        for phase in loop.phases:
            if phase.enabled:
                with weights_kept(model):
                    timings[phase.name] = _time_phase(phase, model, run, tokens)
                rewards = getattr(phase, "rewards", None)
                if rewards is not None:
                    rewards.completions()
                    rewards.counters()
                gc.collect()
    return timings, evals


# -- applying, recording, reporting --------------------------------------------------------------------


def apply(budget: Plan, loop: Any, evaluator: Any) -> None:
    """The plan's changes through the nodes configured values go through: each phase's node type and
    TRL config (:meth:`~rlvr.training_loop.phase.Phase.replan`), the evaluator's ``every_n_steps``
    annotation; raise ConfigValidationError with every issue."""
    issues: list[ConfigIssue] = []
    for phase in loop.phases:
        prefix = f"{phase.key}."
        changes = {
            k[len(prefix) :]: after for k, (_, after) in budget.changes.items() if k.startswith(prefix)
        }
        if changes:
            issues += phase.replan(changes)
    every = budget.changes.get("evaluation.every_n_steps")
    if every is not None:
        wanted = typing.get_type_hints(type(evaluator).__init__, include_extras=True).get("every_n_steps")
        found = value_issues("evaluation.every_n_steps", every[1], wanted, "Evaluator.every_n_steps")
        issues += found
        if not found:
            evaluator.every_n_steps = every[1]
    if issues:
        raise ConfigValidationError(issues)


def read_plan(run_dir: Path) -> Plan:
    return Plan.from_record(json.loads((Path(run_dir) / PLAN_FILE).read_text()))


def write_plan(run_dir: Path, budget: Plan) -> Path:
    """:data:`PLAN_FILE`, and the plan under ``budget_plan`` in provenance.json (written already)."""
    path = atomic_write_json(run_dir / PLAN_FILE, budget.record(), root=run_dir)
    provenance = run_dir / "provenance.json"
    if provenance.is_file():
        record = json.loads(provenance.read_text())
        record["budget_plan"] = budget.record()
        atomic_write_json(provenance, record, root=run_dir, default=str)
    return path


def prepare(
    minutes: float,
    resume: tuple[str, Path] | None,
    loop: Any,
    schedule: Any,
    model: Any,
    run: Any,
    elapsed: Callable[[], float],
    say: Callable[[str], None] = print,
) -> Plan:
    """The run's plan, applied: the one the resumed checkpoint's run recorded, or a new one measured
    now on ``model`` (``schedule``: the run's rlvr.evaluation.schedule.EvalSchedule, its evaluator and
    held-out split; ``run``: what training gets; ``elapsed()``: the run's seconds so far)."""
    run_dir, evaluator, eval_data = run.run_dir, schedule.evaluator, schedule.eval_data
    if resume is not None:
        owner = resume[1].parent.parent.parent
        budget = read_plan(owner)
        apply(budget, loop, evaluator)
        if owner.resolve() != Path(run_dir).resolve():
            write_plan(run_dir, budget)
        changed = (
            f" (budget_minutes is {minutes:g} now: the checkpoint follows the plan)"
            if minutes != budget.budget_minutes
            else ""
        )
        say(
            f"budget: continuing {resume[1]} under the plan of {owner / PLAN_FILE}{changed}, not planned again"
        )
        say(plan_text(budget))
        return budget
    spent, target = elapsed(), minutes * 60 * (1 - MARGIN)
    if spent >= target:  # gone before anything is timed: no calibration to pay for
        raise ConfigValidationError(
            [
                ConfigIssue(
                    KEY,
                    minutes,
                    f"the run does not fit: {spent:.0f} s went before training (loading, the baseline "
                    f"evaluation), more than the {target:.0f} s the budget leaves after its {MARGIN:.0%} "
                    "margin; nothing was trained",
                    f"set {KEY} well above {spent / 60:.1f}, or make the evaluations cheaper "
                    "(evaluation.max_examples, evaluation.baseline=false)",
                )
            ]
        )
    say(f"budget: {minutes:g} min; timing a few steps of each phase and one batch of each evaluation ...")
    timings, evals = calibrate(loop, model, run, evaluator, eval_data)
    budget = plan(
        minutes,
        elapsed(),
        shapes_of(loop),
        evaluator.every_n_steps,
        timings,
        evals,
        sampled=evaluator.sampled_view() is not None,
    )
    budget = dataclasses.replace(budget, created=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    apply(budget, loop, evaluator)
    write_plan(run_dir, budget)
    say(plan_text(budget))
    return budget


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def plan_text(budget: Plan) -> str:
    """The plan as the console says it, before training."""
    lines = [f"budget plan ({budget.budget_minutes:g} min from the pipeline's start to its report):"]
    for name, p in budget.phases.items():
        t = p.timing
        lines.append(
            f"  {name}: {p.configured_steps} -> {p.steps} steps at {t.step:.2f} s/step (first {t.first_step:.1f} s, "
            f"{t.steps_timed} timed), {p.evaluations} evaluation(s), {p.checkpoints} checkpoint(s) at {t.save:.1f} s: "
            f"{_minutes(p.seconds)}"
        )
    configured, planned = budget.every_n_steps
    e = budget.evals
    sampled = (
        f", sampled {e.sampled:.0f} s ({e.sampled_batches} x {e.sampled_batch:.1f} s)"
        if e.sampled_batches
        else ""
    )
    length = (
        f"; timed at {e.completion_tokens} tokens a completion, the reference answers' length SFT teaches "
        "(GRPO's rollouts too)"
        if e.completion_tokens
        else ""
    )
    lines.append(
        f"  evaluation.every_n_steps {configured} -> {planned}; an evaluation: greedy {e.greedy:.0f} s "
        f"({e.greedy_batches} batch(es) x {e.greedy_batch:.1f} s){sampled}{length}"
    )
    s = budget.stages
    lines.append(
        f"  predicted: {_minutes(s['before_training'])} before training (measured) + train {_minutes(s['train'])} + "
        f"final evaluation {_minutes(s['final_eval'])} + save {_minutes(s['save'])} = {_minutes(budget.predicted)} "
        f"of {budget.budget_minutes:g} min ({budget.margin:.0%} held back)"
        + ("; the configured run fits, nothing changed" if not budget.changes else "")
    )
    return "\n".join(lines)


def against(budget: Plan, stages: Mapping[str, float], total: float, outcome: Any) -> dict[str, Any]:
    """:func:`planned_vs_actual` of this attempt: ``stages``' seconds by stage name (the orchestrator's
    clock), ``total`` up to the report, ``outcome`` the training's (each phase's own clock)."""
    actual = {k: stages[k] for k in ("train", "final_eval", "save") if k in stages}
    before = total - sum(actual.values())
    return planned_vs_actual(budget, {**actual, "total": total, "before_training": before}, outcome.seconds)


def planned_vs_actual(
    budget: Plan, actual: Mapping[str, float | None], phases: Mapping[str, float]
) -> dict[str, Any]:
    """The report's record: each part of the run planned and as it went (``actual``: seconds of this
    attempt by part, as in ``budget.stages`` plus ``total``; ``phases``: each phase's own clock)."""
    rows: list[dict[str, Any]] = [{"part": "before training (load, baseline, calibration)", "planned_s": budget.stages["before_training"],
             "actual_s": actual.get("before_training")}]  # fmt: skip
    rows += [
        {"part": f"{name} ({p.steps} steps)", "planned_s": p.seconds, "actual_s": phases.get(name)}
        for name, p in budget.phases.items()
    ]
    rows += [
        {"part": "train stage (phases, their evaluations, after-SFT)", "planned_s": budget.stages["train"],
         "actual_s": actual.get("train")},
        {"part": "final evaluation", "planned_s": budget.stages["final_eval"], "actual_s": actual.get("final_eval")},
        {"part": "save", "planned_s": budget.stages["save"], "actual_s": actual.get("save")},
        {"part": "total, to the report", "planned_s": budget.predicted, "actual_s": actual.get("total")},
    ]  # fmt: skip
    for row in rows:
        row["planned_s"] = round(row["planned_s"], 1)
        row["actual_s"] = None if row["actual_s"] is None else round(row["actual_s"], 1)
    return {"budget_minutes": budget.budget_minutes, "rows": rows, "plan": budget.record()}
