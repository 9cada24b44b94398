"""Run-directory disk use: after a completed run keep only the checkpoints asked for, and report the size;
after a failure, say when the disk is nearly full (:func:`low_disk_hint`).

A checkpoint of the 135M default is 1.5 GiB (fp32 weights 0.5 GiB, Adam's two moments 1.0 GiB)
beside a 0.5 GiB final model, and a sweep multiplies that. Once a run has completed, ``resume=auto``
has nothing left to do (rlvr.training_loop.resume.finished_run) and the report reads only the
evaluation files, so by default no checkpoint is kept. ``keep_checkpoints`` (top level): ``none``
deletes ``checkpoints/``, ``last`` keeps the newest intact checkpoint (GRPO before SFT; to train on
from it with ``resume=<path>``), ``all`` keeps everything. Measured in docs/scaling.md (paragraph "Disk").
"""

from __future__ import annotations

import shutil
from pathlib import Path

from rlvr.config.errors import ConfigIssue
from rlvr.training_loop.checkpoints import latest_checkpoint

KEEP_CHOICES = ("none", "last", "all")


def keep_checkpoints_issues(value: object) -> list[ConfigIssue]:
    if value in KEEP_CHOICES:
        return []
    return [
        ConfigIssue(
            "keep_checkpoints",
            value,
            f"must be one of {', '.join(KEEP_CHOICES)}",
            "keep_checkpoints=last (what resume=auto needs), none or all",
        )
    ]


def prune_checkpoints(run_dir: Path, keep: str) -> list[Path]:
    """Delete the checkpoints ``keep`` does not ask for; returns the deleted directories."""
    (problem,) = keep_checkpoints_issues(keep) or (None,)
    if problem:
        raise ValueError(str(problem))
    root = run_dir / "checkpoints"
    if keep == "all" or not root.is_dir():
        return []
    if keep == "none":
        removed = [p for p in root.glob("*/checkpoint-*") if p.is_dir() and not p.is_symlink()]
        shutil.rmtree(root)
        return removed
    found = latest_checkpoint(run_dir)
    kept = found[1] if found else None
    removed = []
    for phase_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink()):
        for ckpt in sorted(phase_dir.iterdir()):
            if ckpt != kept and ckpt.is_dir() and not ckpt.is_symlink():
                shutil.rmtree(ckpt)
                removed.append(ckpt)
    return removed


def dir_size(path: Path) -> int:
    """Bytes under ``path``, symlinks not followed (a link to a model cache is not this run's disk)."""
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def finish_run_dir(run_dir: Path, keep: str) -> str:
    """Prune after a completed run; returns the run directory, its size and what was deleted (for
    the closing summary)."""
    removed = prune_checkpoints(run_dir, keep)
    note = f"; {len(removed)} checkpoint dir(s) deleted (keep_checkpoints={keep})" if removed else ""
    return f"{run_dir} ({human(dir_size(run_dir))}{note})"


def low_disk_hint(run_dir: Path, min_free: int = 256 * 2**20) -> str | None:
    """A hint when a failure is probably a full disk: torch reports it as e.g. "unexpected pos"."""
    path = run_dir
    while not path.exists() and path != path.parent:
        path = path.parent
    free = shutil.disk_usage(path).free
    if free >= min_free:
        return None
    return (
        f"only {free / 2**20:.0f} MiB free on the disk holding {run_dir}: the error below is likely a full "
        "disk (a checkpoint of the 135M default with optimizer state takes about 1.6 GB). Free space, lower "
        "training_loop.sft.save_total_limit / training_loop.grpo.save_total_limit, or set hydra.run.dir "
        "to a larger disk; resume=auto continues from the newest complete checkpoint."
    )
