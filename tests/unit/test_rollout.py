"""The rollout config group reaches TRL's GRPOConfig, and vLLM rollouts are refused where they cannot run."""

from __future__ import annotations

import importlib.util

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from tests.conftest import CONF, loop_collaborators

from rlvr.runtime import hardware


def loop_for(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides))
    return instantiate(cfg.training_loop, _partial_=True)(**loop_collaborators())


@pytest.fixture
def gpu_machine(monkeypatch):
    """A machine with CUDA and vllm installed, as far as the checks can see."""
    monkeypatch.setattr(hardware, "cuda_available", lambda: True)
    monkeypatch.setattr(hardware, "cuda_bf16", lambda: True)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: object() if name == "vllm" else real(name, *a)
    )


def test_default_rollouts_use_transformers_generate(tmp_path):
    args = loop_for().grpo_phase.config(tmp_path)
    assert args.use_vllm is False


@pytest.mark.parametrize(
    ("rollout", "fields"),
    [
        (
            "vllm_colocate",
            {"vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.4, "vllm_tensor_parallel_size": 2},
        ),
        ("vllm_server", {"vllm_mode": "server", "vllm_server_host": "10.0.0.5", "vllm_server_port": 8001}),
    ],
)
def test_vllm_rollout_settings_reach_grpo_config(tmp_path, gpu_machine, rollout, fields):
    # fp32: transformers itself checks bf16 against the real (absent) GPU when it builds the config
    overrides = [f"rollout={rollout}", "training_loop.precision=fp32"]
    overrides += [f"training_loop.grpo.{k}={v}" for k, v in fields.items()]
    loop = loop_for(*overrides)
    assert [i for i in loop.validate() if "vllm" in i.key] == []
    args = loop.grpo_phase.config(tmp_path)
    assert args.use_vllm is True
    for name, value in fields.items():
        assert getattr(args, name) == value, name
    assert args.use_cpu is False  # the GPU's device


@pytest.mark.parametrize("rollout", ["vllm_colocate", "vllm_server"])
def test_vllm_rollouts_are_refused_without_cuda(monkeypatch, rollout):
    monkeypatch.setattr(hardware, "cuda_available", lambda: False)
    issues = loop_for(f"rollout={rollout}").validate()
    (issue,) = [i for i in issues if i.key == "training_loop.grpo.use_vllm"]
    assert "rollout=hf" in issue.fix
    # the reason names what fails on a CPU: TRL's colocate weight sync, or server mode's NCCL
    assert ("sync_weights" if rollout == "vllm_colocate" else "NCCL") in issue.problem


@pytest.mark.parametrize(
    ("fields", "env", "cards", "refused"),
    [
        ({}, {}, 1, True),  # the conf's host (0.0.0.0), a one-GPU host: the H200 lease's failure
        ({"vllm_server_host": "localhost"}, {}, 1, True),
        ({"+vllm_server_base_url": "http://127.0.0.1:8000"}, {}, 1, True),  # a key the conf leaves out
        ({}, {"CUDA_VISIBLE_DEVICES": "0"}, 1, False),  # the GPUs shared out by the user
        ({}, {}, 2, False),  # the server can have a GPU of its own
        ({"vllm_server_host": "10.0.0.5"}, {}, 1, False),  # another host
    ],
)
def test_a_vllm_server_sharing_the_only_gpu_is_refused(monkeypatch, gpu_machine, fields, env, cards, refused):
    """On an H200, `trl vllm-serve` and the trainer on one card failed in the server's NCCL weight
    transfer ("NCCL error: invalid usage") while the trainer retried until stopped
    (benchmarks/gpu_varlen_lease.md): refused at the gate instead. Mutation: the host, the
    CUDA_VISIBLE_DEVICES or the GPU-count rule dropped -> a False row goes red; the rule removed ->
    the True rows go red."""
    import torch

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: cards)
    overrides = ["rollout=vllm_server", "training_loop.precision=fp32"]
    overrides += [
        f"{k[:1] if k[0] == '+' else ''}training_loop.grpo.{k.lstrip('+')}={v}" for k, v in fields.items()
    ]
    found = [i for i in loop_for(*overrides).validate() if i.key == "training_loop.grpo.vllm_mode"]
    assert bool(found) is refused
    if refused:
        assert "NCCL error: invalid usage" in found[0].problem and "rollout=vllm_colocate" in found[0].fix
