"""Every reasoning-gym task through rlvr's entry conversion: JSON-safe, stable, gold scored the same.

    .venv/bin/python benchmarks/reasoning_gym_tasks.py --budget-s 90      # every task, 200 x seeds 42 43
    .venv/bin/python benchmarks/reasoning_gym_tasks.py --tasks gsm_symbolic arc_agi --items 50 --no-write

Prints a markdown table (:data:`ABOUT` says what each column means) and writes it to
benchmarks/reasoning_gym_tasks.md; exits 1 if any task fails a check.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import math
import os
import platform
import sys
import time
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import reasoning_gym
from reasoning_gym.composite import DatasetSpec
from reasoning_gym.factory import DATASETS

from rlvr.verifier import ScoreRequest, VerifierPool
from rlvr.verifier.entries import TAG, from_json_safe, to_json_safe

OUT = Path(__file__).with_suffix(".md")
ABOUT = """\
Each entry is made JSON-safe as the data components do (`rlvr.verifier.entries.to_json_safe`),
written and read back as the dataset's `entry` column is, and its gold answer (`str(entry["answer"])`,
as the `answer` column and the SFT target hold it) is scored twice: by the task dataset's own
`score_answer` on the raw entry, and by `rlvr.verifier.VerifierPool` (in-process: the pipeline's
screen, entry rebuilding and verifier call) on the converted one.
`converted ok`: entries whose JSON text reads back to the same value and decodes to objects that
encode the same again (types included). `gold raw` / `gold converted`: mean gold score (`-`: no
gold answer). `mismatches`: items whose two scores (value and status) differ; must be 0.
`non-JSON values`: what plain JSON would have refused or changed, by kind (tagged, rebuilt before
scoring). `needs beyond defaults`: what building or scoring the task takes that defaults do not
give; "no gold answer" tasks are verifier-only data."""

# What a task needs beyond reasoning-gym's defaults to build at all, and why (the table says so).
EXTRA_PARAMS: dict[str, dict[str, Any]] = {
    "composite": {
        "datasets": [
            DatasetSpec(name, 1.0, {}) for name in ("gsm_symbolic", "arc_agi", "advanced_geometry", "codeio")
        ]
    },
}
WHY_EXTRA = {
    "composite": "a `datasets` list of DatasetSpec objects (empty: 'Must specify at least one dataset'); "
    "a YAML config cannot make those, rlvr's `data=mixture` is the config route to several tasks",
}


@dataclass
class TaskCheck:
    """One task's sweep result (``error`` set when it could not be generated or scored at all)."""

    task: str
    items: int = 0
    converted_ok: int = 0
    scored: int = 0  # gold answers scored both ways
    raw_sum: float = 0.0
    converted_sum: float = 0.0
    mismatches: int = 0
    no_gold: int = 0  # items whose answer is None: nothing to score (verifier-only data)
    screened: int = 0  # gold answers the sandbox's screen refuses (rlvr.verifier.screen)
    seconds: float = 0.0
    tagged: collections.Counter = field(default_factory=collections.Counter)  # non-JSON values seen
    error: str | None = None
    stopped: bool = False  # the time budget ran out before every item was checked
    examples: list[str] = field(default_factory=list)  # first mismatches / conversion failures

    @property
    def gold_raw(self) -> float:
        return self.raw_sum / self.scored if self.scored else math.nan

    @property
    def gold_converted(self) -> float:
        return self.converted_sum / self.scored if self.scored else math.nan

    @property
    def needs(self) -> str:
        notes = []
        if self.task in EXTRA_PARAMS:
            notes.append(WHY_EXTRA[self.task])
        if self.no_gold:
            notes.append(f"no gold answer ({self.no_gold}/{self.items} answers are None)")
        if self.stopped:
            notes.append("slow: stopped at the time budget")
        if self.screened:
            notes.append(f"the screen refuses {self.screened} gold answers")
        if self.scored and self.gold_raw < 1.0:
            notes.append("gold scores below 1 on the raw entry")
        return "; ".join(notes) or "-"


def _tags(value: Any, seen: collections.Counter) -> None:
    if isinstance(value, list):
        for item in value:
            _tags(item, seen)
    elif isinstance(value, dict):
        if isinstance(value.get(TAG), str):
            seen[value[TAG]] += 1
        for item in value.values():
            _tags(item, seen)


def convert(raw: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """``raw`` as the pipeline stores and reads it back, and whether that is lossless and stable."""
    encoded = to_json_safe(raw)
    back = json.loads(json.dumps(encoded, allow_nan=False))
    return back, back == encoded and to_json_safe(from_json_safe(back)) == encoded


def score_raw(dataset: Any, answer: str | None, raw: dict[str, Any]) -> tuple[float, str]:
    """The task's own verifier on the raw entry; an exception is a status, as in the sandbox."""
    try:
        return float(dataset.score_answer(answer=answer, entry=raw)), "ok"
    except Exception as error:
        return 0.0, f"error {type(error).__name__}"


def verifier_pool() -> VerifierPool:
    """In-process: the pipeline's screen, entry rebuilding and verifier call without worker start-up;
    long answers allowed (some gold boards are long), so only the screen refuses anything."""
    return VerifierPool(
        num_workers=0, timeout_s=60.0, memory_limit_mb=4096, max_answer_chars=100_000, failure_reward=0.0
    )


def score_converted(pool: VerifierPool, task: str, answer: str | None, converted: dict) -> tuple[float, str]:
    """What rewards and evaluation get for the converted entry: ``(value, status)``; "rejected"
    means the screen refused the answer before any verifier saw it (not comparable)."""
    score = pool.score([ScoreRequest(task, answer, converted)])[0]
    return score.value, score.status if score.status != "error" else f"error {score.detail.split(':')[0]}"


def gold_text(raw: dict[str, Any]) -> str | None:
    answer = raw["answer"]
    return None if answer is None else str(answer)


def _score_gold(
    check: TaskCheck, pool: VerifierPool, dataset: Any, where: str, raw: dict, converted: dict
) -> None:
    answer = gold_text(raw)
    if answer is None:
        check.no_gold += 1
        return
    raw_score, converted_score = (
        score_raw(dataset, answer, raw),
        score_converted(pool, check.task, answer, converted),
    )
    if converted_score[1] == "rejected":
        check.screened += 1
        return
    check.scored += 1
    check.raw_sum, check.converted_sum = (
        check.raw_sum + raw_score[0],
        check.converted_sum + converted_score[0],
    )
    if raw_score != converted_score:
        check.mismatches += 1
        if len(check.examples) < 3:
            check.examples.append(f"{where}: raw {raw_score}, converted {converted_score}")


def check_task(
    task: str, items: int, seeds: tuple[int, ...], pool: VerifierPool, budget_s: float = math.inf
) -> TaskCheck:
    """Generate, convert and score the gold answers of ``items`` entries per seed of ``task``;
    stops early once ``budget_s`` seconds have passed (``items`` then says how many were checked)."""
    check, start = TaskCheck(task), time.perf_counter()
    try:
        # Some verifiers print (bf's interpreter); the table is the output here.
        with contextlib.redirect_stdout(io.StringIO()):
            for seed in seeds:
                if check.stopped:
                    break
                dataset = reasoning_gym.create_dataset(
                    task, size=items, seed=seed, **EXTRA_PARAMS.get(task, {})
                )
                for i in range(items):
                    if time.perf_counter() - start > budget_s:
                        check.stopped = True
                        break
                    raw = dataset[i]
                    converted, ok = convert(raw)
                    _tags(converted, check.tagged)
                    check.items += 1
                    check.converted_ok += ok
                    if not ok and len(check.examples) < 3:
                        check.examples.append(f"seed {seed} item {i}: not round-trip stable")
                    _score_gold(check, pool, dataset, f"seed {seed} item {i}", raw, converted)
    except Exception as error:
        check.error = f"{type(error).__name__}: {str(error)[:150]}"
    check.seconds = time.perf_counter() - start
    return check


def _mean(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3f}"


def table(checks: list[TaskCheck]) -> str:
    lines = [
        "| task | items | converted ok | gold raw | gold converted | mismatches | seconds | non-JSON values | needs beyond defaults |",
        "|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for c in checks:
        tagged = ", ".join(f"{kind} x{n}" for kind, n in sorted(c.tagged.items())) or "-"
        needs = c.needs if c.error is None else f"**fails**: {c.error}"
        lines.append(
            f"| {c.task} | {c.items} | {c.converted_ok} | {_mean(c.gold_raw)} | {_mean(c.gold_converted)} "
            f"| {c.mismatches} | {c.seconds:.1f} | {tagged} | {needs} |"
        )
    return "\n".join(lines)


def machine() -> str:
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        platform.processor() or platform.machine(),
    )
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{os.cpu_count()}-core CPU `{cpu}`, {platform.system()}, Python {platform.python_version()}, "
        f"reasoning-gym {metadata.version('reasoning-gym')}; load average at the end {load} (1/5/15 min)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=sorted(DATASETS), help="default: every registered task")
    parser.add_argument("--items", type=int, default=200, help="items per seed and task")
    parser.add_argument("--seeds", type=int, nargs="+", default=[42, 43])
    parser.add_argument(
        "--budget-s", type=float, default=math.inf, help="seconds per task before it stops early"
    )
    parser.add_argument("--no-write", action="store_true", help=f"print only; do not write {OUT.name}")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")

    checks = []
    with verifier_pool() as pool:
        for task in args.tasks:
            checks.append(check_task(task, args.items, tuple(args.seeds), pool, args.budget_s))
            print(table(checks[-1:]).splitlines()[-1], *checks[-1].examples, sep="\n  ", file=sys.stderr)
    bad = [c.task for c in checks if c.error or c.mismatches or c.converted_ok != c.items]
    report = (
        f"# reasoning-gym tasks through rlvr's entry conversion\n\n"
        f"`{' '.join(['benchmarks/reasoning_gym_tasks.py', *sys.argv[1:]])}`\n\n{ABOUT}\n\n"
        f"- Date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC\n"
        f"- Machine: {machine()}; other jobs shared the cores, so seconds are an upper bound.\n"
        f"- Items: {args.items} per seed, seeds {' '.join(map(str, args.seeds))}, at most {args.budget_s:g} s a task; "
        f"{len(checks)} tasks, problems in: {', '.join(bad) or 'none'}\n\n{table(checks)}\n"
    )
    print(report)
    if not args.no_write:
        OUT.write_text(report)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
