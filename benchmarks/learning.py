"""Does training help, and does GRPO add over SFT alone at the same wall-clock budget?

Runs the real pipeline (run_pipeline.py, default conf/) twice on the embedded default:

1. SFT only for K steps, held-out evaluation every E steps (the SFT-only learning curve).
2. The default run: SFT for N steps, then GRPO for M steps, evaluation every E steps.

Both use the same seed, data and constant SFT learning rate, so run 2 repeats run 1's first
N SFT steps (when E divides N, run 1's evaluation there is a reproducibility check). The
equal-budget row is run 1's first evaluation whose training time reaches run 2's SFT+GRPO
training time, so SFT only never gets less time than SFT+GRPO. Training time is steps x the
phase's median step time (evaluations and model loading excluded), so a few steps slowed by
other work on the machine do not tilt the comparison. A finished run directory (report.json
present) is reused, so an interrupted benchmark continues where it stopped.

    python benchmarks/learning.py --sft-steps 120 --grpo-steps 80 --sft-only-steps 320 --eval-every 40
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
    ap.add_argument("--sft-only-steps", type=int, default=320)
    ap.add_argument("--eval-every", type=int, default=40)
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
    if not args.analyze_only:
        plan = {
            sft_dir: [
                f"training_loop.sft.max_steps={args.sft_only_steps}",
                "training_loop.grpo.enabled=false",
                "evaluation.baseline=false",
            ],
            grpo_dir: [f"training_loop.sft.max_steps={n}", f"training_loop.grpo.max_steps={m}"],
        }
        for run_dir, overrides in plan.items():
            if (run_dir / "report.json").is_file():
                print(f"reusing the finished run in {run_dir}")
                continue
            walls[run_dir.name] = run(run_dir, [*overrides, f"evaluation.every_n_steps={e}", *args.overrides])
    table(sft_dir, grpo_dir, n, m, walls)


def budget_seconds(records: list[dict], n: int, m: int) -> float:
    """Training seconds of SFT(n) + GRPO(m) in the default run."""
    return cumulative_seconds(records, "sft")[n] + cumulative_seconds(records, "grpo")[m]


def table(sft_dir: Path, grpo_dir: Path, n: int, m: int, walls: dict[str, float]) -> None:
    sft_records, grpo_records = events(sft_dir), events(grpo_dir)
    sft_time = cumulative_seconds(sft_records, "sft")
    sft_evals = {r["step"]: r for r in evals(sft_records) if r["label"] in ("sft", "final")}
    base = next(r for r in evals(grpo_records) if r["label"] == "baseline")
    after_sft = next(r for r in evals(grpo_records) if r["label"] == "after_sft")
    final = next(r for r in evals(grpo_records) if r["label"] == "final")
    budget = budget_seconds(grpo_records, n, m)
    enough = [s for s in sorted(sft_evals) if sft_time[s] >= budget]
    k = enough[0] if enough else max(sft_evals)
    rows = [
        ("base model", 0, 0.0, base),
        (f"SFT {n} steps", n, cumulative_seconds(grpo_records, "sft")[n], after_sft),
        (f"SFT only, {k} steps (equal time)", k, sft_time[k], sft_evals[k]),
        (f"SFT {n} + GRPO {m} steps (default run)", n + m, budget, final),
    ]
    print(f"\nheld-out: {base['n']} questions, greedy; minutes = training time (evaluations excluded)")
    print(f"{'setting':42s} {'steps':>5s} {'minutes':>7s}  accuracy [95% CI]")
    for name, steps, seconds, ev in rows:
        print(f"{name:42s} {steps:5d} {seconds / 60:7.1f}  {fmt(ev)}")
    if not enough:
        print(
            f"note: the SFT-only run is shorter than the SFT+GRPO budget ({budget / 60:.1f} min); raise --sft-only-steps"
        )
    gain = 100 * (final["accuracy"] - sft_evals[k]["accuracy"])
    print(f"SFT+GRPO minus SFT only at equal time: {gain:+.1f} points")
    if n in sft_evals:
        same = sft_evals[n]["accuracy"] == after_sft["accuracy"]
        print(
            f"reproducibility: SFT-only run at step {n}: {sft_evals[n]['accuracy']:.1%} "
            f"({'identical to' if same else 'differs from'} the default run after SFT)"
        )
    for label, recs, phase in (("GRPO", grpo_records, "grpo"), ("SFT-only", sft_records, "sft")):
        points = [r for r in evals(recs) if r["label"] == phase]
        print(f"{label} in-training: " + ", ".join(f"{r['step']}: {r['accuracy']:.1%}" for r in points))
    for name, seconds in walls.items():
        print(f"wall clock incl. model load and evaluations, {name}: {seconds / 60:.1f} min")


if __name__ == "__main__":
    main()
