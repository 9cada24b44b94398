"""Model components: load a causal LM + tokenizer (hub id, local dir, LoRA checkpoint, GGUF, embedded, tiny)."""

from rlvr.models.loader import EmbeddedModel, HFModel, LoadedModel, TinyRandomModel

__all__ = ["EmbeddedModel", "HFModel", "LoadedModel", "TinyRandomModel"]
