#!/usr/bin/env python3
"""The memory pre-flight against measured training steps of shape models (published architectures,
random weights: rlvr.model.loader.ShapeModel).

    python benchmarks/memory_preflight.py --device cuda            # the grid below, on a GPU
    python benchmarks/memory_preflight.py --device cpu --small     # what this 2-core CPU can run
    python benchmarks/memory_preflight.py --device cuda --json out.json

Each case runs in this process one after the other (``--isolate``: each in its own process), its
model and optimizer freed before the next, and CUDA's peak counter reset: each peak is its own
(``max_memory_allocated`` counts live tensors, so what the allocator kept cached does not count).
The model is loaded by rlvr's own model
component (dtype, LoRA through PEFT, NF4 through bitsandbytes, gradient checkpointing), given TRL's
fused LM head (trl.trainer.utils.add_fused_lm_head, which TRL's SFT and GRPO trainers add, so the
(batch, seq, vocab) logits are never materialised), and trained for two optimizer steps the way
transformers' Trainer does it: forward under bf16 autocast with the completion tokens labelled,
backward, AdamW (fused on CUDA), gradients set to None. The second step is the one measured: the
optimizer state exists by then. GRPO cases then generate ``completion`` tokens for the generation
batch with the optimizer state resident (the rollout peak). On CUDA the peak is
``torch.cuda.max_memory_allocated``; on a CPU the bytes saved for backward are counted with
``torch.autograd.graph.saved_tensors_hooks`` (the term the estimate cannot read off the shape alone)
beside the parameter, gradient and optimizer bytes.

Beside each measurement: rlvr.model.memory's estimate for the same plan, and the ratio. Results:
benchmarks/memory_preflight.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LORA = {"r": 16, "lora_alpha": 32, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}


@dataclass(frozen=True)
class Case:
    arch: str
    method: str  # full | lora | qlora
    phase: str  # sft | grpo
    gc: bool
    batch: int  # training micro-batch (sequences)
    prompt: int  # prompt tokens
    completion: int  # completion (answer) tokens
    dtype: str = "bfloat16"
    generation_batch: int = 0  # GRPO: sequences generated at once (0: batch)

    @property
    def label(self) -> str:
        gc = "+GC" if self.gc else ""
        return (
            f"{self.arch} {self.dtype} {self.method}{gc} {self.phase} b{self.batch} "
            f"p{self.prompt}+c{self.completion}"
        )


def grid(device: str, small: bool) -> list[Case]:
    if small:  # a 2-core CPU: the real architecture, few tokens (a case takes ~8 min on 2 cores)
        cases = [
            Case("qwen2_5_0_5b", m, "sft", gc, 2, 64, 64)
            for m in ("full", "lora", "qlora")
            for gc in (False, True)
        ]
        return cases + [
            Case("qwen2_5_0_5b", "lora", "sft", False, 4, 64, 64)
        ]  # b4: how the saved bytes scale
    cases = [
        # the default run's shapes: the embedded model's architecture in fp32 under bf16 autocast
        Case("smollm2_135m", "full", "sft", False, 16, 48, 16, dtype="float32"),
        Case("smollm2_135m", "full", "grpo", False, 16, 48, 16, dtype="float32", generation_batch=64),
    ]
    for arch in ("qwen2_5_0_5b", "qwen2_5_1_5b"):
        for method in ("full", "lora", "qlora"):
            for gc in (False, True):
                cases.append(Case(arch, method, "sft", gc, 16, 128, 128))
                # the GPU experiment's GRPO shapes (conf/experiment/gsm_symbolic_gpu.yaml)
                cases.append(Case(arch, method, "grpo", gc, 16, 192, 512))
    return cases


def model_component(case: Case):
    from rlvr.model.loader import ShapeModel

    return ShapeModel(
        architecture=case.arch,
        seed=0,
        dtype=case.dtype,
        lora=LORA if case.method in ("lora", "qlora") else None,
        quantization="4bit" if case.method == "qlora" else None,
        gradient_checkpointing=case.gc,
    )


def _rss() -> int:
    """This process's resident set now, in bytes (Linux /proc)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


_RSS_AT_IMPORT = 0


class RssPeak:
    """The largest resident set seen while a step runs (a thread samples /proc every 5 ms): a CPU
    has no allocator peak counter, and ru_maxrss would keep the model build's own high-water mark."""

    def __init__(self) -> None:
        import threading

        self.peak = 0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._halt.is_set():
            self.peak = max(self.peak, _rss())
            self._halt.wait(0.005)

    def start(self) -> None:
        self.peak = _rss()
        self._thread.start()

    def stop(self) -> int:
        self._halt.set()
        self._thread.join()
        return max(self.peak, _rss())


def measure(case: Case, device: str) -> dict:
    """One case in this process: returns the measured bytes (GB, 2**30)."""
    global _RSS_AT_IMPORT
    import torch
    from trl.trainer.utils import add_fused_lm_head

    import rlvr.model.loader  # noqa: F401  (its imports count as the process, not the case)

    _RSS_AT_IMPORT = _rss()
    gb = 1024**3
    torch.manual_seed(0)
    component = model_component(case)
    model = component.load().model
    if not getattr(model, "is_quantized", False):
        model = model.to(device)
    if case.gc:  # as transformers' Trainer enables it for TRL (non-reentrant)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    add_fused_lm_head(base)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-6, fused=device == "cuda")
    seq = case.prompt + case.completion
    ids = torch.randint(0, 49152, (case.batch, seq), device=device)
    labels = ids.clone()
    labels[:, : case.prompt] = -100
    saved = {"now": 0, "peak": 0}

    def pack(t):
        saved["now"] += t.untyped_storage().nbytes()
        saved["peak"] = max(saved["peak"], saved["now"])
        return t

    def step(count_saved: bool) -> None:
        saved["now"] = 0
        hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t) if count_saved else None
        if hooks:
            hooks.__enter__()
        with torch.autocast(device, dtype=torch.bfloat16):
            out = model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels, fused_lm_head=True)
            loss = -out.log_probs[:, -case.completion :].float().mean()
        if hooks:
            hooks.__exit__(None, None, None)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    rss = RssPeak()
    start = time.perf_counter()
    step(False)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    rss.start()
    step(True)
    record: dict = {"train_seconds": round(time.perf_counter() - start, 2)}
    if device == "cpu":  # resident set during the measured step, less what the process held before loading
        record["train_peak_gb"] = (rss.stop() - _RSS_AT_IMPORT) / gb
    record["saved_for_backward_gb"] = saved["peak"] / gb
    record["trainable_params"] = sum(p.numel() for p in params)
    record["param_gb"] = sum(p.numel() * p.element_size() for p in model.parameters()) / gb
    record["optimizer_gb"] = (
        sum(
            t.numel() * t.element_size()
            for state in optimizer.state.values()
            for t in state.values()
            if torch.is_tensor(t)
        )
        / gb
    )
    if device == "cuda":
        torch.cuda.synchronize()
        record["train_peak_gb"] = torch.cuda.max_memory_allocated() / gb
    if case.phase == "grpo" and not case.gc:  # generation runs without checkpointing either way
        gen_batch = case.generation_batch or case.batch
        prompts = torch.randint(0, 49152, (gen_batch, case.prompt), device=device)
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        model.eval()
        start = time.perf_counter()
        with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
            model.generate(
                input_ids=prompts,
                attention_mask=torch.ones_like(prompts),
                max_new_tokens=case.completion,
                min_new_tokens=case.completion,
                do_sample=True,
                pad_token_id=0,
            )
        record["generate_seconds"] = round(time.perf_counter() - start, 2)
        if device == "cuda":
            torch.cuda.synchronize()
            record["generate_peak_gb"] = torch.cuda.max_memory_allocated() / gb
    return record


def measure_here(case: Case, device: str) -> dict:
    """:func:`measure` in this process, everything it made freed afterwards."""
    import gc

    import torch

    try:
        return measure(case, device)
    except Exception as exc:  # one case's failure (out of memory, a missing library) is its record
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    finally:
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()


def estimate(case: Case, device_gb: float) -> dict[str, float]:
    from rlvr.model import memory
    from rlvr.model.architectures import ARCHITECTURES

    shape = memory.shape_of(ARCHITECTURES[case.arch][0])
    plan = memory.Plan(
        dtype=case.dtype,
        quantization="4bit" if case.method == "qlora" else None,
        lora_r=LORA["r"] if case.method != "full" else None,
        lora_targets=tuple(LORA["target_modules"]) if case.method != "full" else (),
        batch=case.batch,
        prompt=case.prompt,
        completion=case.completion,
        activation_checkpointing=case.gc,
        generation_batch=(case.generation_batch or case.batch) if case.phase == "grpo" else 0,
        precision="bf16",
    )
    return memory.estimate(shape, plan, device_gb)


def run_case(case: Case, device: str, timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--one", json.dumps(asdict(case)), "--device", device]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode or not lines:
        tail = (out.stderr or out.stdout).strip().splitlines()[-3:]
        return {"error": f"exit {out.returncode}: {' / '.join(tail)}"}
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--small", action="store_true", help="the CPU grid (few tokens)")
    ap.add_argument("--only", help="cases whose label contains this")
    ap.add_argument("--json", type=Path, help="write every record here")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--isolate", action="store_true", help="each case in its own process")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(measure(Case(**json.loads(args.one)), args.device)), flush=True)
        return 0
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    device_gb = 24.0
    records = []
    print("| case | measured peak GB | estimate GB | ratio | saved for backward GB | s |")
    print("|---|---:|---:|---:|---:|---:|")
    for case in grid(args.device, args.small):
        if args.only and args.only not in case.label:
            continue
        got = run_case(case, args.device, args.timeout) if args.isolate else measure_here(case, args.device)
        try:
            terms = estimate(case, device_gb)
        except Exception as exc:  # the estimate's own bug must not lose the measurement
            terms = {"error": repr(exc)}
        record = {"case": asdict(case), "label": case.label, "measured": got, "estimate_terms_gb": terms}
        records.append(record)
        peak = max(got.get("train_peak_gb", 0.0), got.get("generate_peak_gb", 0.0)) or None
        total = sum(v for v in terms.values() if isinstance(v, float)) if "error" not in terms else None
        ratio = f"{total / peak:.2f}" if peak and total else "-"
        print(
            f"| {case.label} | {peak if peak is None else round(peak, 2)} | "
            f"{total if total is None else round(total, 2)} | {ratio} | "
            f"{round(got.get('saved_for_backward_gb', float('nan')), 3)} | "
            f"{got.get('train_seconds', got.get('error', '-'))} |",
            flush=True,
        )
        if args.json:
            args.json.write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
