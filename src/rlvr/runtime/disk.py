"""Disk use: the bytes under a folder, sizes as people read them, and a hint after a failure when the
disk is nearly full (:func:`low_disk_hint`). What a completed run keeps of its checkpoints is
rlvr.training_loop.run_dir's.
"""

from __future__ import annotations

import shutil
from pathlib import Path


def dir_size(path: Path) -> int:
    """Bytes under ``path``, symlinks not followed (a link to a model cache is not this run's disk)."""
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def free_bytes(path: Path) -> int:
    """Free bytes on the disk that holds ``path`` (or would: its nearest existing parent)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def low_disk_hint(run_dir: Path, min_free: int = 256 * 2**20) -> str | None:
    """A hint when a failure is probably a full disk: torch reports it as e.g. "unexpected pos"."""
    free = free_bytes(run_dir)
    if free >= min_free:
        return None
    return (
        f"only {free / 2**20:.0f} MiB free on the disk holding {run_dir}: the error below is likely a full "
        "disk (a checkpoint of the 135M default with optimizer state takes about 1.6 GB). Free space, lower "
        "training_loop.sft.save_total_limit / training_loop.grpo.save_total_limit, or set hydra.run.dir "
        "to a larger disk; resume=auto continues from the newest complete checkpoint."
    )
