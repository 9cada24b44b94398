"""Hydra's config loader and command line as ``hydra.main`` sets them up, through Hydra's public API
(the compose API, a search-path plugin): the checks before Hydra (rlvr.config.hydra_check,
rlvr.security.hydra_policy) compose with them, and no module imports ``hydra._internal``."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hydra.core.config_loader import ConfigLoader
from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


def parser() -> argparse.ArgumentParser:
    """Hydra's command-line flags as ``hydra.main`` parses them (its parser is private to Hydra:
    tests/unit/test_hydra_public_api.py holds this copy to the installed Hydra's)."""
    from hydra import __version__

    parser = argparse.ArgumentParser(add_help=False, description="Hydra")
    parser.add_argument("overrides", nargs="*")
    for flag in (
        "-h/--help",
        "--hydra-help",
        "--resolve",
        "-r/--run",
        "-m/--multirun",
        "-sc/--shell-completion",
    ):
        parser.add_argument(*flag.split("/"), action="store_true")
    for flag in (
        "-p/--package",
        "-cp/--config-path",
        "-cn/--config-name",
        "-cd/--config-dir",
        "--experimental-rerun",
    ):
        parser.add_argument(*flag.split("/"))
    parser.add_argument("--version", action="version", version=f"Hydra {__version__}")
    parser.add_argument("-c", "--cfg", choices=["job", "hydra", "all"])
    info = ["all", "config", "defaults", "defaults-tree", "plugins", "searchpath"]
    parser.add_argument("-i", "--info", const="all", nargs="?", choices=info)
    return parser


class ConfigDir(SearchPathPlugin):
    """``--config-dir`` where ``hydra.main`` puts it (after every other plugin's folders, before
    Hydra's structured configs), while :func:`loader` composes; inert otherwise, as Hydra's plugin
    registry keeps it for the process."""

    folder: str | None = None

    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        if ConfigDir.folder is not None:
            search_path.append("command-line", f"file://{ConfigDir.folder}")


@contextmanager
def loader(script: Path, config_path: str, config_dir: str | None) -> Iterator[ConfigLoader]:
    """Hydra's config loader for ``hydra.main`` of ``script`` (its config folder, ``--config-dir``),
    through the compose API; Hydra's global state is restored on exit."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.plugins import Plugins

    Plugins.instance().register(ConfigDir)
    ConfigDir.folder = None if config_dir is None else os.path.abspath(config_dir)
    try:
        # the folder as hydra.main computes it (absolute, or beside the script's real path); its version_base
        main = os.path.normpath(os.path.join(os.path.realpath(script.parent), config_path))
        with initialize_config_dir(main, job_name=script.stem, version_base="1.3"):
            yield GlobalHydra.instance().config_loader()
    finally:
        ConfigDir.folder = None
