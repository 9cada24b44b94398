"""Provenance record: what produced a run's numbers (config, code version, packages, prompt, seeds)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from rlvr.runtime.io import atomic_write_json

PACKAGES = (
    "rlvr", "torch", "transformers", "trl", "peft", "accelerate", "datasets",
    "reasoning-gym", "math-verify", "hydra-core", "omegaconf",
)  # fmt: skip
# Environment variables that change speed (not results): threads and glibc's malloc (rlvr.runtime.allocator).
SPEED_ENVIRONMENT = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "GLIBC_TUNABLES", "RLVR_MALLOC_TUNING")


def git_state(start: Path | None = None) -> dict[str, Any]:
    """Commit and dirty flag of the checkout this package runs from (None outside git)."""
    where = start or Path(__file__).resolve().parent

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(dirty) if commit else None}


def package_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def command_line_overrides() -> list[str] | None:
    """The overrides this run was started with (Hydra's own .hydra/ copy is off), credentials masked."""
    from hydra.core.hydra_config import HydraConfig

    from rlvr.runtime.secrets import redact_overrides

    if not HydraConfig.initialized():
        return None
    return redact_overrides(list(HydraConfig.get().overrides.task))


def write_provenance(run_dir: Path, config: dict[str, Any], extra: dict[str, Any]) -> Path:
    """``run_dir/provenance.json``; ``config`` must already be secret-free."""
    record = {
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "overrides": command_line_overrides(),
        "git": git_state(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "environment": {name: os.environ.get(name) for name in SPEED_ENVIRONMENT},
        **extra,
        "config": config,
    }
    path = run_dir / "provenance.json"
    atomic_write_json(path, record, default=str)
    return path


def write_run_provenance(
    run_dir: Path, config: dict[str, Any], meta: dict[str, Any], components: Any, resume: Any
) -> Path:
    """A training run's provenance: its ``meta`` (model, data, seeds), the prompt hash, the hardware,
    the checkpoint it resumed from and the distributed setup (``components``: the built run)."""
    c = components
    extra = {
        **meta,
        "prompt_hash": c.prompts.hash,
        "hardware": c.training_loop.hardware_record(),
        "resumed_from": str(resume[1]) if resume else None,
    }
    if c.distributed is not None:
        extra["distributed"] = c.distributed.record()
    return write_provenance(run_dir, config, extra)


def resolved_config(cfg: Any) -> dict[str, Any]:
    """The resolved config as plain data with secrets masked (what runs save and trackers receive)."""
    from omegaconf import OmegaConf

    from rlvr.runtime.secrets import redact

    return redact(OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False))


def write_config_record(run_dir: Path, config: dict[str, Any]) -> None:
    """``run_dir/config_resolved.yaml``: ``config`` (secret-free) as a config a run can restart from."""
    from omegaconf import OmegaConf

    from rlvr.runtime.io import atomic_write_text

    # A rerun from this file (--config-dir <run_dir> --config-name config_resolved) gets Hydra's
    # defaults, so the one Hydra setting the trust rules require travels with the record.
    record = {**config, "hydra": {"output_subdir": None}}
    atomic_write_text(run_dir / "config_resolved.yaml", OmegaConf.to_yaml(record), root=run_dir)
