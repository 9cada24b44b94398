"""Model components: load a causal LM + tokenizer (hub id, local dir, LoRA checkpoint, GGUF, embedded,
tiny) through transformers + PEFT, or through unsloth on a CUDA GPU."""

from rlvr.model.loader import EmbeddedModel, HFModel, LoadedModel, ShapeModel, TinyRandomModel
from rlvr.model.unsloth import UnslothModel

__all__ = ["EmbeddedModel", "HFModel", "LoadedModel", "ShapeModel", "TinyRandomModel", "UnslothModel"]
