"""Multi-process runs (``accelerate launch``): who is rank 0, the distributed setup named in config, and
the checks that keep every rank on one run.

The processes are started by accelerate (torchrun underneath), never by this package; TRL's trainers
pick the process group up from the environment that launch sets. This module decides only what the
pipeline itself must do differently with several processes: rank 0 alone writes files, talks to
observers and evaluates; every rank trains; at the end the ranks prove they hold the same weights.

Under FSDP and DeepSpeed ZeRO-3 no rank holds the full weights once a trainer has prepared the model.
Wherever rank 0 evaluates or saves, every rank then takes part in accelerate's own gather
(``Accelerator.get_state_dict`` on the trainer's prepared model: FSDP's full state dict offloaded to
rank 0's CPU, or ZeRO-3's consolidated 16-bit state dict), rank 0 loads it into a full-weight copy
that it evaluates or saves, and the others wait for rank 0's verdict (:meth:`Distributed.on_rank0`).
"""

from __future__ import annotations

import hashlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from rlvr.issues import ConfigIssue
from rlvr.runtime.faults import chain

T = TypeVar("T")

# The config key every issue about the accelerate config file names.
_KEY = "distributed.accelerate_config"

# What `accelerate launch` puts in each process's environment for these strategies.
_LAUNCH_FLAGS = {"FSDP": "ACCELERATE_USE_FSDP", "DEEPSPEED": "ACCELERATE_USE_DEEPSPEED"}


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


def unnamed_run_dir_issue(argv: list[str]) -> ConfigIssue | None:
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
    During the run it gives rank 0 the full weights where it evaluates or saves (:meth:`on_rank0`).
    """

    def __init__(self, accelerate_config: str | None):
        self.accelerate_config = accelerate_config
        self._trainer: Any = None

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
            path = Path(__file__).resolve().parents[3] / path
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
        if not self.path.is_file():
            return [
                ConfigIssue(
                    _KEY,
                    self.accelerate_config,
                    "file not found",
                    "name a file under infrastructure/accelerate/",
                )
            ]
        strategy = self.strategy
        return (
            self._launch_issues(processes, strategy) + self._machine_issues(strategy) + self._zero3_issues()
        )

    def _launch_issues(self, processes: int, strategy: str) -> list[ConfigIssue]:
        """The processes were started by `accelerate launch` with this file's strategy."""
        issues = []
        if processes <= 1:
            issues.append(
                ConfigIssue(
                    _KEY,
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
                    _KEY,
                    self.accelerate_config,
                    f"the processes were launched as {sorted(launched) or 'plain DDP'}, this file says {strategy}",
                    f"launch with --config_file {self.accelerate_config}",
                )
            )
        return issues

    def _machine_issues(self, strategy: str) -> list[ConfigIssue]:
        """What the strategy needs of this machine: a GPU for FSDP / DeepSpeed, the deepspeed package."""
        issues = []
        if strategy in _LAUNCH_FLAGS and not _cuda():
            issues.append(
                ConfigIssue(
                    _KEY,
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
                        _KEY,
                        self.accelerate_config,
                        "DeepSpeed ZeRO needs the deepspeed package, which is not installed",
                        "make setup (both locks hold deepspeed), or use distributed=ddp",
                    )
                )
        return issues

    def _zero3_issues(self) -> list[ConfigIssue]:
        """ZeRO-3 gathers rank 0's full copy with DeepSpeed's 16-bit consolidation, which needs its flag."""
        issues = []
        if self._zero_stage() == 3 and not self.settings()["deepspeed_config"].get("zero3_save_16bit_model"):
            issues.append(
                ConfigIssue(
                    f"{_KEY} (deepspeed_config.zero3_save_16bit_model)",
                    self.settings()["deepspeed_config"].get("zero3_save_16bit_model"),
                    "ZeRO-3 shards the weights; rank 0 evaluates and saves a full copy gathered with "
                    "DeepSpeed's 16-bit consolidation, which DeepSpeed allows only with this flag",
                    f"set zero3_save_16bit_model: true in {self.accelerate_config}",
                )
            )
        return issues

    def model_issues(self, model: object) -> list[ConfigIssue]:
        """The model component this setup can run (``model``: the built component, or None when it
        could not be built). Under FSDP / ZeRO-3 rank 0 rebuilds the model from gathered weights
        (:func:`full_copy`) in the dtype they arrive in; a bitsandbytes-quantised base would need the
        same quantisation rebuilt around its packed tensors, which the copy does not do."""
        quantization = getattr(model, "quantization", None)
        if not quantization or not self.sharded:
            return []
        return [
            ConfigIssue(
                "model.quantization",
                quantization,
                f"{self.strategy} shards the weights and rank 0 evaluates and saves an unquantised copy "
                "rebuilt from the gathered weights; a quantised base cannot be rebuilt that way",
                "use distributed=ddp or distributed=deepspeed_zero2 for QLoRA (each GPU holds the 4-bit "
                "base), or model.quantization=null",
            )
        ]

    def _zero_stage(self) -> int | None:
        if self.strategy != "DEEPSPEED":
            return None
        return int((self.settings().get("deepspeed_config") or {}).get("zero_stage", 3))

    @property
    def sharded(self) -> bool:
        """FSDP and ZeRO-3 shard the weights themselves: no rank holds them whole once a trainer has
        prepared the model. (ZeRO-1/2 shard optimizer state and gradients only; DDP replicates.)"""
        return self.strategy == "FSDP" or (self._zero_stage() or 0) >= 3

    # -- full weights on rank 0 under sharding ------------------------------------------------------

    def attach(self, trainer: Any) -> None:
        """The trainer whose accelerator prepared (sharded) the model: later gathers go through it."""
        self._trainer = trainer

    def on_rank0(self, model: Any, work: Callable[[Any], T], what: str) -> T | None:
        """``work(full-weight model)`` on rank 0; None on the other ranks.

        Without sharding rank 0 holds the weights and the others return at once (they meet rank 0 at
        their next collective, as before). Under sharding this is a collective: every rank must call
        it at the same point. Every rank takes part in gathering the weights, rank 0 works on a
        full-weight copy, and the others wait for rank 0's verdict: a failure there is raised on rank
        0 with its traceback and on every other rank as :class:`RankZeroFailed` naming it, so the run
        ends with one error instead of ranks hanging in their next collective.
        """
        if not self.sharded:
            return work(model) if is_main() else None
        result: T | None = None
        failure: BaseException | None = None
        with self._full_weights(model) as full:
            if is_main():
                try:
                    result = work(full)
                except BaseException as exc:  # noqa: BLE001 (re-raised below, after the others hear of it)
                    failure = exc
        verdict = _broadcast_from_rank0(None if failure is None else f"{type(failure).__name__}: {failure}")
        if failure is not None:
            raise failure
        if verdict is not None:
            raise RankZeroFailed(f"rank 0 failed while {what}: {verdict}")
        return result

    @contextmanager
    def _full_weights(self, model: Any) -> Iterator[Any]:
        """Every rank enters; rank 0 gets a model holding the full weights, the others None."""
        trainer = self._trainer
        if trainer is None:
            # No trainer has prepared the model yet (the baseline): FSDP has not sharded it and each
            # rank loaded it whole, unless ZeRO-3's zero.Init partitioned it while loading, in which
            # case DeepSpeed's own context gathers the parameters on every rank for the duration.
            partitioned = [p for p in model.parameters() if hasattr(p, "ds_id")]
            if partitioned:
                import deepspeed

                with deepspeed.zero.GatheredParameters(partitioned, modifier_rank=None):
                    yield model if is_main() else None
                return
            yield model if is_main() else None
            return
        # The trainer's own way to save a sharded model (transformers Trainer.save_model): the prepared
        # model (FSDP module / DeepSpeed engine = model_wrapped) through the trainer's accelerator.
        # A collective; the full state dict arrives on rank 0 only (FSDP rank0_only + CPU offload,
        # ZeRO-3 consolidation), the others get an empty one.
        state = trainer.accelerator.get_state_dict(trainer.model_wrapped)
        yield full_copy(model, state, trainer.accelerator.device) if is_main() else None

    def record(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy,
            "accelerate_config": self.accelerate_config,
            "processes": world_size(),
            # FSDP / ZeRO-3: rank 0 evaluated and saved copies gathered from the shards
            "sharded_weights": self.sharded,
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


def full_copy(model: Any, state_dict: dict[str, Any], device: Any) -> Any:
    """A new model of ``model``'s architecture (and LoRA adapter) holding ``state_dict``: the full
    weights gathered from a sharded ``model``, on ``device``, ready to evaluate or save.

    Built on the meta device (no second random initialisation), the gathered tensors assigned in
    place. What a state dict does not carry, non-persistent buffers such as rotary frequencies, is
    taken from ``model`` itself: FSDP and ZeRO-3 shard parameters only, so every rank keeps those whole.
    """
    import copy as copy_

    import torch
    from transformers import AutoModelForCausalLM

    peft_config = getattr(model, "peft_config", None)
    base = model.get_base_model() if peft_config else model
    with torch.device("meta"):
        full = AutoModelForCausalLM.from_config(base.config)
        if peft_config:
            from peft import get_peft_model

            adapter = model.active_adapter
            full = get_peft_model(full, peft_config[adapter], adapter_name=adapter)
    full.load_state_dict(state_dict, strict=False, assign=True)
    own_buffers = dict(model.named_buffers())
    for name, buffer in list(full.named_buffers()):
        if buffer.is_meta and name in own_buffers:
            owner, _, leaf = name.rpartition(".")
            full.get_submodule(owner).register_buffer(
                leaf, own_buffers[name].detach().clone(), persistent=False
            )
    full.tie_weights()  # an absent tied head (lm_head = embed_tokens) points at the loaded embedding
    empty = [n for n, t in (*full.named_parameters(), *full.named_buffers()) if t.is_meta]
    if empty:
        raise RuntimeError(
            f"the gathered state dict has no value for {len(empty)} tensor(s) of {type(base).__name__}, "
            f"e.g. {empty[:3]}: it is not this model's full state dict"
        )
    if getattr(base, "generation_config", None) is not None:
        full.generation_config = copy_.deepcopy(base.generation_config)
    return full.to(device).eval()


def _broadcast_from_rank0(value: Any) -> Any:
    """Rank 0's ``value`` on every rank (a barrier: the others wait for rank 0)."""
    import torch.distributed as dist

    if world_size() <= 1 or not dist.is_initialized():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


class RankZeroFailed(Exception):
    """Rank 0 failed while it evaluated or saved the gathered weights: the other ranks end with this
    (rank 0 prints the cause with its traceback)."""


class StoppedByLauncher(Exception):
    """SIGTERM in a multi-process run: the launcher ends the other ranks when one fails."""


class LauncherStop:
    """With several processes, SIGTERM means the launcher is ending the run (another rank failed, or
    the job was cancelled): this rank records a FAILED end and closes its workers instead of dying
    silently. (Checkpoint-on-SIGTERM, rlvr.training_loop.checkpoints.PreemptionGuard, is for
    single-process runs: ranks cannot agree on a step to stop at once one of them is gone.)

    The handler only records the request, like PreemptionGuard's (SECURITY.md "A stop request no
    library code can swallow"): an exception raised from a signal handler lands wherever the main
    thread is, and a library's bare ``except:`` there swallows it. rlvr's own code makes the stop: at
    the end of the training step (``guard.abandon``: training stops, no checkpoint) or before the
    next stage (:meth:`stop_if_requested`), raising :class:`StoppedByLauncher`. A second SIGTERM ends
    the process at once by the signal's default action."""

    def __init__(self, guard: Any = None) -> None:
        self._previous: Any = None
        self.guard = guard  # the run's PreemptionGuard: it stops training at the end of the step
        self.requested = False
        self.finished = False  # every stage done: a SIGTERM during the final prune changes nothing

    def __enter__(self) -> LauncherStop:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def reason(self) -> str:
        return (
            f"rank {rank()} stopped by the launcher (SIGTERM): another process of this run failed "
            "(its error is printed above) or the job was cancelled"
        )

    def _handle(self, signum: int, frame: Any) -> None:
        """Record the request; never raise (a library's bare ``except:`` would swallow it)."""
        if self.finished:
            return
        if self.requested:  # the launcher insists: end now, whatever the code running is doing
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.requested = True
        if self.guard is not None:
            self.guard.abandon(self.reason())

    def stop_if_requested(self, before: str) -> None:
        """Raise ``StoppedByLauncher`` when the launcher asked to stop: called between stages."""
        if self.requested:
            raise StoppedByLauncher(f"{self.reason()}; stopped before the {before} stage")


# How torch.distributed reports that another rank is gone (gloo over TCP; NCCL raises DistError types).
_PEER_LOST = ("closed by peer", "reset by peer", "broken pipe", "connection refused")


def peer_lost(exc: BaseException) -> bool:
    """Whether ``exc`` is this rank noticing that another rank of the run has gone (a consequence,
    not the cause: the failing rank prints the cause), also when a library wrapped that notice: a
    SIGTERM that lands while TRL imports a trainer lazily arrives as TRL's ``RuntimeError('Failed to
    import trl.trainer.sft_trainer ...')`` raised from our :class:`StoppedByLauncher`."""
    return any(_peer_lost_here(cause) for cause in chain(exc))


def _peer_lost_here(exc: BaseException) -> bool:
    if isinstance(exc, StoppedByLauncher | RankZeroFailed):
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
