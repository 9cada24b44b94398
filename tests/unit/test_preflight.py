"""The memory check's estimate with the published sizes of Qwen2.5 0.5B, 1.5B and 7B (rlvr.model.memory)."""

from __future__ import annotations

import pytest
from tests.conftest import SIGNAL

from rlvr.model.memory import PUBLISHED, Plan, Shape, batch_issue, check, estimate, peak

QWEN = {size: PUBLISHED[f"Qwen/Qwen2.5-{size}-Instruct"] for size in ("0.5B", "1.5B", "7B")}


def fits(size: str, plan: Plan, gb: float) -> bool:
    refusals, _ = check(QWEN[size], plan, gb, "cuda")
    return not refusals


@pytest.mark.parametrize(("gb", "batch"), [(24, 1), (80, 8)])
def test_7b_full_fine_tune_with_adamw_is_refused_on_24_and_80_gb(gb, batch):
    plan = Plan(dtype="bfloat16", batch=batch, prompt=256, completion=256)
    refusals, _ = check(QWEN["7B"], plan, gb, "cuda")
    (issue,) = refusals
    assert "does not fit" in issue.problem and "7.62B" in issue.problem
    assert "model.quantization=4bit" in issue.fix and "model.lora" in issue.fix


def test_7b_qlora_fits_24_gb():
    plan = Plan(
        quantization="4bit", lora_r=16, batch=4, prompt=256, completion=256, activation_checkpointing=True
    )
    assert fits("7B", plan, 24)
    weights = estimate(QWEN["7B"], plan, 24)["weights"]
    # ~0.52 bytes/param for the 4-bit body (3.2 GB); the untied embeddings and LM head (1.09B params)
    # in fp32 after PEFT's prepare_model_for_kbit_training (4.1 GB; 2.0 GB if they stayed 16-bit)
    assert 6.5 < weights < 8.0


def test_small_models_fit_where_expected():
    assert fits("0.5B", Plan(dtype="bfloat16", batch=8, prompt=256, completion=256), 24)
    assert fits("1.5B", Plan(dtype="bfloat16", lora_r=16, batch=8, prompt=256, completion=256), 24)
    assert not fits("1.5B", Plan(dtype="bfloat16", batch=16, prompt=512, completion=512), 24)
    long = Plan(dtype="bfloat16", batch=16, prompt=512, completion=512, activation_checkpointing=True)
    assert fits("1.5B", long, 24)


def test_full_fine_tune_state_is_what_adamw_needs():
    """transformers' Trainer runs torch's AdamW on the parameters as loaded: gradients and both
    moments in the parameter's dtype, no fp32 master copy; an fp32 model trained under bf16
    autocast also holds 16-bit copies of its weights."""
    params, gb = QWEN["1.5B"].params, 1024**3
    bf16 = estimate(QWEN["1.5B"], Plan(dtype="bfloat16", batch=1, prompt=8, completion=8), 80)
    assert bf16["weights"] == pytest.approx(params * 2 / gb)
    assert bf16["gradients"] == pytest.approx(params * 2 / gb)
    assert bf16["optimizer state"] == pytest.approx(params * 4 / gb)
    assert bf16["autocast copies"] == 0
    fp32 = estimate(QWEN["1.5B"], Plan(dtype="float32", batch=1, prompt=8, completion=8), 80)
    assert (fp32["weights"], fp32["gradients"], fp32["optimizer state"]) == pytest.approx(
        (params * 4 / gb, params * 4 / gb, params * 8 / gb)
    )
    assert fp32["autocast copies"] == pytest.approx(params * 2 / gb)
    fp32_plain = estimate(
        QWEN["1.5B"], Plan(dtype="float32", precision="fp32", batch=1, prompt=8, completion=8), 80
    )
    assert fp32_plain["autocast copies"] == 0


def test_vllm_colocate_reservation_counts_against_the_device():
    plan = Plan(
        dtype="bfloat16",
        lora_r=16,
        batch=8,
        prompt=256,
        completion=256,
        activation_checkpointing=True,
        vllm_fraction=0.5,
    )
    assert fits("1.5B", plan, 24)
    assert not fits("1.5B", Plan(**{**plan.__dict__, "vllm_fraction": 0.95}), 24)


def test_tight_fit_warns_with_the_numbers():
    plan = Plan(dtype="bfloat16", batch=8, prompt=256, completion=256)
    total = peak(estimate(QWEN["0.5B"], plan, 100))
    refusals, warnings = check(QWEN["0.5B"], plan, total / 0.95, "cuda")
    assert not refusals and "tight memory" in warnings[0] and "GB" in warnings[0]


def test_shape_from_a_config_matches_the_published_parameter_count():
    cfg = {"hidden_size": 896, "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
           "vocab_size": 151936, "intermediate_size": 4864, "tie_word_embeddings": True}  # fmt: skip
    assert Shape.from_config(cfg).params == pytest.approx(0.494e9, rel=0.02)


@pytest.mark.parametrize(
    ("per_device", "procs", "accum", "ok"),
    [(16, 1, 1, True), (4, 2, 1, True), (6, 1, 1, False), (3, 2, 1, False)],
)
def test_global_batch_must_hold_whole_groups(per_device, procs, accum, ok):
    issue = batch_issue(per_device, procs, accum, num_generations=8)
    assert (issue is None) is ok
    if issue:
        assert f"= {per_device * procs * accum}" in issue.problem and "num_generations=8" in issue.problem


class _Hardware:
    """A resolved training device for the estimate; TRL's config is built for this CPU-only machine."""

    def __init__(self, device: str):
        self.device = device

    def trainer_args(self) -> dict[str, bool]:
        return {"use_cpu": True, "bf16": False, "fp16": False}


def _components(device: str, sft: bool = True, grpo: bool = True):
    """A 7B full fine-tune: the model component's settings and a real TrainingLoop (its phases build the
    trl.SFTConfig / trl.GRPOConfig the memory check reads)."""
    from types import SimpleNamespace

    from rlvr.training_loop import TrainingLoop

    model = SimpleNamespace(name_or_path="Qwen/Qwen2.5-7B-Instruct", dtype="bfloat16", quantization=None,
                            lora=None, gradient_checkpointing=False)  # fmt: skip
    loop = TrainingLoop(sft={"enabled": sft, "max_length": 256}, rft={"enabled": False},
                    grpo={"enabled": grpo, "per_device_train_batch_size": 16, "num_generations": 8,
                          "max_completion_length": 256},
                    signal=SIGNAL, seed=0, device="auto", precision="auto", prompt=None, rewards=None)  # fmt: skip
    loop.hardware = _Hardware(device)
    return model, loop


def test_the_plan_reads_trl_s_own_config_defaults_included():
    """A field the run leaves out is TRL's default, read from trl.GRPOConfig / trl.SFTConfig."""
    import trl

    from rlvr.model import memory

    model, loop = _components("cuda")
    del loop.grpo_phase.trl_fields["per_device_train_batch_size"]
    args = memory.training_args(loop)
    assert isinstance(args, trl.GRPOConfig)
    default = trl.GRPOConfig.__dataclass_fields__["per_device_train_batch_size"].default
    assert memory.plan_of(model, args, 1).batch == default
    model, loop = _components("cuda", grpo=False)
    args = memory.training_args(loop)
    plan = memory.plan_of(model, args, 1)
    assert isinstance(args, trl.SFTConfig) and plan.prompt + plan.completion == 256


def test_packed_sft_rows_are_bins_of_max_length_tokens():
    """Packing fills each row of the micro-batch to max_length with whole rows: the plan counts full
    bins, not the data's longest prompt and answer. Mutation: no packing branch in plan_of -> red."""
    from rlvr.model import memory

    model, loop = _components("cuda", grpo=False)
    short = (40, 6)  # the data's longest prompt and answer, in tokens
    padded = memory.plan_of(model, memory.training_args(loop), 1, lengths=short)
    assert padded.prompt + padded.completion == 40 + 6 + memory.ANSWER_MARKERS
    model, loop = _components("cuda", grpo=False)  # a phase's TRL config is built once: a new loop
    loop.sft_phase.trl_fields.update(packing=True, max_length=1024)
    packed = memory.plan_of(model, memory.training_args(loop), 1, lengths=short)
    assert packed.prompt + packed.completion == 1024


def test_a_gpu_that_cannot_hold_the_run_refuses_it_and_a_cpu_only_warns_while_swap_can_hold_it(monkeypatch):
    from rlvr.model import memory

    monkeypatch.setattr(memory, "device_memory_gb", lambda device: 24.0)
    monkeypatch.setattr(memory, "swap_gb", lambda: 1000.0)
    refusals, _ = memory.run_checks(*_components("cuda"))
    assert [i.key for i in refusals] == ["model"]
    refusals, warnings = memory.run_checks(*_components("cpu"))
    assert refusals == [] and "does not fit" in warnings[0]
    assert memory.run_checks(*_components("cuda", sft=False, grpo=False)) == ([], [])  # evaluation only


def test_a_cpu_run_beyond_ram_plus_swap_is_refused_before_loading(monkeypatch):
    """The attack: a model whose config claims absurd sizes; on a CPU the estimate only warned and
    loading went on allocating. Mutation: the CPU branch back to warn-only (no ``hard`` check) -> red."""
    from rlvr.model import memory

    monkeypatch.setattr(memory, "device_memory_gb", lambda device: 24.0)
    monkeypatch.setattr(memory, "swap_gb", lambda: 8.0)
    refusals, warnings = memory.run_checks(*_components("cpu"))  # a 7B full fine-tune: > 32 GB
    assert [i.key for i in refusals] == ["model"] and warnings == []
    assert "does not fit" in refusals[0].problem and "32 GB cpu (its RAM plus swap)" in refusals[0].problem
    assert "LoRA" in refusals[0].fix


def test_sharding_divides_what_each_strategy_shards_by_the_processes():
    """ZeRO paper stages: ZeRO-2 shards gradients + optimizer state; FSDP / ZeRO-3 the weights too,
    and rank 0 then holds a full 16-bit copy while it evaluates or saves."""
    params, gb = QWEN["7B"].params, 1024**3
    plan = Plan(dtype="bfloat16", batch=1, prompt=4, completion=4, processes=8)
    ddp = estimate(QWEN["7B"], plan, 80)
    zero2 = estimate(QWEN["7B"], Plan(**{**plan.__dict__, "shard": "optimizer"}), 80)
    zero3 = estimate(QWEN["7B"], Plan(**{**plan.__dict__, "shard": "weights"}), 80)
    assert ddp["weights"] == zero2["weights"] == pytest.approx(params * 2 / gb)
    for term, per_param in (("gradients", 2), ("optimizer state", 4)):
        assert ddp[term] == pytest.approx(params * per_param / gb)
        assert zero2[term] == zero3[term] == pytest.approx(params * per_param / 8 / gb)
    assert zero3["weights"] == pytest.approx(params * 2 / 8 / gb)
    assert zero3["rank-0 full-weight copy"] == pytest.approx(params * 2 / gb)
    assert "rank-0 full-weight copy" not in zero2 and "rank-0 full-weight copy" not in ddp
    # activations and the rollout KV cache are per process whatever the strategy
    for term in ("activations", "logits", "rollout KV cache"):
        assert ddp[term] == zero2[term] == zero3[term]
    # one process has nothing to shard across
    single = estimate(
        QWEN["7B"], Plan(dtype="bfloat16", batch=1, prompt=4, completion=4, shard="weights"), 80
    )
    assert single["weights"] == ddp["weights"] and "rank-0 full-weight copy" not in single


def test_a_7b_full_fine_tune_fits_8_80gb_gpus_only_when_the_optimizer_state_is_sharded():
    ddp = Plan(
        dtype="bfloat16", batch=16, prompt=512, completion=512, processes=8, activation_checkpointing=True
    )
    refusals, _ = check(QWEN["7B"], ddp, 48, "cuda")
    assert refusals and "distributed=fsdp or distributed=deepspeed_zero3" in refusals[0].fix
    # ZeRO-2 sheds 7/8 of the 6 bytes/param of gradients + AdamW state: enough on 48 GB cards
    assert fits("7B", Plan(**{**ddp.__dict__, "shard": "optimizer"}), 48)
    assert fits("7B", Plan(**{**ddp.__dict__, "shard": "weights"}), 48)
    # on 24 GB GPUs the full 16-bit copy rank 0 evaluates (14.2 GB) plus the shards does not fit
    assert not fits("7B", Plan(**{**ddp.__dict__, "shard": "weights"}), 24)


@pytest.mark.parametrize(
    ("option", "flag", "shard"),
    [("ddp", None, None), ("deepspeed_zero2", "ACCELERATE_USE_DEEPSPEED", "optimizer"),
     ("deepspeed_zero3", "ACCELERATE_USE_DEEPSPEED", "weights"), ("fsdp", "ACCELERATE_USE_FSDP", "weights")],
)  # fmt: skip
def test_the_memory_check_reads_the_sharding_from_the_distributed_setup(monkeypatch, option, flag, shard):
    from tests.conftest import compose_config

    from rlvr.model import memory
    from rlvr.runtime.distributed import Distributed

    setup = Distributed(compose_config([f"distributed={option}"]).distributed.accelerate_config)
    assert memory.shard_of(setup) == shard
    model, loop = _components("cuda")
    loop.grpo_phase.trl_fields["per_device_train_batch_size"] = 8
    # TRL's config, built here as in one process: with WORLD_SIZE set it would join a process group.
    configs = memory.phase_configs(loop)
    monkeypatch.setattr(memory, "training_args", lambda loop: configs["grpo"])
    monkeypatch.setattr(memory, "phase_configs", lambda loop: configs)
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setattr(memory, "device_memory_gb", lambda device: 80.0)
    plans = []
    monkeypatch.setattr(memory, "check", lambda shape, plan, *a, **k: plans.append(plan) or ([], []))
    memory.run_checks(model, loop, setup)
    assert plans[0].shard == shard and plans[0].processes == 8


def test_the_run_records_the_memory_estimate_beside_the_cuda_peak(monkeypatch):
    """report.json ``memory``: the same estimate the memory check checks against (scripts/gpu_check.py
    compares it with the measured peak); a CPU run measured no CUDA peak and says so with None."""
    from rlvr.model import memory

    monkeypatch.setattr(memory, "device_memory_gb", lambda device: 80.0)
    model, loop = _components("cuda")
    record = memory.memory_record(model, loop)
    plans = [memory.plan_of(model, args, 1) for args in memory.phase_configs(loop).values()]
    terms = max((memory.estimate(QWEN["7B"], plan, 80.0) for plan in plans), key=peak)
    assert record["preflight_estimate_gb"] == round(peak(terms), 3) > 60  # a 7B full fine-tune
    assert record["preflight_terms_gb"]["weights"] == round(terms["weights"], 3)
    assert record["device_memory_gb"] == 80.0
    assert (
        record["cuda_peak_allocated_gb"] is None and record["cuda_peak_reserved_gb"] is None
    )  # no CUDA here
    nothing = memory.memory_record(*_components("cuda", sft=False, grpo=False))
    assert nothing["preflight_estimate_gb"] is None


def test_a_model_directory_with_an_absurd_layer_count_is_refused_on_this_machines_cpu(tmp_path):
    """The reviewer's attack as it came: a model directory whose config.json claims 100,000 layers
    (thousands of GB), judged against this machine's real RAM and swap. Mutation: the CPU branch
    back to warn-only -> red."""
    import json

    from rlvr.model import memory

    config = {"hidden_size": 576, "num_hidden_layers": 100_000, "num_attention_heads": 9,
              "num_key_value_heads": 3, "vocab_size": 49152, "intermediate_size": 1536}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    model, loop = _components("cpu")
    model.name_or_path = str(tmp_path)
    refusals, _ = memory.run_checks(model, loop)
    assert [i.key for i in refusals] == ["model"], refusals
    total = memory.device_memory_gb("cpu") + memory.swap_gb()
    assert f"on a {total:.0f} GB cpu (its RAM plus swap)" in refusals[0].problem


def test_a_named_card_replaces_this_machines_device_and_its_verdict_is_said_when_it_fits(monkeypatch):
    """runtime.memory.target: the 7B full fine-tune that this (pretend 1,000 GB) machine would hold is
    refused for an L4, and the same run as QLoRA fits it, said with the estimate and every term.
    Mutation: run_checks / summary ignoring ``card`` (this machine's memory again) -> red."""
    from rlvr.model import memory
    from rlvr.runtime.cards import CARDS

    monkeypatch.setattr(memory, "device_memory_gb", lambda device: 1000.0)
    monkeypatch.setattr(memory, "swap_gb", lambda: 0.0)
    model, loop = _components("cpu")
    assert memory.run_checks(model, loop) == ([], [])
    refusals, _ = memory.run_checks(model, loop, card=CARDS["L4-24GB"])
    (issue,) = refusals
    assert (
        issue.problem.startswith("does not fit: estimated peak")
        and "on the L4-24GB (22.03 GB" in issue.problem
    )
    assert "weights 14.2" in issue.problem and "optimizer state 28.4" in issue.problem
    assert "model.quantization=4bit" in issue.fix
    model.quantization, model.lora, model.gradient_checkpointing = "4bit", {"r": 16}, True
    assert memory.run_checks(model, loop, card=CARDS["L4-24GB"]) == ([], [])
    line = memory.summary(model, loop, card=CARDS["L4-24GB"])
    assert line.startswith(
        "memory check: fits on the L4-24GB (22.03 GB as PyTorch reports it): estimated peak"
    )
    assert "terms (GB): weights 7.4" in line and "activations" in line and "7.62B parameters" in line


def test_the_precision_is_the_one_auto_picks_on_the_card_not_on_this_machine(monkeypatch):
    """TRL's config is built for this CPU (fp32 here); on an H100 ``precision: auto`` trains in bf16,
    on a T4 (no bf16) in fp16, and a pinned precision stays. Mutation: no precision replacement for
    the card -> the plan says fp32 -> red."""
    from rlvr.model import memory
    from rlvr.runtime.cards import CARDS

    model, loop = _components("cpu")
    loop.precision = "auto"
    assert "tokens in bf16" in memory.summary(model, loop, card=CARDS["H100-80GB"])
    assert "tokens in fp16" in memory.summary(model, loop, card=CARDS["T4-16GB"])
    loop.precision = "fp32"
    assert "tokens in fp32" in memory.summary(model, loop, card=CARDS["H100-80GB"])


def test_the_7b_estimate_says_it_is_extrapolated_from_the_measured_shapes():
    """benchmarks/memory_preflight.md measured shapes up to Qwen2.5-1.5B: a 7B verdict says it goes
    4.9x beyond them, a 1.5B one that it rests on measurements. Mutation: describe() without the
    basis -> red."""
    plan = Plan(dtype="bfloat16", batch=8, prompt=256, completion=256)
    refusals, _ = check(QWEN["7B"], plan, 24, "cuda")
    assert "basis: extrapolated (4.9x the largest shape measured)" in refusals[0].problem
    assert "0.13-1.54B parameters measured on an H200" in refusals[0].problem
    assert "1.03-1.28x each measured peak" in refusals[0].problem
    refusals, _ = check(
        QWEN["1.5B"], Plan(dtype="bfloat16", batch=64, prompt=512, completion=512), 24, "cuda"
    )
    assert "basis: training steps of shape models" in refusals[0].problem
    assert "extrapolated" not in refusals[0].problem


@pytest.mark.parametrize(
    ("value", "name", "gb"),
    [("H100-80GB", "H100-80GB", 79.18), ("a100-40gb", "A100-40GB", 39.50), (48, "48 GB", 48.0),
     ("80GB", "80 GB", 80.0), (12.5, "12.5 GB", 12.5), (None, None, None)],
)  # fmt: skip
def test_a_target_is_a_known_card_or_a_size_in_gb(value, name, gb):
    from rlvr.runtime.cards import card_of

    card, issues = card_of(value)
    assert issues == [] and (card.name, card.memory_gb) == (name, gb) if card else (name is None)


@pytest.mark.parametrize(
    ("value", "rule"),
    [("H100", "not a known card"), ("RTX-4090", "not a known card"), (0, "must be > 0"), (True, "not a known card")],
)  # fmt: skip
def test_an_unknown_target_is_a_config_error_naming_every_known_card(value, rule):
    """Mutation: card_of returning None (this machine's device) for a name it does not know -> red."""
    from rlvr.runtime.cards import CARDS, KEY, card_of

    card, issues = card_of(value)
    (issue,) = issues
    assert card is None and issue.key == KEY == "runtime.memory.target" and issue.value == value
    assert rule in issue.problem
    assert all(name in issue.fix for name in CARDS) and f"{KEY}=48" in issue.fix
    if value == "H100":
        assert "did you mean 'H100-80GB'?" in issue.fix


# -- every weight a config declares (SECURITY.md "Run directories and checkpoints") -----------------
_DENSE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "vocab_size": 1000, "intermediate_size": 128, "tie_word_embeddings": True}  # fmt: skip
# (config.json additions, the weights of the MLPs and extra layers beyond the dense model's)
_H, _I, _L = 64, 128, 2
_ATTN = _H * 16 * (2 * 4 + 2 * 2)
MOE = {
    "Mixtral: num_local_experts of intermediate_size, a router": (
        {"num_local_experts": 8}, _L * 8 * (3 * _H * _I + _H) - _L * 3 * _H * _I),
    "Qwen-MoE: num_experts of moe_intermediate_size, a shared expert with its gate": (
        {"num_experts": 6, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 96},
        _L * (6 * (3 * _H * 32 + _H) + 3 * _H * 96 + _H) - _L * 3 * _H * _I),
    "DeepSeek: n_routed_experts, n_shared_experts, the first layer dense, one extra layer": (
        {"n_routed_experts": 4, "n_shared_experts": 2, "moe_intermediate_size": 32, "first_k_dense_replace": 1,
         "num_nextn_predict_layers": 1},
        2 * (4 * (3 * _H * 32 + _H) + 2 * 3 * _H * 32) - 3 * _H * _I + _ATTN + 2 * _H * _H),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(MOE))
def test_the_memory_check_counts_every_expert_shared_expert_and_extra_layer(tmp_path, case):
    import json

    from rlvr.model.memory import shape_of

    (tmp_path / "config.json").write_text(json.dumps(_DENSE))
    dense = shape_of(str(tmp_path)).params
    extra, more = MOE[case]
    (tmp_path / "config.json").write_text(json.dumps({**_DENSE, **extra}))
    assert shape_of(str(tmp_path)).params - dense == more


def test_a_model_folder_with_160000_experts_is_refused_before_loading(tmp_path):
    """The probe's model folder: 'configuration OK', then ~21 GB allocated. Mutation: experts not
    counted (mlp_params returns the dense MLP) -> red."""
    import json

    from rlvr.model import memory

    config = {"hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
              "vocab_size": 49152, "intermediate_size": 1536, "num_local_experts": 160_000}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    model, loop = _components("cpu")
    model.name_or_path = str(tmp_path)
    refusals, _ = memory.run_checks(model, loop)
    assert [i.key for i in refusals] == ["model"], refusals
    assert "does not fit" in refusals[0].problem


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"num_medusa_heads": 5}, "num_medusa_heads=5"),
        ({"kv_lora_rank": 512}, "kv_lora_rank=512"),
        ({"vision_config": {"hidden_size": 1024}}, "vision_config="),
        ({"num_experts": "160000"}, "num_experts is '160000'"),
        ({"num_experts": 1.6e5}, "num_experts is 160000.0"),
        ({"hidden_size": None}, "hidden_size is None"),
    ],
)
def test_weights_the_memory_check_cannot_count_are_refused_with_the_keys(tmp_path, extra, named):
    import json

    from rlvr.model import memory

    (tmp_path / "config.json").write_text(json.dumps({**_DENSE, **extra}))
    model, loop = _components("cpu")
    model.name_or_path = str(tmp_path)
    refusals, _ = memory.run_checks(model, loop)
    assert [i.key for i in refusals] == ["model.name_or_path"], refusals
    problem = refusals[0].problem
    assert named in problem and ("cannot count" in problem or "whole number" in problem), problem
    assert refusals[0].value == str(tmp_path) and "config.json" in refusals[0].fix


# Issue 56 item 2: the memory check plans at the lengths the run will use, says which, and names what fits.


def _seven_b_lora_grpo(completion: int):
    """The plan of issue 56: Qwen2.5-7B, LoRA r=16, gradient checkpointing, GRPO micro-batch 16."""
    model, loop = _components("cuda", sft=False)
    model.lora, model.gradient_checkpointing = {"r": 16}, True
    loop.grpo_phase.trl_fields["max_completion_length"] = completion
    return model, loop


def test_the_plan_takes_the_configured_completion_length_and_says_where_each_length_comes_from():
    """Mutation: plan_of with a fixed completion (the default task's 16) -> red; without the lengths'
    sources in _plan_text -> red."""
    from rlvr.model import memory
    from rlvr.runtime.cards import CARDS

    model, loop = _seven_b_lora_grpo(1024)
    plan = memory.plan_of(model, memory.training_args(loop), 1)
    assert (plan.prompt, plan.completion) == (memory.PROMPT_BUDGET, 1024)
    assert plan.completion_from == "training_loop.grpo.max_completion_length"
    assert plan.prompt_from.startswith("a 256-token bound until the data is loaded")
    measured = memory.plan_of(model, memory.training_args(loop), 1, lengths=(93, 4))
    assert measured.prompt == 93 and measured.prompt_from.startswith("the longest training prompt")
    refusals, _ = memory.run_checks(model, loop, card=CARDS["L4-24GB"])
    assert "(256 prompt + 1024 completion) tokens in bf16 (the grpo phase; prompt: a 256-token bound" in (
        refusals[0].problem
    )
    assert "completion: training_loop.grpo.max_completion_length)" in refusals[0].problem


def test_a_plan_that_does_not_fit_a_card_names_levers_that_each_fit_it():
    """The 7B LoRA GRPO plan fits an L4 at 16 completion tokens and not at 1,024, where the fix named
    only 4-bit (which alone does not fit) and "a smaller batch or max_completion_length". Each lever
    named now fits, with its number; the longest completion that fits is the edge. Mutation: check()
    back to the fixed list of fixes -> red; longest_completion off by one -> red."""
    import dataclasses

    from rlvr.model import memory
    from rlvr.runtime.cards import CARDS

    l4 = CARDS["L4-24GB"]
    model, loop = _seven_b_lora_grpo(16)
    assert memory.run_checks(model, loop, card=l4) == ([], [])
    line = memory.summary(model, loop, card=l4)
    model, loop = _seven_b_lora_grpo(1024)
    shape, plan, _, gb = memory._estimate_inputs(model, loop, None, 1, card=l4)
    longest = memory.longest_completion(shape, plan, gb, gb)
    assert f"longest completion that fits at this micro-batch: {longest:,} tokens" in line
    assert memory.peak(memory.estimate(shape, dataclasses.replace(plan, completion=longest), gb)) <= gb
    assert memory.peak(memory.estimate(shape, dataclasses.replace(plan, completion=longest + 1), gb)) > gb
    (issue,) = memory.run_checks(model, loop, card=l4)[0]
    assert "model.quantization=4bit" not in issue.fix  # QLoRA alone does not fit 1,024 tokens here
    half = dataclasses.replace(plan, batch=8)
    assert memory.peak(memory.estimate(shape, half, gb)) <= gb
    assert (
        "training_loop.grpo.per_device_train_batch_size=8 with 2x its gradient_accumulation_steps"
        in issue.fix
    )
    assert f"training_loop.grpo.max_completion_length={longest}: 22.0 GB" in issue.fix
    assert "a card of 25.7 GB or more (the smallest listed: RTX5090-32GB)" in issue.fix


def test_when_no_one_setting_is_enough_the_switches_are_named_together():
    """A 7B full fine-tune at 1,024 tokens on an L4: no single switch fits; checkpointing + LoRA +
    4-bit together with a smaller micro-batch (or completion) does."""
    from rlvr.model import memory
    from rlvr.runtime.cards import CARDS

    model, loop = _components("cuda", sft=False)
    loop.grpo_phase.trl_fields["max_completion_length"] = 1024
    (issue,) = memory.run_checks(model, loop, card=CARDS["L4-24GB"])[0]
    together = "model.gradient_checkpointing=true + model.lora={r: 16} + model.quantization=4bit"
    assert issue.fix.startswith(f"each of these fits (estimated peak): {together}")
    assert "+ training_loop.grpo.per_device_train_batch_size=" in issue.fix


def test_an_rft_phase_is_planned_with_its_sampled_completions():
    """RFT fine-tunes on completions it sampled (up to max_new_tokens) and samples
    max(batch_size, samples_per_prompt) sequences at once. Mutation: "rft" left out of phase_configs
    -> no plan for an RFT-only run -> red."""
    from rlvr.model import memory
    from rlvr.runtime.cards import CARDS
    from rlvr.training_loop import TrainingLoop

    model, _ = _components("cuda")
    rft = {"enabled": True, "rounds": 2, "prompts_per_round": 8, "samples_per_prompt": 8, "max_per_prompt": 2,
           "steps_per_round": 2, "temperature": 1.0, "max_new_tokens": 96, "batch_size": 32, "max_length": 512,
           "per_device_train_batch_size": 4}  # fmt: skip
    loop = TrainingLoop(sft={"enabled": False}, rft=rft, grpo={"enabled": False}, signal=SIGNAL, seed=0,
                        device="auto", precision="auto", prompt=None, rewards=None)  # fmt: skip
    loop.hardware = _Hardware("cuda")
    _, plan, _, _ = memory._estimate_inputs(model, loop, None, 1, lengths=(100, 5), card=CARDS["H100-80GB"])
    assert (plan.phase, plan.batch, plan.prompt, plan.completion) == ("rft", 4, 100, 96)
    assert plan.generation_batch == 32 and plan.completion_from == "training_loop.rft.max_new_tokens"
