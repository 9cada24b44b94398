"""RLVRSFTTrainer's completion-only loss on a CPU (rlvr.training_loop.sft_loss) equals TRL's own SFT loss:
the same loss, the same gradients and the same logged metrics on a real batch of TRL's collator, while
projecting fewer positions through the LM head than the batch has."""

from __future__ import annotations

import copy

import pytest
import torch
from datasets import Dataset
from tests.conftest import tiny_model
from trl import SFTConfig, SFTTrainer

from rlvr.training_loop.sft_loss import RLVRSFTTrainer

pytestmark = pytest.mark.integration

ROWS = [
    {
        "prompt": [
            {"role": "user", "content": f"What is {a} + {b}? Think, then answer in tags." + " pad" * (a % 5)}
        ],
        "completion": [{"role": "assistant", "content": f"<answer>{a + b}</answer>"}],
    }
    for a, b in [(3, 4), (12, 30), (7, 7), (100, 23), (5, 68), (41, 2), (9, 90), (15, 15)]
]


def build(cls: type, model, tokenizer, tmp_path, **args):
    config = SFTConfig(
        output_dir=str(tmp_path / cls.__name__),
        per_device_train_batch_size=len(ROWS),
        max_length=256,
        report_to=[],
        use_cpu=True,
        bf16=False,
        seed=0,
        **args,
    )
    return cls(model=model, args=config, train_dataset=Dataset.from_list(ROWS), processing_class=tokenizer)


@pytest.fixture(scope="module")
def loaded():
    return tiny_model(seed=7).load()


def loss_and_grads(cls: type, loaded, tmp_path, **args):
    model = copy.deepcopy(loaded.model).float().train()
    trainer = build(cls, model, loaded.tokenizer, tmp_path, **args)
    (batch,) = [b for _, b in zip(range(1), trainer.get_train_dataloader(), strict=False)]
    count = (batch["labels"][:, 1:] != -100).sum()
    loss = trainer.compute_loss(trainer.model, dict(batch), num_items_in_batch=count)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}
    return loss.item(), grads, metrics, batch


def test_the_completion_only_loss_is_trls_loss_gradients_and_metrics(loaded, tmp_path):
    ours, ours_grads, ours_metrics, batch = loss_and_grads(RLVRSFTTrainer, loaded, tmp_path)
    trls, trl_grads, trl_metrics, _ = loss_and_grads(SFTTrainer, loaded, tmp_path)
    # the batch has prompt positions the completion-only path leaves out of the head
    labelled = (batch["labels"][:, 1:] != -100).any(dim=0).sum().item()
    assert labelled < batch["input_ids"].shape[1] - 1
    assert ours == pytest.approx(trls, rel=1e-5)
    assert ours_grads.keys() == trl_grads.keys() and len(ours_grads) > 10
    for name, grad in trl_grads.items():
        torch.testing.assert_close(ours_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    assert ours_metrics.keys() == trl_metrics.keys() >= {"entropy", "mean_token_accuracy", "num_tokens"}
    for key, value in trl_metrics.items():
        assert ours_metrics[key] == pytest.approx(value, rel=1e-5), key


def test_the_head_projects_only_positions_with_a_label(loaded, tmp_path):
    model = copy.deepcopy(loaded.model).float().train()
    trainer = build(RLVRSFTTrainer, model, loaded.tokenizer, tmp_path)
    seen = []
    head = trainer.model.get_output_embeddings()
    handle = head.register_forward_hook(lambda mod, args, out: seen.append(args[0].shape[1]))
    try:
        (batch,) = [b for _, b in zip(range(1), trainer.get_train_dataloader(), strict=False)]
        trainer.compute_loss(trainer.model, dict(batch))
    finally:
        handle.remove()
    assert seen == [(batch["labels"][:, 1:] != -100).any(dim=0).sum().item()]


def test_other_losses_keep_trls_own_path(loaded, tmp_path):
    """loss_type=dft is TRL's: our path would silently train the plain NLL instead."""
    ours, _, _, _ = loss_and_grads(RLVRSFTTrainer, loaded, tmp_path, loss_type="dft")
    trls, _, _, _ = loss_and_grads(SFTTrainer, loaded, tmp_path, loss_type="dft")
    plain, _, _, _ = loss_and_grads(SFTTrainer, loaded, tmp_path)
    assert ours == pytest.approx(trls, rel=1e-6) and abs(ours - plain) > 1e-3
