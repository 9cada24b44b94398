"""The check before Hydra: the config composed exactly as ``hydra.main`` is about to compose it.

Hydra acts on ``hydra.*`` before the app runs, so :func:`screen_command_line` composes the config with the
same parser, search path and mode (each sweep point too) and hands it to the policy on Hydra's own
settings (:mod:`rlvr.security.hydra_policy`) first. A command line override of a key that does not
exist, or of a config group to an option it lacks, is named here with its close match and held back
for the gate (:mod:`rlvr.config.gate`), which reports it together with every other problem.
Everything about the app's own keys is the gate's job.
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from hydra.core.config_loader import ConfigLoader
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlvr.issues import ConfigIssue, ConfigValidationError, suggest
from rlvr.runtime.hydra_compose import loader, parser
from rlvr.security.hydra_policy import (
    code_issues,
    config_file_issues,
    hydra_issues,
    location_issues,
    sweeper_param_overrides,
    unsafe_run_dir_issues,
)


def screen_command_line(
    argv: list[str], script: Path, default_config_path: str, default_config_name: str
) -> list[tuple[str, ConfigIssue]]:
    """Compose the config exactly as ``hydra.main`` is about to (same flags, search path and mode)
    and raise ConfigValidationError for the Hydra settings, resolvers and sweeps refused above.

    Returns the overrides of keys that do not exist, each with its issue: the caller hands Hydra the
    command line without them and the gate reports them with every other problem (a sweep refuses
    them here, as its points run elsewhere).
    """
    args = parser().parse_args(argv)
    if args.help or args.hydra_help or args.shell_completion:
        return []
    if args.experimental_rerun is not None:
        # Hydra unpickles that file: loading it runs whatever code the pickle names.
        raise ConfigValidationError(
            [
                ConfigIssue(
                    "--experimental-rerun",
                    args.experimental_rerun,
                    "Hydra would unpickle this file, which runs any code it names",
                    "rerun from the run's config_resolved.yaml: python run_pipeline.py "
                    "--config-dir <run dir> --config-name config_resolved",
                )
            ]
        )
    config_name = args.config_name or default_config_name
    composed = _compose(argv, args, script, default_config_path, config_name)
    if composed is None:
        return []  # Hydra refuses sweep syntax without -m itself, with its own message, before acting
    cfg, mode, job_hydra_nodes, unknown = composed
    overrides = [o for o in args.overrides if o not in {line for line, _ in unknown}]
    multirun = mode == RunMode.MULTIRUN
    issues = hydra_issues(cfg, job_hydra_nodes, multirun, overrides)
    issues += location_issues(cfg, multirun, overrides, script, default_config_path, config_name, mode)
    issues += unsafe_run_dir_issues(cfg, multirun)
    if issues or (unknown and multirun):
        raise ConfigValidationError([*(issue for _, issue in unknown), *issues])
    return unknown


def _compose(
    argv: list[str], args: Any, script: Path, default_config_path: str, config_name: str
) -> tuple[DictConfig, Any, list[DictConfig], list[tuple[str, ConfigIssue]]] | None:
    """(config, run mode, each sweep point's Hydra node, unknown-key overrides with their issues);
    None for sweep syntax without -m."""
    from hydra.errors import HydraException

    config_path = args.config_path if args.config_path is not None else default_config_path
    try:
        with loader(script, config_path, args.config_dir) as hydra:
            issues = config_file_issues(hydra.get_search_path())
            if issues:  # before Hydra reads them: composing an alias bomb alone takes minutes and gigabytes
                raise ConfigValidationError(issues)
            mode = _mode(hydra, args, config_name)
            overrides = OverridesParser.create().parse_overrides(list(args.overrides))
            if mode == RunMode.RUN and any(o.is_sweep_override() for o in overrides):
                return None
            cfg, unknown = _compose_known_keys(hydra, config_name, list(args.overrides), mode)
            kept = [o for o in args.overrides if o not in {line for line, _ in unknown}]
            jobs = _group_sweep_jobs(hydra, cfg, kept) if mode == RunMode.MULTIRUN else []
            job_cfgs = [hydra.load_configuration(config_name, job, run_mode=RunMode.RUN) for job in jobs]
            job_hydra_nodes = [job_cfg.hydra for job_cfg in job_cfgs]
            points = [(job_cfg, job, RunMode.RUN) for job_cfg, job in zip(job_cfgs, jobs, strict=True)]
            issues = code_issues(hydra, config_name, kept, [(cfg, kept, mode), *points])
            if issues:  # before any model is named to a library: refused with everything else found
                raise ConfigValidationError([*(issue for _, issue in unknown), *issues])
    except (HydraException, OmegaConfBaseException, yaml.YAMLError) as exc:
        # Fail closed: a config this check cannot compose is not handed to Hydra either.
        raise ConfigValidationError(
            [ConfigIssue("(command line)", " ".join(argv), f"{type(exc).__name__}: {exc}", _compose_fix(exc))]
        ) from exc
    return cfg, mode, job_hydra_nodes, unknown


def _mode(hydra: ConfigLoader, args: Any, config_name: str) -> RunMode:
    """-m or -r, else the config's ``hydra.mode`` as ``hydra.main`` reads it (composed for a sweep,
    sweep syntax allowed; a config that does not compose so runs once)."""
    if args.multirun or args.run:
        return RunMode.MULTIRUN if args.multirun else RunMode.RUN
    try:
        cfg = hydra.load_configuration(
            config_name, list(args.overrides), run_mode=RunMode.MULTIRUN, validate_sweep_overrides=False
        )
    except Exception:
        return RunMode.RUN
    return cfg.hydra.mode or RunMode.RUN


def _compose_fix(exc: Exception) -> str:
    """The fix for a config Hydra could not compose: the close option names when a config file or
    option is missing (an experiment's defaults list can name one too)."""
    from hydra.errors import MissingConfigException

    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and exc.options:
        group, _, name = exc.missing_cfg_file.rpartition("/")
        return _option_fix(group, name, sorted(exc.options)) if group else suggest(name, exc.options)
    return (
        "fix the override or config file the message names (python run_pipeline.py --help lists the groups)"
    )


_UNKNOWN_KEY = re.compile(r"Could not override '([^']+)'\.")


def _compose_known_keys(
    hydra: ConfigLoader, config_name: str, overrides: list[str], mode: Any
) -> tuple[DictConfig, list[tuple[str, ConfigIssue]]]:
    """Compose, leaving out each override of a key the config does not have (Hydra stops at the
    first), and each config-group choice that is not an option name (``model=5``: Hydra raises a
    bare ValueError); each left-out override comes back with its issue."""
    from hydra.errors import ConfigCompositionException, MissingConfigException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    bad_groups = _group_value_issues(hydra, overrides)
    kept = [o for o in overrides if o not in {line for line, _ in bad_groups}]
    unknown: list[str] = []
    while True:
        try:
            cfg = hydra.load_configuration(config_name, kept, run_mode=mode)
            return cfg, bad_groups + [(line, _unknown_key_issue(cfg, line)) for line in unknown]
        except MissingConfigException:
            absent = _missing_option_issues(hydra, kept)
            if not absent:
                raise
            bad_groups += absent
            kept = [o for o in kept if o not in {line for line, _ in absent}]
        except ConfigCompositionException as exc:
            match = _UNKNOWN_KEY.match(str(exc))
            missing = isinstance(exc.__cause__, (ConfigKeyError, ConfigAttributeError))
            line = next((o for o in kept if match and o.split("=", 1)[0] == match.group(1)), None)
            if not (missing and line is not None):
                raise
            kept.remove(line)
            unknown.append(line)


def _group_choices(hydra: ConfigLoader, overrides: list[str]) -> Iterator[tuple[Any, Any, list[str]]]:
    """(override, value, the group's options) of each plain override that picks a config group's option."""
    for o in OverridesParser.create(config_loader=hydra).parse_overrides(overrides):
        if o.is_sweep_override() or o.is_delete() or not _is_group(hydra, o.key_or_group):
            continue
        yield o, o.value(), sorted(hydra.get_group_options(o.key_or_group))


def _is_group(hydra: ConfigLoader, name: str) -> bool:
    return any(source.is_group(name) for source in hydra.get_sources())


def _group_value_issues(hydra: ConfigLoader, overrides: list[str]) -> list[tuple[str, ConfigIssue]]:
    found = []
    for o, value, options in _group_choices(hydra, overrides):
        if not isinstance(value, (str, list)):
            issue = ConfigIssue(
                o.key_or_group,
                value,
                f"is a config group: it takes the name of a file in conf/{o.key_or_group}/",
                f"one of {options}" + (f", or drop it with ~{o.key_or_group}" if value is None else ""),
            )
            found.append((o.input_line, issue))
    return found


def _missing_option_issues(hydra: ConfigLoader, overrides: list[str]) -> list[tuple[str, ConfigIssue]]:
    """Group choices that name no option, once Hydra could not compose (so an option that only a
    ``hydra.searchpath`` override or an experiment adds is never judged missing). Hydra's own refusal
    lists the options without naming the close one."""
    found = []
    for o, value, options in _group_choices(hydra, overrides):
        # a name with a '/' is a file in a subfolder, which get_group_options does not list
        names = value if isinstance(value, list) else [value]
        missing = [n for n in names if isinstance(n, str) and "/" not in n and n not in options]
        for name in missing:
            fix = _option_fix(o.input_line.split("=", 1)[0], name, options, o.key_or_group)
            if o.key_or_group == "data" and _is_task(name):
                fix = f"{name} is a reasoning-gym task, not a data option: write data.task={name}"
            issue = ConfigIssue(
                o.key_or_group,
                name,
                f"is not an option of the config group {o.key_or_group} (conf/{o.key_or_group}/<option>.yaml)",
                f"{fix} (options: {', '.join(options)})",
            )
            found.append((o.input_line, issue))
    return found


def _is_task(name: str) -> bool:
    from rlvr.data.reasoning_gym import task_names

    return name in task_names()


def _option_fix(key: str, name: str, options: list[str], group: str | None = None) -> str:
    """``key=<closest option>`` for a misspelt option name of config group ``group`` (``key`` as the
    override wrote it, e.g. ``+reward/terms@reward.terms.x``), else where a new option goes."""
    close = difflib.get_close_matches(name, options, n=3, cutoff=0.5)
    if not close:
        return f"pick one of the options, or add conf/{group or key}/{name}.yaml"
    return "did you mean " + " or ".join(f"{key}={c}" for c in close) + "?"


def _key_paths(node: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every key path of a config tree as written (interpolations unresolved; ``hydra`` left out)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if not prefix and key == "hydra":
                continue
            yield (*prefix, str(key))
            yield from _key_paths(value, (*prefix, str(key)))


def _moved_key_fix(cfg: DictConfig, parts: list[str], parent: list[str], value: str) -> str | None:
    """Where a key the user placed wrongly lives: the full paths that end with what was written below
    its deepest existing node (``learning_rate`` -> ``training_loop.grpo.learning_rate``), those under
    that node first; None when no path ends so."""
    tail = tuple(parts[len(parent) :])
    container = OmegaConf.to_container(cfg, resolve=False)
    found = sorted(
        (p for p in _key_paths(container) if p[-len(tail) :] == tail and len(p) > len(tail)),
        key=lambda p: (p[: len(parent)] != tuple(parent), len(p), p),
    )
    if not found:
        return None
    paths = [".".join(p) for p in found]
    more = f" (also {', '.join(paths[1:4])}{', ...' if len(paths) > 4 else ''})" if len(paths) > 1 else ""
    return f"it lives at {paths[0]}{more}: write {paths[0]}={value}"


def _unknown_key_issue(cfg: DictConfig, line: str) -> ConfigIssue:
    key, value = line.split("=", 1)
    parts = key.split(".")
    parent: list[str] = []
    for part in parts[:-1]:  # the deepest node that exists on the way to the key
        node = OmegaConf.select(
            cfg, ".".join([*parent, part]), default=None, throw_on_resolution_failure=False
        )
        if not isinstance(node, DictConfig):
            break
        parent.append(part)
    node = OmegaConf.select(cfg, ".".join(parent), default=None) if parent else cfg
    names = [str(k) for k in node] if isinstance(node, DictConfig) else []
    where = f"under {'.'.join(parent)}" if parent else "at the top level"
    missing = parts[len(parent)]
    if missing in names:  # it exists but holds a value (null, a number), not keys: set it whole
        here, held = ".".join([*parent, missing]), OmegaConf.select(node, missing, default=None)
        return ConfigIssue(
            key,
            value,
            f"{here} is {'null' if held is None else repr(held)} here, not a node with keys",
            f"set it whole, quoted for the shell: '{here}={{{'.'.join(parts[len(parent) + 1 :])}: {value}}}'",
        )
    moved = _moved_key_fix(cfg, parts, parent, value)
    return ConfigIssue(
        key,
        value,
        f"the config has no key {missing!r} {where}",
        moved or f"{suggest(missing, names)} (to add a new key on purpose, write +{line})",
    )


def _group_sweep_jobs(hydra: ConfigLoader, cfg: DictConfig, overrides: list[str]) -> list[list[str]]:
    """The override lists of the sweep points that differ in a config-group choice (only those can
    change ``hydra.*``: sweeping a hydra key is refused, and value sweeps of app keys do not reach
    the Hydra node, whose interpolated parts are judged as written). Expanded like BasicSweeper."""
    from hydra.errors import HydraException

    parser = OverridesParser.create(config_loader=hydra)
    parsed = parser.parse_overrides(sweeper_param_overrides(cfg) + overrides)
    kept = [o for o in parsed if not o.is_sweep_override() or _is_group(hydra, o.key_or_group)]
    if not any(o.is_sweep_override() for o in kept):
        return []
    choices: dict[str, list[str]] = {}  # BasicSweeper's order: a key's last override, at its first place
    for o in kept:
        if o.is_sweep_override() and not o.is_discrete_sweep():
            raise HydraException(f"BasicSweeper does not support sweep type : {o.input_line}")
        key = o.get_key_element()
        values = o.sweep_string_iterator() if o.is_sweep_override() else [o.get_value_element_as_str()]
        choices[key] = [f"{key}={value}" for value in values]
    return [list(job) for job in itertools.product(*choices.values())]
