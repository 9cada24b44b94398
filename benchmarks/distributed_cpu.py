"""Step time of 2 processes (DDP over gloo, `accelerate launch`) against 1 process on the CPU.

    .venv/bin/python benchmarks/distributed_cpu.py [--sft-steps 6] [--grpo-steps 4] [--model smollm2_135m]

Both settings are real pipeline runs of the same config (run_pipeline.py, default conf, evaluations
off): the same per-process batch, so the 2-process run trains on twice the samples per step. The
table gives the median `sft/step_seconds` and `grpo/step_seconds` over the steps after the first,
and samples per second (global batch / median step time). On a machine shared with other jobs the
scheduler's share decides much of the wall time, so the CPU time the whole run used (user + system,
every process of it) is given too. Results: benchmarks/distributed_cpu.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ACCELERATE = Path(sys.executable).parent / "accelerate"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(run_dir: Path, processes: int, overrides: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of all its processes) of one pipeline run."""
    args = [f"hydra.run.dir={run_dir}", *overrides]
    if processes == 1:
        cmd = [sys.executable, "run_pipeline.py", *args]
    else:
        cmd = [str(ACCELERATE), "launch", "--config_file", "infrastructure/accelerate/ddp_cpu.yaml",
               "--num_processes", str(processes), "--main_process_port", str(free_port()),
               "run_pipeline.py", "distributed=ddp_cpu", *args]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return time.perf_counter() - start, cpu


def step_seconds(run_dir: Path, phase: str) -> list[float]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    key = f"{phase}/step_seconds"
    return [r["metrics"][key] for r in records if r["event"] == "train_step" and key in r["metrics"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sft-steps", type=int, default=6)
    ap.add_argument("--grpo-steps", type=int, default=4)
    ap.add_argument("--model", default="smollm2_135m")
    args = ap.parse_args()
    overrides = [
        f"model={args.model}",
        f"training_loop.sft.max_steps={args.sft_steps}",
        f"training_loop.grpo.max_steps={args.grpo_steps}",
        "training_loop.sft.save_strategy=no",
        "training_loop.grpo.save_strategy=no",
        "evaluation.baseline=false",
        "evaluation.every_n_steps=0",
        "evaluation.max_examples=8",
        "keep_checkpoints=none",
    ]
    from omegaconf import OmegaConf

    loop = OmegaConf.load(ROOT / "conf" / "training_loop" / "sft_grpo.yaml")
    batch = {
        p: loop[p].per_device_train_batch_size * loop[p].gradient_accumulation_steps for p in ("sft", "grpo")
    }
    # accelerate launch gives each process OMP_NUM_THREADS=1 (its --num_cpu_threads_per_process default)
    # unless the variable is set; the single process uses torch's default (one thread per core).
    print(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}", file=sys.stderr)
    print("| processes | phase | per-process batch | global batch | median s/step | samples/s | steps timed "
          "| run wall s | run CPU s |")  # fmt: skip
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for processes in (1, 2):
            run_dir = Path(tmp) / f"p{processes}"
            wall, cpu = run(run_dir, processes, overrides)
            for phase in ("sft", "grpo"):
                times = step_seconds(run_dir, phase)[1:]
                median = statistics.median(times)
                total = batch[phase] * processes
                print(
                    f"| {processes} | {phase} | {batch[phase]} | {total} | {median:.2f} | {total / median:.2f} "
                    f"| {len(times)} | {wall:.0f} | {cpu:.0f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
