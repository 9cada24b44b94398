"""Hydra entry point: ``python run_pipeline.py [overrides]`` (see README.md).

The config's ``app`` node names the function to run (training pipeline or
benchmark), so this file only checks the config and hands it over. The config gate
(rlvr.config.gate) runs twice before anything acts on the config (SECURITY.md): on the
command line and Hydra's own settings before ``hydra.main`` starts, and on the resolved
config (every node, every component the app builds) before ``app`` is instantiated; the app
gets what the gate built.
"""

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig

from rlvr.config import gate
from rlvr.issues import ConfigIssue, ConfigValidationError
from rlvr.runtime.allocator import reexec_with_tunables
from rlvr.runtime.distributed import is_main
from rlvr.runtime.logs import (
    INTERRUPTED_EXIT_CODE,
    quiet_submitit_sacct,
    route_library_loggers,
    traceback_to_log_file,
)
from rlvr.runtime.secrets import redact_console, redact_logging

# Offline unless the user says otherwise: the default run must never wait on a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

CONFIG_PATH, CONFIG_NAME = "conf", "config"


_PEER_REFUSAL_WAIT_SECONDS = 10


def _refuse(exc: ConfigValidationError) -> None:
    # Under `accelerate launch` every rank finds the same problems: rank 0 alone prints them. The
    # launcher ends every rank as soon as one exits with an error, so the other ranks give rank 0
    # time to print first (seen: a rank 1 that exited at once left the user with no message at all).
    if is_main():
        print(f"\n{exc}\n", file=sys.stderr)
    else:
        time.sleep(_PEER_REFUSAL_WAIT_SECONDS)
    sys.exit(2)


def entry(held: list[ConfigIssue]) -> Callable[[], Any]:
    """The Hydra app; ``held``: the command-line issues the check before Hydra held back, reported by
    the gate with every other problem."""

    @hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name=CONFIG_NAME)
    def main(cfg: DictConfig) -> float | None:
        """Returns the final held-out accuracy of a training run: the objective a Hydra sweeper
        (e.g. Optuna, README "Hyperparameter search") maximises."""
        redact_logging()  # Hydra has configured its console and log-file handlers by now
        try:
            route_library_loggers()  # before the checks import the config's targets (bitsandbytes warns)
            passed = gate.check(cfg, held=held)  # the components the app names, built and validated
            from rlvr.app import objective  # after the checks: a refusal needs no pipeline import

            return objective(instantiate(passed.cfg.app)(passed))
        except ConfigValidationError as exc:
            _refuse(exc)
            return None
        except KeyboardInterrupt as exc:  # a training run's own Ctrl-C is handled in rlvr.app
            traceback_to_log_file(exc)
            print("interrupted (Ctrl-C)", file=sys.stderr)
            sys.exit(INTERRUPTED_EXIT_CODE)

    return main


if __name__ == "__main__":
    # Before torch is imported: glibc reads its malloc settings at process start (rlvr.runtime.allocator).
    reexec_with_tunables()
    redact_console()  # every line this process prints passes rlvr.runtime.secrets (SECURITY.md "Secrets")
    quiet_submitit_sacct()  # a SLURM launch on a cluster without accounting: one line, not three per poll
    try:
        # Overrides of keys the config lacks: Hydra gets the command line without them, the gate
        # reports them with every other problem.
        sys.argv[1:], held = gate.before_hydra(
            sys.argv[1:], Path(__file__).resolve(), CONFIG_PATH, CONFIG_NAME
        )
    except ConfigValidationError as exc:
        _refuse(exc)
    entry(held)()
