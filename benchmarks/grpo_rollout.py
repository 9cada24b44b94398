"""GRPO's rollout backends side by side: step time, the rollout's share of it, rollout tokens/s.

One GRPO run per backend through the real entry point (run_pipeline.py), on the same model shape,
data, seed and batch, one after another on the same device:

- ``rollout=hf``: transformers' ``generate`` in the training process (the CPU default);
- ``rollout=hf_continuous``: transformers' continuous batching (TRL's
  ``use_transformers_continuous_batching``, formerly ``use_transformers_paged``);
- ``rollout=vllm_colocate``: vLLM inside the training process, sharing the GPU (TRL's colocate mode).

The rollout's own time and token count come from the pipeline's metrics (rlvr.training_loop.
trainer, its rollout clock: ``grpo/rollout/seconds``, ``grpo/rollout/tokens``), the step time from
``grpo/step_seconds``; the first ``--warmup`` steps of each run (compilation, CUDA graphs, the vLLM
engine's first batch) are left out of the medians. A random-weights shape model writes every
completion to its full length, so the work per step is the same for every backend.

    python benchmarks/grpo_rollout.py --out outputs/grpo_rollout              # the 1.5B shape on CUDA
    python benchmarks/grpo_rollout.py --device cpu --architecture smollm2_135m --prompts 2 \\
        --generations 2 --tokens 8 --steps 2 --backends hf --out /tmp/rollout   # wiring check on a CPU

Results: benchmarks/grpo_rollout.md. Each run's folder (metrics.jsonl, console log) stays under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LORA = "model.lora={r:16,lora_alpha:32,lora_dropout:0.05,target_modules:[q_proj,k_proj,v_proj,o_proj]}"


def overrides(args: argparse.Namespace, backend: str, run_dir: Path) -> list[str]:
    """The run: GRPO only (no SFT), evaluation cut to a token budget that cannot dominate."""
    batch = args.prompts * args.generations  # completions a step, generated at once
    micro = min(batch, args.micro_batch)
    return [
        "model=shape",
        f"model.architecture={args.architecture}",
        *([LORA] if args.lora else []),
        f"model.gradient_checkpointing={str(args.gradient_checkpointing).lower()}",
        f"rollout={backend}",
        f"training_loop.device={args.device}",
        f"data.task={args.task}",
        f"data.train_size={max(64, args.prompts * (args.steps + 2))}",
        "data.eval_size=16",
        "training_loop.sft.enabled=false",
        f"training_loop.grpo.max_steps={args.steps}",
        f"training_loop.grpo.num_generations={args.generations}",
        f"training_loop.grpo.per_device_train_batch_size={micro}",
        f"training_loop.grpo.gradient_accumulation_steps={batch // micro}",
        f"training_loop.grpo.max_completion_length={args.tokens}",
        f"training_loop.grpo.save_steps={args.steps + 1}",
        *(
            [f"training_loop.grpo.vllm_gpu_memory_utilization={args.vllm_memory}"]
            if backend == "vllm_colocate"
            else []
        ),
        "evaluation.baseline=false",
        "evaluation.every_n_steps=0",
        "evaluation.max_examples=8",
        "evaluation.max_new_tokens=16",
        "evaluation.sampled=null",
        f"hydra.run.dir={run_dir}",
        *args.extra,
    ]


def read_steps(metrics: Path) -> list[dict]:
    steps = []
    for line in metrics.read_text().splitlines():
        record = json.loads(line)
        if record.get("event") == "train_step" and record.get("phase") == "grpo":
            steps.append(record["metrics"])
    return steps


def summarise(backend: str, steps: list[dict], warmup: int, wall: float) -> dict:
    timed = steps[warmup:] or steps
    step = statistics.median(s["grpo/step_seconds"] for s in timed)
    rollout = statistics.median(s["grpo/rollout/seconds"] for s in timed)
    tokens = statistics.median(s["grpo/rollout/tokens"] for s in timed)
    return {
        "backend": backend,
        "steps": len(steps),
        "timed": len(timed),
        "step_s": step,
        "rollout_s": rollout,
        "share": rollout / step if step else float("nan"),
        "tokens": tokens,
        "tokens_per_s": tokens / rollout if rollout else float("nan"),
        "first_step_s": steps[0]["grpo/step_seconds"] if steps else float("nan"),
        "wall_s": wall,
    }


def run_backend(args: argparse.Namespace, backend: str) -> dict:
    run_dir = args.out / backend
    log = args.out / f"{backend}.log"
    cmd = [sys.executable, str(ROOT / "run_pipeline.py"), *overrides(args, backend, run_dir)]
    print(f"[{datetime.now():%H:%M:%S}] {backend}: {' '.join(cmd[2:])}", flush=True)
    start = time.perf_counter()
    with log.open("w") as out:
        code = subprocess.run(
            cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, timeout=args.timeout
        ).returncode
    wall = time.perf_counter() - start
    metrics = run_dir / "metrics.jsonl"
    steps = read_steps(metrics) if metrics.exists() else []
    if code != 0 or not steps:
        tail = "\n".join(log.read_text().splitlines()[-15:])
        print(f"{backend}: exit {code}, {len(steps)} GRPO steps recorded; the log's end:\n{tail}", flush=True)
        return {"backend": backend, "error": f"exit {code}", "steps": len(steps), "wall_s": wall}
    result = summarise(backend, steps, args.warmup, wall)
    print(f"{backend}: {json.dumps(result)}", flush=True)
    return result


def table(args: argparse.Namespace, results: list[dict]) -> str:
    base = next((r for r in results if r["backend"] == "hf" and "error" not in r), None)
    lines = [
        f"GRPO rollouts, {args.architecture} shape ({'LoRA r=16' if args.lora else 'full fine-tune'}), "
        f"{args.prompts} prompts x {args.generations} completions x {args.tokens} tokens a step, "
        f"{args.device}; medians of steps {args.warmup + 1}-{args.steps}",
        "",
        "| rollout | step (s) | rollout (s) | rollout share | rollout tokens/s | vs generate | first step (s) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['backend']} | {r['error']} ({r['steps']} steps) | | | | | |")
            continue
        ratio = f"{r['tokens_per_s'] / base['tokens_per_s']:.1f}x" if base else "-"
        lines.append(
            f"| {r['backend']} | {r['step_s']:.2f} | {r['rollout_s']:.2f} | {r['share']:.0%} | "
            f"{r['tokens_per_s']:,.0f} | {ratio} | {r['first_step_s']:.1f} |"
        )
    return "\n".join(lines)


def merge(files: list[Path]) -> int:
    """One table from runs made by separate invocations (the same settings: the first file's)."""
    found = [json.loads(f.read_text()) for f in files if f.exists()]
    if not found:
        print(f"none of {', '.join(map(str, files))} exists")
        return 1
    saved = found[0]["args"]
    args = argparse.Namespace(
        **{k: saved[k] for k in ("architecture", "device")},
        **{k: int(saved[k]) for k in ("prompts", "generations", "tokens", "steps", "warmup")},
        lora=saved["lora"] == "True",
    )
    print(table(args, [r for f in found for r in f["results"]]))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "grpo_rollout")
    parser.add_argument("--backends", default="hf,hf_continuous,vllm_colocate")
    parser.add_argument("--architecture", default="qwen2_5_1_5b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--task", default="gsm_symbolic")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--micro-batch", type=int, default=16, help="rows a forward/backward pass")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="first steps left out of the medians")
    parser.add_argument("--lora", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--vllm-memory", type=float, default=0.3, help="vLLM's share of the GPU")
    parser.add_argument("--timeout", type=float, default=900, help="seconds a backend's run may take")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--merge", type=Path, nargs="+", help="print one table from earlier --json files")
    parser.add_argument("extra", nargs="*", help="more Hydra overrides for every run")
    args = parser.parse_args()
    if args.merge:
        return merge(args.merge)
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    results = [run_backend(args, b) for b in args.backends.split(",")]
    text = table(args, results)
    print(f"\n{datetime.now(timezone.utc):%Y-%m-%d}\n{text}")
    if args.json:
        args.json.write_text(
            json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=1)
        )
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
