"""Multi-process runs (``accelerate launch``): who is rank 0, the distributed setup named in config, and
the checks that keep every rank on one run.

The processes are started by accelerate (torchrun underneath), never by this package; TRL's trainers
pick the process group up from the environment that launch sets. This module decides only what the
pipeline itself must do differently with several processes: rank 0 alone writes files, talks to
observers and evaluates; every rank trains; at the end the ranks prove they hold the same weights.
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from rlvr.config_errors import ConfigIssue

# What `accelerate launch` puts in each process's environment for these strategies.
_LAUNCH_FLAGS = {"FSDP": "ACCELERATE_USE_FSDP", "DEEPSPEED": "ACCELERATE_USE_DEEPSPEED"}
# Strategies whose processes each hold a full copy of the weights (rank 0 can evaluate and save alone).
_REPLICATED = {"MULTI_GPU", "MULTI_CPU", "NO"}


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main() -> bool:
    """Rank 0 (or the only process): the one that writes run files, observes and evaluates."""
    return rank() == 0


def run_dir_issue(argv: list[str]) -> ConfigIssue | None:
    """Several processes must write ONE run directory. Hydra's default ``${now:...}`` directory is
    computed by each process on its own and can differ by a second, so a multi-process launch must
    name the directory."""
    if world_size() <= 1 or any(a.startswith(("hydra.run.dir=", "+hydra.run.dir=")) for a in argv):
        return None
    return ConfigIssue(
        "hydra.run.dir",
        None,
        f"this is a {world_size()}-process launch: every process computes its own timestamped run "
        "directory, and they can differ",
        "name it on the command line, e.g. hydra.run.dir=outputs/ddp-$(date +%Y-%m-%d_%H-%M-%S)",
    )


def weights_sha256(model: Any) -> str:
    """A hash of every parameter and buffer (names, dtypes, shapes, bytes), order-independent."""
    import torch

    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


class Distributed:
    """The distributed setup (config group ``distributed``): one process, or an accelerate config.

    Args:
        accelerate_config: the accelerate config file the run must be launched with (relative to the
            project root or absolute), or None for a single process. The file says the strategy
            (``distributed_type``: MULTI_GPU / MULTI_CPU = DDP, FSDP, DEEPSPEED with its ZeRO stage).

    The launch itself is accelerate's: ``accelerate launch --config_file <accelerate_config>
    run_pipeline.py distributed=<this option> hydra.run.dir=<dir> ...``. This component checks, before
    anything loads, that the processes were started that way, and records the setup in provenance.
    """

    def __init__(self, accelerate_config: str | None = None):
        self.accelerate_config = accelerate_config

    def settings(self) -> dict[str, Any]:
        """The accelerate config file's contents (empty for a single process)."""
        if self.accelerate_config is None:
            return {}
        from omegaconf import OmegaConf

        return dict(OmegaConf.to_container(OmegaConf.load(self.path)))

    @property
    def path(self) -> Path:
        path = Path(self.accelerate_config or "")
        if not path.is_absolute():
            path = Path(__file__).resolve().parents[2] / path
        return path

    @property
    def strategy(self) -> str:
        return str(self.settings().get("distributed_type", "NO"))

    def command(self) -> str:
        return (
            f"accelerate launch --config_file {self.accelerate_config} run_pipeline.py "
            f"distributed=<this option> hydra.run.dir=<dir> ..."
        )

    def validate(self) -> list[ConfigIssue]:
        processes = world_size()
        if self.accelerate_config is None:
            if processes > 1:
                return [
                    ConfigIssue(
                        "distributed",
                        "single",
                        f"the run was launched as {processes} processes but distributed=single",
                        "add distributed=ddp (GPUs) or distributed=ddp_cpu (CPU), matching the accelerate "
                        "config the processes were launched with",
                    )
                ]
            return []
        key = "distributed.accelerate_config"
        if not self.path.is_file():
            return [
                ConfigIssue(
                    key,
                    self.accelerate_config,
                    "file not found",
                    "name a file under infrastructure/accelerate/",
                )
            ]
        strategy = self.strategy
        issues = []
        if processes <= 1:
            issues.append(
                ConfigIssue(
                    key,
                    self.accelerate_config,
                    f"a {strategy} setup, but this is a single process (started without accelerate launch)",
                    f"start it as `{self.command()}`, or use distributed=single",
                )
            )
        flag = _LAUNCH_FLAGS.get(strategy)
        launched = {s for s, f in _LAUNCH_FLAGS.items() if os.environ.get(f, "").lower() == "true"}
        if processes > 1 and launched != ({strategy} if flag else set()):
            issues.append(
                ConfigIssue(
                    key,
                    self.accelerate_config,
                    f"the processes were launched as {sorted(launched) or 'plain DDP'}, this file says {strategy}",
                    f"launch with --config_file {self.accelerate_config}",
                )
            )
        if strategy in _LAUNCH_FLAGS and not _cuda():
            issues.append(
                ConfigIssue(
                    key,
                    self.accelerate_config,
                    f"{strategy} needs a GPU: on a CPU, accelerate (1.15) resolves an {_LAUNCH_FLAGS[strategy]} "
                    "launch to MULTI_CPU, plain DDP (with use_cpu) or to no distribution at all (without), so "
                    "the run would silently not be what this file says (measured on a 2-process CPU launch)",
                    "use distributed=ddp_cpu on a CPU machine",
                )
            )
        if strategy == "DEEPSPEED":
            import importlib.util

            if importlib.util.find_spec("deepspeed") is None:
                issues.append(
                    ConfigIssue(
                        key,
                        self.accelerate_config,
                        "DeepSpeed ZeRO needs the deepspeed package, which is not installed",
                        "pip install deepspeed on the GPU machine, or use distributed=ddp",
                    )
                )
        if strategy not in _REPLICATED and not self._replicated():
            issues.append(
                ConfigIssue(
                    key,
                    self.accelerate_config,
                    f"{strategy} shards the weights across processes; the pipeline evaluates and saves the "
                    "model on rank 0 alone, which needs a full copy there",
                    "use distributed=ddp or distributed=deepspeed_zero2 (optimizer state and gradients "
                    "sharded, weights replicated)",
                )
            )
        return issues

    def _replicated(self) -> bool:
        """ZeRO stages 1 and 2 shard optimizer state and gradients only: each rank keeps the weights."""
        ds = self.settings().get("deepspeed_config") or {}
        return self.strategy == "DEEPSPEED" and int(ds.get("zero_stage", 3)) < 3

    def record(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "accelerate_config": self.accelerate_config,
            "processes": world_size(),
        }

    def gather_hashes(self, model: Any) -> list[str]:
        """Every rank's weights hash, in rank order (a collective: every rank must call it)."""
        own = weights_sha256(model)
        if world_size() <= 1:
            return [own]
        import torch.distributed as dist

        out: list[Any] = [None] * world_size()
        dist.all_gather_object(out, own)
        return [str(h) for h in out]


class StoppedByLauncher(Exception):
    """SIGTERM in a multi-process run: the launcher ends the other ranks when one fails."""


class LauncherStop:
    """With several processes, SIGTERM means the launcher is ending the run (another rank failed, or
    the job was cancelled): raise, so this rank records a FAILED end and closes its workers instead
    of dying silently. (Checkpoint-on-SIGTERM, rlvr.training.checkpoints.PreemptionGuard, is for
    single-process runs: ranks cannot agree on a step to stop at once one of them is gone.)"""

    def __init__(self) -> None:
        self._previous: Any = None

    def __enter__(self) -> LauncherStop:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    @staticmethod
    def _handle(signum: int, frame: Any) -> None:
        raise StoppedByLauncher(
            f"rank {rank()} stopped by the launcher (SIGTERM): another process of this run failed "
            "(its error is printed above) or the job was cancelled"
        )


# How torch.distributed reports that another rank is gone (gloo over TCP; NCCL raises DistError types).
_PEER_LOST = ("closed by peer", "reset by peer", "broken pipe", "connection refused")


def peer_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is this rank noticing that another rank of the run has gone (a consequence,
    not the cause: the failing rank prints the cause)."""
    if isinstance(exc, StoppedByLauncher):
        return True
    try:
        import torch.distributed as dist

        if isinstance(exc, dist.DistError):
            return True
    except (ImportError, AttributeError):
        pass
    return isinstance(exc, RuntimeError) and any(words in str(exc).lower() for words in _PEER_LOST)


def rank_prefix() -> str:
    return f"[rank {rank()}] " if world_size() > 1 else ""


def print_error(exc: BaseException) -> None:
    """A non-zero rank has no observers; its failure still reaches stderr, once, named by rank."""
    print(f"{rank_prefix()}{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
