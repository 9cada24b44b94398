"""What a config may make Hydra do: its own settings, judged before ``hydra.main`` acts on them.

Hydra applies ``hydra.*`` before the app runs (the environment of every subprocess, logging
handlers, callbacks, launchers and their job scripts, the run directory it opens its log file in)
and resolves that node, which can interpolate any key. The check before Hydra
(:func:`rlvr.config.hydra_check.screen_command_line`) composes the config as ``hydra.main`` is about to and
hands it here: every setting this program does not need is refused, launcher settings must have a
strict shape, the run and sweep directories are the command line's or the shipped defaults', and
settings that run a model's own code (:data:`rlvr.security.trust.CODE_SETTINGS`) are refused
naming the file that set them. The threat model is SECURITY.md's.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlvr.issues import ConfigIssue
from rlvr.security.trust import (
    CODE_SETTINGS,
    check_resolvers,
    code_setting_issue,
    code_setting_issues,
    secret_path_issue,
    setting_name,
)

LAUNCHERS = frozenset(
    {
        "hydra._internal.core_plugins.basic_launcher.BasicLauncher",
        "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher",
        "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher",
        "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher",
    }
)
SWEEPERS = frozenset(
    {
        "hydra._internal.core_plugins.basic_sweeper.BasicSweeper",
        "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper",
    }
)
LOG_HANDLER_CLASSES = frozenset({"logging.StreamHandler", "logging.FileHandler", "logging.NullHandler"})
LOG_STREAMS = frozenset({"ext://sys.stdout", "ext://sys.stderr"})
LOG_FILE = "${hydra.runtime.output_dir}/${hydra.job.name}.log"
_JOB_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


# -- Hydra's own nodes -------------------------------------------------------------------------------
def _logging_issues(name: str, node: Any) -> list[ConfigIssue]:
    """A logging dictConfig may use the standard handlers on stdout/stderr and Hydra's own log file.

    Judged on the node as written: Hydra resolves it only when it configures logging, so an
    interpolation (of the whole node, a handler, or a value) would be judged as a string here and
    act as whatever it resolves to there. The only interpolation allowed is the run's log file.
    """
    fix = f"use Hydra's default logging (drop the hydra.{name} override or hydra/{name}=default)"
    if node is None:
        return []
    if not isinstance(node, dict):
        return [
            ConfigIssue(f"hydra.{name}", node, "logging settings must be written out, not interpolated", fix)
        ]
    issues = [
        ConfigIssue(path, value, problem, fix)
        for path, value, problem in _logging_values(node, f"hydra.{name}")
    ]
    for kind in ("handlers", "formatters", "filters"):
        for hname, spec in (node.get(kind) or {}).items():
            issues += _logging_class_issues(f"hydra.{name}.{kind}.{hname}", kind, spec, fix)
    return issues


# Keys of a logging dictConfig that build or change objects beyond the named classes.
_LOGGING_KEYS = {
    "()": "a logging factory runs arbitrary code",
    ".": "sets attributes of a handler after it is built (e.g. its file)",
}


def _logging_values(value: Any, path: str) -> list[tuple[str, Any, str]]:
    """(path, value, problem) for every factory, attribute setter, object reference and
    interpolation in a logging dictConfig."""
    if isinstance(value, dict):
        found = [(f"{path}.{k}", v, _LOGGING_KEYS[k]) for k, v in value.items() if k in _LOGGING_KEYS]
        return found + [f for k, v in value.items() for f in _logging_values(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [f for i, v in enumerate(value) for f in _logging_values(v, f"{path}[{i}]")]
    if isinstance(value, str) and value.startswith(("ext://", "cfg://")) and value not in LOG_STREAMS:
        return [(path, value, "a logging reference to an arbitrary object")]
    if isinstance(value, str) and "${" in value and not (path.endswith(".filename") and value == LOG_FILE):
        return [(path, value, "an interpolation in logging settings is resolved after this check")]
    return []


def _logging_class_issues(path: str, kind: str, spec: Any, fix: str) -> list[ConfigIssue]:
    """A handler may be a standard stream/file/null handler (its file the run's log), a formatter
    logging.Formatter; a filter names no class."""
    if not isinstance(spec, dict):
        return [ConfigIssue(path, spec, "must be written out, not interpolated", fix)]
    if "class" not in spec:
        return []
    cls = spec["class"]
    issues = []
    if not (cls in LOG_HANDLER_CLASSES if kind == "handlers" else cls == "logging.Formatter"):
        issues.append(ConfigIssue(f"{path}.class", cls, f"not an allowed logging {kind[:-1]}", fix))
    if cls == "logging.FileHandler" and spec.get("filename") != LOG_FILE:
        issues.append(
            ConfigIssue(
                f"{path}.filename",
                spec.get("filename"),
                "a log file outside the run directory",
                f"keep filename: {LOG_FILE}",
            )
        )
    return issues


# -- launcher settings that reach a shell ------------------------------------------------------------
# submitit writes every SLURM launcher setting into the job script as an "#SBATCH --<key>=<value>"
# line (quoted, but sbatch acts on the option: --export sets the job's environment, BASH_ENV
# included, which bash runs before the script; --output/--error write anywhere; --chdir, --wrap,
# --prolog...), and the keys it does not know as settings (srun_args, teardown, setup) become srun
# arguments or shell lines. So a config may set only the settings below, each to a value of a strict
# shape (SECURITY.md "Launchers and infrastructure"); everything else is refused with the key.
_SLURM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_VALUE_RULES: dict[str, tuple[str, Any]] = {
    "name": ("a plain name: letters, digits, '_', '.', '-' (at most 64)", _SLURM_NAME),
    "names": (
        "plain names separated by commas",
        re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}(,[A-Za-z0-9][A-Za-z0-9_.-]{0,63}){0,15}"),
    ),
    "hosts": (
        "a SLURM host list such as node[01-04],gpu7",
        re.compile(r"[A-Za-z0-9][A-Za-z0-9_.,\[\]-]{0,255}"),
    ),
    "features": (
        "SLURM node features joined by & | , (e.g. a100&ib)",
        re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.&|,*\[\]:-]{0,255}"),
    ),
    "gres": ("a generic resource such as gpu:a100:2", re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.:,-]{0,127}")),
    "memory": ("a memory size such as 16G or 4000M", re.compile(r"[0-9]{1,9}[KMGT]?B?")),
    # No '=': SLURM prints a job's comment inside its "Key=value" record (scontrol show job), where
    # "x JobState=RUNNING Requeue=1" reads as fields of the job (issue 55, finding #6).
    "text": (
        "plain words: letters, digits, space, _ . , : + - and no '=' (SLURM prints it inside the "
        "job's Key=value record, where an '=' reads as a field of the job)",
        re.compile(r"[A-Za-z0-9 _.,:+-]{0,200}"),
    ),
    "duration": (
        "a SLURM time such as 90, 1:30:00 or 1-00:00",
        re.compile(r"[0-9]{1,6}|[0-9]{1,6}:[0-9]{2}(:[0-9]{2})?|[0-9]{1,4}-[0-9]{1,2}(:[0-9]{2}){0,2}"),
    ),
    "open_mode": ("append or truncate", re.compile(r"append|truncate")),
    "exclusive": ("true, user or mcs", re.compile(r"user|mcs")),
}
# The launcher's own settings (hydra-submitit's SlurmQueueConf / LocalQueueConf), by value rule.
_LAUNCHER_KEYS: dict[str, str] = {
    **dict.fromkeys(
        ("timeout_min", "cpus_per_task", "gpus_per_node", "tasks_per_node", "mem_gb", "nodes",
         "cpus_per_gpu", "gpus_per_task", "signal_delay_s", "max_num_timeout", "array_parallelism"),
        "count",
    ),
    "stderr_to_stdout": "bool",
    "name": "name",
    "partition": "names",
    "qos": "name",
    "account": "name",
    "comment": "text",
    "constraint": "features",
    "exclude": "hosts",
    "gres": "gres",
    "mem_per_gpu": "memory",
    "mem_per_cpu": "memory",
}  # fmt: skip
# additional_parameters: SLURM options that only choose where and when the job runs.
SBATCH_OPTIONS: dict[str, str] = {
    "account": "name",
    "qos": "name",
    "partition": "names",
    "reservation": "name",
    "wckey": "name",
    "constraint": "features",
    "nodelist": "hosts",
    "exclude": "hosts",
    "gres": "gres",
    "mem-per-cpu": "memory",
    "mem-per-gpu": "memory",
    "time-min": "duration",
    "comment": "text",
    "exclusive": "exclusive",
    "requeue": "flag",
    "no-requeue": "flag",
    "open-mode": "open_mode",
}
SUBMITIT_FOLDER = "${hydra.sweep.dir}/.submitit/%j"
_SUBMITIT_FOLDER = re.compile(r"\$\{hydra\.sweep\.dir\}(/(?!\.\.?/|\.\.?$)[A-Za-z0-9_.%-]+)+")
SUBMITIT_LAUNCHERS = frozenset(t for t in LAUNCHERS if t.startswith("hydra_plugins.hydra_submitit"))


def _value_problem(rule: str, value: Any) -> str | None:
    """None when ``value`` has the shape ``rule`` asks for, else what shape that is."""
    if value is None:
        return None
    if rule == "count":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        return None if ok else "a whole number >= 0"
    if rule == "bool":
        return None if isinstance(value, bool) else "true or false"
    if rule == "flag":
        return None if value is True else "true (a switch without a value)"
    if rule == "exclusive" and value is True:
        return None
    what, pattern = _VALUE_RULES[rule]
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return what
    return None if pattern.fullmatch(str(value)) else what


def _shape_fix(key: Any, rule: str, value: Any, problem: str) -> str:
    """How to write ``key`` instead: where an '=' is all that is wrong, the same words with ':' for it."""
    if isinstance(value, str) and "=" in value and _value_problem(rule, value.replace("=", ":")) is None:
        return f"write {key} without '=', e.g. {value.replace('=', ':')!r}"
    return f"write {key} as {problem}"


def _resolved_item(node: Any, key: Any, raw: Any) -> Any:
    """``node[key]`` resolved (as submitit will get it); as written when it cannot resolve yet."""
    try:
        value = node[key]
    except (OmegaConfBaseException, KeyError, TypeError, AttributeError):
        return raw
    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value


def _launcher_issues(hydra_node: Any, h: dict[str, Any]) -> list[ConfigIssue]:
    """Every setting of a submitit launcher is on :data:`_LAUNCHER_KEYS` (additional_parameters on
    :data:`SBATCH_OPTIONS`) with a value of its shape; the job files stay in the sweep directory."""
    launcher = h.get("launcher") or {}
    if launcher.get("_target_") not in SUBMITIT_LAUNCHERS:
        return []
    node = hydra_node.launcher if OmegaConf.is_config(hydra_node) else None
    fix_keys = f"remove it; a config may set {sorted(_LAUNCHER_KEYS)} and additional_parameters"
    issues = []
    for key, raw in launcher.items():
        path = f"hydra.launcher.{key}"
        if key in ("_target_", "setup"):
            continue  # judged in check_hydra_node
        if key == "submitit_folder":
            if not (isinstance(raw, str) and _SUBMITIT_FOLDER.fullmatch(raw)):
                issues.append(
                    ConfigIssue(
                        path,
                        raw,
                        "submitit writes the job scripts and their logs there: it must stay inside "
                        "hydra.sweep.dir (written as ${hydra.sweep.dir}/<folder>, no '..')",
                        f"keep the default {SUBMITIT_FOLDER}",
                    )
                )
            continue
        value = _resolved_item(node, key, raw) if node is not None else raw
        if key == "additional_parameters":
            issues.extend(_sbatch_option_issues(node, value, raw))
            continue
        rule = _LAUNCHER_KEYS.get(key) if isinstance(key, str) else None
        if rule is None:
            issues.append(
                ConfigIssue(
                    path,
                    raw,
                    "not a launcher setting a config may pass to submitit (srun arguments, teardown "
                    "lines and sbatch options outside the list reach the job's shell or environment)",
                    fix_keys,
                )
            )
        elif (problem := _value_problem(rule, value)) is not None:
            issues.append(
                ConfigIssue(path, value, f"must be {problem}", _shape_fix(key, rule, value, problem))
            )
    return issues


def _sbatch_option_issues(launcher_node: Any, value: Any, raw: Any) -> list[ConfigIssue]:
    base = "hydra.launcher.additional_parameters"
    if value is None:
        return []
    if not isinstance(value, dict):
        return [ConfigIssue(base, raw, "must be a mapping of SLURM options", "write option: value lines")]
    node = None
    if launcher_node is not None:
        with contextlib.suppress(OmegaConfBaseException, KeyError, AttributeError):
            node = launcher_node.additional_parameters
    issues = []
    for key, item in value.items():
        # submitit writes the key with '_' turned into '-': "open_mode" is --open-mode
        option = key.replace("_", "-") if isinstance(key, str) else key
        rule = SBATCH_OPTIONS.get(option) if isinstance(option, str) else None
        resolved = _resolved_item(node, key, item) if node is not None else item
        if rule is None:
            issues.append(
                ConfigIssue(
                    f"{base}.{key}",
                    resolved,
                    "becomes an #SBATCH option of the job script; only options that choose where and "
                    "when the job runs are allowed (--export sets the job's environment, --output/--error "
                    "write files anywhere, others run programs)",
                    f"remove it; allowed: {sorted(SBATCH_OPTIONS)}",
                )
            )
        elif (problem := _value_problem(rule, resolved)) is not None:
            issues.append(
                ConfigIssue(
                    f"{base}.{key}",
                    resolved,
                    f"must be {problem}",
                    _shape_fix(option, rule, resolved, problem),
                )
            )
    return issues


def _strings_with_newlines(node: Any, path: str) -> list[tuple[str, Any]]:
    if isinstance(node, dict):
        found = [(f"{path}.{k}", k) for k in node if isinstance(k, str) and ("\n" in k or "\r" in k)]
        return found + [s for k, v in node.items() for s in _strings_with_newlines(v, f"{path}.{k}")]
    if isinstance(node, list):
        return [s for i, v in enumerate(node) for s in _strings_with_newlines(v, f"{path}[{i}]")]
    return [(path, node)] if isinstance(node, str) and ("\n" in node or "\r" in node) else []


# Hydra settings this program never needs, refused when set: (path under hydra, problem, fix).
_ENV_FIX = "export variables in your shell instead of setting them from a config"
_REFUSED: tuple[tuple[str, str, str], ...] = (
    ("job.env_set", "sets the environment of the run and of every process it starts", _ENV_FIX),
    ("job.env_copy", "sets the environment of the run and of every process it starts", _ENV_FIX),
    ("callbacks", "Hydra callbacks run code before the app", "remove them"),
    (
        "launcher.setup",
        "shell commands the launcher would run on every node",
        "prepare the environment in your job template or shell, not from a config",
    ),
    (
        "output_subdir",
        "Hydra would write the command line verbatim (credentials included) to a folder the "
        "config chooses (an absolute path leaves the run directory)",
        "remove it: the run writes its own records (config_resolved.yaml, provenance.json)",
    ),
)


def _setting(h: Any, path: str) -> Any:
    for part in path.split("."):
        h = h.get(part) if isinstance(h, dict) else None
    return h


def _is_set(path: str, value: Any) -> bool:
    # output_subdir: any value, an empty one too (Hydra would then write into the run dir itself)
    return value is not None if path == "output_subdir" else bool(value)


def check_hydra_node(hydra_node: DictConfig) -> list[ConfigIssue]:
    """What this program does not need from ``hydra.*`` is refused: Hydra acts on these before the app."""
    h = OmegaConf.to_container(hydra_node, resolve=False)
    issues = [
        ConfigIssue(f"hydra.{path}", value, problem, fix)
        for path, problem, fix in _REFUSED
        if _is_set(path, value := _setting(h, path))
    ]
    for node_name, allowed in (("launcher", LAUNCHERS), ("sweeper", SWEEPERS)):
        target = (h.get(node_name) or {}).get("_target_")
        if target not in allowed:
            issues.append(
                ConfigIssue(
                    f"hydra.{node_name}._target_",
                    target,
                    f"not one of the supported {node_name}s",
                    f"pick a hydra/{node_name} option from conf/hydra or Hydra's own: {sorted(allowed)}",
                )
            )
    params = (h.get("sweeper") or {}).get("params") or {}
    issues += [
        ConfigIssue(f"hydra.sweeper.params.{k}", v, "sweeps over Hydra's own settings", "sweep app keys only")
        for k, v in params.items()
        if str(k).startswith("hydra")
    ]
    for name in ("job_logging", "hydra_logging"):
        issues.extend(_logging_issues(name, h.get(name)))
    job_name = (h.get("job") or {}).get("name")
    if job_name is not None and not (isinstance(job_name, str) and _JOB_NAME.fullmatch(job_name)):
        issues.append(
            ConfigIssue(
                "hydra.job.name",
                job_name,
                "names the run's log file (<run dir>/<job name>.log), so it must be a plain name",
                "letters, digits, '_', '-' and '.', not starting with '.'; or leave it unset",
            )
        )
    return issues + _launcher_issues(hydra_node, h) + _launcher_newline_issues(hydra_node, h)


def _launcher_newline_issues(hydra_node: DictConfig, h: dict[str, Any]) -> list[ConfigIssue]:
    launcher = h.get("launcher") or {}
    # Judged resolved where it resolves; a value that cannot resolve yet is judged as written.
    with contextlib.suppress(OmegaConfBaseException, AttributeError):
        launcher = OmegaConf.to_container(hydra_node.launcher, resolve=True)
    return [
        ConfigIssue(
            path,
            value,
            "a line break in a launcher setting becomes a new line of the job script (a shell command)",
            "write the value on one line",
        )
        for path, value in _strings_with_newlines(launcher, "hydra.launcher")
    ]


def _sweep_issues(overrides: list[str]) -> list[ConfigIssue]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    issues = []
    for o in OverridesParser.create().parse_overrides(overrides):
        if o.is_sweep_override() and o.key_or_group.startswith("hydra"):
            issues.append(
                ConfigIssue(
                    o.key_or_group, o.input_line, "sweeps over Hydra's own settings", "sweep app keys only"
                )
            )
    return issues


# -- settings that run a model's own code, and where a config file set them -------------------------
def code_issues(
    hydra: Any, config_name: str, typed: list[str], composed: list[tuple[DictConfig, list[str], Any]]
) -> list[ConfigIssue]:
    """Settings that make a library run code shipped with a model (rlvr.security.trust.CODE_SETTINGS),
    in the config and in each sweep point that differs in a group choice, unless the command line's
    own overrides set them; each refusal names the file the value came from. A sweeper's ``params``
    over such a setting is a file's choice too."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create(config_loader=hydra)
    typed_keys = {o.key_or_group for o in parser.parse_overrides(typed)}
    issues: list[ConfigIssue] = []
    for cfg, overrides, mode in composed:
        container: Any = OmegaConf.to_container(cfg, resolve=False)
        container.pop("hydra", None)
        found = code_setting_issues(
            container, typed_keys, lambda key, o=overrides, m=mode: _origin(hydra, config_name, o, m, key)
        )
        found += _sweeper_code_issues(parser, sweeper_param_overrides(cfg), typed_keys)
        issues += [i for i in found if i.key not in {j.key for j in issues}]
    return issues


def _sweeper_code_issues(parser: Any, params: list[str], typed_keys: set[str]) -> list[ConfigIssue]:
    """A sweeper's ``params`` (a file's) over a code setting, or over a field whose swept values are
    JSON strings carrying one (each value judged as :func:`code_setting_issues` judges a string)."""
    where = "the sweeper's params in a config file (hydra.sweeper.params)"
    found = []
    for o in parser.parse_overrides(params):
        key = o.key_or_group
        if key in typed_keys:
            continue
        if setting_name(key) in CODE_SETTINGS:
            found.append(code_setting_issue(key, o.input_line.split("=", 1)[1], where))
            continue
        values = [
            getattr(v, "text", v) for v in (o.sweep_iterator() if o.is_sweep_override() else [o.value()])
        ]
        for value in values:
            found += [
                i for i in code_setting_issues({key: value}, set()) if i.key not in {j.key for j in found}
            ]
    return [replace(i, problem=i.problem.replace("a config file (experiment, --config-dir, group)", where))
            for i in found]  # fmt: skip


def _origin(hydra: Any, config_name: str, overrides: list[str], mode: Any, key: str) -> str | None:
    """The config file that sets ``key`` last in Hydra's defaults list (None if none does)."""
    try:
        defaults = hydra.compute_defaults_list(config_name, overrides, mode).defaults
    except Exception:  # the composition itself succeeded; a missing origin only weakens the message
        return None
    for default in reversed(defaults):
        if default.config_path is None:
            continue
        package = default.package or ""
        if package and not key.startswith(package + "."):
            continue
        source = next((s for s in hydra.get_sources() if s.is_config(default.config_path)), None)
        if source is None:
            continue
        loaded = source.load_config(default.config_path)
        raw = OmegaConf.to_container(loaded.config, resolve=False)
        node: Any = raw
        for part in key[len(package) + 1 if package else 0 :].split("."):
            node = node.get(part, _MISSING) if isinstance(node, dict) else _MISSING
        if node is not _MISSING:
            return f"{loaded.path.removeprefix('file://')}/{default.config_path}.yaml"
    return None


_MISSING = object()


# -- the composed config as a whole, and each sweep point's Hydra node ------------------------------
def hydra_issues(
    cfg: DictConfig, job_hydra_nodes: list[DictConfig], multirun: bool, overrides: list[str]
) -> list[ConfigIssue]:
    """The composed Hydra node's settings, its resolvers (resolving ``hydra.*`` can reach any key)
    and its sweeps; in a sweep each point's own Hydra node too (a swept config group can set
    ``hydra.*``), each problem once."""
    issues = check_hydra_node(cfg.hydra) + check_resolvers(cfg) + _sweep_issues(overrides)
    nodes = [cfg.hydra, *job_hydra_nodes] if multirun else []
    task_overrides = overrides + sweeper_param_overrides(cfg)
    seen = {(i.key, str(i.value)) for i in issues}
    for node in job_hydra_nodes:
        issues += [i for i in check_hydra_node(node) if (i.key, str(i.value)) not in seen]
        seen |= {(i.key, str(i.value)) for i in issues}
    for node in nodes:
        # (submitit's job folder is judged with the launcher's settings: _launcher_issues)
        found = _sweep_subdir_issues(node, task_overrides)
        issues += [i for i in found if (i.key, str(i.value)) not in seen]
        seen |= {(i.key, str(i.value)) for i in issues}
    return issues


def config_file_issues(search_path: Any) -> list[ConfigIssue]:
    """Every YAML file in the config directories Hydra will search (``--config-dir``, the primary
    config path), judged by rlvr.runtime.safe_yaml before Hydra parses any of them: bounded size, and a
    bounded number of nodes once YAML aliases are expanded (an alias bomb is refused in
    milliseconds, not after minutes of composition)."""
    from rlvr.runtime.safe_yaml import config_file_issue

    issues = []
    for element in search_path.get_path():
        path = element.path
        if "://" in path and not path.startswith("file://"):
            continue  # package and structured configs (Hydra's own) are installed code
        root = Path(path.removeprefix("file://"))
        for folder, _dirs, files in os.walk(root):
            for name in sorted(files):
                if name.endswith((".yaml", ".yml")):
                    refused = config_file_issue(Path(folder) / name)
                    if refused is not None:
                        issues.append(ConfigIssue(refused.path, "(file)", refused.rule, refused.fix))
    return issues


# -- where a run writes -----------------------------------------------------------------------------
def unsafe_run_dir_issues(cfg: DictConfig, multirun: bool) -> list[ConfigIssue]:
    """The run (or sweep) directory must not hold a secret; an existing one holding a symlink is
    refused before Hydra opens its log file there (in append mode, which would follow a planted link);
    so is a fresh run (``resume`` unset) in a directory, or a sweep over one, that holds another run's
    records: it would overwrite them."""
    from rlvr.runtime.io import SymlinkRefused, refuse_symlinks_in, run_records_in

    keys = ("hydra.sweep.dir", "hydra.sweep.subdir") if multirun else ("hydra.run.dir",)
    # A sweep point's subdir names its job number, which exists once Hydra launches the job.
    probe = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    for runtime_key, runtime_value in (("hydra.job.num", 0), ("hydra.job.id", "0")):
        OmegaConf.update(probe, runtime_key, runtime_value, force_add=True)
    issues = []
    for key in keys:
        # Resolving records the environment reads in it (rlvr.runtime.secrets.watch_env_reads).
        with contextlib.suppress(OmegaConfBaseException):
            value = OmegaConf.select(probe, key, throw_on_resolution_failure=True)
            issue = secret_path_issue(key, str(value)) if value is not None else None
            if issue is not None:
                issues.append(issue)
    if issues:
        return issues
    key = keys[0]
    try:
        folder = Path(str(OmegaConf.select(cfg, key, throw_on_resolution_failure=True)))
    except OmegaConfBaseException:
        return []  # a directory named after runtime values cannot exist yet
    unwritable = writable_issue(key, folder)
    if unwritable is not None or not folder.is_dir():
        return [unwritable] if unwritable else []
    try:
        refuse_symlinks_in(folder)
    except SymlinkRefused as exc:
        return [ConfigIssue(key, str(folder), str(exc), "remove the link or choose another directory")]
    from rlvr.runtime.distributed import is_main

    if not is_main():
        return []  # under accelerate launch rank 0 may already be writing this run's own records
    with contextlib.suppress(OmegaConfBaseException):
        if OmegaConf.select(cfg, "resume", default=None) not in (None, "", False):
            return []  # a continued run: the app compares its settings with the run's fingerprint
    runs = [folder] if multirun is False else [folder, *_point_dirs(folder)]
    held = [(run, found) for run in runs if (found := run_records_in(run))]
    if not held:
        return []
    run, found = held[0]
    what = "a run" if run == folder else f"an earlier sweep (e.g. {run.name}/)"
    return [
        ConfigIssue(
            key,
            str(folder),
            f"holds {what} ({', '.join(found)}); a fresh run here would overwrite its records",
            f"choose a new {key}, or continue that run with resume=auto and its settings",
        )
    ]


def _exists(path: Path) -> bool:
    """``path.exists()`` that is False, not an OSError, for a name the file system cannot hold."""
    try:
        os.lstat(path)
    except OSError:
        return False
    return True


def writable_issue(key: str, folder: Path) -> ConfigIssue | None:
    """One message, before Hydra creates ``folder`` or opens its log there, when it cannot be written:
    a part of its path longer than the file system's name limit (255 bytes on most), the whole path
    longer than its path limit, or the folder (else its nearest existing parent) not writable (a
    read-only file system, or permissions). Each was a traceback from Hydra's ``makedirs`` or log file."""
    existing = next((p for p in (folder.absolute(), *folder.absolute().parents) if _exists(p)), Path("/"))
    limits = {}
    for name in ("PC_NAME_MAX", "PC_PATH_MAX"):
        try:
            limits[name] = os.pathconf(existing, name)
        except (OSError, ValueError):
            limits[name] = 255 if name == "PC_NAME_MAX" else 4096
    long = [part for part in folder.parts if len(os.fsencode(part)) > limits["PC_NAME_MAX"]]
    fix = f"choose another {key} on the command line (shorter names, in a folder you can write)"
    if long:
        part = long[0]
        return ConfigIssue(
            key,
            str(folder),
            f"its part {part[:40]!r}... is {len(os.fsencode(part))} bytes, more than the "
            f"{limits['PC_NAME_MAX']} bytes a file name may have on this file system",
            fix,
        )
    if len(os.fsencode(str(folder.absolute()))) >= limits["PC_PATH_MAX"]:
        return ConfigIssue(key, str(folder), f"the path is longer than {limits['PC_PATH_MAX']} bytes", fix)
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        where = "it" if existing == folder.absolute() else f"its nearest existing folder {str(existing)!r}"
        return ConfigIssue(
            key,
            str(folder),
            f"{where} cannot be written by this process (a read-only file system, its permissions, or not a "
            "folder): the run could not create its directory, log or records",
            f"{fix}; or make it writable (chmod u+w, or remount it read-write)",
        )
    return full_disk_issue(key, folder, existing)


# Free space a run needs to start (its log, lock, resolved config and first records). A checkpoint needs
# far more; a disk that fills during the run ends it in one message (rlvr.runtime.faults).
MIN_FREE_AT_START = 2**20


def full_disk_issue(key: str, folder: Path, existing: Path) -> ConfigIssue | None:
    """One message when the disk ``folder`` would be written on (``existing``: it, or its nearest
    existing parent) has less than MIN_FREE_AT_START bytes or no free inode left: a full disk at start
    printed 165 lines (a logging traceback per record, then Hydra's) around the one that mattered."""
    try:
        disk = os.statvfs(existing)
    except OSError:
        return None
    free = disk.f_bavail * disk.f_frsize
    no_inodes = disk.f_files > 0 and disk.f_favail == 0  # some file systems report no inode counts at all
    if free >= MIN_FREE_AT_START and not no_inodes:
        return None
    what = "no free inode" if no_inodes else f"{free // 1024} KiB free"
    return ConfigIssue(
        key,
        str(folder),
        f"the disk holding {str(existing)!r} is full ({what}; a run needs at least "
        f"{MIN_FREE_AT_START // 2**20} MiB to start): the run could not write its log, lock or records",
        f"free space on that disk, or choose another {key} on the command line, on a disk with room for "
        "the run's checkpoints",
    )


def _point_dirs(sweep_dir: Path, depth: int = 3) -> list[Path]:
    """Folders up to ``depth`` levels below a sweep directory (where its points' run dirs are)."""
    found, level = [], [sweep_dir]
    for _ in range(depth):
        level = [p for d in level for p in d.iterdir() if p.is_dir() and not p.is_symlink()]
        found += level
    return found


# hydra.sweep.subdir may hold only these interpolations: each sweep point gets its own folder.
_SUBDIR_PARTS = re.compile(r"\$\{hydra\.job\.(num|override_dirname)\}")


def sweeper_param_overrides(cfg: DictConfig) -> list[str]:
    params = OmegaConf.to_container(cfg.hydra.sweeper, resolve=False).get("params") or {}
    return [f"{k}={v}" for k, v in params.items()]


def _sweep_subdir_issues(hydra_node: DictConfig, task_overrides: list[str]) -> list[ConfigIssue]:
    """``hydra.sweep.subdir`` names each point's folder under the sweep directory: one that does not
    differ between points (a constant, or an interpolation of anything but the job number) makes the
    points overwrite each other, and an absolute one or one with ``..`` leaves the sweep directory.
    ``${hydra.job.override_dirname}`` differs between points only if no key is excluded from it,
    and stays inside only if no override value holds a path separator or ``..``."""
    h = OmegaConf.to_container(hydra_node, resolve=False)
    subdir = (h.get("sweep") or {}).get("subdir")
    job = h.get("job") or {}
    fix = "keep Hydra's default hydra.sweep.subdir=${hydra.job.num} (one folder per sweep point)"
    text = subdir if isinstance(subdir, str) else ""
    used = set(_SUBDIR_PARTS.findall(text))
    rest = _SUBDIR_PARTS.sub("x", text)
    problem = None
    if not used:
        problem = "is the same for every sweep point, so the points overwrite each other's run directory"
    elif "${" in rest:
        problem = "may hold only ${hydra.job.num} and ${hydra.job.override_dirname}"
    elif Path(rest).is_absolute() or rest.startswith("~") or ".." in rest.replace("\\", "/").split("/"):
        problem = "leaves the sweep directory (absolute or '..')"
    elif "override_dirname" in used:
        excluded = (((job.get("config") or {}).get("override_dirname") or {}).get("exclude_keys")) or []
        separators = [
            o
            for o in task_overrides
            if not o.lstrip("+~").startswith("hydra") and _path_like(o.split("=", 1)[-1])
        ]
        if excluded and "num" not in used:
            problem = (
                f"uses ${{hydra.job.override_dirname}} with keys excluded from it ({excluded}): points "
                "that differ only in those share a folder"
            )
        elif separators:
            problem = (
                f"uses ${{hydra.job.override_dirname}} and an override value is a path ({separators[0]}): "
                "it would name folders outside the sweep directory"
            )
    if problem is None:
        return []
    return [ConfigIssue("hydra.sweep.subdir", subdir, problem, fix)]


def _path_like(value: str) -> bool:
    return "/" in value or "\\" in value or ".." in value


def location_issues(
    cfg: DictConfig,
    multirun: bool,
    overrides: list[str],
    script: Path,
    default_config_path: str,
    config_name: str,
    mode: Any,
) -> list[ConfigIssue]:
    """The run (or sweep) directory and the benchmark's output directory are chosen on the command
    line or by the shipped defaults, never by a config file (an experiment file from a colleague):
    each must resolve to what the shipped config with the command line's own location overrides
    gives, or to a folder inside its ``paths.output_dir``. A config file could otherwise point a
    run at any folder (``~/.bashrc.d``: every file in it is run by the next shell)."""
    keys = ["hydra.sweep.dir" if multirun else "hydra.run.dir"]
    if OmegaConf.select(cfg, "benchmark.output_dir", default=None) is not None:
        keys.append("benchmark.output_dir")
    expected = _shipped_locations(cfg, overrides, script, default_config_path, config_name, mode)
    issues = []
    for key in keys:
        problem = _location_problem(cfg, expected, key)
        if problem:
            issues.append(
                ConfigIssue(
                    key,
                    _raw(cfg, key),
                    problem,
                    f"remove it from the config file and name the folder on the command line ({key}=<folder>)",
                )
            )
    return issues


def _location_problem(cfg: DictConfig, expected: DictConfig | None, key: str) -> str | None:
    try:
        value = str(OmegaConf.select(cfg, key, throw_on_resolution_failure=True))
    except OmegaConfBaseException as exc:
        return f"cannot be resolved before the run ({type(exc).__name__})"
    if expected is None:
        return "the shipped config cannot be composed with the command line's overrides to compare"
    raw = _raw(cfg, key)
    if raw is not None and raw == _raw(expected, key) and not re.sub(r"\$\{now:[^}]*\}", "", raw).count("${"):
        return None  # the shipped (or typed) text, with no interpolation a config file could change
    try:
        want = str(OmegaConf.select(expected, key, default=""))
    except OmegaConfBaseException:  # the typed value names keys only the full config holds
        want = ""  # (e.g. hydra.run.dir=outputs/${name} with +name=...): judged by where it lands
    outputs = str(OmegaConf.select(expected, "paths.output_dir", default=""))
    here = os.path.abspath(value)
    if want and here == os.path.abspath(want):
        return None
    for root in (os.path.abspath(outputs),) if outputs else ():
        real_root = os.path.realpath(root)
        if (
            os.path.commonpath([root, here]) == root
            and os.path.commonpath([real_root, os.path.realpath(here)]) == real_root
        ):
            return None
    if not want:
        return (
            f"resolves to {value}, built from config keys that a config file can set; write the folder "
            f"out on the command line, or keep it inside {outputs or 'paths.output_dir'}"
        )
    return (
        f"resolves to {value}: a config file chose it (or a setting it is built from, such as "
        f"paths.root_dir or paths.output_dir); the folder is the command line's or the default's ({want}), "
        f"or one inside {outputs or 'paths.output_dir'}"
    )


def _raw(cfg: DictConfig, key: str) -> str | None:
    node: Any = OmegaConf.to_container(cfg, resolve=False)
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, str) else None


def _shipped_locations(
    cfg: DictConfig, overrides: list[str], script: Path, default_config_path: str, config_name: str, mode: Any
) -> DictConfig | None:
    """The shipped config (conf/ beside the script, no --config-dir) composed with only the command
    line's overrides of location settings: what the user, not a config file, chose."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    from rlvr.runtime.hydra_compose import loader

    shipped = script.parent / default_config_path
    name = config_name if (shipped / f"{config_name}.yaml").is_file() else None
    name = name or (
        "benchmark" if "benchmark" in cfg and (shipped / "benchmark.yaml").is_file() else "config"
    )
    prefixes = ("hydra.run.", "hydra.sweep.", "paths.", "benchmark.output_dir")
    typed = [
        o.input_line
        for o in OverridesParser.create().parse_overrides(overrides)
        if not o.is_sweep_override() and o.key_or_group.startswith(prefixes)
    ]
    try:
        with loader(script, default_config_path, None) as hydra:
            return hydra.load_configuration(name, typed, run_mode=mode)
    except (HydraException, OmegaConfBaseException, yaml.YAMLError):
        return None


# -- inside a Hydra job: the gate's checks of what this job itself was given ------------------------
def output_dir_issues() -> list[ConfigIssue]:
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


def job_code_issues(container: Any) -> list[ConfigIssue]:
    """Inside a Hydra job: settings that make a library run a model's own code (rlvr.security.trust.
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
