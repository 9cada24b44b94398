"""The converted Gemma 3 270M (``python -m rlvr.model.embedded gemma3_270m``; skipped when not fetched)
tokenizes as Gemma does and continues a sentence greedily."""

from __future__ import annotations

import pytest

from rlvr.model import embedded
from rlvr.model.embedded import MODELS


@pytest.mark.slow
def test_the_converted_gemma3_270m_tokenizes_as_gemma_and_continues_a_sentence():
    source = MODELS["gemma3_270m"]
    if not embedded.is_ready(embedded.model_path(source)):
        pytest.skip("gemma-3-270m is not fetched: python -m rlvr.model.embedded gemma3_270m")
    import torch

    from rlvr.model.loader import EmbeddedModel

    loaded = EmbeddedModel(name="gemma-3-270m").load()  # verifies every file against the pinned hashes
    tok, model = loaded.tokenizer, loaded.model
    # Gemma 3's ids (BOS, "The", "▁capital", "▁of", "▁France", "▁is"): with the GGUF's own tokenizer
    # conversion in transformers 5.17 they were one id per character and no BOS.
    assert tok("The capital of France is").input_ids == [2, 818, 5279, 529, 7001, 563]
    text = tok.apply_chat_template(
        [{"role": "user", "content": "Hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text == "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"
    # as the pipeline and TRL tokenize a rendered prompt: <bos>, <start_of_turn> whole, "user"
    assert tok(text, add_special_tokens=False).input_ids[:3] == [2, 105, 2364]
    with torch.no_grad():
        out = model.generate(
            **tok("The capital of France is", return_tensors="pt"), max_new_tokens=3, do_sample=False
        )
    assert tok.decode(out[0, 6:]) == " the capital of"
