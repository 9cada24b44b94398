"""Published architectures: the ``config.json`` values of hub models, by short name.

One home for two users: ``model=shape`` builds any of them with random weights (rlvr.model.loader.ShapeModel),
so memory and speed of a real model size can be measured without its weights; and the memory
check (rlvr.model.memory) reads a hub id's shape from here when its ``config.json`` cannot be
fetched. Values copied from each model's ``config.json`` on the hub (the fields that decide the
tensor shapes; rope and norm settings that change no size are kept so the model computes like the
published one).
"""

from __future__ import annotations

from typing import Any

# short name -> (hub id, config.json fields)
ARCHITECTURES: dict[str, tuple[str, dict[str, Any]]] = {
    "smollm2_135m": (
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        {
            "model_type": "llama",
            "hidden_size": 576,
            "intermediate_size": 1536,
            "num_hidden_layers": 30,
            "num_attention_heads": 9,
            "num_key_value_heads": 3,
            "vocab_size": 49152,
            "max_position_embeddings": 8192,
            "rope_theta": 100000.0,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": True,
        },
    ),
    "smollm2_360m": (
        "HuggingFaceTB/SmolLM2-360M-Instruct",
        {
            "model_type": "llama",
            "hidden_size": 960,
            "intermediate_size": 2560,
            "num_hidden_layers": 32,
            "num_attention_heads": 15,
            "num_key_value_heads": 5,
            "vocab_size": 49152,
            "max_position_embeddings": 8192,
            "rope_theta": 100000.0,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": True,
        },
    ),
    "smollm2_1_7b": (
        "HuggingFaceTB/SmolLM2-1.7B-Instruct",
        {
            "model_type": "llama",
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_hidden_layers": 24,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "vocab_size": 49152,
            "max_position_embeddings": 8192,
            "rope_theta": 130000.0,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": True,
        },
    ),
    "llama3_2_1b": (
        "meta-llama/Llama-3.2-1B-Instruct",
        {
            "model_type": "llama",
            "hidden_size": 2048,
            "intermediate_size": 8192,
            "num_hidden_layers": 16,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 64,
            "vocab_size": 128256,
            "max_position_embeddings": 131072,
            "rope_theta": 500000.0,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 32.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": True,
        },
    ),
    "qwen2_5_0_5b": (
        "Qwen/Qwen2.5-0.5B-Instruct",
        {
            "model_type": "qwen2",
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_hidden_layers": 24,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
            "vocab_size": 151936,
            "max_position_embeddings": 32768,
            "rope_theta": 1000000.0,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
        },
    ),
    "qwen2_5_1_5b": (
        "Qwen/Qwen2.5-1.5B-Instruct",
        {
            "model_type": "qwen2",
            "hidden_size": 1536,
            "intermediate_size": 8960,
            "num_hidden_layers": 28,
            "num_attention_heads": 12,
            "num_key_value_heads": 2,
            "vocab_size": 151936,
            "max_position_embeddings": 32768,
            "rope_theta": 1000000.0,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
        },
    ),
    "qwen2_5_7b": (
        "Qwen/Qwen2.5-7B-Instruct",
        {
            "model_type": "qwen2",
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "num_hidden_layers": 28,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "vocab_size": 152064,
            "max_position_embeddings": 32768,
            "rope_theta": 1000000.0,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": False,
        },
    ),
    "gemma3_1b": (
        "google/gemma-3-1b-it",
        {
            "model_type": "gemma3_text",
            "hidden_size": 1152,
            "intermediate_size": 6912,
            "num_hidden_layers": 26,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "head_dim": 256,
            "vocab_size": 262144,
            "max_position_embeddings": 32768,
            "sliding_window": 512,
            "rope_theta": 1000000.0,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
        },
    ),
}

BY_HUB_ID = {hub_id: fields for hub_id, fields in ARCHITECTURES.values()}
