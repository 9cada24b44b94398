"""The tiny test model's tokenizer: the embedded one cut to its first tokens (rlvr.model.loader.first_tokens)."""

from __future__ import annotations

import shutil

import pytest
from transformers import AutoTokenizer

from rlvr.model.embedded import ensure_default_model
from rlvr.model.loader import FIRST_MERGED_ID, TinyRandomModel, first_tokens

TEXTS = [
    "<|im_start|>system\nSolve it. Put the answer in <answer></answer>.<|im_end|>\n<|im_start|>user\n"
    "What is 345 + 782 * 3?<|im_end|>\n<|im_start|>assistant\n",
    "Janet's ducks lay 16 eggs per day; she sells the rest at $2 each. ∑ x² = 1/3, naïve 東京 🙂",
    "  two  spaces\tand\ttabs\n\nand a final newline\n",
]


@pytest.fixture(scope="module")
def embedded():
    path = ensure_default_model(weights=False)
    return path, AutoTokenizer.from_pretrained(path)


@pytest.mark.parametrize("size", [FIRST_MERGED_ID, 4096])
def test_the_cut_tokenizer_keeps_the_first_ids_and_every_text_round_trips(tmp_path, embedded, size):
    path, full = embedded
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (path / name).is_file():
            shutil.copy(path / name, tmp_path)
    first_tokens(tmp_path / "tokenizer.json", size)
    cut = AutoTokenizer.from_pretrained(tmp_path)
    assert len(cut) == size
    assert (cut.eos_token_id, cut.convert_tokens_to_ids("<|im_end|>")) == (
        full.eos_token_id,
        full.convert_tokens_to_ids("<|im_end|>"),
    )
    for text in TEXTS:
        ids = cut(text)["input_ids"]
        assert max(ids) < size
        assert cut.decode(ids) == text
        # the same text takes more of the smaller vocabulary's tokens, never fewer
        assert len(ids) >= len(full(text)["input_ids"])
    # a token the cut kept has the id it had
    kept = full.convert_ids_to_tokens(size - 1)
    assert cut.convert_tokens_to_ids(kept) == size - 1


def test_a_tiny_vocabulary_outside_the_embedded_tokenizer_is_refused():
    def issues(size):
        return TinyRandomModel(
            hidden_size=64, num_layers=2, num_heads=4, intermediate_size=128, vocab_size=size, seed=0
        ).validate()

    assert issues(4096) == []
    for size in (FIRST_MERGED_ID - 1, 49153):
        (issue,) = issues(size)
        assert issue.key == "model.vocab_size" and issue.value == size and "273 to 49152" in issue.problem
