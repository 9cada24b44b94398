"""A reasoning-gym curriculum: GRPO's questions get harder or easier with the recent success rate.

The levels are reasoning-gym's own (``reasoning_gym.factory.create_curriculum(task)``: each
attribute, e.g. ``num_terms`` of basic_arithmetic, has a list of levels that its
``generate_configuration`` turns into generator parameters). :class:`Curriculum` holds that
object and the update rule: after every ``window`` GRPO generation batches it takes the share of
completions the task's verifier accepted; at or above ``raise_at`` every moving attribute goes one
level up (``increment_attr_level``), below ``lower_at`` one level down, each within
``[min_level, min(max_level, its top level)]``; after a change the window starts afresh, so the new
level is judged on its own batches.

How the questions follow the level (rlvr.training_loop.curriculum): every training row carries a
``slot``; TRL's sampler picks slots as for any dataset, and right before GRPO generates for a batch
each slot is filled with question ``slot`` of the current level's pool. A pool is a train-side
draw of ``train_size`` questions at one level (rlvr.data.identity), so no held-out question is
ever trained on, the question of a slot at a level is the same in every run of a config, and a
resumed run (its curriculum state restored from the checkpoint) continues with the very questions
and level the uninterrupted run had. SFT, when enabled, trains on the starting level's pool.

Evaluation stays on fixed levels so runs compare: the headline held-out split is the starting
level, and each of ``eval_levels`` is an extra evaluation set ``level_<L>`` (rlvr.data.base).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

from datasets import Dataset
from pydantic import Field
from reasoning_gym.coaching.attributes import RangeAttributeDefinition, ScalarAttributeDefinition
from reasoning_gym.coaching.base_curriculum import (
    BaseCurriculum,
    DefaultCurriculumContext,
    RangeAttributeMode,
)
from reasoning_gym.factory import CURRICULA, DATASETS, create_curriculum

from rlvr.data import identity
from rlvr.data.base import TaskData, eval_set_drawn_size_issues, with_eval_sets
from rlvr.data.reasoning_gym import ReasoningGymData, Size, split_entries, to_dataset
from rlvr.issues import ConfigIssue, suggest
from rlvr.prompts import PromptTemplate
from rlvr.runtime.io import atomic_write_json

STATE_FILE = "curriculum_state.json"
SLOT = "slot"
RANGE_MODES = [m.value for m in RangeAttributeMode]


def _fields(attr: Any) -> list[str]:
    """The generator config fields an attribute sets."""
    if isinstance(attr, RangeAttributeDefinition):
        return [attr.lower_field_name, attr.upper_field_name]
    if isinstance(attr, ScalarAttributeDefinition):
        return [attr.field_name]
    return []


class Curriculum:
    """The live difficulty of one task: reasoning-gym's curriculum object, the update rule, its state.

    Args:
        task: a reasoning-gym task with a registered curriculum.
        start_levels: attribute -> starting level (absent: reasoning-gym's default level).
        attributes: the attributes that move (None: all of the task's).
        min_level, max_level: bounds of the moving attributes' levels (max None: each one's top).
        raise_at, lower_at: success-rate thresholds (raise at >= raise_at, lower below lower_at).
        window: generation batches per decision.
        params: the generator parameters the curriculum does not set (e.g. ``operators``).
        range_mode: how a range attribute's level becomes a range (reasoning-gym's
            ``RangeAttributeMode``: inclusive = all levels up to it, upper_bound = its own segment).

    >>> c = Curriculum("basic_arithmetic", {}, None, 0, None, raise_at=0.5, lower_at=0.2, window=2)
    >>> c.observe(3, 4), c.levels, c.observe(4, 4), c.levels
    (False, {'num_terms': 0, 'num_digits': 0}, True, {'num_terms': 1, 'num_digits': 1})
    """

    def __init__(
        self,
        task: str,
        start_levels: dict[str, int],
        attributes: list[str] | None,
        min_level: int,
        max_level: int | None,
        raise_at: float,
        lower_at: float,
        window: int,
        params: dict[str, Any] | None = None,
        range_mode: str = "inclusive",
    ):
        self.task = task
        self.rg = create_curriculum(task)
        self.moving = list(attributes) if attributes is not None else list(self.rg.attributes)
        self.min_level, self.max_level = min_level, max_level
        self.raise_at, self.lower_at, self.window = raise_at, lower_at, window
        self.params = dict(params or {})
        self.context = DefaultCurriculumContext(mode=RangeAttributeMode(range_mode))
        for name, level in start_levels.items():
            self.rg.set_attr_level(name, level)
        self.start = self.levels
        self.batches: list[tuple[int, int]] = []  # (accepted, scored) per batch since the last change
        self.last: dict[str, Any] = {}  # what the latest generation batch trained at, for the metrics
        self.visited: list[dict[str, int]] = [self.start]  # every level a batch was drawn at (and SFT's)

    # -- levels ------------------------------------------------------------------------------------
    @property
    def levels(self) -> dict[str, int]:
        return {name: self.rg.get_attr_level(name) for name in self.rg.attributes}

    def level(self) -> int:
        """One number for the difficulty: the highest level among the moving attributes."""
        return max(self.rg.get_attr_level(name) for name in self.moving)

    def top(self, name: str) -> int:
        top = len(self.rg.get_attribute(name).levels) - 1
        return top if self.max_level is None else min(self.max_level, top)

    def params_at(self, levels: dict[str, int]) -> dict[str, Any]:
        """Generator parameters of ``levels``: the fixed ones plus what the attributes set."""
        saved = self.levels
        for name, level in levels.items():
            self.rg.set_attr_level(name, level)
        try:
            config = asdict(self.rg.generate_configuration(defaults=self.params, context=self.context))
        finally:
            for name, level in saved.items():
                self.rg.set_attr_level(name, level)
        keys = set(self.params) | {f for a in self.rg.attributes.values() for f in _fields(a)}
        return {k: v for k, v in config.items() if k in keys}

    def at_global(self, level: int) -> dict[str, int]:
        """The start levels with every moving attribute at ``level`` (its top if it has fewer levels),
        as reasoning-gym's ``set_global_level`` does."""
        out = dict(self.start)
        for name in self.moving:
            out[name] = min(level, len(self.rg.get_attribute(name).levels) - 1)
        return out

    # -- the update rule ---------------------------------------------------------------------------
    def observe(self, accepted: int, scored: int) -> bool:
        """Record one generation batch (``accepted`` of ``scored`` completions right); after
        ``window`` batches, raise or lower the moving attributes. Returns whether the level moved."""
        self.last["success"] = accepted / scored if scored else 0.0
        self.last.pop("window_success", None)
        self.batches.append((accepted, scored))
        if len(self.batches) < self.window:
            return False
        recent = self.batches[-self.window :]
        rate = sum(a for a, _ in recent) / max(1, sum(n for _, n in recent))
        self.last["window_success"] = rate
        before = self.levels
        if rate >= self.raise_at:
            self._move(up=True)
        elif rate < self.lower_at:
            self._move(up=False)
        moved = self.levels != before
        self.batches = [] if moved else recent
        return moved

    def _move(self, up: bool) -> None:
        """Every moving attribute one level up (down) with reasoning-gym's own increment (decrement),
        each within ``[min_level, min(max_level, its top)]``."""
        for name in self.moving:
            if up and self.rg.get_attr_level(name) < self.top(name):
                self.rg.increment_attr_level(name)
            elif not up and self.rg.get_attr_level(name) > self.min_level:
                self.rg.decrement_attr_level(name)

    def metrics(self) -> dict[str, float]:
        """The difficulty the latest generation batch trained at, and its success rate."""
        if not self.last:
            return {}
        out = {"curriculum/level": float(self.last["level"])}
        out.update({f"curriculum/level/{k}": float(v) for k, v in self.last["levels"].items()})
        for key in ("success", "window_success"):
            if key in self.last:
                out[f"curriculum/{key}"] = self.last[key]
        return out

    def note_batch(self) -> dict[str, int]:
        """Called when a batch is generated: remember its levels for the metrics; returns them."""
        self.last = {"levels": {n: self.rg.get_attr_level(n) for n in self.moving}, "level": self.level()}
        if self.levels not in self.visited:
            self.visited.append(self.levels)
        return self.levels

    # -- state -------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "levels": self.levels,
            "batches": self.batches,
            "last": self.last,
            "visited": self.visited,
        }

    def save(self, folder: Path) -> Path:
        return atomic_write_json(Path(folder) / STATE_FILE, self.state())

    def restore(self, folder: Path) -> None:
        """Levels and the open window from a checkpoint; a checkpoint without a state file (an SFT one,
        or a run without a curriculum) leaves the starting levels."""
        path = Path(folder) / STATE_FILE
        if not path.is_file():
            return
        try:
            state = json.loads(path.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: not a JSON curriculum state ({type(exc).__name__})") from None
        if not isinstance(state, dict) or state.get("task") != self.task:
            task = state.get("task") if isinstance(state, dict) else None
            raise ValueError(f"{path} holds the curriculum of task {task!r}, not {self.task!r}")
        problems = self.state_problems(state)
        if problems:
            # A checkpoint is a file from elsewhere: a level above the configured maximum would train
            # (and report) a difficulty the config rules out, a non-numeric one becomes a metric.
            raise ValueError(
                f"{path} does not fit this run's curriculum: " + "; ".join(problems) + ". Fix: resume from a "
                "checkpoint this config wrote, or set data.min_level / data.max_level to the bounds it ran under"
            )
        for name, level in state["levels"].items():
            self.rg.set_attr_level(name, level)
        self.batches = [tuple(b) for b in state["batches"]]
        self.last = state.get("last") or {}
        self.visited = state.get("visited") or [self.start]

    def _level_problems(self, where: str, levels: Any) -> list[str]:
        """Problems of a dict of attribute -> level: every attribute known, each level an integer within
        its bounds (:meth:`_bounds`)."""
        if not isinstance(levels, dict):
            return [f"{where} is {type(levels).__name__}, not an object of attribute -> level"]
        problems = []
        for name, level in levels.items():
            if name not in self.rg.attributes:
                problems.append(
                    f"{where} names {name!r}, not an attribute of {self.task} ({sorted(self.rg.attributes)})"
                )
            elif isinstance(level, bool) or not isinstance(level, int):
                problems.append(f"{where}.{name} is {level!r:.40}, not an integer level")
            else:
                low, high = self._bounds(name)
                if not low <= level <= high:
                    problems.append(f"{where}.{name}={level} is outside [{low}, {high}]")
        return problems

    def _bounds(self, name: str) -> tuple[int, int]:
        """The levels ``name`` can be at: [min_level, top] when it moves, any of its levels otherwise."""
        if name in self.moving:
            return self.min_level, self.top(name)
        return 0, len(self.rg.get_attribute(name).levels) - 1

    def state_problems(self, state: dict[str, Any]) -> list[str]:
        """What in a saved state (see :meth:`state`) this curriculum could not be at."""
        problems = self._level_problems("levels", state.get("levels"))
        visited = state.get("visited") or []
        if not isinstance(visited, list):
            problems.append(f"visited is {type(visited).__name__}, not a list")
            visited = []
        for i, levels in enumerate(visited):
            problems += self._level_problems(f"visited[{i}]", levels)
        batches = state.get("batches")
        pairs = isinstance(batches, list) and all(
            isinstance(b, list) and len(b) == 2 and all(type(n) is int and n >= 0 for n in b) and b[0] <= b[1]
            for b in batches
        )
        if not pairs:
            problems.append(f"batches is {batches!r:.60}, not a list of [accepted, scored] counts")
        last = state.get("last") or {}
        if not isinstance(last, dict):
            problems.append(f"last is {type(last).__name__}, not an object")
        elif last:
            problems += self._level_problems("last.levels", last.get("levels"))
            top = max(self._bounds(name)[1] for name in self.moving)
            for key, low, high in (
                ("level", self.min_level, top),
                ("success", 0, 1),
                ("window_success", 0, 1),
            ):
                value = last.get(key, low)
                number = not isinstance(value, bool) and isinstance(value, (int, float))
                if not number or not math.isfinite(value) or not low <= value <= high:
                    problems.append(f"last.{key} is {value!r:.40}, not a number in [{low}, {high}]")
        return problems


class CurriculumSource:
    """What training needs at run time: the curriculum, the question pool of each level, and the
    run's data manifest, which it keeps listing the pools of every level trained at.

    A pool is drawn the first time training reaches its level (a task such as leg_counting has
    hundreds of level combinations, most never reached). The manifest holds the whole pool of each
    visited level: a superset of the questions trained on, all train-side by construction.
    """

    def __init__(self, curriculum: Curriculum, pool: Any, prompt: PromptTemplate, manifest: dict[str, Any]):
        self.curriculum = curriculum
        self._pool = pool  # levels -> list of entries (train side, train_size of them)
        self.prompt = prompt
        self.manifest = manifest
        self._rows: dict[tuple, Dataset] = {}
        self.sync_manifest()

    def sync_manifest(self) -> None:
        """Add the pools of the visited levels to the manifest (in place: the run writes this dict)."""
        c = self.curriculum
        ids = set(self.manifest["train_question_ids"])
        for levels in c.visited:
            ids.update(identity.ids_of((c.task, e["question"]) for e in self._pool(levels)))
        self.manifest["train_question_ids"] = sorted(ids)
        self.manifest["num_train_questions"] = len(ids)
        self.manifest["task_params"][c.task]["curriculum"]["levels_trained"] = [
            {"levels": levels, "params": c.params_at(levels)} for levels in c.visited
        ]

    def restore(self, checkpoint: Path) -> None:
        """The curriculum state of ``checkpoint``, and the manifest of the levels trained before it."""
        self.curriculum.restore(checkpoint)
        self.sync_manifest()

    def save(self, checkpoint: Path) -> None:
        """The curriculum state, and the manifest so far: a checkpoint's own manifest is found before
        its run's (rlvr.data.identity.find_manifest)."""
        self.curriculum.save(checkpoint)
        atomic_write_json(Path(checkpoint) / identity.MANIFEST, self.manifest)

    def row(self, slot: int) -> dict[str, Any]:
        """Row ``slot`` at the current level, with the dataset's columns."""
        levels = self.curriculum.levels
        key = tuple(sorted(levels.items()))
        if key not in self._rows:
            self._rows[key] = to_dataset(self._pool(levels), self.curriculum.task, self.prompt)
        rows = self._rows[key]
        return {**rows[slot % len(rows)], SLOT: slot}

    def fill(self, inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A generation batch's rows with their questions at the current level (rows of one slot, a
        GRPO group, get the same question)."""
        visited = len(self.curriculum.visited)
        self.curriculum.note_batch()
        if len(self.curriculum.visited) > visited:  # a level trained at for the first time
            self.sync_manifest()
        return [{**row, **self.row(int(row[SLOT]))} for row in inputs]


class CurriculumData(ReasoningGymData):
    """One reasoning-gym task whose training difficulty follows the model (see the module docstring).

    Args:
        task, task_params, train_size, eval_size, seed, eval_sets: as ReasoningGymData; the
            ``task_params`` here are the generator parameters the curriculum does not set.
        start_levels: per task name, attribute -> starting level (unlisted tasks and attributes
            start at reasoning-gym's default level), so ``data.task=<other>`` works from the CLI.
        attributes: attributes that move with the success rate (None: all of the task's).
        min_level, max_level: bounds of the moving attributes' levels (None: each one's top).
        raise_at: raise when the window's success rate is at or above this (in [0, 1]).
        lower_at: lower when it is below this (in [0, 1], below ``raise_at``).
        window: GRPO generation batches per decision (a step each when steps_per_generation is 1).
        range_mode: reasoning-gym's RangeAttributeMode (inclusive, upper_bound, last_k).
        eval_levels: fixed global levels evaluated beside the starting level, each reported as
            the evaluation set ``level_<L>``.
    """

    # The orchestrator checks that a reward term runs the verifier (the success rate comes from it).
    needs_success_term = True

    def __init__(
        self,
        task: str,
        train_size: Size,
        eval_size: Size,
        seed: int,
        raise_at: Annotated[float, Field(ge=0, le=1, examples=[0.8], description="a success rate threshold")],
        lower_at: Annotated[float, Field(ge=0, le=1, examples=[0.3], description="a success rate threshold")],
        window: Annotated[int, Field(ge=1, examples=[4], description="batches")],
        start_levels: dict[str, dict[str, int]] | None,
        attributes: list[str] | None,
        min_level: Annotated[int, Field(ge=0, examples=[0], description="a level")],
        max_level: Annotated[int, Field(ge=0, description="a level; null = the top")] | None,
        range_mode: str,
        eval_levels: list[int] | None,
        task_params: dict[str, dict] | None,
        eval_sets: dict[str, Any] | None,
    ):
        super().__init__(task, train_size, eval_size, seed, task_params, eval_sets)
        self.all_start_levels = dict(start_levels or {})
        self.start_levels = dict(self.all_start_levels.get(task) or {})
        self.attributes = None if attributes is None else list(attributes)
        self.min_level, self.max_level = min_level, max_level
        self.raise_at, self.lower_at, self.window = raise_at, lower_at, window
        self.range_mode = range_mode
        self.eval_levels = list(eval_levels or [])

    def curriculum(self) -> Curriculum:
        return Curriculum(
            self.task,
            self.start_levels,
            self.attributes,
            self.min_level,
            self.max_level,
            self.raise_at,
            self.lower_at,
            self.window,
            self.params,
            self.range_mode,
        )

    def validate(self) -> list[ConfigIssue]:
        if self.task not in DATASETS:
            return super().validate()
        if self.task not in CURRICULA:
            return [
                ConfigIssue(
                    "data.task",
                    self.task,
                    "reasoning-gym has no curriculum for this task",
                    f"pick one of the {len(CURRICULA)} tasks with one ({suggest(self.task, CURRICULA)}; "
                    "list: `python -c 'import reasoning_gym.factory as f; print(sorted(f.CURRICULA))'`), "
                    "or use data=basic_arithmetic-style fixed parameters",
                )
            ]
        issues = self._rule_issues() + self._level_issues()
        if issues:
            return issues
        # The task's own generator check, at the starting level.
        self.params = self.curriculum().params_at(self.curriculum().start)
        try:
            return super().validate()
        finally:
            self.params = dict(self.task_params.get(self.task) or {})

    def drawn_size_issues(self, eval_only: bool = False) -> list[ConfigIssue]:
        """Only the extra sets' sizes: this task's questions are drawn level by level as the run moves,
        which a draw at the starting level would not judge."""
        return eval_set_drawn_size_issues(self.eval_sets)

    def _rule_issues(self) -> list[ConfigIssue]:
        """data.lower_at below data.raise_at, and a reasoning-gym range_mode (each threshold's range
        is the signature's)."""
        issues = []
        if self.lower_at >= self.raise_at:
            issues.append(
                ConfigIssue(
                    "data.lower_at",
                    self.lower_at,
                    f"must be below data.raise_at ({self.raise_at}), or one success rate would both "
                    "raise and lower the level",
                    f"set data.lower_at below {self.raise_at} (0 never lowers), e.g. 0.3 with raise_at 0.8",
                )
            )
        if self.range_mode not in RANGE_MODES:
            issues.append(
                ConfigIssue(
                    "data.range_mode",
                    self.range_mode,
                    "not a reasoning-gym RangeAttributeMode",
                    f"one of {RANGE_MODES} ({suggest(str(self.range_mode), RANGE_MODES)})",
                )
            )
        return issues

    def _level_issues(self) -> list[ConfigIssue]:
        rg = create_curriculum(self.task)
        names = list(rg.attributes)
        tops = {n: len(rg.get_attribute(n).levels) - 1 for n in names}
        listing = ", ".join(f"{n} (0-{tops[n]})" for n in names)
        # Each of the first two groups stops the checks: the later ones would only repeat it.
        issues = self._attribute_name_issues(rg, names, listing) or self._level_bound_issues()
        if issues:
            return issues
        moving = self.attributes if self.attributes is not None else names
        return (
            self._min_level_issues(tops, moving, listing)
            + self._start_level_issues(rg, tops, moving, listing)
            + self._eval_level_issues(tops, listing)
            + self._task_param_issues(rg, moving)
        )

    def _attribute_name_issues(self, rg: BaseCurriculum, names: list[str], listing: str) -> list[ConfigIssue]:
        """Attribute names in data.start_levels and data.attributes that the curriculum lacks."""
        issues = []
        for key, chosen in (("start_levels", list(self.start_levels)), ("attributes", self.attributes or [])):
            for name in chosen:
                if name not in rg.attributes:
                    issues.append(
                        ConfigIssue(
                            f"data.start_levels.{self.task}.{name}"
                            if key == "start_levels"
                            else f"data.{key}",
                            name,
                            f"not an attribute of reasoning-gym's {self.task} curriculum",
                            f"{suggest(name, names)}; its attributes and levels: {listing}",
                        )
                    )
        if self.attributes is not None and not self.attributes:
            issues.append(
                ConfigIssue("data.attributes", [], "no attribute would move", f"list some of: {listing}")
            )
        return issues

    def _level_bound_issues(self) -> list[ConfigIssue]:
        """data.min_level / data.max_level in order (each one's range is the signature's)."""
        if self.max_level is not None and self.max_level < self.min_level:
            return [
                ConfigIssue(
                    "data.max_level",
                    self.max_level,
                    f"below data.min_level ({self.min_level})",
                    "raise max_level or lower min_level",
                )
            ]
        return []

    def _min_level_issues(self, tops: dict[str, int], moving: list[str], listing: str) -> list[ConfigIssue]:
        """data.min_level must be reachable by every moving attribute."""
        if self.min_level <= min(tops[n] for n in moving):
            return []
        return [
            ConfigIssue(
                "data.min_level",
                self.min_level,
                "above the top level of a moving attribute",
                f"set it at most {min(tops[n] for n in moving)}; levels: {listing}",
            )
        ]

    def _start_level_issues(
        self, rg: BaseCurriculum, tops: dict[str, int], moving: list[str], listing: str
    ) -> list[ConfigIssue]:
        """Each attribute's starting level (configured or reasoning-gym's default) within its bounds."""
        issues = []
        for name in tops:
            level = self.start_levels.get(name, rg.get_attribute(name).default_level)
            low = self.min_level if name in moving else 0
            high = (
                min(tops[name], self.max_level)
                if name in moving and self.max_level is not None
                else tops[name]
            )
            if isinstance(level, bool) or not isinstance(level, int) or not low <= level <= high:
                issues.append(
                    ConfigIssue(
                        f"data.start_levels.{self.task}.{name}",
                        level,
                        f"outside the allowed levels {low}-{high} (reasoning-gym's levels: {listing}; "
                        "moving attributes also within data.min_level/max_level)",
                        f"set a level in {low}-{high}",
                    )
                )
        return issues

    def _eval_level_issues(self, tops: dict[str, int], listing: str) -> list[ConfigIssue]:
        """data.eval_levels: global levels of the curriculum."""
        top = max(tops.values())
        return [
            ConfigIssue(
                "data.eval_levels",
                level,
                f"not a level of the {self.task} curriculum (0-{top})",
                f"use levels within 0-{top}; attributes: {listing}",
            )
            for level in self.eval_levels
            if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= top
        ]

    def _task_param_issues(self, rg: BaseCurriculum, moving: list[str]) -> list[ConfigIssue]:
        """Generator parameters the moving attributes set, which data.task_params would set in vain."""
        return [
            ConfigIssue(
                f"data.task_params.{self.task}.{field}",
                self.params[field],
                f"set by the curriculum attribute {name}, so this value would be ignored",
                f"remove it; choose the difficulty with data.start_levels.{self.task}.{name}",
            )
            for name in moving
            for field in _fields(rg.get_attribute(name))
            if field in self.params
        ]

    def level_eval_sets(self) -> dict[str, ReasoningGymData]:
        """One fixed-difficulty held-out set per ``eval_levels`` entry."""
        curriculum = self.curriculum()
        return {
            f"level_{level}": ReasoningGymData(
                self.task,
                self.train_size,
                self.eval_size,
                self.seed,
                {self.task: curriculum.params_at(curriculum.at_global(level))},
                eval_sets=None,
            )
            for level in self.eval_levels
        }

    def eval_split(self, prompt: PromptTemplate, key: str = "data.eval_size") -> Dataset:
        curriculum = self.curriculum()
        params = curriculum.params_at(curriculum.start)
        return to_dataset(
            split_entries(self.task, params, "test", self.eval_size, self.seed, key), self.task, prompt
        )

    def load(self, prompt: PromptTemplate) -> TaskData:
        curriculum = self.curriculum()
        cache: dict[tuple, list[dict[str, Any]]] = {}

        def pool(levels: dict[str, int]) -> list[dict[str, Any]]:
            key = tuple(sorted(levels.items()))
            if key not in cache:
                cache[key] = split_entries(
                    self.task,
                    curriculum.params_at(levels),
                    "train",
                    self.train_size,
                    self.seed + 1,
                    "data.train_size",
                )
            return cache[key]

        train = to_dataset(pool(curriculum.start), self.task, prompt)
        train = train.add_column(SLOT, list(range(len(train))))
        data = TaskData(
            train=train,
            eval=self.eval_split(prompt),
            tasks=[self.task],
            seed=self.seed,
            manifest=identity.manifest(
                [self.task], {self.task: {"curriculum": {"start_levels": curriculum.start}}}, []
            ),
        )
        # The manifest starts with the starting level's pool (SFT's data) and grows with training.
        data.curriculum = CurriculumSource(curriculum, pool, prompt, data.manifest)
        return with_eval_sets(data, {**self.level_eval_sets(), **self.eval_sets}, prompt)
