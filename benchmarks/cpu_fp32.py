"""Where the default run's time goes on a CPU, and what each lever on an SFT step buys.

    .venv/bin/python benchmarks/cpu_fp32.py --avx2             # the AVX2-only fp32 kind, emulated here
    .venv/bin/python benchmarks/cpu_fp32.py                    # this machine as it is (bf16 on AVX512-BF16)
    .venv/bin/python benchmarks/cpu_fp32.py --run-dir DIR      # also break down a finished run_pipeline.py run

Run it alone on the machine. ``--avx2`` re-runs this script with the settings of docs/install.md "The AVX2
CPU kind" (ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2): torch's
kernels and oneDNN then run as on an AVX2-only CPU, so ``precision: auto`` picks fp32.

Part 1, the anatomy of one SFT step of the default run: the real default model, the real training rows
of the default config (seed 42), batched by TRL's own SFTTrainer data loader (16 rows, padded), the
optimizer TRL builds. Each arm runs ``--steps`` steps on the same batches; the table gives the median
seconds of forward, backward and optimizer over the steps after the first, the real (unpadded) tokens a
second, and the loss of the first batch (so an arm that changes the loss shows it). Arms:

- ``default``: TRL's own SFTTrainer.compute_loss (what the run did before rlvr.training_loop.sft_loss):
  TRL 1.16's fused LM head, which on a device without Triton scores every position in tiles, with
  entropy and top-1 for each;
- ``completion_logits``: rlvr's RLVRSFTTrainer, what the run does now: the head over the positions
  whose next token is a label only (the lever "logits only at completion positions"), the same loss;
- ``full_logits``: the model's own loss, the tied head over every position, no extra metrics;
- ``frozen_embeddings``: the tied embedding/head matrix not trained (no gradient, no AdamW state);
- ``completion_logits+frozen``: both;
- ``lora_r16``: a PEFT LoRA adapter (r=16, alpha=32, every linear layer; TRL's peft_config), base frozen;
- ``batch_32``: 32 rows a step instead of 16 (the batch shape): compare real tokens/s; ``batch_8``: 8 rows;
- ``+layers_6``: the lowest 6 decoder layers frozen too (``training_loop.sft.frozen_layers=6``);
- ``compile``: ``torch.compile`` (dynamic shapes) of the model; its first step includes compiling.

Part 2 (``--run-dir``): the stages of a real run from its metrics.jsonl (baseline, each evaluation, the
SFT and GRPO steps), and what the default's 640 SFT + 16 GRPO steps and its evaluations add up to.
Results: benchmarks/cpu_fp32.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AVX2 = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "TORCHINDUCTOR_CACHE_DIR": str(ROOT / ".cache" / "torchinductor-avx2"),
}
ARMS = ("default", "completion_logits", "full_logits", "frozen_embeddings", "completion_logits+frozen", "lora_r16",
        "batch_32", "compile", "completion_logits+lora_r16", "completion_logits+frozen+layers_6",
        "completion_logits+batch_8", "completion_logits+frozen+batch_8")  # fmt: skip


def compose(overrides: list[str]):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra_compose(config_name="config", overrides=overrides)


class Setup:
    """The default config's model loader, tokenizer and SFT rows (as the run's SFT phase makes them)."""

    def __init__(self, seed: int):
        from hydra.utils import instantiate

        self.seed = seed
        self.cfg = compose([f"seed={seed}"])
        loaded = instantiate(self.cfg.model).load()
        self.tokenizer = loaded.tokenizer
        prompt = instantiate(self.cfg.prompts)
        prompt.bind(self.tokenizer)
        data = instantiate(self.cfg.data).load(prompt)
        self.rows = data.train.map(
            lambda row: {
                "completion": [{"role": "assistant", "content": prompt.format_answer(row["answer"])}]
            },
            remove_columns=[c for c in data.train.column_names if c != "prompt"],
        )

    def model(self):
        from hydra.utils import instantiate

        return instantiate(self.cfg.model).load().model.float()

    def trainer(self, model, out: str, batch_size: int = 16, peft_config=None, bf16: bool = False, cls=None):
        """TRL's SFTTrainer (or ``cls``) as an SFT phase builds it (its loss, its optimizer, its data loader)."""
        from trl import SFTConfig, SFTTrainer

        sft = self.cfg.training_loop.sft
        args = SFTConfig(
            output_dir=out,
            per_device_train_batch_size=batch_size,
            max_length=sft.max_length,
            learning_rate=sft.learning_rate,
            gradient_checkpointing=False,  # TRL's default is on; the run follows model.gradient_checkpointing (off)
            seed=self.seed,
            bf16=bf16,
            report_to=[],
            use_cpu=True,
        )
        return (cls or SFTTrainer)(
            model=model,
            args=args,
            train_dataset=self.rows,
            processing_class=self.tokenizer,
            peft_config=peft_config,
        )


def full_logits_loss(model, batch):
    """The model's own causal-LM loss: the tied head over every position, prompt and padding included
    (what SFT did before TRL's fused head, which scores label positions only)."""
    return model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]
    ).loss


def time_arm(name: str, setup: Setup, steps: int, bf16: bool) -> dict:
    import torch

    torch.manual_seed(setup.seed)
    model = setup.model()
    peft_config = None
    if "frozen" in name:
        model.get_input_embeddings().weight.requires_grad_(False)  # tied: the head's weight too
    if "layers_" in name:  # the lowest N decoder layers too (training_loop.sft.frozen_layers)
        for layer in model.model.layers[: int(name.rsplit("layers_", 1)[1])]:
            layer.requires_grad_(False)
    if "lora_r16" in name:
        from peft import LoraConfig

        peft_config = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM")
    rows = 32 if name.endswith("batch_32") else 8 if name.endswith("batch_8") else 16
    with tempfile.TemporaryDirectory() as out:
        cls = None
        if "completion_logits" in name:
            from rlvr.training_loop.sft_loss import RLVRSFTTrainer as cls
        trainer = setup.trainer(model, out, batch_size=rows, peft_config=peft_config, bf16=bf16, cls=cls)
        model = trainer.model
        model.train()
        if name == "compile":
            model.compile(dynamic=True)  # nn.Module.compile: in place, the fused head's patch kept
        opt = trainer.create_optimizer()
        batches = []
        for batch in trainer.get_train_dataloader():
            batches.append(batch)
            if len(batches) == steps:
                break
        fwd, bwd, optim, losses = [], [], [], []
        for batch in batches:
            count = (batch["labels"][:, 1:] != -100).sum()
            t0 = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                if name == "full_logits":
                    loss = full_logits_loss(model, batch)
                else:
                    loss = trainer.compute_loss(model, dict(batch), num_items_in_batch=count)
            t1 = time.perf_counter()
            loss.backward()
            t2 = time.perf_counter()
            opt.step()
            opt.zero_grad(set_to_none=True)
            t3 = time.perf_counter()
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
            optim.append(t3 - t2)
            losses.append(loss.item())
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        real = sum(int(b["attention_mask"].sum()) for b in batches[1:])
    med = {
        k: statistics.median(v[1:]) for k, v in (("forward", fwd), ("backward", bwd), ("optimizer", optim))
    }
    step = sum(med.values())
    return {"arm": name, **med, "step": step, "rows": rows, "first": fwd[0] + bwd[0] + optim[0],
            "tokens_per_s": real / sum(f + b + o for f, b, o in zip(fwd[1:], bwd[1:], optim[1:], strict=True)),
            "loss0": losses[0], "trainable": trainable}  # fmt: skip


def anatomy(steps: int, seed: int, bf16: bool, arms: list[str]) -> None:
    import torch

    setup = Setup(seed)
    with tempfile.TemporaryDirectory() as out:
        trainer = setup.trainer(setup.model(), out)
        batches = [b for _, b in zip(range(steps), trainer.get_train_dataloader(), strict=False)]
    rows = sum(b["input_ids"].shape[0] for b in batches)
    real = sum(int(b["attention_mask"].sum()) for b in batches)
    padded = sum(b["input_ids"].numel() for b in batches)
    labelled = sum(int((b["labels"] != -100).sum()) for b in batches)
    print(f"\n{len(batches)} SFT batches of the default run (seed {seed}): {rows} rows, {real / rows:.1f} real "
          f"tokens a row, {padded / rows:.1f} padded; {labelled / real:.1%} of the real tokens are labels "
          f"(completion); precision {'bf16 autocast' if bf16 else 'fp32'}; torch {torch.__version__}, "
          f"capability {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} threads\n")  # fmt: skip
    print(
        "| arm | rows a step | trainable params | forward s | backward s | optimizer s | step s | first step s "
        "| real tokens/s | vs default (tokens/s) | loss, batch 1 |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    base = None
    for name in arms:
        try:
            r = time_arm(name, setup, steps, bf16)
        except Exception as exc:  # noqa: BLE001 - a lever that does not run here is a row too
            print(f"| {name} | failed: {type(exc).__name__}: {str(exc)[:160]} |||||||||", flush=True)
            continue
        base = base or r["tokens_per_s"]
        print(f"| {name} | {r['rows']} | {r['trainable'] / 1e6:.1f} M | {r['forward']:.2f} | {r['backward']:.2f} | "
              f"{r['optimizer']:.2f} | {r['step']:.2f} | {r['first']:.1f} | {r['tokens_per_s']:.0f} | "
              f"{r['tokens_per_s'] / base:.2f}x | {r['loss0']:.4f} |", flush=True)  # fmt: skip


def run_breakdown(run_dir: Path, sft_steps: int = 640, grpo_steps: int = 16, evals_in_sft: int = 3) -> None:
    """Stage times of a finished run, and the default's total built from them."""
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    stages, open_ = {}, {}
    for e in events:
        if e["event"] == "stage_start":
            open_[e["stage"]] = e["time"]
        elif e["event"] == "stage_end":
            stages[e["stage"]] = e["time"] - open_.pop(e["stage"])
    step_times: dict[str, list[float]] = {"sft": [], "grpo": []}
    evals: dict[str, float] = {}
    last = None
    for e in events:
        if e["event"] == "train_step" and e.get("phase") in step_times:
            metrics = e.get("metrics", {})
            seconds = metrics.get(f"{e['phase']}/step_seconds")
            if seconds is not None and f"{e['phase']}/learning_rate" in metrics:
                step_times[e["phase"]].append(seconds)
        if e["event"] == "evaluation" and last is not None:
            evals[e.get("label", "?")] = e["time"] - last
        last = e["time"]
    sft = statistics.median(step_times["sft"][1:] or step_times["sft"])
    grpo = statistics.median(step_times["grpo"][1:] or step_times["grpo"])
    greedy = stages.get("baseline_eval", 0.0)
    sampled = evals.get("after_sft_sampled", 0.0)
    fixed = sum(v for k, v in stages.items() if k not in ("train", "baseline_eval", "final_eval"))
    parts = [
        ("model, data, checks, save, report", fixed),
        ("baseline evaluation (greedy)", greedy),
        (f"SFT, {sft_steps} steps x {sft:.2f} s", sft_steps * sft),
        (f"in-training evaluations, {evals_in_sft} x greedy", evals_in_sft * greedy),
        ("after-SFT evaluations (greedy + sampled)", greedy + sampled),
        (f"GRPO, {grpo_steps} steps x {grpo:.2f} s", grpo_steps * grpo),
        ("final evaluations (greedy + sampled)", greedy + sampled),
    ]
    total = sum(v for _, v in parts)
    print(f"\nStages of {run_dir.name} (measured): " + ", ".join(f"{k} {v:.1f} s" for k, v in stages.items()))
    print(f"SFT step median {sft:.2f} s over {len(step_times['sft'])} steps; GRPO step median {grpo:.2f} s over "
          f"{len(step_times['grpo'])}; greedy evaluation {greedy:.1f} s; sampled evaluation {sampled:.1f} s\n")  # fmt: skip
    print("| the default run, built from those | seconds | share |")
    print("|---|---:|---:|")
    for name, seconds in parts:
        print(f"| {name} | {seconds:.0f} | {seconds / total:.0%} |")
    print(f"| **total** | **{total:.0f}** ({total / 60:.1f} min) | |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--avx2", action="store_true", help="emulate the AVX2-only fp32 CPU kind")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--run-dir", type=Path, help="a finished run to break down (part 2)")
    parser.add_argument("--no-anatomy", action="store_true")
    args = parser.parse_args(argv)
    if args.no_anatomy and not args.run_dir:
        parser.error(
            "--no-anatomy skips the step arms; add --run-dir <a finished run> to break down, or drop it"
        )
    if args.avx2 and os.environ.get("ATEN_CPU_CAPABILITY") != "avx2":
        argv_ = [a for a in (argv if argv is not None else sys.argv[1:])]
        raise SystemExit(subprocess.call([sys.executable, __file__, *argv_], env={**os.environ, **AVX2}))
    from rlvr.runtime import hardware

    bf16 = hardware.resolve("cpu", "auto").precision == "bf16"  # what precision: auto picks here
    if not args.no_anatomy:
        anatomy(args.steps, args.seed, bf16, args.arms)
    if args.run_dir:
        run_breakdown(args.run_dir)


if __name__ == "__main__":
    main()
