"""Pre-flight memory estimate with the published sizes of Qwen2.5 0.5B, 1.5B and 7B (rlvr.runtime.memory)."""

from __future__ import annotations

import pytest
from tests.conftest import SIGNAL

from rlvr.runtime.memory import PUBLISHED, Plan, Shape, batch_issue, check, estimate, peak

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
    """A 7B full fine-tune: the model component's settings and a real GRPOLoop (its phases build the
    trl.SFTConfig / trl.GRPOConfig the pre-flight reads)."""
    from types import SimpleNamespace

    from rlvr.training_loop import GRPOLoop

    model = SimpleNamespace(name_or_path="Qwen/Qwen2.5-7B-Instruct", dtype="bfloat16", quantization=None,
                            lora=None, gradient_checkpointing=False)  # fmt: skip
    loop = GRPOLoop(sft={"enabled": sft, "max_length": 256}, rft={"enabled": False},
                    grpo={"enabled": grpo, "per_device_train_batch_size": 16, "num_generations": 8,
                          "max_completion_length": 256},
                    signal=SIGNAL, seed=0, device="auto", precision="auto", prompt=None, rewards=None)  # fmt: skip
    loop.hardware = _Hardware(device)
    return model, loop


def test_the_plan_reads_trl_s_own_config_defaults_included():
    """A field the run leaves out is TRL's default, read from trl.GRPOConfig / trl.SFTConfig."""
    import trl

    from rlvr.runtime import memory as preflight

    model, loop = _components("cuda")
    del loop.grpo_phase.fields["per_device_train_batch_size"]
    args = preflight.training_args(loop)
    assert isinstance(args, trl.GRPOConfig)
    default = trl.GRPOConfig.__dataclass_fields__["per_device_train_batch_size"].default
    assert preflight.plan_of(model, args, 1).batch == default
    model, loop = _components("cuda", grpo=False)
    args = preflight.training_args(loop)
    plan = preflight.plan_of(model, args, 1)
    assert isinstance(args, trl.SFTConfig) and plan.prompt + plan.completion == 256


def test_a_gpu_that_cannot_hold_the_run_refuses_it_and_a_cpu_only_warns_while_swap_can_hold_it(monkeypatch):
    from rlvr.runtime import memory as preflight

    monkeypatch.setattr(preflight, "device_memory_gb", lambda device: 24.0)
    monkeypatch.setattr(preflight, "swap_gb", lambda: 1000.0)
    refusals, _ = preflight.run_checks(*_components("cuda"))
    assert [i.key for i in refusals] == ["model"]
    refusals, warnings = preflight.run_checks(*_components("cpu"))
    assert refusals == [] and "does not fit" in warnings[0]
    assert preflight.run_checks(*_components("cuda", sft=False, grpo=False)) == ([], [])  # evaluation only


def test_a_cpu_run_beyond_ram_plus_swap_is_refused_before_loading(monkeypatch):
    """The attack: a model whose config claims absurd sizes; on a CPU the estimate only warned and
    loading went on allocating. Mutation: the CPU branch back to warn-only (no ``hard`` check) -> red."""
    from rlvr.runtime import memory as preflight

    monkeypatch.setattr(preflight, "device_memory_gb", lambda device: 24.0)
    monkeypatch.setattr(preflight, "swap_gb", lambda: 8.0)
    refusals, warnings = preflight.run_checks(*_components("cpu"))  # a 7B full fine-tune: > 32 GB
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
def test_the_preflight_reads_the_sharding_from_the_distributed_setup(monkeypatch, option, flag, shard):
    from tests.conftest import compose_config

    from rlvr.runtime import memory as preflight
    from rlvr.runtime.distributed import Distributed

    setup = Distributed(compose_config([f"distributed={option}"]).distributed.accelerate_config)
    assert preflight.shard_of(setup) == shard
    model, loop = _components("cuda")
    loop.grpo_phase.fields["per_device_train_batch_size"] = 8
    # TRL's config, built here as in one process: with WORLD_SIZE set it would join a process group.
    configs = preflight.phase_configs(loop)
    monkeypatch.setattr(preflight, "training_args", lambda loop: configs["grpo"])
    monkeypatch.setattr(preflight, "phase_configs", lambda loop: configs)
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setattr(preflight, "device_memory_gb", lambda device: 80.0)
    plans = []
    monkeypatch.setattr(preflight, "check", lambda shape, plan, *a: plans.append(plan) or ([], []))
    preflight.run_checks(model, loop, setup)
    assert plans[0].shard == shard and plans[0].processes == 8


def test_the_run_records_the_preflight_estimate_beside_the_cuda_peak(monkeypatch):
    """report.json ``memory``: the same estimate the pre-flight checks against (scripts/gpu_check.py
    compares it with the measured peak); a CPU run measured no CUDA peak and says so with None."""
    from rlvr.runtime import memory as preflight

    monkeypatch.setattr(preflight, "device_memory_gb", lambda device: 80.0)
    model, loop = _components("cuda")
    record = preflight.memory_record(model, loop)
    plans = [preflight.plan_of(model, args, 1) for args in preflight.phase_configs(loop).values()]
    terms = max((preflight.estimate(QWEN["7B"], plan, 80.0) for plan in plans), key=peak)
    assert record["preflight_estimate_gb"] == round(peak(terms), 3) > 60  # a 7B full fine-tune
    assert record["preflight_terms_gb"]["weights"] == round(terms["weights"], 3)
    assert record["device_memory_gb"] == 80.0
    assert (
        record["cuda_peak_allocated_gb"] is None and record["cuda_peak_reserved_gb"] is None
    )  # no CUDA here
    nothing = preflight.memory_record(*_components("cuda", sft=False, grpo=False))
    assert nothing["preflight_estimate_gb"] is None


def test_a_model_directory_with_an_absurd_layer_count_is_refused_on_this_machines_cpu(tmp_path):
    """The reviewer's attack as it came: a model directory whose config.json claims 100,000 layers
    (thousands of GB), judged against this machine's real RAM and swap. Mutation: the CPU branch
    back to warn-only -> red."""
    import json

    from rlvr.runtime import memory as preflight

    config = {"hidden_size": 576, "num_hidden_layers": 100_000, "num_attention_heads": 9,
              "num_key_value_heads": 3, "vocab_size": 49152, "intermediate_size": 1536}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    model, loop = _components("cpu")
    model.name_or_path = str(tmp_path)
    refusals, _ = preflight.run_checks(model, loop)
    assert [i.key for i in refusals] == ["model"], refusals
    total = preflight.device_memory_gb("cpu") + preflight.swap_gb()
    assert f"on a {total:.0f} GB cpu (its RAM plus swap)" in refusals[0].problem
