"""Does training help, and does GRPO add over SFT alone at the same wall-clock budget?

Runs the real pipeline (run_pipeline.py, default conf/) twice on the embedded default:

1. The default run: SFT for N steps, then GRPO for M steps, evaluation every E steps.
2. SFT only, for as many steps K as fit in run 1's SFT+GRPO training time (K = ceil(budget /
   SFT step time)), evaluation every E steps and at step K.

Run 2 is a run of its own, not a prefix of a longer SFT run, so a decaying learning-rate
schedule (the default is cosine) ends at step K for SFT only just as it ends at step N in the
default run: each side gets its full schedule within the same budget. Training time is steps x
the phase's median step time (evaluations and model loading excluded), so a few steps slowed by
other work on the machine do not tilt the comparison. A finished run directory (report.json
present) is reused, so an interrupted benchmark continues where it stopped.

    python benchmarks/learning.py --sft-steps 240 --grpo-steps 16 --eval-every 80
    python benchmarks/learning.py --analyze-only   # re-print from outputs/learning
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(run_dir: Path, overrides: list[str]) -> float:
    cmd = [sys.executable, str(ROOT / "run_pipeline.py"), f"hydra.run.dir={run_dir}", *overrides]
    print("$", " ".join(cmd[1:]), flush=True)
    start = time.perf_counter()
    with (run_dir.parent / f"{run_dir.name}.log").open("w") as log:
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    return time.perf_counter() - start


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def cumulative_seconds(records: list[dict], phase: str) -> dict[int, float]:
    """Training seconds up to each step: steps x the phase's median step time.

    The median, not the sum, so that a few steps slowed by other work on a shared
    2-core machine do not tilt the equal-budget comparison; evaluations are excluded.
    """
    times = {
        r["step"]: r["metrics"][f"{phase}/step_seconds"]
        for r in records
        if r["event"] == "train_step" and r["phase"] == phase and f"{phase}/step_seconds" in r["metrics"]
    }
    median = statistics.median(times.values())
    return {step: step * median for step in times}


def evals(records: list[dict]) -> list[dict]:
    return [r for r in records if r["event"] == "evaluation"]


def fmt(e: dict) -> str:
    return f"{e['accuracy']:6.1%}  [{e['ci_low']:.1%}, {e['ci_high']:.1%}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sft-steps", type=int, default=240)
    ap.add_argument("--grpo-steps", type=int, default=16)
    ap.add_argument("--eval-every", type=int, default=80)
    ap.add_argument("--out", type=Path, default=ROOT / "outputs" / "learning")
    ap.add_argument(
        "--analyze-only", action="store_true", help="re-print the table from finished runs in --out"
    )
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for both runs")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    n, m, e = args.sft_steps, args.grpo_steps, args.eval_every
    sft_dir, grpo_dir = args.out / "sft_only", args.out / "default_run"
    walls: dict[str, float] = {}
    plan = [
        (grpo_dir, lambda: [f"training_loop.sft.max_steps={n}", f"training_loop.grpo.max_steps={m}"]),
        (
            sft_dir,
            lambda: [
                f"training_loop.sft.max_steps={equal_time_sft_steps(events(grpo_dir), n, m)}",
                "training_loop.grpo.enabled=false",
                "evaluation.baseline=false",
            ],
        ),
    ]
    for run_dir, overrides in plan:
        if args.analyze_only or (run_dir / "report.json").is_file():
            print(f"reusing the finished run in {run_dir}")
            continue
        walls[run_dir.name] = run(run_dir, [*overrides(), f"evaluation.every_n_steps={e}", *args.overrides])
    table(sft_dir, grpo_dir, n, m, walls)


def equal_time_sft_steps(records: list[dict], n: int, m: int) -> int:
    """SFT steps that take at least the default run's SFT(n) + GRPO(m) training time."""
    sft_step = cumulative_seconds(records, "sft")[n] / n
    return math.ceil(budget_seconds(records, n, m) / sft_step)


def budget_seconds(records: list[dict], n: int, m: int) -> float:
    """Training seconds of SFT(n) + GRPO(m) in the default run."""
    return cumulative_seconds(records, "sft")[n] + cumulative_seconds(records, "grpo")[m]


def table(sft_dir: Path, grpo_dir: Path, n: int, m: int, walls: dict[str, float]) -> None:
    sft_records, grpo_records = events(sft_dir), events(grpo_dir)
    base = next(r for r in evals(grpo_records) if r["label"] == "baseline")
    after_sft = next(r for r in evals(grpo_records) if r["label"] == "after_sft")
    final = next(r for r in evals(grpo_records) if r["label"] == "final")
    sft_only = next(r for r in evals(sft_records) if r["label"] == "final")
    k = sft_only["step"]
    budget = budget_seconds(grpo_records, n, m)
    rows = [
        ("base model", 0, 0.0, base),
        (f"SFT {n} steps", n, cumulative_seconds(grpo_records, "sft")[n], after_sft),
        (f"SFT only, {k} steps (equal time)", k, cumulative_seconds(sft_records, "sft")[k], sft_only),
        (f"SFT {n} + GRPO {m} steps (default run)", n + m, budget, final),
    ]
    print(f"\nheld-out: {base['n']} questions, greedy; minutes = training time (evaluations excluded)")
    print(f"{'setting':42s} {'steps':>5s} {'minutes':>7s}  accuracy [95% CI]")
    for name, steps, seconds, ev in rows:
        print(f"{name:42s} {steps:5d} {seconds / 60:7.1f}  {fmt(ev)}")
    gain = 100 * (final["accuracy"] - sft_only["accuracy"])
    print(f"SFT+GRPO minus SFT only at equal time: {gain:+.1f} points")
    for label, recs in (("default run", grpo_records), ("SFT-only", sft_records)):
        points = [r for r in evals(recs) if r["label"] in ("sft", "grpo")]
        print(f"{label} in-training: " + ", ".join(f"{r['step']}: {r['accuracy']:.1%}" for r in points))
    for name, seconds in walls.items():
        print(f"wall clock incl. model load and evaluations, {name}: {seconds / 60:.1f} min")


if __name__ == "__main__":
    main()
