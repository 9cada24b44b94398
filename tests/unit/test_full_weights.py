"""Full weights on rank 0 under FSDP / ZeRO-3 (rlvr.runtime.distributed.Distributed.on_rank0, full_copy).

The gather itself (accelerate's ``get_state_dict`` on a sharded model) needs GPUs; it is replaced
here by a stand-in accelerator that records the call and hands rank 0 a real state dict, as FSDP's
rank0_only full state dict and ZeRO-3's 16-bit consolidation do. Everything after it runs for real:
the copy built from that state dict, its evaluation and its saving, and the verdict that rank 0
sends to the other ranks over a real 2-process gloo group.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

from rlvr.runtime.distributed import Distributed, full_copy, peer_lost

FSDP = "infrastructure/accelerate/fsdp.yaml"
TOKENS = torch.tensor([[1, 2, 3, 4, 5]])


def tiny_model(lora: bool = False):
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                         num_key_value_heads=1, vocab_size=64, tie_word_embeddings=True)  # fmt: skip
    model = AutoModelForCausalLM.from_config(config)
    if lora:
        from peft import LoraConfig, get_peft_model

        # init_lora_weights=False: a non-zero adapter, so a copy that lost it computes differently
        lora_config = LoraConfig(task_type="CAUSAL_LM", r=2, target_modules=["q_proj", "v_proj"],
                                 init_lora_weights=False)  # fmt: skip
        model = get_peft_model(model, lora_config)
    return model.eval()


def gathered(model) -> dict[str, torch.Tensor]:
    """What a gather delivers on rank 0: new tensors with the model's full weights."""
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


class StandInAccelerator:
    """Records get_state_dict calls; rank 0 gets the full state dict, the other ranks an empty one."""

    device = torch.device("cpu")

    def __init__(self, full: dict[str, torch.Tensor]):
        self.full, self.calls = full, []

    def get_state_dict(self, model):
        self.calls.append(model)
        return self.full if os.environ.get("RANK", "0") == "0" else {}


def sharded_setup(model, attach: bool = True):
    setup = Distributed(FSDP)
    accelerator = StandInAccelerator(gathered(model))
    trainer = SimpleNamespace(accelerator=accelerator, model_wrapped=object())
    if attach:
        setup.attach(trainer)
    return setup, trainer


@pytest.mark.parametrize("lora", [False, True])
def test_the_copy_of_a_gathered_state_dict_computes_what_the_model_computes(lora):
    model = tiny_model(lora)
    copy = full_copy(model, gathered(model), "cpu")
    assert copy is not model and type(copy).__name__ == type(model).__name__
    with torch.no_grad():
        assert torch.equal(copy(TOKENS).logits, model(TOKENS).logits)
    # non-persistent buffers (rotary frequencies) are not in a state dict: taken from the model
    assert not any(b.is_meta for _, b in copy.named_buffers())
    # the copy owns its weights: changing it does not change the model being trained
    next(copy.parameters()).data.add_(1.0)
    with torch.no_grad():
        assert not torch.equal(copy(TOKENS).logits, model(TOKENS).logits)


def test_a_tied_head_left_out_of_the_gather_is_tied_again():
    model = tiny_model()
    state = gathered(model)
    del state["lm_head.weight"]  # a gather may carry a tied tensor once
    copy = full_copy(model, state, "cpu")
    assert copy.lm_head.weight is copy.model.embed_tokens.weight
    with torch.no_grad():
        assert torch.equal(copy(TOKENS).logits, model(TOKENS).logits)


def test_a_state_dict_that_is_not_the_full_one_is_refused_by_name():
    model = tiny_model()
    state = gathered(model)
    del state["model.layers.1.mlp.up_proj.weight"]  # e.g. a shard instead of the full state dict
    with pytest.raises(RuntimeError, match=r"model\.layers\.1\.mlp\.up_proj\.weight"):
        full_copy(model, state, "cpu")


def test_rank0_evaluates_a_full_weight_copy_gathered_on_every_rank(monkeypatch):
    model = tiny_model(lora=True)
    with torch.no_grad():
        expected = model(TOKENS).logits
    seen = []

    def evaluate(full):
        with torch.no_grad():
            seen.append(torch.equal(full(TOKENS).logits, expected))
        return "result"

    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank, returns in (("0", "result"), ("1", None)):
        monkeypatch.setenv("RANK", rank)
        setup, trainer = sharded_setup(model)
        assert setup.sharded
        assert setup.on_rank0(model, evaluate, "evaluating final") == returns
        # every rank took part in the gather, on the trainer's prepared (sharded) model
        assert trainer.accelerator.calls == [trainer.model_wrapped]
    assert seen == [True]  # rank 0 alone evaluated, on the full weights


def test_rank0_saves_the_copy_and_its_adapter_holds_the_trained_weights(monkeypatch, tmp_path):
    from safetensors.torch import load_file

    model = tiny_model(lora=True)
    monkeypatch.setenv("RANK", "0")
    setup, _ = sharded_setup(model)
    setup.on_rank0(model, lambda full: full.save_pretrained(tmp_path), "saving the final model")
    saved = load_file(tmp_path / "adapter_model.safetensors")
    ours = {k: v for k, v in model.state_dict().items() if "lora_" in k}
    assert saved and len(saved) == len(ours)
    for name, tensor in saved.items():
        key = name.replace(".weight", ".default.weight")
        assert torch.equal(tensor, ours[key]), name


def test_replicated_strategies_do_not_gather(monkeypatch):
    """DDP and ZeRO-2 keep the whole weights on every rank: rank 0 works on the model itself."""
    model = tiny_model()
    monkeypatch.setenv("RANK", "0")
    for path in ("infrastructure/accelerate/ddp.yaml", "infrastructure/accelerate/deepspeed_zero2.yaml"):
        setup = Distributed(path)
        assert not setup.sharded
        assert setup.on_rank0(model, lambda full: full, "evaluating") is model


def test_before_any_trainer_rank0_evaluates_the_model_as_loaded(monkeypatch):
    """The baseline comes before FSDP has sharded anything (and without ZeRO-3's zero.Init every
    rank loaded the whole model): no gather, rank 0 evaluates the model itself."""
    model = tiny_model()
    monkeypatch.setenv("RANK", "0")
    assert Distributed(FSDP).on_rank0(model, lambda full: full, "evaluating baseline") is model


class ShardedLoop:
    """A training loop as TrainingLoop drives it under FSDP: the trainer is attached, then an
    in-training evaluation through the session (on every rank)."""

    def __init__(self, trainer):
        from rlvr.runtime.hardware import Hardware

        self.hardware = Hardware("cpu", "fp32", "a test")
        self.trainer = trainer

    def hardware_record(self):
        return self.hardware.record()

    def see_data(self, train, tokenizer):  # SFT's target: nothing to decide here
        return []

    def place(self, model):
        return model

    def run(self, model, session, resume=None):
        from rlvr.training_loop import TrainOutcome

        session.attach(self.trainer)
        session.on_weights(model, "grpo", 1)
        # A step after that evaluation: the final weights are new, evaluated rather than reused.
        return TrainOutcome(model=model, steps={"grpo": 2})


def run_with(tmp_path, model, setup, trainer) -> list:
    """The run (rlvr.pipeline.Run) to its end with ``setup`` as its distributed setup and a loop whose
    phase hands ``trainer`` over; returns the models the evaluator was given."""
    from tests.unit.test_orchestrator import Loaded, Recorder, make_run

    run = make_run(tmp_path / "run", ShardedLoop(trainer), {"rec": Recorder()})
    run.model.load = lambda: Loaded(model, SimpleNamespace(save_pretrained=lambda path: None))
    run.distributed = setup
    evaluated = []
    run.evaluation.evaluate = lambda m, *a, **k: evaluated.append(m) or make_result(a[2], a[3])
    assert run.run().status == "COMPLETED"
    return evaluated


@pytest.mark.parametrize("rank", ["0", "1"])
def test_a_sharded_run_evaluates_and_saves_gathered_copies_on_rank0(tmp_path, monkeypatch, rank):
    monkeypatch.setenv("RANK", rank)
    monkeypatch.setenv("WORLD_SIZE", "2")
    model = tiny_model()
    setup, trainer = sharded_setup(model, attach=False)  # the loop attaches it, as TrainingLoop does
    evaluated = run_with(tmp_path, model, setup, trainer)
    # every rank gathered for the in-training evaluation, the final one and the save
    assert len(trainer.accelerator.calls) == 3
    if rank == "1":
        assert evaluated == [] and not (tmp_path / "run" / "final").exists()
        return
    # baseline: the model as loaded; then full-weight copies
    assert evaluated[0] is model and all(m is not model for m in evaluated[1:]) and len(evaluated) == 3
    final = tmp_path / "run" / "final"
    assert (final / "model.safetensors").is_file() and not (final / "rank_weights.json").exists()
    from safetensors.torch import load_file

    saved = load_file(final / "model.safetensors")
    assert torch.equal(saved["model.layers.0.mlp.up_proj.weight"], model.model.layers[0].mlp.up_proj.weight)


def make_result(label, step):
    from tests.conftest import make_eval_result

    return make_eval_result(label, step, 1, 2)


def test_weights_partitioned_while_loading_are_gathered_with_deepspeeds_own_context(monkeypatch):
    """ZeRO-3's zero.Init can partition the weights as they load, before any trainer exists: then
    every rank enters deepspeed.zero.GatheredParameters (a stand-in module here: deepspeed is not
    installed on this CPU machine) over the partitioned parameters, and rank 0 evaluates inside it."""
    import sys

    entered = []

    class GatheredParameters:
        def __init__(self, params, modifier_rank):
            self.params, self.modifier_rank = params, modifier_rank

        def __enter__(self):
            entered.append((len(self.params), self.modifier_rank))

        def __exit__(self, *exc):
            entered.append("left")

    stand_in = SimpleNamespace(zero=SimpleNamespace(GatheredParameters=GatheredParameters))
    monkeypatch.setitem(sys.modules, "deepspeed", stand_in)
    model = torch.nn.Linear(2, 2)
    for p in model.parameters():
        p.ds_id = 0  # what ZeRO-3 partitioning marks a parameter with
    monkeypatch.setenv("WORLD_SIZE", "2")
    setup = Distributed("infrastructure/accelerate/deepspeed_zero3.yaml")
    for rank, returns in (("0", model), ("1", None)):
        monkeypatch.setenv("RANK", rank)
        inside: list = []

        def work(full, inside=inside):
            inside.append(entered[-1])  # what was entered when rank 0 worked
            return full

        assert setup.on_rank0(model, work, "evaluating") is returns
        assert inside == ([(2, None)] if rank == "0" else [])
    # both ranks gathered all (here 2) parameters for everyone (modifier_rank=None) and let go after
    assert entered == [(2, None), "left", (2, None), "left"]


def test_each_phase_tells_the_session_its_trainer_before_training(tmp_path):
    """In-training evaluations gather through the trainer of the phase that is running: the phase
    attaches it before train() starts (and so before its first evaluation callback)."""
    from tests.stand_in_run import StandInRun

    from rlvr.runtime.hardware import Hardware
    from rlvr.training_loop.loop import SFTPhase
    from rlvr.training_loop.phase import TrainOutcome

    attached = []

    class StandInTrainer:
        model = "trained"
        state = SimpleNamespace(global_step=3)

        def remove_callback(self, callback):
            pass

        def add_callback(self, callback):
            pass

        def train(self, resume_from_checkpoint=None):
            self.attached_before_train = list(attached)

    class Phase(SFTPhase):
        def trainer(self, model, args, session, callbacks):
            return StandInTrainer()

    hardware = Hardware("cpu", "fp32", "a test")
    phase = Phase({"max_steps": 3}, 0, lambda: hardware, prompt=None)
    session = StandInRun(None, None, lambda event: None, lambda *a: None, 0, tmp_path, attach=attached.append)
    outcome = TrainOutcome(model=None)
    assert phase.run(torch.nn.Linear(2, 2), session, outcome, None) == "trained"
    (trainer,) = attached
    assert isinstance(trainer, StandInTrainer) and trainer.attached_before_train == [trainer]


def test_a_quantised_base_under_weight_sharding_is_refused_before_loading():
    model = SimpleNamespace(quantization="4bit")
    (issue,) = Distributed(FSDP).model_issues(model)
    assert issue.key == "model.quantization" and issue.value == "4bit" and "deepspeed_zero2" in issue.fix
    assert Distributed("infrastructure/accelerate/deepspeed_zero2.yaml").model_issues(model) == []
    assert Distributed(FSDP).model_issues(SimpleNamespace(quantization=None)) == []
    assert Distributed(FSDP).model_issues(None) == []  # the model component could not be built


def test_a_zero2_run_evaluates_and_saves_the_model_itself_without_a_gather(tmp_path, monkeypatch):
    """ZeRO-2 keeps the whole 16-bit weights on every rank: the orchestrator takes the replicated
    path (no get_state_dict, the model itself evaluated and saved on rank 0)."""
    monkeypatch.setenv("RANK", "0")
    model = tiny_model()
    setup = Distributed("infrastructure/accelerate/deepspeed_zero2.yaml")
    trainer = SimpleNamespace(accelerator=StandInAccelerator(gathered(model)), model_wrapped=object())
    evaluated = run_with(tmp_path, model, setup, trainer)
    assert trainer.accelerator.calls == [] and len(evaluated) == 3 and all(m is model for m in evaluated)
    assert (tmp_path / "run" / "final" / "model.safetensors").is_file()


def test_a_stop_wrapped_by_a_library_is_still_a_peer_lost():
    """Seen under accelerate launch: the launcher's SIGTERM landed while TRL imported SFTTrainer
    lazily, and TRL re-raised it as RuntimeError('Failed to import ...') from our StoppedByLauncher;
    rank 0 must still say one line ("another process failed"), not print a second traceback."""
    from rlvr.runtime.distributed import StoppedByLauncher

    def wrapped() -> RuntimeError:
        try:
            try:
                raise StoppedByLauncher("rank 0 stopped by the launcher (SIGTERM)")
            except StoppedByLauncher as stop:
                raise RuntimeError("Failed to import trl.trainer.sft_trainer") from stop
        except RuntimeError as exc:
            return exc

    assert peer_lost(wrapped())
    assert not peer_lost(RuntimeError("Failed to import trl.trainer.sft_trainer: no module named x"))
