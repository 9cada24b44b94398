"""GRPO signal per minute from one SFT checkpoint: zero-advantage skipping and dynamic sampling.

Each variant is a GRPO-only run of the real pipeline (run_pipeline.py, default conf/) from
``--start`` (the default run's after-SFT checkpoint) for ``--steps`` steps of the default GRPO stage
with the variant's overrides; evaluations are off except a 16-question final one. Printed per
variant: seconds per GRPO step (the pipeline's own ``step_seconds``: generation, scoring, forward
and backward), the share of groups without reward variance, completions skipped per step, groups
generated and trained per step, and informative groups trained per minute of GRPO.

    .venv/bin/python benchmarks/grpo_signal.py --start <run>/checkpoints/sft/checkpoint-480 \\
        --out outputs/grpo_signal --steps 8

Skipping on and off start from the same weights with the same seed, so they generate the same
first batch and, as the update is the same, nearly the same later ones. Results:
benchmarks/grpo_signal.md.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from learning import events, finished, run  # benchmarks/learning.py: the same run helper

from rlvr.runtime.safe_yaml import load_data

VARIANTS = {
    "skip off": ["training_loop.signal.skip_zero_advantage=false"],
    "skip on (default)": [],
    "skip on + dynamic sampling": ["training_loop.signal.dynamic_sampling=true"],
}


def steps(run_dir: Path) -> list[dict]:
    return [e["metrics"] for e in events(run_dir) if e["event"] == "train_step" and e["phase"] == "grpo"]


def row(name: str, records: list[dict], groups: int, micro_batches: int) -> str:
    seconds = [r["grpo/step_seconds"] for r in records]
    # the pipeline's own count of groups whose rewards are all equal (rlvr.reward.RewardSet)
    zero = statistics.mean(r["grpo/reward/zero_std_groups_frac"] for r in records)
    skipped = statistics.mean(r.get("grpo/signal/rows_skipped", 0.0) for r in records)
    # rows_skipped is TRL's mean over the step's micro-batches (gradient_accumulation_steps of them)
    generated = statistics.mean(r.get("grpo/signal/groups_generated", groups) for r in records)
    kept = statistics.mean(
        r.get("grpo/signal/groups_kept", (1 - r["grpo/reward/zero_std_groups_frac"]) * groups)
        for r in records
    )
    per_minute = kept / statistics.mean(seconds) * 60
    return (
        f"| {name} | {len(records)} | {statistics.median(seconds):.1f} | {statistics.mean(seconds):.1f} "
        f"| {zero:.2f} | {skipped * micro_batches:.0f} | {generated:.1f} | {kept:.1f} | {per_minute:.1f} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--start", type=Path, required=True, help="the checkpoint GRPO starts from")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--only", action="append", help="run only these variants (names as in the table)")
    args = ap.parse_args()
    start = args.start.resolve()
    lines = []
    for name, overrides in VARIANTS.items():
        if args.only and name not in args.only:
            continue
        run_dir = args.out / name.split(" (")[0].replace(" ", "_").replace("+", "and")
        settings = [
            "model=hf",
            f"model.name_or_path={start}",
            "training_loop.sft.enabled=false",
            f"training_loop.grpo.max_steps={args.steps}",
            "training_loop.grpo.save_strategy=no",
            "evaluation.baseline=false",
            "evaluation.every_n_steps=0",
            "evaluation.sampled=null",
            "data.eval_size=16",
            f"seed={args.seed}",
            "keep_checkpoints=none",
            *overrides,
        ]
        if not finished(run_dir, settings):
            run_dir.parent.mkdir(parents=True, exist_ok=True)
            run(run_dir, settings)
        # Read as data (rlvr.runtime.safe_yaml: size bound, no aliases, never interpolated), as every results reader.
        grpo = load_data(run_dir / "config_resolved.yaml")["training_loop"]["grpo"]
        accumulation = grpo["gradient_accumulation_steps"]
        groups = grpo["per_device_train_batch_size"] * accumulation // grpo["num_generations"]
        lines.append(row(name, steps(run_dir), groups, accumulation))
    print(
        "| variant | steps | s/step median | s/step mean | groups without variance | completions skipped "
        "/ step | groups generated / step | groups trained with signal / step | signal groups / min |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
