"""DeepSpeed ZeRO-3's partitioned weights gathered for real by two gloo processes; the GPU
libraries' source checks are unit tests in tests/unit/test_gpu_libraries.py."""

from __future__ import annotations

import importlib.util

import pytest
from tests.locked_source import installed

pytestmark = pytest.mark.integration


@pytest.mark.long  # two gloo processes with DeepSpeed: ~2-3 minutes (make test-long, CI)
@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not in the CPU lock")
def test_zero3_partitioned_weights_are_gathered_for_real_with_gloo(monkeypatch):
    """deepspeed on the CPU (gloo, one process): weights partitioned by zero.Init are empty outside
    the gathering context, and rank 0's work in Distributed.on_rank0 sees the whole model."""
    import deepspeed
    import torch

    from rlvr.runtime.distributed import Distributed

    installed("deepspeed")  # the GPU lock's version
    for name, value in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29517",
        "RANK": "0",
        "LOCAL_RANK": "0",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("WORLD_SIZE", "1")
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    reference = torch.nn.Linear(4, 3)
    config = {"zero_optimization": {"stage": 3}, "train_micro_batch_size_per_gpu": 1}
    with deepspeed.zero.Init(config_dict_or_path=config):
        model = torch.nn.Linear(4, 3)
    with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=0):
        model.load_state_dict(reference.state_dict())
    assert model.weight.numel() == 0  # partitioned
    x = torch.ones(2, 4)
    try:
        setup = Distributed("infrastructure/accelerate/deepspeed_zero3.yaml")
        out = setup.on_rank0(model, lambda m: m(x), "evaluating")
    finally:
        torch.distributed.destroy_process_group()  # later tests in this worker expect none
    torch.testing.assert_close(out, reference(x))
