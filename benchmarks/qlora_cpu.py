"""SFT step time of the default model on the CPU: full fine-tune against LoRA and QLoRA (4-bit NF4).

    .venv/bin/python benchmarks/qlora_cpu.py [--steps 6]

Each setting is a real pipeline run (run_pipeline.py, default conf, GRPO and evaluations off);
the table gives the median `sft/step_seconds` over the steps after the first. Results:
benchmarks/qlora_cpu.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LORA = "model.lora={r: 16, lora_alpha: 32, target_modules: [q_proj, k_proj, v_proj, o_proj]}"
SETTINGS = {
    "full fine-tune (fp32)": [],
    "LoRA r=16 (fp32)": [LORA],
    "QLoRA r=16 (NF4 4-bit base)": [LORA, "model.quantization=4bit"],
}


def step_seconds(run_dir: Path, overrides: list[str], steps: int) -> list[float]:
    cmd = [sys.executable, str(ROOT / "run_pipeline.py"), f"hydra.run.dir={run_dir}",
           f"training_loop.sft.max_steps={steps}", "training_loop.sft.save_strategy=no",
           "training_loop.grpo.enabled=false", "evaluation.baseline=false", "evaluation.every_n_steps=0",
           "data.eval_size=8", "keep_checkpoints=none", *overrides]  # fmt: skip
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [
        r["metrics"]["sft/step_seconds"]
        for r in records
        if r["event"] == "train_step" and "sft/step_seconds" in r["metrics"]
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=6)
    args = ap.parse_args()
    print("| setting | median s/step | steps timed |\n|---|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, overrides) in enumerate(SETTINGS.items()):
            times = step_seconds(Path(tmp) / str(i), overrides, args.steps)[1:]
            print(f"| {name} | {statistics.median(times):.2f} | {len(times)} |", flush=True)


if __name__ == "__main__":
    main()
