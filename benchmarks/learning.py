"""Does training help, and does GRPO add over SFT alone at the same wall-clock budget?

Runs the real pipeline (run_pipeline.py, default conf/) twice on the embedded default:

1. The default run: SFT for N steps, then GRPO for M steps, held-out evaluation every E steps.
2. SFT only, for as many steps as fit in run 1's training time (SFT(N) + GRPO(M) seconds
   divided by run 1's median SFT step time), evaluation every E steps and at the end.

Both use the same seed, data and constant SFT learning rate, so run 2 repeats run 1's first
N SFT steps (when E divides N its evaluation there is a reproducibility check). The table
shows the base model, SFT after N steps, SFT only at equal training time, and SFT+GRPO, each
with its 95% Wilson interval and minutes of training (evaluations excluded).

    python benchmarks/learning.py --sft-steps 120 --grpo-steps 80 --eval-every 40
    python benchmarks/learning.py --analyze-only   # re-print from outputs/learning
"""

from __future__ import annotations

import argparse
import json
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
    ap.add_argument("--sft-steps", type=int, default=120)
    ap.add_argument("--grpo-steps", type=int, default=80)
    ap.add_argument("--eval-every", type=int, default=40)
    ap.add_argument("--out", type=Path, default=ROOT / "outputs" / "learning")
    ap.add_argument(
        "--analyze-only", action="store_true", help="re-print the table from finished runs in --out"
    )
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for both runs")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    n, m, e = args.sft_steps, args.grpo_steps, args.eval_every
    grpo_dir, sft_dir = args.out / "default_run", args.out / "sft_only"
    walls: dict[str, float] = {}
    if not args.analyze_only:
        walls["SFT+GRPO run"] = run(
            grpo_dir,
            [
                f"training_loop.sft.max_steps={n}",
                f"training_loop.grpo.max_steps={m}",
                f"evaluation.every_n_steps={e}",
                *args.overrides,
            ],
        )
        records = events(grpo_dir)
        sft_step = cumulative_seconds(records, "sft")[n] / n  # median SFT step time of the default run
        k = round(budget_seconds(records, n, m) / sft_step)
        walls["SFT-only run"] = run(
            sft_dir,
            [
                f"training_loop.sft.max_steps={k}",
                "training_loop.grpo.enabled=false",
                f"evaluation.every_n_steps={e}",
                "evaluation.baseline=false",
                *args.overrides,
            ],
        )
    table(sft_dir, grpo_dir, n, m, walls)


def budget_seconds(records: list[dict], n: int, m: int) -> float:
    """Training seconds of SFT(n) + GRPO(m) in the default run."""
    return cumulative_seconds(records, "sft")[n] + cumulative_seconds(records, "grpo")[m]


def table(sft_dir: Path, grpo_dir: Path, n: int, m: int, walls: dict[str, float]) -> None:
    sft_records, grpo_records = events(sft_dir), events(grpo_dir)
    sft_time = cumulative_seconds(sft_records, "sft")
    sft_evals = {r["step"]: r for r in evals(sft_records) if r["label"] == "sft"}
    base = next(r for r in evals(grpo_records) if r["label"] == "baseline")
    after_sft = next(r for r in evals(grpo_records) if r["label"] == "after_sft")
    sft_final = next(r for r in evals(sft_records) if r["label"] == "final")
    k = sft_final["step"]
    final = next(r for r in evals(grpo_records) if r["label"] == "final")
    rows = [
        ("base model", 0, 0.0, base),
        (f"SFT {n} steps", n, cumulative_seconds(grpo_records, "sft")[n], after_sft),
        (f"SFT only, {k} steps (equal time)", k, sft_time[k], sft_final),
        (f"SFT {n} + GRPO {m} steps (default run)", n + m, budget_seconds(grpo_records, n, m), final),
    ]
    print(f"\nheld-out: {base['n']} questions, greedy; minutes = training time (evaluations excluded)")
    print(f"{'setting':42s} {'steps':>5s} {'minutes':>7s}  accuracy [95% CI]")
    for name, steps, seconds, ev in rows:
        print(f"{name:42s} {steps:5d} {seconds / 60:7.1f}  {fmt(ev)}")
    print(f"GRPO - SFT only at equal time: {100 * (final['accuracy'] - sft_final['accuracy']):+.1f} points")
    if n in sft_evals:
        same = sft_evals[n]["accuracy"] == after_sft["accuracy"]
        print(
            f"reproducibility: SFT-only run at step {n}: {sft_evals[n]['accuracy']:.1%} ({'identical' if same else 'differs'})"
        )
    for label, recs, phase in (("GRPO", grpo_records, "grpo"), ("SFT-only", sft_records, "sft")):
        points = [r for r in evals(recs) if r["label"] == phase]
        print(f"{label} in-training: " + ", ".join(f"{r['step']}: {r['accuracy']:.1%}" for r in points))
    for name, seconds in walls.items():
        print(f"wall clock incl. model load and evaluations, {name}: {seconds / 60:.1f} min")


if __name__ == "__main__":
    main()
