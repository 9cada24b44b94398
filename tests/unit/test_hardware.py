"""Device and precision follow the machine unless pinned; TRL's bf16 default never reaches a CPU that
runs bf16 ~100x slower (rlvr.runtime.hardware)."""

from __future__ import annotations

import pytest
from tests.conftest import make_loop

from rlvr.runtime import hardware


@pytest.fixture
def machine(monkeypatch):
    """Pretend to be a machine with the given CUDA / bf16 abilities."""

    def set_machine(cuda: bool = False, cuda_bf16: bool = False, cpu_bf16: bool = False) -> None:
        monkeypatch.setattr(hardware, "cuda_available", lambda: cuda)
        monkeypatch.setattr(hardware, "cuda_bf16", lambda: cuda and cuda_bf16)
        monkeypatch.setattr(hardware, "cpu_native_bf16", lambda: cpu_bf16)

    return set_machine


@pytest.mark.parametrize(
    ("abilities", "device", "precision"),
    [
        ({}, "cpu", "fp32"),  # AVX2-only CPU: TRL would have chosen bf16
        ({"cpu_bf16": True}, "cpu", "bf16"),  # AMX / AVX512-BF16
        ({"cuda": True, "cuda_bf16": True}, "cuda", "bf16"),
        ({"cuda": True}, "cuda", "fp16"),  # e.g. a T4 or V100
    ],
)
def test_auto_follows_the_machine(machine, abilities, device, precision):
    machine(**abilities)
    chosen = hardware.resolve("auto", "auto")
    assert (chosen.device, chosen.precision) == (device, precision)
    assert chosen.reason.startswith("auto")


def test_the_choice_reaches_both_trl_configs(machine, tmp_path):
    machine()  # no bf16 anywhere
    loop = make_loop(sft={"max_steps": 1}, grpo={"max_steps": 1})
    for args in (loop.sft_phase.config(tmp_path), loop.grpo_phase.config(tmp_path)):
        assert (args.bf16, args.fp16, args.use_cpu) == (False, False, True)
    machine(cpu_bf16=True)
    loop = make_loop(sft={"max_steps": 1}, grpo={"max_steps": 1})
    for args in (loop.sft_phase.config(tmp_path), loop.grpo_phase.config(tmp_path)):
        assert (args.bf16, args.use_cpu) == (True, True)


def test_a_pinned_precision_is_kept_and_warned_about(machine):
    machine()
    loop = make_loop(sft={"max_steps": 1}, grpo={"max_steps": 1}, precision="bf16")
    assert loop.hardware.precision == "bf16"
    assert loop.validate() == []
    (message,) = hardware.warnings("auto", "bf16")
    assert "training_loop.precision=bf16" in message and "precision=auto" in message


@pytest.mark.parametrize(
    ("device", "precision", "key"),
    [
        ("cuda", "auto", "training_loop.device"),  # no GPU visible
        ("auto", "fp16", "training_loop.precision"),  # fp16 autocast needs CUDA
    ],
)
def test_settings_this_machine_cannot_honour_are_refused(machine, device, precision, key):
    machine()
    issues = make_loop(sft={}, grpo={}, device=device, precision=precision).validate()
    assert [i.key for i in issues] == [key]
    assert "set" in issues[0].fix


@pytest.mark.parametrize(
    ("device", "precision", "key"),
    [("gpu", "auto", "training_loop.device"), ("auto", "float16", "training_loop.precision")],
)
def test_a_device_or_precision_outside_the_choices_is_the_types_once(machine, device, precision, key):
    """The choices are the types TrainingLoop declares (hardware.Device, hardware.Precision): the
    config gate's binding names the key with the close choice; the loop's own check does not repeat it.
    Mutation: the Literal annotation replaced by str -> red."""
    from tests.conftest import compose_config

    from rlvr.config.validation import check_targets
    from rlvr.pipeline.wiring import runtime_args

    machine()
    cfg = compose_config([f"training_loop.device={device}", f"training_loop.precision={precision}"])
    [issue] = [i for i in check_targets(cfg, runtime_args(cfg)) if i.key.startswith("training_loop")]
    assert issue.key == key and issue.problem.startswith("must be 'auto', ") and "did you mean" in issue.fix
    assert make_loop(sft={}, grpo={}, device=device, precision=precision).validate() == []


@pytest.mark.parametrize("name", ["bf16", "fp16", "use_cpu"])
def test_per_phase_hardware_keys_point_to_the_one_setting(machine, name):
    machine()
    issues = make_loop(sft={name: True}, grpo={}).validate()
    (issue,) = [i for i in issues if i.key == f"training_loop.sft.{name}"]
    assert "training_loop." in issue.fix


def test_place_moves_plain_models_and_leaves_quantised_ones(machine):
    import torch

    machine()
    loop = make_loop(sft={}, grpo={})
    model = torch.nn.Linear(2, 2)
    assert loop.place(model) is model and next(model.parameters()).device.type == "cpu"

    class Quantised(torch.nn.Linear):
        is_quantized = True

        def to(self, *args, **kwargs):  # a bitsandbytes model refuses .to(); place must not call it
            raise AssertionError("moved a quantised model")

    q = Quantised(2, 2)
    assert loop.place(q) is q


def test_cpu_native_bf16_reads_onednn():
    import torch

    hardware.cpu_native_bf16.cache_clear()
    assert hardware.cpu_native_bf16() == bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


class _Probe(__import__("torch").nn.Linear):
    """A layer that records whether its forward ran under CPU autocast, and at which dtype."""

    seen: list

    def forward(self, x):
        import torch

        self.seen.append(torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None)
        return super().forward(x)


def _probe():
    layer = _Probe(4, 4)
    layer.seen = []
    return layer


@pytest.mark.parametrize(("abilities", "wraps"), [({"cpu_bf16": True}, True), ({}, False)])
def test_a_placed_model_evaluates_at_the_precision_it_trains_in(machine, abilities, wraps):
    """Placement gives an fp32 model that trains in bf16 the autocast forward its first trainer would
    (accelerate's), so the baseline evaluation runs at the precision of every evaluation after
    training; outputs come back in fp32 as accelerate's do. On an fp32 machine nothing changes.
    Mutation: place() without evaluate_at_training_precision -> red (bf16 case)."""
    import torch

    machine(**abilities)
    layer = make_loop(sft={"max_steps": 1}, grpo={"max_steps": 1}).place(_probe())
    out = layer(torch.ones(2, 4))
    assert layer.seen == [torch.bfloat16 if wraps else None]
    assert out.dtype == torch.float32 and hasattr(layer, "_original_forward") is wraps


def test_the_training_precision_forward_is_put_on_once_and_only_on_fp32_weights():
    """A model a trainer has wrapped already (accelerate's _original_forward) is left as it is; so is
    one whose weights are bf16 already (nothing to autocast), and an fp32 precision. Mutation: the
    _original_forward check dropped -> red (wrapped twice)."""
    import torch

    from rlvr.training_loop.loop import evaluate_at_training_precision

    bf16 = hardware.Hardware("cpu", "bf16", "pinned")
    layer = _probe()
    assert evaluate_at_training_precision(layer, bf16) is True
    first = layer.forward
    assert evaluate_at_training_precision(layer, bf16) is False and layer.forward is first
    assert evaluate_at_training_precision(_probe().to(torch.bfloat16), bf16) is False
    assert evaluate_at_training_precision(_probe(), hardware.Hardware("cpu", "fp32", "auto")) is False
