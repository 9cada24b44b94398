"""Does training help, does the GRPO stage do harm, and does GRPO add over SFT alone at equal time?

For each seed, runs the real pipeline (run_pipeline.py, default conf/) twice on the embedded default:

1. The default run: SFT for N steps, then GRPO for M steps, evaluation every E steps.
2. SFT only, for as many steps K as fit in run 1's SFT+GRPO training time (K = ceil(budget /
   SFT step time)), evaluation every E steps and at step K.

Run 2 is a run of its own, not a prefix of a longer SFT run, so a decaying learning-rate
schedule (the default is cosine) ends at step K for SFT only just as it ends at step N in the
default run: each side gets its full schedule within the same budget. Training time is steps x
the phase's median step time (evaluations and model loading excluded), so a few steps slowed by
other work on the machine do not tilt the comparison. A finished run directory (report.json
present) is reused, so an interrupted benchmark continues where it stopped.

Then the three models (after SFT, after SFT+GRPO, SFT only) are measured on three axes through
the benchmark app, each model on the same questions: in-distribution (the training difficulty,
the runs' own held-out split), harder (``--harder``: a difficulty never trained on) and retention
(``--retention``: another task, to see forgetting), plus what GRPO optimises: accuracy sampled at
the training temperature (pass@1 over ``--samples`` samples), pass@k and majority@k. Every
comparison is paired on the same questions (mean change, 95% CI, exact McNemar p) per seed;
across seeds the table gives mean and range.

    python benchmarks/learning.py --seeds 42 43 44 --sft-steps 480 --grpo-steps 16 --eval-every 160 --run-eval-size 500
    python benchmarks/learning.py --analyze-only   # re-print from outputs/learning
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def finished(run_dir: Path, overrides: list[str], record: str = "report.json") -> bool:
    """True when ``run_dir`` holds a finished run (``record``: report.json, or metrics.jsonl for a run
    stopped on purpose) started with exactly ``overrides`` (its provenance.json records the command
    line); False when it holds none. A run of other settings is refused: reusing it would report its
    numbers under these settings' name."""
    if not (run_dir / record).is_file():
        return False
    try:
        recorded = json.loads((run_dir / "provenance.json").read_text()).get("overrides")
    except (OSError, ValueError, AttributeError):
        recorded = None
    if recorded != list(overrides):
        raise SystemExit(
            f"{run_dir} holds a finished run of other settings:\n  recorded: {recorded}\n  this run: "
            f"{list(overrides)}\nFix: delete that folder, or pass another --out"
        )
    return True


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


HARDER = "{min_terms: 3, max_terms: 4, min_digits: 1, max_digits: 2, operators: ['+', '-']}"


def after_sft_checkpoint(run_dir: Path, n: int) -> Path:
    return run_dir / "checkpoints" / "sft" / f"checkpoint-{n}"


def model_key(name: str) -> str:
    """A model's name as its benchmark.models key (an identifier)."""
    return re.sub(r"\W+", "_", name).strip("_")


def bench(
    out: Path, models: dict[str, Path], tasks: list[str], params: str | None, size: int, seed: int, extra=()
) -> dict[str, dict]:
    """The benchmark app on ``models`` x ``tasks``: task -> model name -> Evaluation.

    Always through the app, which reuses a stored cell only after checking its fingerprint and
    re-scoring its answers (reading the cell files directly would take any edited file as measured)."""
    from rlvr.benchmark.results import CellStore

    out.mkdir(parents=True, exist_ok=True)
    store = CellStore(out)
    # Each model is a conf/model node (model/hf on its directory) keyed by its name as an identifier.
    keys = {name: model_key(name) for name in models}
    nodes = [
        override
        for name, path in models.items()
        for override in (
            f"+model@benchmark.models.{keys[name]}=hf",
            f"benchmark.models.{keys[name]}.name_or_path={path.resolve()}",
        )
    ]
    cmd = [
        sys.executable,
        str(ROOT / "run_pipeline.py"),
        "--config-name",
        "benchmark",
        f"hydra.run.dir={out}/hydra",
        "~model@benchmark.models.smollm2_135m",
        *nodes,
        f"benchmark.tasks=[{','.join(tasks)}]",
        f"benchmark.num_examples={size}",
        f"benchmark.output_dir={out}",
        f"seed={seed}",
        *([f"++benchmark.task_params.{tasks[0]}={params}"] if params else []),
        *extra,
    ]
    print("$", " ".join(cmd[1:]), flush=True)
    with (out.parent / f"{out.name}.log").open("w") as log:
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    return {task: {name: store.load(key, task).evaluation for name, key in keys.items()} for task in tasks}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[42])
    ap.add_argument("--sft-steps", type=int, default=240)
    ap.add_argument("--grpo-steps", type=int, default=16)
    ap.add_argument("--eval-every", type=int, default=80)
    ap.add_argument("--eval-size", type=int, default=1000, help="held-out questions per axis")
    ap.add_argument(
        "--run-eval-size",
        type=int,
        help="held-out questions of the runs' own evaluations (default: --eval-size); the axes are "
        "measured on --eval-size questions either way",
    )
    ap.add_argument("--sampled-size", type=int, default=200, help="questions for the sampled axis")
    ap.add_argument("--samples", type=int, default=8, help="samples per question at the training temperature")
    ap.add_argument("--task", default="basic_arithmetic", help="the training task (for the axes)")
    ap.add_argument("--harder", default=HARDER, help="task_params of the harder axis")
    ap.add_argument("--retention", default="leg_counting", help="another task, to see forgetting")
    ap.add_argument("--out", type=Path, default=ROOT / "outputs" / "learning")
    ap.add_argument(
        "--analyze-only", action="store_true", help="re-print the table from finished runs in --out"
    )
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides for both runs")
    args = ap.parse_args()
    n, m, e = args.sft_steps, args.grpo_steps, args.eval_every
    results = []
    for seed in args.seeds:
        out = args.out / f"seed{seed}"
        out.mkdir(parents=True, exist_ok=True)
        sft_dir, grpo_dir = out / "sft_only", out / "default_run"
        common = [
            f"seed={seed}",
            f"data.eval_size={args.run_eval_size or args.eval_size}",
            f"evaluation.every_n_steps={e}",
        ]
        walls: dict[str, float] = {}
        plan = [
            (
                grpo_dir,
                # keep_checkpoints=all: the after-SFT checkpoint is one of the three measured models
                lambda: [
                    f"training_loop.sft.max_steps={n}",
                    f"training_loop.grpo.max_steps={m}",
                    "keep_checkpoints=all",
                ],
            ),
            (
                sft_dir,
                lambda g=grpo_dir: [
                    f"training_loop.sft.max_steps={equal_time_sft_steps(events(g), n, m)}",
                    "training_loop.grpo.enabled=false",
                    "evaluation.baseline=false",
                    "keep_checkpoints=none",
                ],
            ),
        ]
        for run_dir, overrides in plan:
            if finished(run_dir, [*overrides(), *common, *args.overrides]) or args.analyze_only:
                print(f"reusing the finished run in {run_dir}")
                continue
            walls[run_dir.name] = run(run_dir, [*overrides(), *common, *args.overrides])
        table(sft_dir, grpo_dir, n, m, walls)
        models = {
            "after SFT": after_sft_checkpoint(grpo_dir, n),
            "SFT+GRPO": grpo_dir / "final",
            "SFT only": sft_dir / "final",
        }
        extra = tuple(o for o in args.overrides if o.startswith("evaluation."))
        greedy = bench(
            out / "axis_greedy", models, [args.task, args.retention], None, args.eval_size, seed, extra
        )
        sampling = (
            f"evaluation.num_samples={args.samples}",
            "evaluation.temperature=1.0",
            f"evaluation.ks=[1,{args.samples}]",
        )
        axes = {
            "in-distribution": greedy[args.task],
            "harder": bench(out / "axis_harder", models, [args.task], args.harder, args.eval_size, seed, extra)[args.task],
            "retention": greedy[args.retention],
            "sampled": bench(out / "axis_sampled", models, [args.task], None, args.sampled_size, seed, (*extra, *sampling))[args.task],
        }  # fmt: skip
        results.append(seed_table(seed, axes, args.samples))
    summary(results, args.samples)


def seed_table(seed: int, axes: dict, k: int) -> dict:
    """Per-axis accuracies and paired changes of one seed; printed, and returned for the summary."""
    from rlvr.evaluation.results import paired

    row: dict = {"seed": seed}
    print(f"\nseed {seed}: accuracy per axis (paired changes on the same questions, 95% CI)")
    for axis, ev in axes.items():
        metric = "greedy" if axis != "sampled" else f"pass@1 of {k} samples at T=1.0"
        print(f"  {axis} ({metric}, n={ev['after SFT'].summary.n}):")
        for name, evaluation in ev.items():
            s = evaluation.summary
            value = s.accuracy if axis != "sampled" else s.pass_at_k[1]
            row[(axis, name)] = value
            extra = ""
            if axis == "sampled":
                extra = f", pass@{k} {s.pass_at_k[k]:.1%}, majority@{k} {s.majority_vote:.1%}"
                row[(axis, name, "pass@k")], row[(axis, name, "majority")] = s.pass_at_k[k], s.majority_vote
            print(f"    {name:10s} {value:6.1%}{extra}")
        for label, before, after in (
            ("GRPO stage", "after SFT", "SFT+GRPO"),
            ("SFT+GRPO vs SFT only", "SFT only", "SFT+GRPO"),
        ):
            change = paired(ev[before], ev[after])
            row[(axis, label)] = change
            print(f"    {label}: {change.text()}")
    return row


def summary(results: list[dict], k: int) -> None:
    """Mean and range across seeds of every accuracy and paired change."""
    import statistics as st

    print(f"\nacross {len(results)} seed(s): mean [min, max]")
    keys = [key for key in results[0] if key != "seed"]
    for key in keys:
        values = [r[key] for r in results]
        if hasattr(values[0], "delta"):
            deltas = [v.delta * 100 for v in values]
            significant = sum(1 for v in values if v.ci_low > 0 or v.ci_high < 0)
            print(
                f"  {key[0]:16s} {key[1]:22s} {st.mean(deltas):+6.1f} points [{min(deltas):+.1f}, {max(deltas):+.1f}]"
                f"  (CI excludes 0 in {significant}/{len(values)} seeds)"
            )
        else:
            name = " ".join(key[1:])
            print(f"  {key[0]:16s} {name:22s} {st.mean(values):6.1%} [{min(values):.1%}, {max(values):.1%}]")


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
