"""RL where it should win: GRPO vs SFT on the references vs rejection-sampling fine-tuning (RFT), from
one start, at equal training time, on a task with many right answers (reasoning-gym ``countdown``:
any valid expression scores 1.0, the reference is one arbitrary expression among them).

GRPO and RFT never read a reference answer (they train from the checker alone), so GRPO vs RFT is
also the verifier-only comparison: what a user with a checker and no gold solutions can run. SFT on
the references is the arm such a user does not have.

Stages; each is reused when its files exist, so the benchmark runs in budgets (``--stage``):

1. ``start``: an SFT warm start from the embedded model on the task's references (``--warm-steps``),
   then its held-out greedy accuracy on ``--probe-size`` questions. Pick ``--task-params`` so it lies
   between 10% and 60% (room to learn, and a learning signal for GRPO and RFT).
2. ``arms``: from that checkpoint, each with the same constant learning rate (``--lr``) and seed,
   saving every ``--save-every`` optimizer steps: ``grpo`` (training_loop=grpo), ``sft`` (more SFT on
   the references) and ``rft`` (training_loop=rft). Each is stopped (SIGTERM, its checkpoint kept) once
   its measured training time passes the largest of ``--minutes`` (or ``--stop-after``).
3. ``eval``: per arm, the last saved checkpoint whose measured training time (the pipeline's own step
   times; RFT's sampling time included) is within ``--minutes``; the start and these go through the
   benchmark app, greedy and sampled (T=1.0, ``--samples`` per question), on ``--eval-size`` held-out
   questions; paired changes (95% CI, exact McNemar p): each arm vs the start, GRPO vs SFT, GRPO vs RFT.

    python benchmarks/rl_where_it_wins.py --out outputs/rl_wins/seed42 --seed 42 --stage start
    python benchmarks/rl_where_it_wins.py --out outputs/rl_wins/seed42 --seed 42 --minutes 10 20 30

Results: benchmarks/rl_where_it_wins.md.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

# benchmarks/learning.py and grpo_budget.py: the same run, benchmark and timing helpers
from grpo_budget import step_seconds
from learning import ROOT, bench, events, finished, model_key, run

TASK = "countdown"
# 2-3 numbers of 1-10, targets 5-30: a difficulty the 135M model can start on after a short warm start.
PARAMS = "{min_numbers: 2, max_numbers: 3, min_value: 1, max_value: 10, min_target: 5, max_target: 30}"
ARMS = ("grpo", "sft", "rft")
# Optimizer steps between an arm's checkpoints: about 1.5-3 minutes of training each on the 2-core CPU
# (a GRPO step holds 64 completions; an RFT round is 8 steps and its sampling).
SAVE_EVERY = {"grpo": 2, "sft": 4, "rft": 8}


def data_overrides(args) -> list[str]:
    return [
        f"data.task={TASK}",
        f"++data.task_params.{TASK}={args.task_params}",
        f"seed={args.seed}",
        "evaluation.sampled=null",
        "evaluation.every_n_steps=0",
        # The countdown answer is an expression: 32 new tokens hold it with room to spare.
        "training_loop.grpo.max_completion_length=32",
        *args.overrides,
    ]


def warm_start(args) -> list[str]:
    return [
        *data_overrides(args),
        *args.start_overrides,
        "training_loop.grpo.enabled=false",
        f"training_loop.sft.max_steps={args.warm_steps}",
        f"training_loop.sft.save_steps={args.warm_steps}",
        f"data.train_size={16 * args.warm_steps}",  # each question seen once (generating countdown is slow)
        f"data.eval_size={args.probe_size}",
        "evaluation.baseline=false",
    ]


def arm_overrides(args, arm: str, start: Path) -> list[str]:
    """One arm from ``start``: its own phase only, constant learning rate, every save kept."""
    shared = [
        *data_overrides(args),
        "model=hf",
        f"model.name_or_path={start}",
        "evaluation.baseline=false",
        "data.eval_size=16",
        f"data.train_size={args.train_size}",
        "keep_checkpoints=all",
    ]
    phase = {
        "grpo": ["training_loop=grpo", f"training_loop.grpo.max_steps={args.grpo_steps}"],
        "sft": ["training_loop.grpo.enabled=false", f"training_loop.sft.max_steps={args.sft_steps}"],
        "rft": ["training_loop=rft", f"training_loop.rft.rounds={args.rft_rounds}"],
    }[arm]
    knobs = [
        f"training_loop.{arm}.learning_rate={args.lr}",
        f"training_loop.{arm}.lr_scheduler_type=constant",
        f"training_loop.{arm}.warmup_steps=0",
        f"training_loop.{arm}.save_steps={args.save_every or SAVE_EVERY[arm]}",
        f"training_loop.{arm}.save_total_limit=null",
    ]
    if arm != "rft":  # RFT resumes its optimizer every round: its checkpoints keep it
        knobs.append(f"+training_loop.{arm}.save_only_model=true")
    return [*shared, *phase, *knobs]


def training_minutes(run_dir: Path, arm: str) -> dict[int, float]:
    """Cumulative training minutes at each step: the step times, plus (RFT) each round's sampling
    time, charged at the round's first logged step."""
    charged: dict[int, float] = {}
    if arm == "rft":
        seen: set[int] = set()
        logged = [e for e in events(run_dir) if e["event"] == "train_step" and "rft/round" in e["metrics"]]
        for e in sorted(logged, key=lambda e: e["step"]):
            index = int(e["metrics"]["rft/round"])
            if index not in seen:
                seen.add(index)
                charged[e["step"]] = e["metrics"]["rft/round/sample_seconds"]
    total, out = 0.0, {}
    for step, seconds in sorted(step_seconds(run_dir, arm).items()):
        total += seconds + charged.get(step, 0.0)
        out[step] = total / 60
    return out


def train_arm(run_dir: Path, arm: str, overrides: list[str], stop_after: float) -> None:
    """Run one arm and stop it (SIGTERM: the pipeline finishes its step, saves a checkpoint and exits)
    once its measured training time passes ``stop_after`` minutes: the budgets need no more, and a step
    count that fits them is not known before the first steps ran."""
    cmd = [sys.executable, str(ROOT / "run_pipeline.py"), f"hydra.run.dir={run_dir}", *overrides]
    print("$", " ".join(cmd[1:]), flush=True)
    with (run_dir.parent / f"{run_dir.name}.log").open("w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        stopped = False
        while proc.poll() is None:
            time.sleep(10)
            try:  # the run appends a line at a time: a poll can land mid-line
                minutes = training_minutes(run_dir, arm) if not stopped else {}
            except (OSError, ValueError, KeyError):
                minutes = {}
            if minutes and max(minutes.values()) > stop_after:
                print(f"{arm}: {max(minutes.values()):.1f} min of training, stopping it", flush=True)
                proc.send_signal(signal.SIGTERM)
                stopped = True
    if proc.returncode not in (0, 75):  # 75: stopped by the signal, its checkpoint saved
        raise SystemExit(
            f"{arm} ended with exit code {proc.returncode}: see {run_dir.parent / run_dir.name}.log"
        )


def at_budget(run_dir: Path, arm: str, minutes: float) -> tuple[int, float] | None:
    """(step, minutes) of the last saved checkpoint within ``minutes`` of training, or None."""
    saved = {int(p.name.split("-")[1]) for p in (run_dir / "checkpoints" / arm).glob("checkpoint-*")}
    within = [(s, m) for s, m in training_minutes(run_dir, arm).items() if s in saved and m <= minutes]
    return max(within) if within else None


def change(a, b) -> str:
    """The paired change in points, its 95% CI and p: exact McNemar where each question scores 0 or 1
    (greedy); where a score is a mean of samples (pass@1 of k), McNemar would count only the full
    flips, so p is the paired z-test the interval is built on."""
    import math

    from rlvr.evaluation.results import paired

    p = paired(a, b)
    interval = f"{p.delta * 100:+.1f} [{p.ci_low * 100:+.1f}, {p.ci_high * 100:+.1f}]"
    if p.binary:
        return f"{interval} p={p.p_value:.3g}"
    se = (p.ci_high - p.ci_low) / (2 * 1.96)  # the CI is delta +- 1.96 se (not clipped at this size)
    z_p = math.erfc(abs(p.delta) / se / math.sqrt(2)) if se > 0 else float(p.delta == 0)
    return f"{interval} p={z_p:.3g} (z)"


def evaluate(args, start: Path, runs: dict[str, Path]) -> None:
    models, spent = {"start": start}, {}
    for minutes in args.minutes:
        for arm, run_dir in runs.items():
            found = at_budget(run_dir, arm, minutes)
            if found is None:
                print(f"{arm}: no checkpoint within {minutes} min (saves every {args.save_every} steps)")
                continue
            step, took = found
            models[f"{arm} {minutes}min"] = run_dir / "checkpoints" / arm / f"checkpoint-{step}"
            spent[f"{arm} {minutes}min"] = (step, took)
    extra = (
        *(f"benchmark.models.{model_key(n)}.dtype={args.dtype}" for n in models),
        f"evaluation/generator={args.generator}",
        "evaluation.max_new_tokens=32",  # the arms' completion budget (the benchmark's default is 16)
    )
    params = args.task_params
    greedy = bench(args.out / "greedy", models, [TASK], params, args.eval_size, args.seed, extra)[TASK]
    sampled = (
        bench(
            args.out / "sampled",
            models,
            [TASK],
            params,
            args.eval_size,
            args.seed,
            (
                *extra,
                "evaluation.temperature=1.0",
                f"evaluation.num_samples={args.samples}",
                f"evaluation.ks=[1,{args.samples}]",
            ),
        )[TASK]
        if args.samples
        else None
    )
    axes = {"greedy": greedy, **({"sampled": sampled} if sampled else {})}
    print(
        f"\n{TASK} {params}, seed {args.seed}, {args.eval_size} held-out questions; paired changes, 95% CI, McNemar p"
    )
    print("start: " + ", ".join(f"{axis} {e['start'].summary.accuracy:.1%}" for axis, e in axes.items()))
    for axis, e in axes.items():
        # the sampled axis: accuracy is pass@1 (the mean over the samples); pass@k from all k of them
        k = args.samples if axis == "sampled" else None
        head = ["budget", "arm", "step", "train min", "accuracy", *([f"pass@{k}"] if k else [])]
        head += ["vs start", "GRPO vs this arm"]
        print(f"\n{axis}\n| " + " | ".join(head) + " |\n|" + "---|" * len(head))
        start_pass = [f"{e['start'].summary.pass_at_k.get(k, float('nan')):.1%}"] if k else []
        print(
            "| 0 | start | - | - | "
            + " | ".join([f"{e['start'].summary.accuracy:.1%}", *start_pass])
            + " | | |"
        )
        for minutes in args.minutes:
            grpo = e.get(f"grpo {minutes}min")
            for arm in ARMS:
                name = f"{arm} {minutes}min"
                if name not in e:
                    continue
                step, took = spent[name]
                versus = change(e[name], grpo) if grpo is not None and arm != "grpo" else ""
                cells = [f"{minutes} min", arm, str(step), f"{took:.1f}", f"{e[name].summary.accuracy:.1%}"]
                cells += [f"{e[name].summary.pass_at_k.get(k, float('nan')):.1%}"] if k else []
                print("| " + " | ".join([*cells, change(e["start"], e[name]), versus]) + " |")
    (args.out / "spent.json").write_text(json.dumps(spent, indent=1))
    chart(args, axes, spent)


def chart(args, axes: dict, spent: dict) -> None:
    """Held-out accuracy against measured training minutes, one line per arm from the shared start
    (95% Wilson intervals), one panel per axis: ``<out>/curve.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, panels = plt.subplots(1, len(axes), figsize=(5.5 * len(axes), 4), sharey=True, squeeze=False)
    for panel, (axis, e) in zip(panels[0], axes.items(), strict=True):
        start = e["start"].summary
        for arm in ARMS:
            points = [(0.0, start)] + [
                (spent[f"{arm} {m}min"][1], e[f"{arm} {m}min"].summary)
                for m in args.minutes
                if f"{arm} {m}min" in e
            ]
            x = [minutes for minutes, _ in points]
            y = [s.accuracy * 100 for _, s in points]
            err = [
                [(s.accuracy - s.ci_low) * 100 for _, s in points],
                [(s.ci_high - s.accuracy) * 100 for _, s in points],
            ]
            panel.errorbar(x, y, yerr=err, marker="o", capsize=3, label=arm)
        panel.set_title(f"{axis} (n={start.n})")
        panel.set_xlabel("training minutes (measured step times)")
        panel.grid(alpha=0.3)
    panels[0][0].set_ylabel(f"{TASK} held-out accuracy, % (95% CI)")
    panels[0][0].legend()
    fig.suptitle(f"{TASK}, seed {args.seed}: each arm from the same SFT start")
    fig.tight_layout()
    fig.savefig(args.out / "curve.png", dpi=120)
    plt.close(fig)
    print(f"chart: {args.out / 'curve.png'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--task-params", default=PARAMS, help=f"the {TASK} generator's settings")
    ap.add_argument("--stage", choices=["start", "arms", "eval", "all"], default="all")
    ap.add_argument("--warm-steps", type=int, default=160, help="the SFT warm start's steps")
    ap.add_argument("--probe-size", type=int, default=200, help="held-out questions for the start's accuracy")
    ap.add_argument("--arm", choices=[*ARMS, "all"], default="all", help="train one arm only")
    ap.add_argument("--minutes", type=float, nargs="+", default=[10, 20, 30], help="training-time budgets")
    ap.add_argument("--grpo-steps", type=int, default=400, help="more than the largest budget holds")
    ap.add_argument("--sft-steps", type=int, default=1200)
    ap.add_argument("--rft-rounds", type=int, default=60)
    ap.add_argument(
        "--save-every", type=int, default=None, help=f"steps between saves (default {SAVE_EVERY})"
    )
    ap.add_argument(
        "--stop-after",
        type=float,
        default=None,
        help="stop an arm after this many training minutes (default: the largest budget)",
    )
    ap.add_argument("--train-size", type=int, default=4096, help="the arms' training questions")
    ap.add_argument("--lr", type=float, default=1e-5, help="every arm's constant learning rate (GRPO's)")
    ap.add_argument("--eval-size", type=int, default=1000)
    ap.add_argument("--samples", type=int, default=2, help="samples per question at T=1.0 (0: greedy only)")
    ap.add_argument("--dtype", default="float32", help="the evaluated models' dtype (one for all)")
    ap.add_argument(
        "--generator",
        default="hf",
        help="evaluation/generator: hf, hf_continuous or vllm (3-6x hf on an AVX512 CPU, benchmarks/vllm_cpu.md; "
        "on an AVX2-only CPU it was slower than hf: rl_where_it_wins.md)",
    )
    ap.add_argument("--start-overrides", nargs="*", default=[], help="for the warm start only (model=tiny)")
    ap.add_argument(
        "--overrides",
        nargs="*",
        default=[],
        help="more Hydra overrides for every training run",
    )
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    warm = args.out / "start"
    if not (warm / "report.json").is_file():
        run(warm, warm_start(args))
    start = warm / "final"  # the warm start's model (its checkpoints are cleaned up when the run ends)
    report = json.loads((warm / "report.json").read_text())
    final = next(e for e in report["accuracy"] if e["label"] == "final")
    print(
        f"start ({args.warm_steps} SFT steps): {final['accuracy']:.1%} greedy on {final['n']} held-out questions"
    )
    if args.stage == "start":
        return
    runs = {arm: args.out / arm for arm in ARMS}
    # An arm is stopped once past the budgets (no report.json): its step records mark it as trained.
    overrides = {arm: arm_overrides(args, arm, start.resolve()) for arm in ARMS}
    if args.stage in ("arms", "all"):
        for arm in ARMS if args.arm == "all" else (args.arm,):
            if not finished(runs[arm], overrides[arm], record="metrics.jsonl"):
                stop_after = args.stop_after if args.stop_after is not None else max(args.minutes)
                train_arm(runs[arm], arm, overrides[arm], stop_after)
    if args.stage in ("eval", "all"):
        trained = {a: d for a, d in runs.items() if finished(d, overrides[a], record="metrics.jsonl")}
        evaluate(args, start.resolve(), trained)


if __name__ == "__main__":
    main()
