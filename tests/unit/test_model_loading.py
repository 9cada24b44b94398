"""Model loading options up to the from_pretrained / GPU call: safe defaults, adapters, quantization kwargs."""

from __future__ import annotations

import json

import pytest

from rlvr.models import HFModel
from rlvr.models.loader import adapter_base


def test_remote_code_off_and_safetensors_only_by_default():
    kwargs = HFModel("org/model").load_kwargs()
    assert kwargs["trust_remote_code"] is False
    assert kwargs["use_safetensors"] is True
    assert HFModel("org/model", trust_remote_code=True).load_kwargs()["trust_remote_code"] is True


def test_adapter_directory_is_detected(tmp_path):
    assert adapter_base(tmp_path) is None
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "base/model"}))
    assert adapter_base(tmp_path) == "base/model"


def test_4bit_kwargs_built_without_a_gpu():
    pytest.importorskip("transformers")
    kwargs = HFModel("org/model", quantization="4bit", dtype="bfloat16").load_kwargs()
    q = kwargs["quantization_config"]
    assert q.load_in_4bit and not q.load_in_8bit and q.bnb_4bit_quant_type == "nf4"


def test_unsloth_refuses_on_cpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("machine has a GPU")
    with pytest.raises(RuntimeError, match="CUDA"):
        HFModel("org/model", backend="unsloth")._load_base("org/model")
