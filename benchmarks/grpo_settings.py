"""GRPO settings compared from one SFT checkpoint: greedy and sampled accuracy, paired.

Each variant is a GRPO-only run of the real pipeline (run_pipeline.py, default conf/) that starts
from ``--start`` (e.g. the default run's after-SFT checkpoint) with the variant's overrides. Its
baseline evaluation is the start checkpoint, its final evaluation the trained model: the same
held-out questions, greedy, so the run report already holds the paired greedy change. Then the
benchmark app measures the start checkpoint and every variant's final model on the same questions
at the training temperature (``--samples`` samples per question: pass@1 = sampled accuracy, what
GRPO optimises, plus pass@k and majority@k), and each variant's sampled change is paired against
the start. Finished runs and benchmark cells are reused, so an interrupted comparison continues,
and a finished full run (SFT + GRPO, e.g. the default run) can stand in as a variant by putting
its run directory (or a link to it) at ``<out>/<variant name>``.

    .venv/bin/python benchmarks/grpo_settings.py --start <run>/checkpoints/sft/checkpoint-240 \\
        --out outputs/grpo_settings \\
        --variant default= \\
        --variant lr3e-5_8prompts=training_loop.grpo.learning_rate=3e-5,training_loop.grpo.per_device_train_batch_size=64

Results: benchmarks/grpo_settings.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from learning import (
    bench,
    events,
    finished,
    run,
)  # benchmarks/learning.py: the same run and benchmark helpers


def variant(text: str) -> tuple[str, list[str]]:
    name, _, overrides = text.partition("=")
    if not name:
        raise argparse.ArgumentTypeError(f"--variant {text!r}: expected NAME=override,override,... ")
    return name, [o for o in overrides.split(",") if o]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--start", type=Path, required=True, help="the checkpoint GRPO starts from")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--variant", type=variant, action="append", required=True, help="NAME=o1,o2,...")
    ap.add_argument("--eval-size", type=int, default=500, help="held-out questions (greedy)")
    ap.add_argument("--sampled-size", type=int, default=500, help="questions for the sampled axis")
    ap.add_argument("--samples", type=int, default=4, help="samples per question at T=1.0")
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    start = args.start.resolve()
    finals: dict[str, Path] = {}
    for name, overrides in args.variant:
        run_dir = args.out / name
        settings = [
            "model=hf",
            f"model.name_or_path={start}",
            "training_loop.sft.enabled=false",
            f"data.eval_size={args.eval_size}",
            f"seed={args.seed}",
            "keep_checkpoints=none",
            *overrides,
        ]
        if not finished(run_dir, settings):
            run_dir.parent.mkdir(parents=True, exist_ok=True)
            run(run_dir, settings)
        finals[name] = run_dir / "final"
    sampled = bench(
        args.out / "sampled",
        {"start": start, **finals},
        ["basic_arithmetic"],
        None,
        args.sampled_size,
        args.seed,
        (
            f"evaluation.num_samples={args.samples}",
            "evaluation.temperature=1.0",
            f"evaluation.ks=[1,{args.samples}]",
        ),
    )["basic_arithmetic"]
    print_table(args, sampled)


def print_table(args: argparse.Namespace, sampled: dict) -> None:
    from rlvr.evaluation.results import paired

    k = args.samples
    start = sampled["start"].summary
    print(
        f"\nGRPO from {args.start.name}: greedy on {args.eval_size} held-out questions (run report), "
        f"sampled at T=1.0 ({k} samples) on {args.sampled_size} benchmark questions; paired changes, 95% CI"
    )
    print(
        f"start: sampled pass@1 {start.pass_at_k[1]:.1%}, pass@{k} {start.pass_at_k[k]:.1%}, "
        f"majority@{k} {start.majority_vote:.1%}"
    )
    header = "| variant | overrides | steps | GRPO min | greedy | greedy change | sampled pass@1 | sampled change | pass@k | maj@k | train reward | zero-std groups |"
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for name, overrides in args.variant:
        run_dir = args.out / name
        report = json.loads((run_dir / "report.json").read_text())
        # A GRPO-only run's "whole run" is its GRPO stage; a full run (reused, e.g. the default run's
        # directory) reports its GRPO stage under that name.
        changes = {c["stage"]: c for c in report["paired_changes"]}
        change = changes.get("GRPO") or changes["whole run"]
        steps = [r["metrics"] for r in events(run_dir) if r["event"] == "train_step"]
        reward = statistics.mean(m["grpo/reward/mean"] for m in steps if "grpo/reward/mean" in m)
        zero = [
            m["grpo/reward/zero_std_groups_frac"] for m in steps if "grpo/reward/zero_std_groups_frac" in m
        ]
        s = sampled[name].summary
        sc = paired(sampled["start"], sampled[name])
        print(
            f"| {name} | {' '.join(overrides) or '(conf default)'} | {report['steps'].get('grpo', 0)} "
            f"| {report['train_seconds'].get('grpo', 0) / 60:.1f} "
            f"| {change['after']:.1%} | {change['delta'] * 100:+.1f} [{change['ci_low'] * 100:+.1f}, {change['ci_high'] * 100:+.1f}] "
            f"| {s.pass_at_k[1]:.1%} | {sc.delta * 100:+.1f} [{sc.ci_low * 100:+.1f}, {sc.ci_high * 100:+.1f}] "
            f"| {s.pass_at_k[k]:.1%} | {s.majority_vote:.1%} | {reward:.2f} "
            f"| {statistics.mean(zero) if zero else float('nan'):.2f} |"
        )


if __name__ == "__main__":
    main()
