"""The config gate after composition: the resolved config every app instantiates from.

:func:`checked_config` resolves the composed config once (resolvers and credentials checked
first) and judges the ``app`` target; the app then binds every component against its signature
and runs each component's own validate() (rlvr.config.validation, the components), reporting
every problem at once. Command-line mistakes the check before Hydra held back
(:func:`hold`) join that report.
"""

from __future__ import annotations

import contextlib
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlvr.config.errors import ConfigIssue, ConfigValidationError
from rlvr.config.trust import (
    check_resolvers,
    code_setting_issues,
    credential_issues,
    rebuilt_interpolations,
    secret_path_issue,
)
from rlvr.config.validation import check_targets, run_key_issues


def _resolved(cfg: DictConfig) -> Any:
    """The config resolved to plain data; a value a resolver refuses (rlvr.config.resolvers) becomes a
    ConfigIssue naming the key, the value as written and the resolver's rule."""
    from omegaconf.errors import InterpolationResolutionError

    from rlvr.config.resolvers import ResolverArgumentError

    try:
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)
    except InterpolationResolutionError as exc:
        # OmegaConf drops the resolver's exception and keeps its type name and text in the message.
        prefix = f"{ResolverArgumentError.__name__} raised while resolving interpolation: "
        first = str(exc).splitlines()[0] if str(exc) else ""
        if not first.startswith(prefix):
            raise
        refused = first[len(prefix) :]
        raw: Any = OmegaConf.to_container(cfg, resolve=False)
        for part in (exc.full_key or "").split("."):
            raw = raw.get(part) if isinstance(raw, dict) else None
        raise ConfigValidationError(
            [
                ConfigIssue(
                    exc.full_key or "(config)",
                    raw,
                    str(refused),
                    'see docs/rewards-and-prompts.md "Prompts per model family"',
                )
            ]
        ) from None


def checked_config(cfg: DictConfig) -> DictConfig:
    """The config resolved into a fresh node, after the resolver check and the ``app`` target check.

    Everything downstream instantiates from the returned copy, so nothing a resolver could
    produce later escapes the apps' own :func:`check_targets` of every node.
    """
    issues = check_resolvers(cfg)
    if issues:
        refuse(issues)
    # Resolving records every value oc.env returns (rlvr.runtime.secrets.watch_env_reads): from here on
    # they are masked in every output of this process.
    container = _resolved(cfg)
    issues = credential_issues(container) + rebuilt_interpolations(container) + _output_dir_issues()
    issues += _code_issues(container)
    if issues:
        refuse(issues)
    resolved = OmegaConf.create(container)
    # The app is instantiated right after this; every other node is judged again, together with
    # each component's own validation, by the app before it instantiates anything (so a user sees
    # all problems at once).
    issues = [i for i in check_targets(resolved, targets_only=True) if i.key.startswith("app.")]
    if issues:
        refuse(issues)
    return resolved


def _output_dir_issues() -> list[ConfigIssue]:
    """Inside a Hydra job: its output directory (a sweep point's subdir included, which the check
    before Hydra may not resolve) must not hold a secret; refused before the app writes anything."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    hydra_node = HydraConfig.get()
    for node in ("run", "sweep"):  # resolving records the environment reads in them
        with contextlib.suppress(OmegaConfBaseException):
            OmegaConf.to_container(hydra_node[node], resolve=True)
    issue = secret_path_issue("hydra.runtime.output_dir", str(hydra_node.runtime.output_dir))
    return [] if issue is None else [issue]


def _code_issues(container: Any) -> list[ConfigIssue]:
    """Inside a Hydra job: settings that make a library run a model's own code (rlvr.config.trust.
    CODE_SETTINGS) only where this job's command-line overrides set them; a sweeper's ``params``
    are a config file's. The check before Hydra refused them already, naming the file; this one holds
    for every job a launcher starts (a requeued one too). A Python caller composes its own config."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if not HydraConfig.initialized():
        return []
    hydra_node = HydraConfig.get()
    params = OmegaConf.to_container(hydra_node.sweeper, resolve=False).get("params") or {}
    typed = {
        o.key_or_group for o in OverridesParser.create().parse_overrides(list(hydra_node.overrides.task))
    }
    return code_setting_issues(container, typed - set(params))


# Command-line overrides of keys that do not exist, named by the check before Hydra (which hands
# Hydra the command line without them): reported by the gate with every other problem, so a
# misspelt key never hides the rest. Held in this process only: a sweep refuses them at once.
_HELD: list[ConfigIssue] = []


def hold(issues: list[ConfigIssue]) -> None:
    _HELD.extend(issues)


def config_issues(cfg: DictConfig, runtime_args: dict[str, set[str]] | None = None) -> list[ConfigIssue]:
    """What an app checks before building its components: the run's own top-level keys, and every
    ``_target_`` judged and bound against its signature (:func:`check_targets`)."""
    return run_key_issues(cfg) + check_targets(cfg, runtime_args)


def refuse(issues: list[ConfigIssue]) -> None:
    """Raise ConfigValidationError with the held command-line issues and ``issues``, if any."""
    found = [*_HELD, *issues]
    if found:
        raise ConfigValidationError(found)
