"""Does training help, and does GRPO add over SFT alone at the same wall-clock budget?

Runs the real pipeline (run_pipeline.py, default conf/) twice on the embedded default:

1. SFT only for 2N steps, held-out evaluation every E steps.
2. The default run: SFT for N steps, then GRPO for M steps (evaluation every E steps).

Both use the same seed, data and constant SFT learning rate, so run 2's SFT stage
repeats run 1's first N steps (its after-SFT accuracy doubles as a reproducibility
check). The table shows base model, SFT after N steps, SFT-only at the training
budget of SFT(N)+GRPO(M) (run 1's evaluation whose cumulative training time is
closest), and SFT+GRPO, each with its 95% Wilson interval and minutes.

    python benchmarks/learning.py --sft-steps 80 --grpo-steps 80 --eval-every 20
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
    ap.add_argument("--sft-steps", type=int, default=80)
    ap.add_argument("--grpo-steps", type=int, default=80)
    ap.add_argument("--eval-every", type=int, default=20)
    ap.add_argument("--out", type=Path, default=ROOT / "outputs" / "learning")
    ap.add_argument(
        "--analyze-only", action="store_true", help="re-print the table from finished runs in --out"
    )
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for both runs")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    n, m, e = args.sft_steps, args.grpo_steps, args.eval_every

    sft_dir = args.out / "sft_only"
    grpo_dir = args.out / "default_run"
    if args.analyze_only:
        return table(sft_dir, grpo_dir, n, m, None, None)
    sft_wall = run(
        sft_dir,
        [
            f"training_loop.sft.max_steps={2 * n}",
            "training_loop.grpo.enabled=false",
            f"evaluation.every_n_steps={e}",
            *args.overrides,
        ],
    )
    grpo_wall = run(
        grpo_dir,
        [
            f"training_loop.sft.max_steps={n}",
            f"training_loop.grpo.max_steps={m}",
            f"evaluation.every_n_steps={e}",
            "evaluation.baseline=false",
            *args.overrides,
        ],
    )
    table(sft_dir, grpo_dir, n, m, sft_wall, grpo_wall)


def table(
    sft_dir: Path, grpo_dir: Path, n: int, m: int, sft_wall: float | None, grpo_wall: float | None
) -> None:
    sft_records, grpo_records = events(sft_dir), events(grpo_dir)
    sft_time = cumulative_seconds(sft_records, "sft")
    grpo_time = cumulative_seconds(grpo_records, "grpo")
    sft_evals = {r["step"]: r for r in evals(sft_records) if r["label"] == "sft"}
    base = next(r for r in evals(sft_records) if r["label"] == "baseline")
    after_sft = next(r for r in evals(grpo_records) if r["label"] == "after_sft")
    budget = cumulative_seconds(grpo_records, "sft")[n] + grpo_time[m]
    # SFT-only at the same training-time budget: the in-training evaluation nearest to it.
    eq_step = min(sft_evals, key=lambda s: abs(sft_time[s] - budget))
    final = next(r for r in evals(grpo_records) if r["label"] == "final")
    rows = [
        ("base model", 0, 0.0, base),
        (f"SFT {n} steps (run 1)", n, sft_time[n], sft_evals[n]),
        (f"SFT {n} steps (run 2, same seed)", n, cumulative_seconds(grpo_records, "sft")[n], after_sft),
        (f"SFT only, {eq_step} steps (equal budget)", eq_step, sft_time[eq_step], sft_evals[eq_step]),
        (f"SFT {n} + GRPO {m} steps", n + m, budget, final),
    ]
    print(f"\nheld-out: {base['n']} questions, greedy; minutes = training time (evaluations excluded)")
    print(f"{'setting':42s} {'steps':>5s} {'minutes':>7s}  accuracy [95% CI]")
    for name, steps, seconds, ev in rows:
        print(f"{name:42s} {steps:5d} {seconds / 60:7.1f}  {fmt(ev)}")
    grpo_evals = [r for r in evals(grpo_records) if r["label"] == "grpo"]
    print("\nGRPO in-training:", ", ".join(f"{r['step']}: {r['accuracy']:.1%}" for r in grpo_evals))
    print("SFT in-training: ", ", ".join(f"{s}: {r['accuracy']:.1%}" for s, r in sorted(sft_evals.items())))
    if sft_wall is not None and grpo_wall is not None:
        print(
            f"wall clock incl. evaluations: SFT-only run {sft_wall / 60:.1f} min, GRPO run {grpo_wall / 60:.1f} min"
        )


if __name__ == "__main__":
    main()
