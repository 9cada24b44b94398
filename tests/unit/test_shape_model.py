"""Shape models: a published architecture with random weights (rlvr.model.loader.ShapeModel)."""

from __future__ import annotations

import json

import pytest

from rlvr.model import architectures
from rlvr.model.loader import HFModel, ShapeModel, random_weights_of

# A small architecture in the published table's format (the real ones take seconds to minutes to build).
SMALL = (
    "test-org/Small-Llama",
    {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 60000,
        "max_position_embeddings": 512,
        "tie_word_embeddings": True,
    },
)


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setitem(architectures.ARCHITECTURES, "small_llama", SMALL)
    return ShapeModel(architecture="small_llama", seed=3, dtype="float32")


def test_a_shape_model_is_the_published_architecture_with_random_weights_named_as_such(small):
    loaded = small.load()
    config = loaded.model.config
    assert (config.hidden_size, config.num_hidden_layers, config.num_key_value_heads) == (64, 2, 2)
    # the published vocabulary, larger than the embedded tokenizer's: the logits keep their size
    assert config.vocab_size == 60000 > len(loaded.tokenizer)
    assert loaded.name == "Small-Llama shape (random weights)"
    assert random_weights_of(small.model_path()) == "small_llama"
    again = ShapeModel(architecture="small_llama", seed=3, dtype="float32").load().model
    assert all(
        (a == b).all()
        for a, b in zip(loaded.model.state_dict().values(), again.state_dict().values(), strict=True)
    )


def test_no_run_loads_a_shape_model_s_weights_as_a_trained_model(small, tmp_path):
    path = small.model_path()
    (issue,) = [i for i in HFModel(name_or_path=path).validate() if "random weights" in i.problem]
    assert issue.key == "model.name_or_path" and "model=shape model.architecture=small_llama" in issue.fix
    # a LoRA adapter trained on it says the same through its base
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": path}))
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    assert any("random weights" in i.problem for i in HFModel(name_or_path=str(adapter)).validate())
    assert small.validate() == []


def test_an_unknown_architecture_is_named_with_the_known_ones():
    (issue,) = ShapeModel(architecture="qwen2_5_15b", seed=0).validate()
    assert issue.key == "model.architecture" and "qwen2_5_1_5b" in issue.fix


def test_every_published_architecture_is_a_config_transformers_builds():
    """Each table entry builds a transformers config whose sizes the memory check reads back."""
    from transformers import AutoConfig

    from rlvr.model.memory import PUBLISHED, Shape

    for name, (hub_id, fields) in architectures.ARCHITECTURES.items():
        values = dict(fields)
        config = AutoConfig.for_model(values.pop("model_type"), **values)
        assert Shape.from_config(config.to_dict()) == PUBLISHED[hub_id], name
    # the parameter counts the model cards publish
    for hub_id, billions in [("Qwen/Qwen2.5-0.5B-Instruct", 0.494), ("Qwen/Qwen2.5-1.5B-Instruct", 1.54),
                             ("Qwen/Qwen2.5-7B-Instruct", 7.62), ("meta-llama/Llama-3.2-1B-Instruct", 1.24),
                             ("HuggingFaceTB/SmolLM2-1.7B-Instruct", 1.71)]:  # fmt: skip
        assert PUBLISHED[hub_id].params / 1e9 == pytest.approx(billions, rel=0.02), hub_id


def test_the_benchmark_refuses_a_shape_model(tmp_path):
    """A models x tasks table of random weights would publish numbers that measure nothing."""
    from tests.conftest import compose_config

    from rlvr.config.gate import check
    from rlvr.issues import ConfigValidationError

    cfg = compose_config(
        [
            "+model@benchmark.models.random=shape",
            "benchmark.only=[random]",
            f"benchmark.output_dir={tmp_path}",
        ],
        config_name="benchmark",
    )
    with pytest.raises(ConfigValidationError) as info:
        check(cfg, tmp_path)
    (issue,) = [i for i in info.value.issues if "random weights" in i.problem]
    assert issue.key == "benchmark.models.random" and "model=shape" in issue.fix
