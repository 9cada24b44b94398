"""Config checks that need no component: ``_target_`` allowlist and argument binding against signatures.

Hydra's own blocklist lets ``builtins.open`` through, so any ``_target_`` outside
this project's package and an explicit allowlist is refused before instantiation.
Arguments are bound against each target's signature (torchtune's approach), so
a misspelt key fails with its path and the valid names, before anything loads.
"""

from __future__ import annotations

import inspect
from typing import Any

from hydra.utils import get_object
from omegaconf import DictConfig, ListConfig, OmegaConf

from rlvr.config_errors import ConfigIssue, suggest

ALLOWED_TARGET_PREFIXES = ("rlvr.",)
_HYDRA_KEYS = {"_target_", "_partial_", "_recursive_", "_convert_", "_args_"}


def iter_targets(node: Any, path: str = "") -> list[tuple[str, DictConfig]]:
    """Every (dotted path, node) that has a ``_target_``, depth first."""
    found = []
    if isinstance(node, DictConfig):
        if "_target_" in node:
            found.append((path, node))
        for key in node:
            found.extend(iter_targets(node._get_node(key), f"{path}.{key}" if path else str(key)))
    elif isinstance(node, ListConfig):
        for i, item in enumerate(node):
            found.extend(iter_targets(item, f"{path}[{i}]"))
    return found


def check_targets(cfg: DictConfig, runtime_args: dict[str, set[str]] | None = None) -> list[ConfigIssue]:
    """Allowlist + signature binding for every ``_target_`` in ``cfg``.

    ``runtime_args`` names, per config path, the arguments the orchestrator passes at
    instantiation (they are absent from YAML on purpose).
    """
    runtime_args = runtime_args or {}
    issues = []
    for path, node in iter_targets(cfg):
        target = OmegaConf.select(node, "_target_", throw_on_missing=False)
        key = f"{path}._target_"
        if not isinstance(target, str) or not target.startswith(ALLOWED_TARGET_PREFIXES):
            issues.append(
                ConfigIssue(
                    key,
                    target,
                    f"targets outside {ALLOWED_TARGET_PREFIXES} are refused (a config must not run arbitrary code)",
                    "point _target_ at a class in the rlvr package, or wrap the library class in one",
                )
            )
            continue
        try:
            obj = get_object(target)
        except Exception as exc:
            issues.append(
                ConfigIssue(
                    key, target, f"cannot be imported ({type(exc).__name__})", "check the dotted path"
                )
            )
            continue
        try:
            signature = inspect.signature(obj)
        except (TypeError, ValueError):
            continue
        params = signature.parameters
        accepts_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        given = [k for k in node if k not in _HYDRA_KEYS]
        if not accepts_kwargs:
            for name in given:
                if name not in params:
                    issues.append(
                        ConfigIssue(
                            f"{path}.{name}",
                            OmegaConf.select(node, name, throw_on_missing=False),
                            f"{target} takes no argument '{name}'",
                            f"{suggest(name, params)} valid: {', '.join(p for p in params if p != 'self')}",
                        )
                    )
        provided = set(given) | runtime_args.get(path, set())
        # A partial is completed by the caller at run time, so missing arguments are expected there.
        is_partial = bool(OmegaConf.select(node, "_partial_", default=False))
        for name, param in params.items():
            if is_partial:
                break
            required = param.default is inspect.Parameter.empty and param.kind in (
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                inspect.Parameter.KEYWORD_ONLY,
            )
            if required and name not in provided:
                issues.append(
                    ConfigIssue(f"{path}.{name}", None, f"required by {target}", f"set {path}.{name}")
                )
        for name in given:
            if OmegaConf.is_missing(node, name):
                issues.append(
                    ConfigIssue(f"{path}.{name}", "???", "missing mandatory value", f"set {path}.{name}")
                )
    return issues
