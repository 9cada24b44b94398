"""What each component receives at build time, and the one builder that follows it.

:data:`WIRING` is the table: per component key, the constructor arguments it takes from components
built before it. The training pipeline, the benchmark and the config gate build through
:func:`build_all` (a training run and a benchmark through the gate, which hands the app what it
built), so they can never disagree on who gets what; :func:`runtime_args` tells
:func:`rlvr.config.validation.check_targets` which arguments are provided at build time (absent from
the YAML on purpose).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from rlvr.issues import ConfigIssue, ConfigValidationError
from rlvr.runtime.secrets import redact


@dataclass(frozen=True)
class Wiring:
    """How one component is built from the ones before it."""

    takes: dict[str, str]  # constructor argument -> key of the component that provides it
    # A child mapping whose entries are built with the same arguments and passed under this name.
    each: str | None = None
    # Built even when a provider could not be (None stands in), so its own config mistakes are
    # reported with the provider's; otherwise it is skipped and only the provider's are.
    without_providers: bool = False


WIRING: dict[str, Wiring] = {
    "reward": Wiring({"prompt": "prompts", "verifier": "verifier"}, each="terms"),
    "evaluation": Wiring({"prompt": "prompts", "verifier": "verifier"}),
    "training_loop": Wiring({"prompt": "prompts", "rewards": "reward"}, without_providers=True),
}

# The components of a training run, in the order they are built (providers before their users);
# ``observers`` stands for each of its entries.
COMPONENT_KEYS = ("prompts", "verifier", "data", "model", "reward", "training_loop", "evaluation")
TRAINING = (*COMPONENT_KEYS, "observers", "distributed")
# Built where the config has them: one process needs no distributed setup, a benchmark no observers.
OPTIONAL_KEYS = ("distributed", "observers")


@dataclass
class BuildResult:
    """What :func:`build_all` made, and the config mistakes its constructors raised: its return value
    (the gate keeps the components for the app, rlvr.config.gate.GateResult)."""

    components: dict[str, Any] = field(default_factory=dict)
    issues: list[ConfigIssue] = field(default_factory=list)


def runtime_args(cfg: DictConfig) -> dict[str, set[str]]:
    """Per config path, the arguments passed at build time (:data:`WIRING`)."""
    args: dict[str, set[str]] = {}
    for key, wiring in WIRING.items():
        args[key] = set(wiring.takes)
        if wiring.each is not None:
            children = OmegaConf.select(cfg, f"{key}.{wiring.each}", default=None)
            # anything but a mapping: check_targets names it
            for name in children if isinstance(children, DictConfig) else {}:
                args[f"{key}.{wiring.each}.{name}"] = set(wiring.takes)
    return args


def _instantiate(node: DictConfig, runtime: dict[str, Any] | None = None, recursive: bool = True) -> Any:
    """``instantiate`` with Hydra's wrapper removed, so a component's own ConfigValidationError
    reaches the collector and a bug keeps its original exception and traceback.

    ``runtime`` objects go to the constructor directly, not through Hydra's config merge (which
    would turn a dataclass such as PromptTemplate into a dict).
    """
    try:
        if runtime is None:
            return instantiate(node, _convert_="all")
        return instantiate(node, _convert_="all", _partial_=True, _recursive_=recursive)(**runtime)
    except InstantiationException as exc:
        if exc.__cause__ is not None:
            raise exc.__cause__ from None
        raise


def build(key: str, node: DictConfig, built: dict[str, Any]) -> Any:
    """Component ``key`` with the arguments :data:`WIRING` gives it (None when a provider it cannot
    do without was not built: that provider's own issues are reported instead)."""
    wiring = WIRING.get(key)
    if wiring is None:
        return _instantiate(node)
    runtime = {arg: built.get(provider) for arg, provider in wiring.takes.items()}
    if not wiring.without_providers and any(v is None for v in runtime.values()):
        return None
    if wiring.each is None:
        return _instantiate(node, runtime)
    children = {name: _instantiate(child, runtime) for name, child in (node.get(wiring.each) or {}).items()}
    return _instantiate(node, {**runtime, wiring.each: children}, recursive=False)


def _nodes(cfg: DictConfig, keys: tuple[str, ...]) -> list[tuple[str, DictConfig]]:
    """The nodes to build, providers first; ``observers`` stands for each of its entries."""
    nodes = []
    for key in keys:
        if key != "observers":
            nodes.append((key, cfg[key]))
            continue
        for name in cfg.observers:
            # An observer only writes (a run name, tags, a project): it is built from its settings
            # with secrets masked, so none reaches a tracker's files or servers.
            masked = OmegaConf.create(redact(OmegaConf.to_container(cfg.observers[name], resolve=True)))
            nodes.append((f"observers.{name}", masked))
    return nodes


def build_all(
    cfg: DictConfig, keys: tuple[str, ...], skip: frozenset[str] | set[str] = frozenset()
) -> BuildResult:
    """Build the components ``keys`` names that ``cfg`` has (those in ``skip`` not: their config is
    already known to be wrong), collecting the config mistakes their constructors raise. Anything
    else a constructor raises is a bug and propagates with its traceback."""
    out = BuildResult()
    for key, node in _nodes(cfg, tuple(k for k in keys if k in cfg)):
        if key in skip:
            continue
        try:
            component = build(key, node, out.components)
        except ConfigValidationError as exc:
            out.issues.extend(exc.issues)
            continue
        if component is not None:
            out.components[key] = component
    return out


def observers_of(built: dict[str, Any]) -> dict[str, Any]:
    """The observers among what :func:`build_all` built (keyed ``observers.<name>``), by name."""
    return {k.split(".", 1)[1]: v for k, v in built.items() if k.startswith("observers.")}
