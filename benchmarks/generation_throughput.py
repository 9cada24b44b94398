"""Generation throughput: sequential `model.generate` per question vs `HFGenerator`, in one run.

Builds held-out reasoning-gym `basic_arithmetic` prompts, then measures side by side
(same process, same model, same max_new_tokens, greedy):

1. sequential: one `model.generate` per question, no stop string (the baseline);
2. plain batch: `model.generate` on unsorted left-padded batches of 16, no stop string;
3. `HFGenerator` at several batch sizes (sorted by length, stops at `</answer>`,
   drops finished rows).

It also checks that the batched greedy outputs equal the sequential ones up to the
stop string (left padding can change float rounding, so this is a rate, not a given).

    python benchmarks/generation_throughput.py --model PATH [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from functools import partial

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import reasoning_gym  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from rlvr.evaluation.generation import HFGenerator, _cut_at_stop  # noqa: E402
from rlvr.evaluation.sampling import SamplingConfig  # noqa: E402

INSTRUCTION = "Think briefly, then give only the final number inside <answer></answer> tags."


def default_model() -> str | None:
    try:
        from rlvr.model.embedded import default_model_path
    except ImportError:
        return None
    return str(default_model_path())


def build_prompts(tokenizer, n: int) -> list[str]:
    data = reasoning_gym.create_dataset(
        "basic_arithmetic", size=n, seed=123, min_terms=2, max_terms=3, min_digits=1, max_digits=1
    )
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": f"{item['question']}\n{INSTRUCTION}"}],
            tokenize=False,
            add_generation_prompt=True,
        )
        for item in data
    ]


def run_sequential(
    model, tokenizer, prompts: list[str], max_new_tokens: int
) -> tuple[list[str], float, list[int]]:
    texts, tokens = [], []
    start = time.perf_counter()
    with torch.inference_mode():
        for prompt in prompts:
            enc = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
            out = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
            new = out[0, enc["input_ids"].shape[1] :]
            tokens.append(len(new))
            texts.append(tokenizer.decode(new, skip_special_tokens=True))
    return texts, time.perf_counter() - start, tokens


def run_plain_batch(model, tokenizer, prompts: list[str], max_new_tokens: int, batch_size: int) -> float:
    start = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(prompts), batch_size):
            enc = tokenizer(
                prompts[i : i + batch_size],
                return_tensors="pt",
                padding=True,
                padding_side="left",
                add_special_tokens=False,
            )
            model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
    return time.perf_counter() - start


@dataclass
class Row:
    name: str
    seconds: float = 0.0
    tokens: int | None = 0
    texts: list[str] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="HF checkpoint dir (default: the product's cache)")
    parser.add_argument("--num-prompts", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--batch-sizes", default="8,16,32,64")
    parser.add_argument("--plain-batch-size", type=int, default=16, help="0 skips the plain-batch row")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    model_path = args.model or default_model()
    if model_path is None:
        parser.error("--model is required (rlvr.model.embedded is not importable to find the default)")

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, args.dtype)).eval()
    prompts = build_prompts(tokenizer, args.num_prompts)
    base = SamplingConfig(max_new_tokens=args.max_new_tokens)

    # Warm-up so one-time costs (oneDNN kernel selection, allocator growth) land in no measured row.
    HFGenerator(model, tokenizer, replace(base, max_new_tokens=8, batch_size=4)).generate(prompts[:4])
    run_sequential(model, tokenizer, prompts[:1], 8)

    print(f"# {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC | {platform.machine()}, {os.cpu_count()} cores")
    print(
        f"# torch {torch.__version__}, threads {torch.get_num_threads()}, dtype {args.dtype}, "
        f"prompts {len(prompts)}, max_new_tokens {args.max_new_tokens}, 1-min load avg before {os.getloadavg()[0]:.2f}"
    )

    def plain(row: Row) -> None:
        row.seconds = run_plain_batch(model, tokenizer, prompts, args.max_new_tokens, args.plain_batch_size)
        row.tokens = None

    def batched(bs: int, row: Row) -> None:
        gen = HFGenerator(model, tokenizer, replace(base, batch_size=bs))
        outs = [o[0] for o in gen.generate(prompts)]
        row.texts = [o.text for o in outs]
        row.seconds, row.tokens = gen.last_stats["seconds"], sum(o.num_tokens for o in outs)

    jobs: list[tuple[Row, Callable[[Row], None]]] = []
    if args.plain_batch_size:
        jobs.append((Row(f"plain batch {args.plain_batch_size} generate (unsorted, no stop)"), plain))
    for bs in (int(b) for b in args.batch_sizes.split(",")):
        jobs.append((Row(f"HFGenerator batch {bs}"), partial(batched, bs)))

    # The machine may be shared: the sequential baseline runs in chunks interleaved with the
    # batched rows, so background load that comes and goes hits both sides of each ratio.
    seq = Row("sequential generate (one call per question)")
    seq_lengths: list[int] = []
    chunk = -(-len(prompts) // len(jobs))
    for i, (row, job) in enumerate(jobs):
        texts, secs, toks = run_sequential(
            model, tokenizer, prompts[i * chunk : (i + 1) * chunk], args.max_new_tokens
        )
        seq.texts += texts
        seq.seconds += secs
        seq_lengths += toks
        seq.loads.append(os.getloadavg()[0])
        job(row)
        row.loads.append(os.getloadavg()[0])

    seq.tokens = sum(seq_lengths)
    seq_sps = len(prompts) / seq.seconds
    seq_cut = [_cut_at_stop(t, base.stop_strings)[0] for t in seq.texts]
    print()
    print("| path | seconds | samples/s | tokens/s | vs sequential | greedy match vs sequential | load avg |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for row in [seq] + [r for r, _ in jobs]:
        sps = len(prompts) / row.seconds
        tps = f"{row.tokens / row.seconds:.1f}" if row.tokens is not None else "-"
        match = (
            f"{sum(a == b for a, b in zip(row.texts, seq_cut, strict=True))}/{len(prompts)}"
            if row.texts and row is not seq
            else "-"
        )
        load = "/".join(f"{x:.1f}" for x in row.loads)
        print(
            f"| {row.name} | {row.seconds:.1f} | {sps:.3f} | {tps} | {sps / seq_sps:.2f}x | {match} | {load} |"
        )
    print()
    lengths = sorted(seq_lengths)
    print(
        f"# sequential completions containing </answer>: {sum('</answer>' in t for t in seq.texts)}/{len(prompts)}"
    )
    print(
        f"# sequential new tokens per question: mean {seq.tokens / len(prompts):.1f}, "
        f"median {lengths[len(lengths) // 2]}, max {lengths[-1]}"
    )
    print(f"# 1-min load avg after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
