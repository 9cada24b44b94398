"""The distributed config group: a launch that does not match the config is refused before loading."""

from __future__ import annotations

import pytest
from tests.conftest import compose_config

from rlvr.runtime.distributed import Distributed, unnamed_run_dir_issue, weights_sha256


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
    ],
)
def test_a_launch_that_does_not_match_is_refused(launched, option, processes, flags, words):
    launched(processes, **flags)
    issues = component(option).validate()
    assert any(words in i.problem for i in issues), [str(i) for i in issues]
    assert all(i.key.startswith("distributed") and i.fix for i in issues)


def test_deepspeed_needs_the_package(launched):
    import importlib.util

    launched(2, ACCELERATE_USE_DEEPSPEED="true")
    for option in ("deepspeed_zero2", "deepspeed_zero3"):
        problems = [i.problem for i in component(option).validate()]
        assert any("deepspeed package" in p for p in problems) == (
            importlib.util.find_spec("deepspeed") is None
        )


@pytest.mark.parametrize(
    ("option", "flag", "sharded"),
    [
        ("fsdp", "ACCELERATE_USE_FSDP", True),
        ("deepspeed_zero3", "ACCELERATE_USE_DEEPSPEED", True),
        ("deepspeed_zero2", "ACCELERATE_USE_DEEPSPEED", False),
        ("ddp", None, False),
    ],
)
def test_sharded_strategies_pass_on_a_gpu(launched, monkeypatch, option, flag, sharded):
    """FSDP and ZeRO-3 are no longer refused on a GPU: rank 0 evaluates and saves gathered weights
    (tests/unit/test_full_weights.py). Only the deepspeed package may be missing here."""
    import rlvr.runtime.distributed as d

    launched(2, **({flag: "true"} if flag else {}))
    monkeypatch.setattr(d, "_cuda", lambda: True)
    setup = component(option)
    assert setup.sharded is sharded
    assert [i.problem for i in setup.validate() if "deepspeed package" not in i.problem] == []


def test_zero3_without_the_16bit_gather_is_refused_naming_the_flag(launched, monkeypatch, tmp_path):
    from omegaconf import OmegaConf

    import rlvr.runtime.distributed as d

    settings = component("deepspeed_zero3").settings()
    settings["deepspeed_config"]["zero3_save_16bit_model"] = False
    path = tmp_path / "zero3.yaml"
    OmegaConf.save(OmegaConf.create(settings), path)
    launched(2, ACCELERATE_USE_DEEPSPEED="true")
    monkeypatch.setattr(d, "_cuda", lambda: True)
    (issue,) = [i for i in Distributed(str(path)).validate() if "deepspeed package" not in i.problem]
    assert issue.key.endswith("zero3_save_16bit_model)") and issue.value is False
    assert "zero3_save_16bit_model: true" in issue.fix


def test_a_multi_process_launch_must_name_its_run_directory(launched):
    launched(2)
    issue = unnamed_run_dir_issue(["experiment=smoke"])
    assert issue is not None and issue.key == "hydra.run.dir" and "hydra.run.dir=" in issue.fix
    assert unnamed_run_dir_issue(["experiment=smoke", "hydra.run.dir=outputs/x"]) is None
    launched(1)
    assert unnamed_run_dir_issue(["experiment=smoke"]) is None


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
    something else. With a GPU this refusal is absent."""
    import rlvr.runtime.distributed as d

    launched(2, **{flag: "true"})
    monkeypatch.setattr(d, "_cuda", lambda: False)
    assert any("needs a GPU" in i.problem and "ddp_cpu" in i.fix for i in component(option).validate())
    monkeypatch.setattr(d, "_cuda", lambda: True)
    assert not any("needs a GPU" in i.problem for i in component(option).validate())


def test_the_check_before_hydra_reports_the_run_directory_with_every_other_problem(launched, monkeypatch):
    """One call before Hydra (rlvr.config.gate.before_hydra): a multi-process launch without its run
    directory is named together with Hydra's own settings, and a misspelt key is held for the gate."""
    from pathlib import Path

    from rlvr.config import gate
    from rlvr.issues import ConfigValidationError

    script = Path(__file__).resolve().parents[2] / "run_pipeline.py"
    launched(2)
    with pytest.raises(ConfigValidationError) as exc:
        gate.before_hydra(["+hydra.job.env_set.X=1"], script, "conf", "config")
    keys = [i.key for i in exc.value.issues]
    assert keys[0] == "hydra.run.dir" and any(k.startswith("hydra.job.env_set") for k in keys[1:]), keys
    launched(1)
    argv, [held] = gate.before_hydra(["validate_only=true", "sed=1"], script, "conf", "config")
    assert argv == ["validate_only=true"]
    assert held.key == "sed" and "seed" in held.fix
