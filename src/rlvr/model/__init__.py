"""Model components: load a causal LM + tokenizer (hub id, local dir, LoRA checkpoint, GGUF, embedded,
tiny, shape) through transformers + PEFT (``loader``), or through unsloth on a CUDA GPU (``unsloth``).
Beside them: the embedded models fetched by hash (``embedded``), published architectures by short name
(``architectures``), the memory check (``memory``: will a training step fit the device or a card),
padding-free attention on CUDA (``varlen``) and the run's final save (``final``)."""

from rlvr.model.loader import EmbeddedModel, HFModel, LoadedModel, ShapeModel, TinyRandomModel
from rlvr.model.unsloth import UnslothModel

__all__ = ["EmbeddedModel", "HFModel", "LoadedModel", "ShapeModel", "TinyRandomModel", "UnslothModel"]
