"""What a config may make this program do, decided before anything acts on the config.

Threat model (SECURITY.md): the installed code and the user's own command line are
trusted; config files, experiment and sweep files, checkpoints and caches are not.
So a config may only name code that is

- a class defined in the ``rlvr`` package, or one of the two app entry points, or
- anything defined in a plugin package the user named on the command line through
  the ``RLVR_PLUGINS`` environment variable (a config file cannot set it),

judged on the imported object (where it is *defined*), not on the spelling of the
path, so ``rlvr.some_module.shutil.copyfile`` is refused. Resolvers are limited to a
safe set and targets are judged after resolution, so a resolver cannot build a node
after the check. Hydra's own settings are judged before Hydra starts
(:mod:`rlvr.security.hydra_policy`, called by :mod:`rlvr.config.hydra_check`); everything else
by the gate after composition (:mod:`rlvr.config.gate`).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import pkgutil
import re
import sys
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlvr.issues import ConfigIssue, ConfigValidationError, suggest

PLUGINS_ENV = "RLVR_PLUGINS"
PROJECT_PACKAGE = "rlvr"
# The only functions a config may name in this package: the apps run_pipeline.py dispatches to.
APP_FUNCTIONS = frozenset({"rlvr.app.train", "rlvr.benchmark.runner.run"})
# rlvr.marker / rlvr.family_of are pure table look-ups (rlvr.prompt_families; tests/unit/test_resolvers.py
# plays the attacker). Any resolver added here must be as pure: no I/O, no environment, no code.
# rlvr.fp32_cpu returns one of its two arguments as written, chosen by the run's device and precision on
# this machine's CPU (rlvr.runtime.hardware.fp32_cpu_value): no I/O, no environment variable, no code.
SAFE_RESOLVERS = frozenset(
    {"now", "hydra", "oc.env", "oc.select", "rlvr.marker", "rlvr.family_of", "rlvr.fp32_cpu"}
)
_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
_RESOLVER = re.compile(r"\$\{\s*([A-Za-z_][\w.\-]*)\s*:")


# -- plugin packages ---------------------------------------------------------------------------------
def plugin_packages() -> tuple[str, ...]:
    """Packages named in ``RLVR_PLUGINS`` (comma separated); refuses names that are not plugins."""
    names = [n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(",") if n.strip()]
    bad = [
        n
        for n in names
        if not n.isidentifier()
        or n in sys.stdlib_module_names
        or n in {PROJECT_PACKAGE, "hydra", "omegaconf"}
    ]
    if bad:
        raise ConfigValidationError(
            [
                ConfigIssue(
                    PLUGINS_ENV,
                    ",".join(bad),
                    "a plugin package must be your own top-level package, not the standard library, "
                    "rlvr or hydra",
                    f"set {PLUGINS_ENV}=<your_package> (comma separated for several)",
                )
            ]
        )
    return tuple(names)


def allowed_packages() -> tuple[str, ...]:
    return (PROJECT_PACKAGE, *plugin_packages())


# -- targets -----------------------------------------------------------------------------------------
# Classes renamed or moved since a run directory may have recorded them (config_resolved.yaml, the
# settings fingerprint): old target -> (the class's target now, date of the change). Not aliases: an
# old name is refused with its new one named, so the run's record is edited once rather than every
# old name being kept importable.
RENAMED_TARGETS = {
    "rlvr.model.HFModel": ("rlvr.model.loader.HFModel", "2026-11-26"),
    "rlvr.model.EmbeddedModel": ("rlvr.model.loader.EmbeddedModel", "2026-11-26"),
    "rlvr.model.TinyRandomModel": ("rlvr.model.loader.TinyRandomModel", "2026-11-26"),
    "rlvr.model.UnslothModel": ("rlvr.model.unsloth.UnslothModel", "2026-11-26"),
    "rlvr.training_loop.GRPOLoop": ("rlvr.training_loop.loop.TrainingLoop", "2026-11-28"),
    "rlvr.training_loop.loop.GRPOLoop": ("rlvr.training_loop.loop.TrainingLoop", "2026-11-28"),
}


def renamed(target: str) -> str | None:
    """Why ``target`` is an old name (its new one and when it changed), or None."""
    if target not in RENAMED_TARGETS:
        return None
    new, when = RENAMED_TARGETS[target]
    return f"{target} is the old name of {new} (renamed {when})"


class _MissingDependency(Exception):
    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


def _import_object(path: str) -> Any:
    """The object at a dotted path: the longest importable module prefix, then attributes.

    A module that exists but fails importing because one of ITS imports is missing raises
    _MissingDependency, so that error is not mistaken for a misspelt path.
    """
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            obj: Any = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
                continue  # this prefix is not a module: try a shorter one
            raise _MissingDependency(exc.name or "?") from exc
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(f"no module named {parts[0]!r}")


def _install_hint(module: str) -> str:
    top = module.split(".")[0]
    if top in {"vllm", "unsloth", "bitsandbytes"}:
        return f"make setup GPU=1 (the hashed GPU lock, on a CUDA machine), or remove the option that needs {top}"
    if top in {"wandb", "tensorboard"}:
        return f"pip install 'rlvr[tracking]', or drop the observer that needs {top}"
    return f"pip install {top.replace('_', '-')}"


def _import_issue(key: str, target: str, exc: Exception) -> ConfigIssue:
    """Why ``target`` does not import: its package is not importable from this Python (a plugin not
    installed, or its folder not on the path), or a name in the path is misspelt (named, with the
    close names that do exist)."""
    parts = target.split(".")
    if importlib.util.find_spec(parts[0]) is None:
        return ConfigIssue(
            key,
            target,
            f"its package {parts[0]!r} is not importable from this Python ({sys.executable}); "
            f"{PLUGINS_ENV} only allows a package, it does not install or find it",
            f"install it into this environment (pip install -e <the folder with its pyproject.toml>) or put "
            f"the folder that holds {parts[0]}/ on PYTHONPATH, so that python -c 'import {parts[0]}' works",
        )
    obj: Any = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=1):
        prefix = ".".join(parts[:i])
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        try:  # a submodule its package does not import itself
            obj = importlib.import_module(f"{prefix}.{part}")
            continue
        except ModuleNotFoundError:
            pass
        names = [n for n in dir(obj) if not n.startswith("_")]
        if hasattr(obj, "__path__"):
            names += [m.name for m in pkgutil.iter_modules(obj.__path__)]
        return ConfigIssue(
            key,
            target,
            f"{prefix} has no {part!r} (a misspelt name in the path)",
            f"{suggest(part, sorted(set(names)))} (check the dotted path for a typo)",
        )
    return ConfigIssue(key, target, f"cannot be imported ({exc})", "check the dotted path for a typo")


def judge_target(key: str, target: Any) -> ConfigIssue | None:
    """None when ``target`` may be instantiated from a config, else the issue saying why not."""
    allowed = allowed_packages()
    fix = (
        "point _target_ at a class in the rlvr package; for your own component, name its package on "
        f"the command line with {PLUGINS_ENV}=<package> (see SECURITY.md)"
    )
    if not isinstance(target, str) or not _DOTTED.fullmatch(target):
        return ConfigIssue(
            key, target, "not a dotted path to a class (a config must not run arbitrary code)", fix
        )
    if target.split(".")[0] not in allowed:
        return ConfigIssue(key, target, f"outside the allowed packages {allowed}", fix)
    if (old := renamed(target)) is not None:
        # A config written before the rename (a run's config_resolved.yaml): the new name, not an alias.
        new = RENAMED_TARGETS[target][0]
        return ConfigIssue(
            key, target, old, f"set {key}={new} (in the config file, or as an override: {key}={new})"
        )
    try:
        obj = _import_object(target)
    except _MissingDependency as exc:
        return ConfigIssue(
            key, target, f"needs the package {exc.name!r}, which is not installed", _install_hint(exc.name)
        )
    except (ImportError, AttributeError) as exc:
        return _import_issue(key, target, exc)
    if not (inspect.isclass(obj) or inspect.isfunction(obj)):
        return ConfigIssue(key, target, f"is a {type(obj).__name__}, not a class or function", fix)
    module = getattr(obj, "__module__", "") or ""
    defined = f"{module}.{getattr(obj, '__qualname__', '?')}"
    if module.split(".")[0] not in allowed:
        return ConfigIssue(key, target, f"resolves to {defined}, which is defined outside {allowed}", fix)
    if module.split(".")[0] == PROJECT_PACKAGE and inspect.isfunction(obj) and defined not in APP_FUNCTIONS:
        return ConfigIssue(
            key,
            target,
            f"{defined} is a function; a config may only name rlvr classes and the apps {sorted(APP_FUNCTIONS)}",
            fix,
        )
    return None


# -- resolvers ---------------------------------------------------------------------------------------
def _strings(node: Any, path: str = "") -> list[tuple[str, str]]:
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in _strings(v, f"{path}.{k}" if path else str(k))]
    if isinstance(node, list):
        return [s for i, v in enumerate(node) for s in _strings(v, f"{path}[{i}]")]
    return [(path, node)] if isinstance(node, str) else []


def check_resolvers(cfg: DictConfig) -> list[ConfigIssue]:
    """Every interpolation uses only :data:`SAFE_RESOLVERS` (``oc.create``/``oc.decode`` build nodes
    after a check has looked at a string; custom resolvers run code)."""
    raw = OmegaConf.to_container(cfg, resolve=False)
    issues = []
    for path, value in _strings(raw):
        for name in _RESOLVER.findall(value):
            if name not in SAFE_RESOLVERS:
                issues.append(
                    ConfigIssue(
                        path,
                        value,
                        f"uses the resolver {name!r}; configs may only use {sorted(SAFE_RESOLVERS)}",
                        "write the value itself instead of building it with a resolver",
                    )
                )
    return issues


def credential_issues(node: Any, path: str = "") -> list[ConfigIssue]:
    """Credential-named keys with a value: refused, so no credential can reach any file a run writes
    (records, trainer argument files in checkpoints, tracker files). The value is never echoed."""
    from rlvr.runtime.secrets import REDACTED, is_credential_key

    issues = []
    if isinstance(node, dict):
        for key, value in node.items():
            sub = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and is_credential_key(key) and value not in (None, ""):
                issues.append(
                    ConfigIssue(
                        sub,
                        REDACTED,
                        "a credential in a config would be written into the run's records and checkpoints",
                        "remove it and export it as an environment variable instead (HF_TOKEN, WANDB_API_KEY)",
                    )
                )
            else:
                issues.extend(credential_issues(value, sub))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            issues.extend(credential_issues(value, f"{path}[{i}]"))
    return issues


# -- code shipped with a model ----------------------------------------------------------------------
# Settings that make a library run code that comes with a model (its folder or hub repository), or
# choose which revision of that code runs: each maps to (does this value widen?, what it does). They
# are judged under any key path (model, benchmark.models.<name>, training_loop.grpo.model_init_kwargs,
# a data source), so a new place that passes one on to a library is covered too.
CODE_SETTINGS: dict[str, tuple[Any, str]] = {
    "trust_remote_code": (
        lambda v: v not in (None, False),
        "runs the Python code shipped in the model's folder or hub repository (its auto_map)",
    ),
    "code_revision": (
        lambda v: v is not None,
        "chooses which revision of a repository's own code runs",
    ),
    "use_safetensors": (
        lambda v: v is not True,
        "loads pickled weights (.bin), and unpickling can run code",
    ),
}


def setting_name(key: Any) -> str:
    """A key as a library setting is named, whatever its case and surrounding space
    (``" Trust-Remote-Code"`` is judged as ``trust_remote_code``)."""
    return str(key).rsplit(".", 1)[-1].strip().lower().replace("-", "_")


# The fields transformers' TrainingArguments and TRL's configs type as dicts and decode from a JSON
# string in their __post_init__ (``_VALID_DICT_FIELDS``: ``json.loads`` of a value starting with "{",
# then "true"/"false" strings made booleans). tests/unit/test_code_trust.py checks this set against
# the installed libraries, so an upgrade that adds one fails a test.
LIBRARY_DICT_FIELDS = frozenset(
    {
        "accelerator_config",
        "chat_template_kwargs",
        "dataset_kwargs",
        "deepspeed",
        "fsdp_config",
        "generation_kwargs",
        "gradient_checkpointing_kwargs",
        "lr_scheduler_kwargs",
        "model_init_kwargs",
        "teacher_model_init_kwargs",
        "transformers_continuous_batching_config",
    }
)
# Deeper than this a config value is not a setting (JSON in JSON counts every level).
MAX_JSON_NESTING = 100


def _json_refusal(key: str, value: str, why: str) -> ConfigIssue:
    return ConfigIssue(
        key,
        value,
        f"{why}; a library decodes a string here into settings, and rlvr judges what it decodes to "
        'before anything runs (SECURITY.md "Code shipped with a model")',
        f"write {key.rsplit('.', 1)[-1]} as a YAML mapping ({{name: value, ...}}) instead of a string",
    )


def decoded_json(node: Any) -> tuple[Any, dict[str, str], list[ConfigIssue]]:
    """``node`` (plain data) with every string that reads as a JSON object or array replaced by what
    it decodes to, decoded again inside (JSON in JSON), so every check sees the settings a library
    would decode from it; the key and text of each such string; and the refusals: a string of a
    :data:`LIBRARY_DICT_FIELDS` field that does not decode to an object, and JSON nested deeper than
    :data:`MAX_JSON_NESTING`. A string holding ``${`` is judged once resolved (the gate's copy)."""
    from rlvr.runtime.safe_json import loads

    holders: dict[str, str] = {}
    issues: list[ConfigIssue] = []

    def walk(value: Any, key: str, depth: int) -> Any:
        if isinstance(value, (dict, list)) and depth > MAX_JSON_NESTING:
            issues.append(_json_refusal(key, "...", f"nested deeper than {MAX_JSON_NESTING} levels"))
            return None
        if isinstance(value, dict):
            return {k: walk(v, f"{key}.{k}" if key else str(k), depth + 1) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, f"{key}[{i}]", depth + 1) for i, v in enumerate(value)]
        if not isinstance(value, str) or "${" in value:
            return value
        field = setting_name(key) in LIBRARY_DICT_FIELDS
        if not field and value.lstrip()[:1] not in ("{", "["):
            return value
        try:
            decoded = loads(value, key, limit=MAX_JSON_NESTING - depth)
        except ValueError as exc:  # not JSON (JSONDecodeError), or too deep (JsonRefused)
            too_deep = getattr(exc, "rule", "")
            if field or too_deep:
                issues.append(_json_refusal(key, value, too_deep or f"does not decode as JSON ({exc})"))
            return value
        if not isinstance(decoded, (dict, list)):
            if field:
                issues.append(_json_refusal(key, value, "decodes to a single value, not a mapping"))
            return value
        holders.setdefault(key, value)
        return walk(decoded, key, depth)

    return walk(node, "", 0), holders, issues


def _code_settings(node: Any, path: str = "") -> list[tuple[str, Any]]:
    """(key path, value) of every widening :data:`CODE_SETTINGS` entry in a plain container."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            sub = f"{path}.{key}" if path else str(key)
            name = setting_name(key)
            if name in CODE_SETTINGS and CODE_SETTINGS[name][0](value):
                found.append((sub, value))
            else:
                found.extend(_code_settings(value, sub))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found.extend(_code_settings(value, f"{path}[{i}]"))
    return found


def _typed(value: Any) -> str:
    return "true" if value is True else "false" if value is False else "null" if value is None else str(value)


def code_setting_issue(key: str, value: Any, where: str) -> ConfigIssue:
    """The refusal of a widening code setting at ``key`` that ``where`` (not the command line) set."""
    name = setting_name(key)
    return ConfigIssue(
        key,
        value,
        f"{CODE_SETTINGS[name][1]}; set by {where}, and only your own command line may widen what code "
        'runs (SECURITY.md "Code shipped with a model")',
        f"remove it from the file and, if you trust that model's code, pass {key}={_typed(value)} on "
        "the command line",
    )


def code_setting_issues(container: Any, typed_keys: set[str], origin: Any = None) -> list[ConfigIssue]:
    """Settings that widen what code a library runs from a model, set anywhere but on the command line.

    ``container`` is the composed config as plain data; ``typed_keys`` the keys the command line's
    own overrides set (a config-group choice such as ``experiment=x`` sets none: its file does);
    ``origin(key)`` names the file a value came from, where that is known.
    String values a library decodes as JSON are judged as what they decode to (:func:`decoded_json`):
    a setting inside one is refused naming the string's key, unless the command line typed that string.
    """
    decoded, holders, issues = decoded_json(container)
    for key, value in _code_settings(decoded):
        holder = next((h for h in holders if key.startswith((f"{h}.", f"{h}["))), None)
        if key in typed_keys or holder in typed_keys:
            continue
        where = (
            origin(holder or key) if origin else None
        ) or "a config file (experiment, --config-dir, group)"
        issues.append(
            code_setting_issue(key, value, where)
            if holder is None
            else json_setting_issue(holder, holders[holder], key, value, where)
        )
    return issues


def json_setting_issue(holder: str, text: str, key: str, value: Any, where: str) -> ConfigIssue:
    """The refusal of a widening code setting carried inside the JSON string at ``holder``."""
    return ConfigIssue(
        holder,
        text,
        f"this JSON string decodes to {key[len(holder) :].lstrip('.')}={_typed(value)}, which "
        f"{CODE_SETTINGS[setting_name(key)][1]}; set by {where}, and only your own command line may "
        'widen what code runs (SECURITY.md "Code shipped with a model")',
        "remove that setting from the string in the file and, if you trust that model's code, type the "
        f"whole value on the command line: {holder}='<the JSON>'",
    )


def rebuilt_interpolations(container: Any) -> list[ConfigIssue]:
    """Resolved values that read as an interpolation again (``"${d}{oc.create:...}"`` with
    ``d: $``): the resolved copy is a new config, which would resolve them after every check."""
    return [
        ConfigIssue(
            path,
            value,
            "resolves to text that is itself an interpolation; it would be resolved again after the checks",
            "write the value itself (a literal '${' is not supported in config values)",
        )
        for path, value in _strings(container)
        if "${" in value
    ]


def secret_path_issue(key: str, path: str) -> ConfigIssue | None:
    """A directory named after a secret (a value read from the environment, a credential) would
    carry it into every record that names the run directory: refused, never written masked."""
    from rlvr.runtime.secrets import REDACTED, contains_secret, redact_text

    if not contains_secret(path):
        return None
    return ConfigIssue(
        key,
        redact_text(path),
        f"the directory holds a value read from the environment or a credential ({REDACTED} above); "
        "a path is written into the run's records, logs and trackers",
        "write the directory out on the command line (your shell expands variables: "
        "hydra.run.dir=$SCRATCH/runs/x), or drop the ${oc.env:...} from it",
    )
