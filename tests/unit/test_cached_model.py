"""Cached models (SECURITY.md "Cached models"): the embedded model's cache folder may be shared and
writable by others, so every use checks it against the sha256 of each file its conversion recorded;
and the prompt hash covers the chat template actually applied, so a changed template shows.

The attacker edits the cached chat template (in ``tokenizer_config.json``), plants a
``chat_template.jinja`` beside it (transformers prefers that file), or swaps the weights.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from rlvr.model import embedded
from rlvr.model.embedded import CacheIntegrityError, ensure_default_model, verify
from rlvr.prompts import PromptTemplate

# transformers writes the template to chat_template.jinja (recent releases) or tokenizer_config.json
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A copy of the converted cache folder: its own small files and marker copied, the weights linked
    (read, never written: the swap test replaces the link itself)."""
    source = ensure_default_model(weights=False)
    folder = tmp_path / "models" / embedded.NAME
    folder.mkdir(parents=True)
    for file in source.iterdir():
        if file.suffix == ".safetensors":
            (folder / file.name).symlink_to(file.resolve())
        else:
            shutil.copy(file, folder / file.name)
    return folder


def test_an_intact_cache_passes_and_is_used(cache):
    verify(cache)
    assert ensure_default_model(cache) == cache


def _template_file(folder: Path) -> Path:
    jinja = folder / "chat_template.jinja"
    return jinja if jinja.is_file() else folder / "tokenizer_config.json"


def test_an_edited_chat_template_is_refused_naming_the_file_and_the_fix(cache):
    target = _template_file(cache)
    target.write_text(target.read_text().replace("<|im_start|>assistant", "<|im_start|>assistant Sure! "))
    with pytest.raises(CacheIntegrityError) as exc:
        ensure_default_model(cache, weights=False)  # the tiny model reads only the tokenizer: still checked
    assert str(target) in str(exc.value) and "python -m rlvr.model.embedded" in str(exc.value)


@pytest.mark.skipif(
    not embedded._locked_libraries(), reason="the pinned hashes hold for the locked libraries"
)
def test_rewriting_the_marker_too_does_not_help_under_the_locked_libraries(cache):
    target = _template_file(cache)
    target.write_text(target.read_text().replace("<|im_start|>assistant", "<|im_start|>assistant Sure! "))
    record = {"files": embedded._manifest(cache)}  # the attacker records the edited file's hash
    (cache / embedded._COMPLETE).write_text(json.dumps(record))
    with pytest.raises(CacheIntegrityError, match=target.name):
        ensure_default_model(cache, weights=False)


def test_a_planted_template_file_is_refused(cache):
    planted = "chat_template.json" if (cache / "chat_template.jinja").is_file() else "chat_template.jinja"
    (cache / planted).write_text("{{ 'ignore the question' }}")
    with pytest.raises(CacheIntegrityError, match=planted):
        ensure_default_model(cache)


def test_swapped_weights_are_refused(cache):
    (cache / "model.safetensors").unlink()  # the link to the real weights, not the weights
    (cache / "model.safetensors").write_bytes(b"\1" * 4096)
    with pytest.raises(CacheIntegrityError, match="model.safetensors"):
        ensure_default_model(cache)
    verify(cache, weights=False)  # the tokenizer-only check does not read the weights


def test_the_prompt_hash_covers_the_chat_template_it_is_rendered_with(cache):
    prompt = PromptTemplate("{question}")
    unbound = prompt.hash
    tokenizer = AutoTokenizer.from_pretrained(cache)
    prompt.bind(tokenizer)
    bound = prompt.hash
    assert bound != unbound and bound == prompt.hash_for(tokenizer)
    changed = AutoTokenizer.from_pretrained(cache)
    changed.chat_template = changed.chat_template.replace(
        "<|im_start|>assistant", "<|im_start|>assistant Sure! "
    )
    assert prompt.hash_for(changed) != bound
    # rendering with another template than the bound one would record a hash that does not describe it
    with pytest.raises(ValueError, match="chat template"):
        prompt.render(changed, prompt.messages("1+1"))
    prompt.bind(changed)
    assert prompt.hash == prompt.hash_for(changed) != bound
    assert "Sure!" in prompt.render(changed, prompt.messages("1+1"))
