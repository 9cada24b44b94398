"""Plain-TRL control for the GRPO stage: is a loss of accuracy the setting's or the pipeline's?

Trains GRPO from a given checkpoint (e.g. the default run's after-SFT checkpoint) with nothing of
the pipeline's training code: a bare ``trl.GRPOTrainer`` with two reward functions written here
(reasoning-gym's own ``extract_answer`` + ``score_answer``, and a format check), the same prompt
text, the same training questions (the train side of the content-hash split, so held-out stays held
out) and the same GRPO settings as conf/training_loop/sft_grpo.yaml. Then it evaluates the result
and the start checkpoint on the pipeline's held-out questions (the pipeline's own evaluation, a
run with no training) and prints the paired change.

    .venv/bin/python benchmarks/grpo_control.py --start <run>/checkpoints/sft/checkpoint-240 \\
        --out outputs/grpo_control [--steps 16] [--eval-size 500]

Results: benchmarks/grpo_control.md.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASK = "basic_arithmetic"
PARAMS = {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 1, "operators": ["+", "-"]}
SYSTEM = "Answer with <answer>N</answer>."  # conf/prompts/answer_tags.yaml


def train_dataset(size: int, seed: int):
    from datasets import Dataset

    from rlvr.data.reasoning_gym import split_entries

    entries = split_entries(TASK, PARAMS, "train", size, seed + 1, "train_size")  # as the pipeline draws
    return Dataset.from_dict(
        {
            "prompt": [
                [{"role": "system", "content": SYSTEM}, {"role": "user", "content": e["question"]}]
                for e in entries
            ],
            "entry": [json.dumps(e) for e in entries],
        }
    )


def correctness(completions, entry, **_):
    import reasoning_gym
    from reasoning_gym.utils import extract_answer

    scorer = reasoning_gym.create_dataset(TASK, size=1, seed=0, **PARAMS)
    out = []
    for completion, e in zip(completions, entry, strict=True):
        text = completion[0]["content"]
        end = text.find("</answer>")
        answer = extract_answer(text[: end + 9] if end != -1 else text, tag_name="answer", strip=True)
        out.append(1.0 if answer is not None and scorer.score_answer(answer, json.loads(e)) >= 1.0 else 0.0)
    return out


FORMAT = re.compile(r"<answer>(?!\s*</answer>)((?!<answer>).)*?</answer>\s*$", re.DOTALL)


def format_reward(completions, **_):
    texts = [c[0]["content"] for c in completions]
    return [1.0 if t.count("<answer>") == 1 and FORMAT.search(t) else 0.0 for t in texts]


def train(start: Path, out: Path, steps: int, seed: int) -> float:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(  # conf/training_loop/sft_grpo.yaml's grpo block, fp32 on this CPU
        output_dir=str(out / "checkpoints"),
        max_steps=steps,
        learning_rate=1.0e-5,
        num_generations=8,
        per_device_train_batch_size=16,
        gradient_accumulation_steps=1,
        max_completion_length=16,
        temperature=1.0,
        beta=0.0,
        loss_type="dapo",
        scale_rewards="group",
        lr_scheduler_type="constant",
        warmup_steps=0,
        logging_steps=1,
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        gradient_checkpointing=False,
        reward_weights=[1.0, 0.2],
        seed=seed,
        data_seed=seed,
        report_to="none",
    )
    model = AutoModelForCausalLM.from_pretrained(start, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(start)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[correctness, format_reward],
        args=args,
        train_dataset=train_dataset(2000, seed),
        processing_class=tokenizer,
    )
    begin = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - begin
    trainer.save_model(str(out / "final"))
    tokenizer.save_pretrained(out / "final")
    (out / "train_log.json").write_text(json.dumps(trainer.state.log_history, indent=1))
    return seconds


def evaluate(model_dir: Path, run_dir: Path, eval_size: int, seed: int) -> Path:
    """The pipeline's own held-out evaluation of ``model_dir`` (a run with both phases off)."""
    from learning import (
        finished,
    )  # benchmarks/learning.py: a finished run is reused only if it ran these settings

    settings = [
        "model=hf",
        f"model.name_or_path={model_dir.resolve()}",
        "training_loop.sft.enabled=false",
        "training_loop.grpo.enabled=false",
        "evaluation.baseline=false",
        f"data.eval_size={eval_size}",
        f"seed={seed}",
    ]
    if not finished(run_dir, settings):
        cmd = [sys.executable, str(ROOT / "run_pipeline.py"), f"hydra.run.dir={run_dir}", *settings]
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return next((run_dir / "eval").glob("final*.json"))


def main() -> None:
    from rlvr.evaluation.results import Evaluation, paired

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--start", type=Path, required=True, help="checkpoint GRPO starts from")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "grpo_control")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--eval-size", type=int, default=500)
    parser.add_argument("--seed", type=int, default=42)
    a = parser.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if not (a.out / "final" / "config.json").is_file():
        print(f"plain TRL GRPO: {a.steps} steps from {a.start}", flush=True)
        print(f"trained in {train(a.start, a.out, a.steps, a.seed) / 60:.1f} min", flush=True)
    before = evaluate(a.start, a.out / "eval_start", a.eval_size, a.seed)
    after = evaluate(a.out / "final", a.out / "eval_final", a.eval_size, a.seed)
    load = lambda p: Evaluation.from_dict(json.loads(p.read_text()))  # noqa: E731
    b, f = load(before), load(after)
    change = paired(b, f)
    print(f"start {b.accuracy:.1%} -> plain-TRL GRPO {f.accuracy:.1%}: {change.text()}")
    (a.out / "control.json").write_text(json.dumps({"start": str(a.start), **change.to_dict()}, indent=1))


if __name__ == "__main__":
    main()
