"""glibc malloc settings (rlvr.runtime.allocator) against glibc's defaults: SFT step time of the default run.

    .venv/bin/python benchmarks/allocator.py [--steps 20] [--threads 1] [--cpus 0]   # markdown table

Runs ``run_pipeline.py`` twice with the committed conf (SFT only, ``--steps`` steps, 32 held-out
questions): once as shipped and once with ``RLVR_MALLOC_TUNING=0``. Reports the median SFT step
time after the first 3 steps (``sft/step_seconds`` in metrics.jsonl), the process's user and system
CPU time, minor page faults and peak RSS. Results: benchmarks/allocator.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(label: str, env: dict[str, str], steps: int, cpus: str | None, out: Path) -> dict:
    run_dir = out / ("tuned" if "RLVR_MALLOC_TUNING" not in env else "defaults")
    command = [
        sys.executable, str(ROOT / "run_pipeline.py"), f"hydra.run.dir={run_dir}",
        f"training_loop.sft.max_steps={steps}", "training_loop.grpo.enabled=false",
        "evaluation.baseline=false", "evaluation.every_n_steps=100000", "data.eval_size=32",
    ]  # fmt: skip
    if cpus:
        command = ["taskset", "-c", cpus, *command]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{label}: run_pipeline.py exited {proc.returncode}\n{proc.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    seconds = [r["metrics"]["sft/step_seconds"] for r in rows if r.get("event") == "train_step"]
    return {
        "label": label,
        "step": statistics.median(seconds[3:]),
        "user": after.ru_utime - before.ru_utime,
        "sys": after.ru_stime - before.ru_stime,
        "faults": after.ru_minflt - before.ru_minflt,
        # ru_maxrss of children is the largest child's peak (kB on Linux), not a difference
        "rss_gb": after.ru_maxrss / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS")
    parser.add_argument("--cpus", default="0", help="taskset CPU list ('' for none)")
    args = parser.parse_args()
    base = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "RLVR_MALLOC_TUNING")}
    base["OMP_NUM_THREADS"] = str(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        # glibc defaults first: ru_maxrss of children only grows, so the larger peak must come last
        results = [
            run("glibc defaults (RLVR_MALLOC_TUNING=0)", {**base, "RLVR_MALLOC_TUNING": "0"}, args.steps, args.cpus, Path(tmp)),
            run("rlvr.runtime.allocator (as shipped)", base, args.steps, args.cpus, Path(tmp)),
        ]  # fmt: skip
    print(f"SFT, {args.steps} steps, OMP_NUM_THREADS={args.threads}, CPUs {args.cpus or 'all'}\n")
    print("| malloc | SFT step (median) | user CPU | system CPU | minor faults | peak RSS |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['label']} | {r['step']:.2f} s | {r['user']:.0f} s | {r['sys']:.0f} s "
            f"| {r['faults'] / 1e6:.1f} M | {r['rss_gb']:.2f} GB |"
        )
    print(f"\nspeed-up {results[0]['step'] / results[1]['step']:.2f}x")


if __name__ == "__main__":
    main()
