"""LoRA and QLoRA (bitsandbytes 4-bit on the CPU) end to end through the real entry point.

A tiny random base is saved to disk first, so the adapter in final/ points at a base that can be
loaded again. Checkpoints and final/ hold the adapter only, and a run resumed from a checkpoint
(which reloads the base from disk) ends with the uninterrupted run's adapter: that holds only if
training changed the adapter and left the base alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tests import in_process
from tests.conftest import ROOT

pytestmark = pytest.mark.integration

LORA = "model.lora={r: 8, lora_alpha: 16, target_modules: [q_proj, k_proj, v_proj, o_proj]}"
RUN = [
    "experiment=smoke",
    "model=hf",
    LORA,
    "reward=with_brevity",  # non-zero GRPO advantages on a random model, so the adapter moves
    "reward.terms.length.free_chars=0",
    "reward.terms.length.scale_chars=40",
    "training_loop.sft.max_steps=2",
    "training_loop.sft.save_strategy=no",
    "training_loop.sft.learning_rate=1e-2",
    "training_loop.grpo.max_steps=4",
    "training_loop.grpo.save_steps=2",
    "training_loop.grpo.save_total_limit=3",
    "training_loop.grpo.learning_rate=1e-2",
    "evaluation.every_n_steps=0",
    "evaluation.baseline=false",
    "data.eval_size=8",
]


def run(run_dir: Path, base: Path, *overrides: str) -> in_process.Run:
    cmd = [f"hydra.run.dir={run_dir}",
           *RUN, f"model.name_or_path={base}", *overrides]  # fmt: skip
    return in_process.run(cmd)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from tests.conftest import tiny_model

    root = tmp_path_factory.mktemp("base") / "tiny"
    loaded = tiny_model(seed=5).load()
    loaded.model.save_pretrained(root)
    loaded.tokenizer.save_pretrained(root)
    return root


def test_lora_trains_the_adapter_only_and_final_holds_it(tmp_path, base):
    run_dir = tmp_path / "lora"
    proc = run(run_dir, base)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    final = run_dir / "final"
    assert (final / "adapter_config.json").is_file() and (final / "adapter_model.safetensors").is_file()
    assert not (final / "model.safetensors").exists()  # the adapter, not a full copy
    assert json.loads((final / "adapter_config.json").read_text())["base_model_name_or_path"] == str(base)
    adapter = load_file(final / "adapter_model.safetensors")
    lora_b = [t for k, t in adapter.items() if "lora_B" in k]
    assert len(lora_b) == 2 * 4 and all(t.abs().max() > 0 for t in lora_b)  # B starts at 0: it moved
    report = json.loads((run_dir / "report.json").read_text())
    assert report["steps"] == {"sft": 2, "grpo": 4}

    # the adapter loads on its base from disk and changes what the model computes
    from transformers import AutoModelForCausalLM

    from rlvr.model.loader import HFModel

    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        plain = AutoModelForCausalLM.from_pretrained(base)(ids).logits
        tuned = HFModel(name_or_path=str(final)).load().model(ids).logits
    assert (plain - tuned).abs().max() > 1e-3

    # resume=auto mid-run: a run killed after GRPO checkpoint 2 continues to the same adapter
    resumed_dir = tmp_path / "resumed"
    cmd = [
        f"hydra.run.dir={resumed_dir}",
        *RUN,
        f"model.name_or_path={base}",
    ]
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "run_pipeline.py"), *cmd],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    ckpt = resumed_dir / "checkpoints" / "grpo" / "checkpoint-2"
    deadline = time.time() + 300
    while not (ckpt / "COMPLETE").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    assert (ckpt / "adapter_model.safetensors").is_file() and not (ckpt / "model.safetensors").exists()
    assert not (resumed_dir / "final").exists()
    second = run(resumed_dir, base, "resume=auto")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    resumed = load_file(resumed_dir / "final" / "adapter_model.safetensors")
    worst = max((resumed[k] - adapter[k]).abs().max().item() for k in adapter)
    assert worst <= 1e-5, worst


def test_qlora_on_cpu_trains_and_the_benchmark_loads_the_adapter_on_its_4bit_base(tmp_path, base):
    run_dir = tmp_path / "qlora"
    proc = run(run_dir, base, "model.quantization=4bit")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    final = run_dir / "final"
    assert json.loads((final / "rlvr_quantization.json").read_text()) == {"quantization": "4bit"}
    adapter = load_file(final / "adapter_model.safetensors")
    assert all(t.abs().max() > 0 for k, t in adapter.items() if "lora_B" in k)
    assert json.loads((run_dir / "report.json").read_text())["steps"] == {"sft": 2, "grpo": 4}

    from rlvr.model.loader import HFModel

    loaded = HFModel(name_or_path=str(final)).load()  # as the benchmark loads a model directory
    layer = loaded.model.base_model.model.model.layers[0].self_attn.q_proj.base_layer
    assert type(layer).__name__ == "Linear4bit" and layer.weight.quant_type == "nf4"
    assert layer.compute_dtype == torch.float32 or torch.ops.mkldnn._is_mkldnn_bf16_supported()

    out = tmp_path / "bench"
    bench = in_process.run(
        ["--config-name", "benchmark", f"hydra.run.dir={out}/h",
         "+model@benchmark.models.qlora=hf", f"benchmark.models.qlora.name_or_path={final}",
         "benchmark.only=[qlora]", "benchmark.tasks=[basic_arithmetic]", "benchmark.num_examples=4",
         f"benchmark.output_dir={out}", "evaluation.max_new_tokens=8"]
    )  # fmt: skip
    assert bench.returncode == 0, bench.stdout[-3000:] + bench.stderr[-3000:]
    [cell] = (out / "cells").glob("*.json")
    assert json.loads(cell.read_text())["evaluation"]["summary"]["n"] == 4


def test_a_lora_adapter_on_the_tiny_model_loads_in_a_second_run(tmp_path):
    """The adapter's base is the tiny model's cached checkpoint (TinyRandomModel.model_path), so a
    later run loads final/ on it from disk (once: an empty base id, and a hub lookup that fails offline)."""
    run_dir = tmp_path / "lora"
    cmd = [f"hydra.run.dir={run_dir}", "experiment=smoke", LORA,
           "training_loop.sft.max_steps=1", "training_loop.grpo.max_steps=1", "evaluation.every_n_steps=0",
           "evaluation.baseline=false", "data.eval_size=4"]  # fmt: skip
    proc = in_process.run(cmd)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    final = run_dir / "final"
    base = json.loads((final / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert base and (Path(base) / "config.json").is_file(), base
    assert "Trained with LoRA (rank 8, alpha 16" in (run_dir / "report.md").read_text()

    out = tmp_path / "bench"
    bench = in_process.run(
        ["--config-name", "benchmark", f"hydra.run.dir={out}/h",
         "+model@benchmark.models.lora=hf", f"benchmark.models.lora.name_or_path={final}",
         "benchmark.only=[lora]", "benchmark.tasks=[basic_arithmetic]", "benchmark.num_examples=4",
         f"benchmark.output_dir={out}", "evaluation.max_new_tokens=8"]
    )  # fmt: skip
    assert bench.returncode == 0, bench.stdout[-3000:] + bench.stderr[-3000:]
    [cell] = (out / "cells").glob("*.json")
    assert json.loads(cell.read_text())["evaluation"]["summary"]["n"] == 4
