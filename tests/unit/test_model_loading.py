"""Model loading options up to the from_pretrained / GPU call: safe defaults, adapters, quantization kwargs."""

from __future__ import annotations

import json

import pytest

from rlvr.model import HFModel
from rlvr.model.loader import adapter_base


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


class _Payload:
    """Unpickling this creates the marker file: proof that a pickle was loaded."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickled_adapter_is_refused_before_anything_is_unpickled(tmp_path):
    import json
    import pickle

    from rlvr.issues import ConfigValidationError
    from rlvr.model import HFModel

    marker = tmp_path / "unpickled"
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(
        json.dumps({"base_model_name_or_path": str(tmp_path / "base")})
    )
    (adapter / "adapter_model.bin").write_bytes(pickle.dumps(_Payload(str(marker))))
    model = HFModel(name_or_path=str(adapter))
    assert any("adapter_model.safetensors" in i.problem for i in model.validate())
    with pytest.raises(ConfigValidationError, match="use_safetensors=false"):
        model.load()
    assert not marker.exists()
    # opting in is the user's explicit choice: validation no longer objects
    assert not any(
        "safetensors" in i.problem
        for i in HFModel(name_or_path=str(adapter), use_safetensors=False).validate()
    )
