"""Is the hand-written generator still worth its ~490 lines? HFGenerator against the library paths.

Measured side by side in one process on the embedded default model (SmolLM2-135M, fp32, greedy),
on the pipeline's own prompt (conf/prompts/answer_tags) and held-out basic_arithmetic questions,
at the default evaluation budget (16 new tokens) and at 128:

1. ``HFGenerator`` (rlvr.evaluation.generation): continuous batching over DynamicCache internals, batch 32;
2. ``BatchedGenerate`` (rlvr.evaluation.generation, the evaluation default): library ``model.generate``
   on prompts sorted by token length, left-padded batches of 32, stopping at ``</answer>`` with a
   stop-string criterion built once (rlvr.evaluation.generation.stop_criteria);
3. the same loop passing ``stop_strings`` + ``tokenizer`` to every ``generate`` call, as
   ``BatchedGenerate`` did before 2026-11-26 (transformers then rebuilds the criterion each call);
4. with ``--paged``: transformers' own continuous batching, ``model.generate_batch`` (paged
   attention, CPU).

Methods are interleaved over ``--rounds`` rounds and the median is reported; the greedy texts
of 2-4 are compared with 1 (cut at the stop string).

    python benchmarks/generation_library.py [--n 128] [--rounds 2] [--paged]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from datetime import datetime, timezone

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig  # noqa: E402

from rlvr.data.reasoning_gym import split_entries  # noqa: E402
from rlvr.evaluation.generation import BatchedGenerate, HFGenerator, _cut_at_stop  # noqa: E402
from rlvr.evaluation.sampling import SamplingConfig  # noqa: E402
from rlvr.model.embedded import ensure_default_model  # noqa: E402
from rlvr.prompts import PromptTemplate  # noqa: E402

PARAMS = {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 1, "operators": ["+", "-"]}
STOP = "</answer>"


def library_generate(model, tok, prompts: list[str], max_new: int, batch: int) -> list[str]:
    order = sorted(range(len(prompts)), key=lambda i: len(tok(prompts[i]).input_ids))
    out: list[str] = [""] * len(prompts)
    tok.padding_side = "left"
    for start in range(0, len(order), batch):
        idx = order[start : start + batch]
        enc = tok([prompts[i] for i in idx], return_tensors="pt", padding=True)
        with torch.no_grad():
            gen = model.generate(
                **enc, max_new_tokens=max_new, do_sample=False, stop_strings=[STOP], tokenizer=tok,
                pad_token_id=tok.pad_token_id,
            )  # fmt: skip
        for row, i in enumerate(idx):
            text = tok.decode(gen[row, enc.input_ids.shape[1] :], skip_special_tokens=True)
            out[i] = _cut_at_stop(text, (STOP,))[0]
    return out


def batch_generate(model, tok, prompts: list[str], max_new: int) -> list[str]:
    config = GenerationConfig(
        max_new_tokens=max_new, do_sample=False, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )
    ids = [tok(p).input_ids for p in prompts]
    with torch.no_grad():
        out = model.generate_batch(inputs=ids, generation_config=config, progress_bar=False)
    texts = [
        tok.decode(out[f"req_{i}"].generated_tokens, skip_special_tokens=True) for i in range(len(prompts))
    ]
    return [_cut_at_stop(t, (STOP,))[0] for t in texts]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tokens", type=int, nargs="+", default=[16, 128])
    parser.add_argument(
        "--paged", action="store_true", help="also transformers' generate_batch (slowest here)"
    )
    args = parser.parse_args()

    path = str(ensure_default_model())
    tok = AutoTokenizer.from_pretrained(path)
    tok.pad_token = tok.pad_token or tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    paged = (
        AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.float32, attn_implementation="paged|eager"
        ).eval()
        if args.paged
        else None
    )
    prompt = PromptTemplate(instruction="{question}", system="Answer with <answer>N</answer>.")
    entries = split_entries("basic_arithmetic", PARAMS, "test", args.n, 42, "--n")
    prompts = [prompt.render(tok, prompt.messages(e["question"])) for e in entries]

    print(f"# {datetime.now(timezone.utc):%Y-%m-%d}, {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} torch threads, torch {torch.__version__}, n={args.n}, fp32 greedy")  # fmt: skip
    print(
        "| max_new_tokens | method | samples/s (median) | vs HFGenerator | greedy texts equal to HFGenerator |"
    )
    print("|---|---|---|---|---|")
    for max_new in args.tokens:
        sampling = SamplingConfig(max_new_tokens=max_new, batch_size=32, stop_strings=(STOP,))
        methods = {
            "HFGenerator batch 32": lambda sampling=sampling: [
                g[0].text for g in HFGenerator(model, tok, sampling).generate(prompts)
            ],
            "BatchedGenerate batch 32 (criterion built once)": lambda sampling=sampling: [
                g[0].text for g in BatchedGenerate(model, tok, sampling).generate(prompts)
            ],
            "model.generate sorted batch 32 + stop_strings each call": lambda max_new=max_new: (
                library_generate(model, tok, prompts, max_new, 32)
            ),
        }
        if paged is not None:
            methods["model.generate_batch (continuous batching)"] = lambda max_new=max_new: batch_generate(
                paged, tok, prompts, max_new
            )
        times: dict[str, list[float]] = {k: [] for k in methods}
        texts: dict[str, list[str]] = {}
        for _ in range(args.rounds):
            for name, run in methods.items():
                start = time.perf_counter()
                texts[name] = run()
                times[name].append(time.perf_counter() - start)
        ref = texts["HFGenerator batch 32"]
        base = args.n / statistics.median(times["HFGenerator batch 32"])
        for name in methods:
            rate = args.n / statistics.median(times[name])
            same = sum(a == b for a, b in zip(texts[name], ref, strict=True))
            print(f"| {max_new} | {name} | {rate:.2f} | {rate / base:.2f}x | {same}/{args.n} |")


if __name__ == "__main__":
    main()
