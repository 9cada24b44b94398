"""The run's final model: ``final/`` holds the weights (or adapter), the tokenizer and the data manifest,
written by rank 0 once every rank agrees on the weights."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr.data.identity import MANIFEST
from rlvr.model.loader import QUANTIZATION_FILE, LoadedModel
from rlvr.runtime.io import atomic_write_json

if TYPE_CHECKING:
    from torch import nn

    from rlvr.runtime.distributed import Distributed

FINAL = "final"
# The weights hash of every rank (written beside the final model when several replicated ranks ran).
RANK_WEIGHTS = "rank_weights.json"


def save_final(
    model: nn.Module,
    loaded: LoadedModel,
    manifest: dict[str, Any],
    run_dir: Path,
    setup: Distributed | None,
    main: bool,
) -> Path | None:
    """Write ``<run_dir>/final``; returns it on rank 0, None on the other ranks.

    ``setup`` is the run's distributed setup (None: one process). With several replicated
    processes, first check that every rank ended with the same weights; under FSDP / ZeRO-3 (each
    rank holds a shard, no two alike) every rank gathers and rank 0 saves the full-weight copy.
    """
    if setup is not None and setup.sharded:
        return setup.on_rank0(
            model, lambda full: _write(full, loaded, manifest, run_dir, None), "saving the final model"
        )
    hashes = setup.gather_hashes(model) if setup is not None else None
    if hashes and len(set(hashes)) > 1:
        raise RuntimeError(f"the ranks ended training with different weights (sha256 per rank: {hashes})")
    return _write(model, loaded, manifest, run_dir, hashes) if main else None


def _write(
    model: nn.Module, loaded: LoadedModel, manifest: dict[str, Any], run_dir: Path, hashes: list[str] | None
) -> Path:
    final_dir = run_dir / FINAL
    atomic_write_json(final_dir / MANIFEST, manifest, root=run_dir)
    model.save_pretrained(final_dir)
    loaded.tokenizer.save_pretrained(final_dir)
    if loaded.quantization:  # the adapter's base is quantised: say so, for whoever loads it
        atomic_write_json(final_dir / QUANTIZATION_FILE, {"quantization": loaded.quantization}, root=run_dir)
    if hashes and len(hashes) > 1:
        atomic_write_json(
            final_dir / RANK_WEIGHTS, {"world_size": len(hashes), "sha256": hashes}, root=run_dir
        )
    return final_dir
