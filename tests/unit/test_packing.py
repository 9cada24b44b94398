"""Padding-free and packed SFT (rlvr.training_loop.packing): the loss over the same rows is the padded
loss, computed by TRL's own SFTTrainer (its dataset preparation, collator and compute_loss) as the SFT
phase builds it, on the tiny model; the settings that cannot run are refused before anything loads;
a model whose attention would mix the rows of a padding-free batch is refused once loaded."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from tests.conftest import make_loop

from rlvr.training_loop import packing

ROWS = 12


@pytest.fixture(scope="module")
def tiny():
    from rlvr.model.loader import TinyRandomModel

    loaded = TinyRandomModel(hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128,
                             vocab_size=4096, seed=0, dtype="float32", lora=None).load()  # fmt: skip
    return loaded.model.eval(), loaded.tokenizer


def _rows():
    """Prompts and answers of different lengths, so the padded batch carries padding."""
    from datasets import Dataset

    return Dataset.from_list(
        [{"prompt": [{"role": "user", "content": f"What is {i} + {3 * i % 7}?" + " Think." * (i % 4)}],
          "answer": str(i + 3 * i % 7) * (1 + i % 3)} for i in range(ROWS)]
    )  # fmt: skip


def _loss(tmp_path: Path, tiny, **fields) -> torch.Tensor:
    """The loss of all rows in one batch, as the SFT phase's trainer computes it."""
    from tests.stand_in_run import StandInRun

    model, tokenizer = tiny
    loop = make_loop(sft={"enabled": True, "max_steps": 1, "per_device_train_batch_size": ROWS,
                          "max_length": 256, **fields}, grpo={"enabled": False})  # fmt: skip
    assert loop.sft_phase.validate() == []
    session = StandInRun(tokenizer=tokenizer, train_dataset=_rows(), emit=lambda e: None,
                      on_weights=lambda *a, **k: None, eval_every=0, run_dir=tmp_path)  # fmt: skip
    trainer = loop.sft_phase.trainer(model, loop.sft_phase.config(tmp_path), session, [])
    data = trainer.train_dataset
    batch = trainer.data_collator([data[i] for i in range(len(data))])
    assert ("position_ids" in batch) is packing.padding_free(trainer.args)
    with torch.no_grad():
        return trainer.compute_loss(model, dict(batch))


def test_padding_free_and_packed_losses_equal_the_padded_loss_on_the_same_rows(tmp_path, tiny):
    """The same 12 rows padded (one row each), padding-free (concatenated, position ids restarting
    at each row) and packed (bfd bins of 256 tokens, then concatenated): one loss to float32 rounding
    (1e-5 of it; the two differed by under 1e-6 here)."""
    padded = _loss(tmp_path / "padded", tiny)
    free = _loss(tmp_path / "free", tiny, padding_free=True, max_length=None)
    packed = _loss(tmp_path / "packed", tiny, packing=True)
    assert free.item() == pytest.approx(padded.item(), rel=1e-5, abs=0)
    assert packed.item() == pytest.approx(padded.item(), rel=1e-5, abs=0)


def test_the_equality_is_not_free_position_ids_that_do_not_restart_change_the_loss(
    tmp_path, tiny, monkeypatch
):
    """The control that makes the test above worth its name: TRL's collator with position ids
    counting on across rows (the packing bug) gives another loss, so equality means the rows were
    kept apart. Mutation: any break of the per-row restart -> the test above goes red like this."""
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    padded = _loss(tmp_path / "padded", tiny)

    def running_positions(lengths):
        total = sum(sum(row) for row in lengths)
        return list(torch.arange(total).split([sum(row) for row in lengths]))

    monkeypatch.setattr(DataCollatorForLanguageModeling, "get_position_ids_from_packed_seq_lengths",
                        staticmethod(running_positions))  # fmt: skip
    broken = _loss(tmp_path / "packed", tiny, packing=True)
    # the equality above allows 1e-5 of the loss; rows that see each other move it 10x that at least
    # (a random 2-layer model's near-uniform logits move little: 6e-3 of 8.28 here)
    assert abs(broken.item() - padded.item()) > 10 * 1e-5 * padded.item()


@pytest.mark.parametrize(
    ("fields", "key", "value", "rule", "fix"),
    [({"padding_free": True}, "training_loop.sft.padding_free", True, "refuses max_length (256)",
      "training_loop.sft.max_length=null"),
     ({"packing": True, "max_length": None}, "training_loop.sft.packing", True, "max_length is null",
      "training_loop.sft.max_length to the bin size"),
     ({"packing": True, "packing_strategy": "wrapped"}, "training_loop.sft.packing_strategy", "wrapped",
      "apart from its question", "packing_strategy=bfd"),
     ({"packing": True, "packing_strategy": "bfd_split"}, "training_loop.sft.packing_strategy", "bfd_split",
      "apart from its question", "packing_strategy=bfd")],
)  # fmt: skip
def test_sft_settings_that_cannot_run_are_named_before_anything_loads(fields, key, value, rule, fix):
    """Mutation: any rule of packing.config_issues removed -> its case is red (TRL would refuse the
    first two once the model is loaded and the trainer built; the last two train cut rows)."""
    loop = make_loop(sft={"enabled": True, "max_length": 256, **fields}, grpo={"enabled": False})
    (issue,) = loop.validate()
    assert (issue.key, issue.value) == (key, value) and rule in issue.problem and fix in issue.fix


def test_sft_padding_free_without_truncation_and_bfd_packing_pass():
    for fields in ({"padding_free": True, "max_length": None}, {"packing": True}):
        assert (
            make_loop(sft={"enabled": True, "max_length": 256, **fields}, grpo={"enabled": False}).validate()
            == []
        )


def test_rft_rounds_take_padding_free_batches_but_not_packing():
    """An RFT round is exactly steps_per_round batches of its own rows (exact resume): packing would
    merge them into fewer bins. Mutation: config_issues without the ``rounds`` rule -> red."""
    rft = {"enabled": True, "rounds": 2, "prompts_per_round": 4, "samples_per_prompt": 2, "max_per_prompt": 1,
           "steps_per_round": 2, "temperature": 1.0, "max_new_tokens": 8, "batch_size": 4, "max_length": 256}  # fmt: skip

    def own(loop):  # the test's reward set has no verifier term, which RFT also names
        return [i for i in loop.rft_phase.validate() if i.key.startswith("training_loop.rft")]

    (issue,) = own(make_loop(sft={"enabled": False}, rft={**rft, "packing": True}, grpo={"enabled": False}))
    assert issue.key == "training_loop.rft.packing" and "steps_per_round batches" in issue.problem
    assert "training_loop.rft.padding_free=true" in issue.fix
    free = make_loop(
        sft={"enabled": False}, rft={**rft, "padding_free": True, "max_length": None}, grpo={"enabled": False}
    )
    assert own(free) == []


def _unmasked(module, query, key, value, attention_mask, **kwargs):
    """An attention that ignores the mask and position ids (causal over the whole row), as custom
    model code or an implementation outside transformers' mask functions would."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    kwargs.pop("is_causal", None)
    return sdpa_attention_forward(module, query, key, value, None, is_causal=True, **kwargs)


def _failing(module, query, key, value, attention_mask, **kwargs):
    """An attention whose kernel cannot run here, as torch.compile's flex_attention kernel on a CPU
    without a vector ISA (ATEN_CPU_CAPABILITY=default: "torch.compile on current platform is not
    supported for CPU")."""
    raise NotImplementedError("this kernel does not run on this CPU")


def _measured_here(model) -> tuple[bool, str]:
    """Whether the model's attention keeps padding-free rows apart on the machine running the test,
    by the product's own probe, and what the probe gave as the refusal writes it (a number, nan, or
    the error it raised)."""
    try:
        moved = packing.probe(model)
    except Exception as error:
        return False, f"{type(error).__name__}: {error}"
    return moved <= packing.tolerance(model), f"{moved:.3f}"


def test_a_model_whose_attention_mixes_padding_free_rows_is_refused_once_loaded(tiny):
    """Whether an attention keeps padding-free rows apart is measured on the machine that runs this,
    never assumed: transformers 5.17's sdpa, eager and flex_attention all build the block-diagonal
    mask, yet torch 2.13's compiled flex_attention kept the rows apart on the AVX512-BF16 EPYC and
    gave NaN, then another difference at each call (0.2-0.38), on the AVX2-only kind (real and emulated:
    ``make test-avx2``). The SFT phase refuses exactly the attentions that mix the rows here, by its
    key and with the measured difference, and accepts the others; sdpa (the default) and eager kept
    them apart on every CPU kind measured, which docs/scaling.md's padding-free SFT on a CPU rests on.
    An attention that ignores position ids is refused everywhere. Mutation: place() without the
    probe -> red (the unmasked attention is accepted)."""
    from transformers import AttentionInterface

    from rlvr.issues import ConfigValidationError

    model, _ = tiny
    AttentionInterface.register("rlvr_test_unmasked", _unmasked)
    loop = make_loop(sft={"enabled": True, "padding_free": True, "max_length": None}, grpo={"enabled": False})
    here = {}
    try:
        for attention in ("sdpa", "eager", "flex_attention", "rlvr_test_unmasked"):
            model.set_attn_implementation(attention)
            kept_apart, reading = here[attention] = _measured_here(model)
            if kept_apart:
                assert loop.place(model) is model, (attention, reading)
                continue
            try:
                loop.place(model)
            except ConfigValidationError as refused:
                (issue,) = refused.issues
            else:
                pytest.fail(f"{attention} accepted although its rows moved here: {here}")
            assert issue.key == "training_loop.sft.padding_free" and f"'{attention}'" in issue.problem
            assert "does not keep its rows apart in this model on this machine" in issue.problem
            # the measured difference (or the error), not necessarily the reading above: on the AVX2 kind
            # flex_attention gives another value at each call (nan, 0.26, 0.36 in one process)
            assert re.search(r"by up to (nan|\d+\.\d{3}) from the padded batch|batch of two probe rows failed: ",
                             issue.problem), issue.problem  # fmt: skip
            assert "padding_free=false" in issue.fix and "model.attn_implementation=" in issue.fix
        padded_loop = make_loop(sft={"enabled": True}, grpo={"enabled": False})
        assert padded_loop.place(model) is model  # without padding-free nothing is probed
    finally:
        model.set_attn_implementation("sdpa")
    assert here["sdpa"][0] and here["eager"][0], here
    assert not here["rlvr_test_unmasked"][0], here


def test_an_attention_that_keeps_the_rows_apart_only_on_its_first_probe_is_refused(tiny):
    """A kernel that is right only sometimes (torch 2.13's flex_attention on the AVX2 kind gave a
    different difference at each call) is not trusted on one forward: here the attention keeps the
    rows apart for the first probe (two layers x two batches) and then stops reading the mask.
    Mutation: packing.PROBES = 1 -> red (accepted)."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask  # sdpa's mask for it

    from rlvr.issues import ConfigValidationError

    calls = []

    def first_probe_only(module, query, key, value, attention_mask, **kwargs):
        calls.append(1)
        if len(calls) <= 4:
            return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
        return _unmasked(module, query, key, value, attention_mask, **kwargs)

    model, _ = tiny
    AttentionInterface.register("rlvr_test_first_probe_only", first_probe_only)
    AttentionMaskInterface.register("rlvr_test_first_probe_only", sdpa_mask)
    loop = make_loop(sft={"enabled": True, "padding_free": True, "max_length": None}, grpo={"enabled": False})
    try:
        model.set_attn_implementation("rlvr_test_first_probe_only")
        assert packing.probe(model) <= packing.tolerance(model)  # the first probe alone passes
        calls.clear()
        with pytest.raises(ConfigValidationError) as refused:
            loop.place(model)
    finally:
        model.set_attn_implementation("sdpa")
    (issue,) = refused.value.issues
    assert "'rlvr_test_first_probe_only'" in issue.problem and "by up to" in issue.problem


def test_an_attention_that_cannot_run_a_padding_free_batch_here_is_refused_with_its_error(tiny):
    """A probe forward that raises (flex_attention's compiled kernel where torch.compile does not
    run) is a refusal naming the key, the attention and the error, not a traceback out of the gate.
    Mutation: model_issues without its ``except`` -> red (NotImplementedError escapes place())."""
    from transformers import AttentionInterface

    from rlvr.issues import ConfigValidationError

    model, _ = tiny
    AttentionInterface.register("rlvr_test_failing", _failing)
    loop = make_loop(sft={"enabled": True, "padding_free": True, "max_length": None}, grpo={"enabled": False})
    try:
        model.set_attn_implementation("rlvr_test_failing")
        with pytest.raises(ConfigValidationError) as refused:
            loop.place(model)
    finally:
        model.set_attn_implementation("sdpa")
    (issue,) = refused.value.issues
    assert issue.key == "training_loop.sft.padding_free" and "'rlvr_test_failing'" in issue.problem
    assert "NotImplementedError: this kernel does not run on this CPU" in issue.problem
    assert "padding_free=false" in issue.fix


@pytest.mark.parametrize(
    ("value", "rule"),
    [("flash_attention_2", "CUDA GPUs only"), ("spda", "not an attention implementation")],
)
def test_an_attention_implementation_this_machine_cannot_run_is_named(value, rule):
    from rlvr.model.loader import attention_issues

    (issue,) = attention_issues(value)
    assert issue.key == "model.attn_implementation" and issue.value == value and rule in issue.problem
    assert attention_issues("sdpa") == attention_issues(None) == []


def test_varlen_is_sdpa_on_a_cpu_for_padded_padding_free_and_packed_batches(tmp_path, tiny):
    """model.attn_implementation=varlen (rlvr.model.varlen) hands every call it does not compute
    with torch's CUDA varlen kernel to sdpa with sdpa's own mask: on a CPU the three losses of the
    test above are sdpa's to the bit, and the padding-free probe passes. The kernel itself runs on
    CUDA only (aten::_flash_attention_forward has no CPU kernel); benchmarks/varlen_check.py checks
    it there against the padded sdpa loss and gradients. Mutation: register() without the mask
    function (transformers then builds no packed mask for it) -> the padding-free losses move."""
    from rlvr.model import varlen

    model, _ = tiny
    varlen.register()
    expected = {}
    try:
        for attention in ("sdpa", "varlen"):
            model.set_attn_implementation(attention)
            expected[attention] = [
                _loss(tmp_path / f"{attention}-padded", tiny).item(),
                _loss(tmp_path / f"{attention}-free", tiny, padding_free=True, max_length=None).item(),
                _loss(tmp_path / f"{attention}-packed", tiny, packing=True).item(),
            ]
        assert model.config._attn_implementation == "varlen"
        assert packing.probe(model) <= packing.tolerance(model)
    finally:
        model.set_attn_implementation("sdpa")
    assert expected["varlen"] == expected["sdpa"]


def test_the_varlen_kernel_is_taken_only_for_a_padding_free_batch_on_cuda():
    """The rule that decides between torch's varlen kernel and sdpa, on tensors of a CPU (is_cuda is
    False) and of the meta device standing in for nothing but the shapes: a CPU never takes it; the
    shape rules (one row, restarting position ids, no KV cache, no window, no dropout) are read from
    the same function, with the device rule set aside through ``on_cuda``. Mutation: any rule
    dropped -> its case red."""
    from rlvr.model.varlen import takes_kernel

    q = torch.zeros(1, 4, 10, 8)
    packed = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 0, 1, 2]])
    assert not takes_kernel(q, q, packed, 0.0, None)  # a CPU tensor
    assert takes_kernel(q, q, packed, 0.0, None, on_cuda=True)
    assert not takes_kernel(q, q, torch.arange(10)[None], 0.0, None, on_cuda=True)  # one row: sdpa's own
    assert not takes_kernel(q, q, None, 0.0, None, on_cuda=True)
    assert not takes_kernel(torch.zeros(2, 4, 10, 8), torch.zeros(2, 4, 10, 8), packed.repeat(2, 1), 0.0,
                            None, on_cuda=True)  # fmt: skip
    assert not takes_kernel(q[:, :, :1], q, packed[:, :1], 0.0, None, on_cuda=True)  # KV cache
    assert not takes_kernel(q, q, packed, 0.1, None, on_cuda=True)
    assert not takes_kernel(q, q, packed, 0.0, 4096, on_cuda=True)


def test_varlen_needs_torchs_varlen_api(monkeypatch):
    from rlvr.model import loader, varlen

    assert loader.attention_issues("varlen") == []
    monkeypatch.setattr(varlen, "available", lambda: False)
    (issue,) = loader.attention_issues("varlen")
    assert issue.key == "model.attn_implementation" and "torch >= 2.10" in issue.problem
    assert issue.fix == "model.attn_implementation=sdpa"


def test_padding_free_rows_on_cuda_under_a_dense_mask_get_the_varlen_hint(tiny):
    """The hint is read from the model's device and attention alone (a namespace carries the two for
    the CUDA rows: this machine has no GPU). Mutation: the device or the attention rule dropped -> red."""
    from types import SimpleNamespace

    def on(device, attention):
        return SimpleNamespace(
            device=torch.device(device), config=SimpleNamespace(_attn_implementation=attention)
        )

    assert "model.attn_implementation=varlen" in packing.slow_attention_hint(on("cuda", "sdpa"))
    assert packing.slow_attention_hint(on("cuda", "eager")) is not None
    for quiet in (on("cuda", "varlen"), on("cuda", "flash_attention_2"), on("cpu", "sdpa")):
        assert packing.slow_attention_hint(quiet) is None
    assert packing.slow_attention_hint(tiny[0]) is None  # the real tiny model, on this CPU
