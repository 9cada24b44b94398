"""Hydra entry point: ``python run_pipeline.py [overrides]`` (see README.md).

The config's ``app`` node names the function to run (training pipeline or
benchmark), so this file only composes the config and hands it over.
"""

import os
import sys

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig

from rlvr.config_errors import ConfigValidationError

# Offline unless the user says otherwise: the default run must never wait on a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    try:
        instantiate(cfg.app)(cfg)
    except ConfigValidationError as exc:
        print(f"\n{exc}\n", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
