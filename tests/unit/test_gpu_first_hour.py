"""A GPU user's first hour: the memory check against peaks measured on a GPU, shape models, the GPU
recipe's micro-batches and evaluation batches, tokens/s and MFU."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlvr.model import memory

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "benchmarks" / "memory_preflight_h200.json"
MEASURED_QLORA = ROOT / "benchmarks" / "memory_preflight_qlora_h200.json"


def _bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import memory_preflight
    finally:
        sys.path.pop(0)
    return memory_preflight


def _measured_cases(path: Path = MEASURED):
    bench = _bench()
    for record in json.loads(path.read_text())["cases"]:
        got = record["measured"]
        yield (
            bench.Case(**record["case"]),
            max(got.get("train_peak_gb", 0.0), got.get("generate_peak_gb", 0.0)),
        )


def test_the_estimate_is_at_least_every_measured_peak_and_at_most_one_and_a_half_times_it():
    """benchmarks/memory_preflight_h200.json: 18 training steps of shape models measured on an H200
    (0.5B and 1.5B, full and LoRA, with and without checkpointing, SFT and GRPO shapes)."""
    bench = _bench()
    cases = list(_measured_cases())
    assert len(cases) >= 16 and {c.arch for c, _ in cases} >= {"qwen2_5_0_5b", "qwen2_5_1_5b"}
    ratios = {c.label: memory.peak(bench.estimate(c, 24.0)) / measured for c, measured in cases}
    assert all(1.0 <= r <= 1.5 for r in ratios.values()), ratios


def test_the_qlora_estimate_is_at_least_every_measured_peak_and_at_most_one_and_a_half_times_it():
    """benchmarks/memory_preflight_qlora_h200.json: QLoRA (NF4 base, LoRA r16, PEFT's
    prepare_model_for_kbit_training) of the 0.5B and 1.5B shapes measured on an H200. Before the
    estimate counted the fp32 embeddings and residual stream that preparation leaves, it was
    0.78-0.87x of these peaks: it would have passed runs that run out of memory."""
    bench = _bench()
    cases = list(_measured_cases(MEASURED_QLORA))
    assert len(cases) >= 5 and {c.method for c, _ in cases} == {"qlora"}
    assert {c.gc for c, _ in cases} == {True, False} and {c.phase for c, _ in cases} == {"sft", "grpo"}
    ratios = {c.label: memory.peak(bench.estimate(c, 24.0)) / measured for c, measured in cases}
    assert all(1.0 <= r <= 1.5 for r in ratios.values()), ratios


def _gpu_experiment(overrides: list[str]):
    from hydra.utils import instantiate
    from tests.conftest import compose_config

    from rlvr.training_loop import TrainingLoop

    cfg = compose_config(["experiment=gsm_symbolic_gpu", *overrides])
    model = instantiate(cfg.model, _convert_="all")
    from omegaconf import OmegaConf

    fields = OmegaConf.to_container(cfg.training_loop, resolve=True)  # interpolations from the root
    fields.pop("_target_")
    loop = TrainingLoop(**fields, prompt=None, rewards=None)
    loop.hardware = SimpleNamespace(
        device="cuda", trainer_args=lambda: {"use_cpu": True, "bf16": True, "fp16": False}
    )
    return model, loop


def test_the_gpu_experiment_runs_on_a_24_gb_card_and_is_refused_there_without_checkpointing(monkeypatch):
    """Its GRPO micro-batch measured 5.4 GB with gradient checkpointing and 28.8 GB without (the
    1.5B shape, LoRA, H200): the memory check lets the first run on 24 GB and refuses the second,
    naming the terms and the fixes. (217, 12): gsm_symbolic's longest prompt and answer."""
    monkeypatch.setattr(memory, "device_memory_gb", lambda device: 24.0)
    lengths = (217, 12)
    model, loop = _gpu_experiment([])
    assert model.gradient_checkpointing and model.lora["r"] == 16
    refusals, _ = memory.run_checks(model, loop, None, lengths)
    assert refusals == []
    measured = dict((c.label, peak) for c, peak in _measured_cases())
    shape, plan, _, _ = memory._estimate_inputs(model, loop, None, 1, lengths)
    estimate = memory.peak(memory.estimate(shape, plan, 24.0))
    assert measured["qwen2_5_1_5b bfloat16 lora+GC grpo b16 p192+c512"] <= estimate <= 24.0

    model, loop = _gpu_experiment(["model.gradient_checkpointing=false"])
    (refusal,) = memory.run_checks(model, loop, None, lengths)[0]
    assert measured["qwen2_5_1_5b bfloat16 lora grpo b16 p192+c512"] > 24.0
    assert "activations" in refusal.problem and "model.gradient_checkpointing=true" in refusal.fix


def test_the_data_lengths_are_token_counts_of_the_chat_template():
    """The run's own check measures prompts as TRL tokenizes them (a BatchEncoding's len is 2)."""
    from datasets import Dataset
    from transformers import AutoTokenizer

    from rlvr.model.embedded import ensure_default_model

    tokenizer = AutoTokenizer.from_pretrained(ensure_default_model())
    long = "What is " + " + ".join(str(i) for i in range(40)) + "?"
    data = Dataset.from_dict(
        {
            "prompt": [[{"role": "user", "content": "2 + 2?"}], [{"role": "user", "content": long}]],
            "answer": ["4", "780"],
        }
    )
    prompt, answer = memory.data_lengths(data, tokenizer, lambda a: f"<answer>{a}</answer>")
    text = tokenizer.apply_chat_template(data[1]["prompt"], tokenize=False, add_generation_prompt=True)
    assert prompt == len(tokenizer(text, add_special_tokens=False)["input_ids"]) > 80
    assert answer == len(tokenizer("<answer>780</answer>")["input_ids"])


@pytest.mark.parametrize(
    ("per_device", "accumulation", "limit", "expected"),
    [(16, 4, 64, (64, 1)), (16, 4, 32, (32, 2)), (16, 4, 16, None), (16, 1, 1000, None), (8, 6, 24, (24, 2))],
)
def test_accumulation_folds_into_the_largest_micro_batch_that_fits(per_device, accumulation, limit, expected):
    from rlvr.training_loop.microbatch import fold_accumulation

    got = fold_accumulation(per_device, accumulation, lambda batch: batch <= limit)
    assert got == expected
    if got:
        assert got[0] * got[1] == per_device * accumulation


def test_a_folded_grpo_step_keeps_its_generation_batch():
    """TRL buffers generation_batch_size completions and trains them in steps_per_generation
    micro-batches: folding changes the split, never what is generated or the update."""
    from tests.conftest import SIGNAL

    from rlvr.training_loop import TrainingLoop
    from rlvr.training_loop.phase import TrainOutcome

    loop = TrainingLoop(
        sft={"enabled": False},
        rft={"enabled": False},
        grpo={"per_device_train_batch_size": 16, "gradient_accumulation_steps": 4, "num_generations": 8},
        signal=SIGNAL, seed=0, device="auto", precision="auto", prompt=None, rewards=None,
    )  # fmt: skip
    loop.hardware = SimpleNamespace(
        device="cuda", trainer_args=lambda: {"use_cpu": True, "bf16": False, "fp16": False}
    )
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        args = loop.grpo_phase.config(Path(tmp))
    outcome = TrainOutcome(model=None)
    args = loop.grpo_phase.fit_to_device(args, SimpleNamespace(fits=lambda b: b <= 32), outcome)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (32, 2)
    assert (args.generation_batch_size, args.steps_per_generation) == (64, 2)
    assert outcome.micro_batches == {"grpo": 32} and "16x4 -> 32x2" in outcome.hardware["grpo_micro_batch"]
    loop.hardware = SimpleNamespace(device="cpu", trainer_args=loop.hardware.trainer_args)
    with tempfile.TemporaryDirectory() as tmp:
        cpu_args = loop.grpo_phase.fit_to_device(
            loop.grpo_phase.config(Path(tmp)), SimpleNamespace(fits=lambda b: True), TrainOutcome(model=None)
        )
    assert (cpu_args.per_device_train_batch_size, cpu_args.gradient_accumulation_steps) == (16, 4)


def _sft_loop(device: str, **sft):
    from tests.conftest import SIGNAL

    from rlvr.training_loop import TrainingLoop

    loop = TrainingLoop(
        sft={"max_steps": 640, "learning_rate": 3e-4, "per_device_train_batch_size": 16, "warmup_steps": 10,
             "save_steps": 160, **sft},
        rft={"enabled": False}, grpo={"enabled": False},
        signal=SIGNAL, seed=0, device="auto", precision="auto", prompt=None, rewards=None,
    )  # fmt: skip
    loop.hardware = SimpleNamespace(
        device=device, trainer_args=lambda: {"use_cpu": True, "bf16": False, "fp16": False}
    )
    return loop


def _fit_sft(loop, fits):
    import tempfile

    from rlvr.training_loop.phase import TrainOutcome

    outcome, warnings = TrainOutcome(model=None), []
    with tempfile.TemporaryDirectory() as tmp:
        args = loop.sft_phase.config(Path(tmp))
    args = loop.sft_phase.fit_to_device(args, SimpleNamespace(fits=fits, emit=warnings.append), outcome)
    return args, outcome, warnings


def test_sft_on_a_gpu_takes_cuda_batch_size_rows_in_proportionally_fewer_steps():
    """The same rows seen, the schedule's shape kept, the learning rate by the square-root rule;
    only on CUDA, only where the memory estimate of that SFT micro-batch fits."""
    asked = []
    args, outcome, _ = _fit_sft(
        _sft_loop("cuda", cuda_batch_size=64), lambda b, phase: asked.append((b, phase)) or True
    )
    assert asked == [(64, "sft")]
    assert (args.per_device_train_batch_size, args.max_steps) == (64, 160)
    assert args.learning_rate == pytest.approx(6e-4)
    assert (args.warmup_steps, args.save_steps) == (3, 40)
    assert outcome.micro_batches == {"sft": 64} and "16 rows x 640 steps" in outcome.hardware["sft_batch"]

    cpu, cpu_outcome, _ = _fit_sft(_sft_loop("cpu", cuda_batch_size=64), lambda b, phase: True)
    assert (cpu.per_device_train_batch_size, cpu.max_steps, cpu.learning_rate) == (16, 640, 3e-4)
    assert cpu_outcome.micro_batches == {}

    tight, _, warnings = _fit_sft(_sft_loop("cuda", cuda_batch_size=64), lambda b, phase: b <= 32)
    assert (tight.per_device_train_batch_size, tight.max_steps) == (16, 640)
    assert "does not fit" in warnings[0].message


def test_a_bad_sft_cuda_batch_size_is_named_with_its_fix():
    """Its type and bound are the SFT node's (rlvr.training_loop.settings), bound by the config gate
    against TrainingLoop's signature. Mutation: cuda_batch_size left out of the node -> red."""
    from tests.conftest import compose_config

    from rlvr.config.validation import check_targets
    from rlvr.pipeline.wiring import runtime_args

    def issues(value):
        cfg = compose_config([f"training_loop.sft.cuda_batch_size={value}"])
        return [i for i in check_targets(cfg, runtime_args(cfg)) if i.key.startswith("training_loop")]

    [bad] = issues("big")
    assert bad.key == "training_loop.sft.cuda_batch_size" and "expects int | None" in bad.problem
    [low] = issues(0)
    assert low.problem == "must be >= 1" and "null keeps" in low.fix
    assert issues("null") == [] and issues(64) == []


def test_a_cuda_evaluation_batch_is_what_half_the_free_memory_holds(monkeypatch):
    import torch

    from rlvr.evaluation.evaluator import cuda_batch

    config = SimpleNamespace(
        num_attention_heads=9, hidden_size=576, num_key_value_heads=3, num_hidden_layers=30, vocab_size=49152
    )
    model = SimpleNamespace(config=config, device="cuda:0")
    per_sequence = 2 * 30 * 192 * (512 + 16) * 2 + 49152 * 12
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (100 * per_sequence, 0))
    assert cuda_batch(model, 512, 16) == 50
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (10**15, 0))
    assert cuda_batch(model, 512, 16) == 512


def test_throughput_counts_tokens_over_step_time_and_mfu_against_the_gpu_peak():
    from rlvr.training_loop.throughput import peak_tflops, phase_throughput

    assert peak_tflops("NVIDIA H100 PCIe") == 756.0 and peak_tflops("NVIDIA H200") == 989.4
    assert peak_tflops("Some GPU") is None and peak_tflops(None) is None
    config = SimpleNamespace(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
        intermediate_size=128, vocab_size=1000,
    )  # fmt: skip
    n = 2 * (64 * 16 * 16 + 3 * 64 * 128) + 1000 * 64
    rows = [
        {"step": 1, "sft/step_seconds": 9.0},  # no earlier token count: warm-up, left out
        {"step": 2, "sft/step_seconds": 1.0, "sft/tokens_per_second": 1000.0},
        {"step": 3, "sft/step_seconds": 3.0, "sft/tokens_per_second": 2000.0},
    ]
    got = phase_throughput(rows, "sft", config, frozen_base=False, device_name="NVIDIA H200")
    assert (got["tokens"], got["seconds"], got["tokens_per_second"]) == (7000, 4.0, 1750.0)
    assert got["flops_per_token_trained"] == 6 * n
    assert got["mfu"] == round(1750.0 * 6 * n / 989.4e12, 4)
    frozen = phase_throughput(rows, "sft", config, frozen_base=True, device_name=None)
    assert frozen["flops_per_token_trained"] == 4 * n and frozen["mfu"] is None
    grpo = [{k.replace("sft", "grpo"): v for k, v in r.items()} for r in rows]
    assert phase_throughput(grpo, "grpo", config, False, None)["flops_per_token_trained"] == 8 * n
    assert phase_throughput(rows, "grpo", config, False, None) is None
