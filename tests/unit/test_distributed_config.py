"""The distributed config group: a launch that does not match the config is refused before loading."""

from __future__ import annotations

import pytest
from tests.conftest import compose_config

from rlvr.distributed import Distributed, run_dir_issue, weights_sha256


@pytest.fixture
def launched(monkeypatch):
    """Pretend to be one rank of an `accelerate launch` with ``processes`` processes."""

    def set_env(processes: int, **flags: str) -> None:
        monkeypatch.setenv("WORLD_SIZE", str(processes))
        monkeypatch.setenv("RANK", "0")
        for name in ("ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED"):
            monkeypatch.delenv(name, raising=False)
        for name, value in flags.items():
            monkeypatch.setenv(name, value)

    return set_env


def component(option: str) -> Distributed:
    cfg = compose_config([f"distributed={option}"])
    return Distributed(cfg.distributed.accelerate_config)


def test_every_option_names_an_accelerate_file_of_its_strategy():
    expected = {
        "single": "NO",
        "ddp": "MULTI_GPU",
        "ddp_cpu": "MULTI_GPU",  # accelerate starts CPU processes with torchrun only under this type
        "fsdp": "FSDP",
        "deepspeed_zero2": "DEEPSPEED",
        "deepspeed_zero3": "DEEPSPEED",
    }
    for option, strategy in expected.items():
        assert component(option).strategy == strategy, option
    assert component("deepspeed_zero3").settings()["deepspeed_config"]["zero_stage"] == 3


def test_a_matching_launch_passes(launched):
    launched(2)
    assert component("ddp_cpu").validate() == []
    launched(1)
    assert component("single").validate() == []


@pytest.mark.parametrize(
    ("option", "processes", "flags", "words"),
    [
        ("single", 2, {}, "launched as 2 processes but distributed=single"),
        ("ddp", 1, {}, "single process (started without accelerate launch)"),
        ("ddp", 2, {"ACCELERATE_USE_FSDP": "true"}, "launched as ['FSDP']"),
        ("fsdp", 2, {"ACCELERATE_USE_FSDP": "true"}, "shards the weights"),
        ("deepspeed_zero3", 2, {"ACCELERATE_USE_DEEPSPEED": "true"}, "shards the weights"),
    ],
)
def test_a_launch_that_does_not_match_is_refused(launched, option, processes, flags, words):
    launched(processes, **flags)
    issues = component(option).validate()
    assert any(words in i.problem for i in issues), [str(i) for i in issues]
    assert all(i.key.startswith("distributed") and i.fix for i in issues)


def test_deepspeed_zero2_keeps_the_weights_replicated_and_needs_the_package(launched):
    import importlib.util

    launched(2, ACCELERATE_USE_DEEPSPEED="true")
    problems = [i.problem for i in component("deepspeed_zero2").validate()]
    assert not any("shards the weights" in p for p in problems)
    assert any("deepspeed package" in p for p in problems) == (importlib.util.find_spec("deepspeed") is None)


def test_a_multi_process_launch_must_name_its_run_directory(launched):
    launched(2)
    issue = run_dir_issue(["experiment=smoke"])
    assert issue is not None and issue.key == "hydra.run.dir" and "hydra.run.dir=" in issue.fix
    assert run_dir_issue(["experiment=smoke", "hydra.run.dir=outputs/x"]) is None
    launched(1)
    assert run_dir_issue(["experiment=smoke"]) is None


def test_the_weights_hash_sees_every_parameter_and_buffer():
    import torch

    model = torch.nn.BatchNorm1d(3)
    before = weights_sha256(model)
    assert weights_sha256(model) == before
    model.running_mean[0] += 1e-7  # a buffer
    assert weights_sha256(model) != before
    model.running_mean[0] -= 1e-7
    model.weight.data[1] = torch.nextafter(model.weight.data[1], torch.tensor(2.0))  # one ulp
    assert weights_sha256(model) != before


@pytest.mark.parametrize(
    ("option", "flag"),
    [
        ("fsdp", "ACCELERATE_USE_FSDP"),
        ("deepspeed_zero2", "ACCELERATE_USE_DEEPSPEED"),
        ("deepspeed_zero3", "ACCELERATE_USE_DEEPSPEED"),
    ],
)
def test_fsdp_and_deepspeed_are_refused_without_a_gpu(launched, monkeypatch, option, flag):
    """On a CPU accelerate 1.15 turns these launches into plain DDP (MULTI_CPU): refused, not run as
    something else. With a GPU this refusal is absent (the others, e.g. sharded weights, stay)."""
    import rlvr.distributed as d

    launched(2, **{flag: "true"})
    monkeypatch.setattr(d, "_cuda", lambda: False)
    assert any("needs a GPU" in i.problem and "ddp_cpu" in i.fix for i in component(option).validate())
    monkeypatch.setattr(d, "_cuda", lambda: True)
    assert not any("needs a GPU" in i.problem for i in component(option).validate())
