"""The config gate: every check of a run, in two calls of ``run_pipeline.py``.

:func:`before_hydra` judges the command line and Hydra's own settings before Hydra acts on them
(rlvr.config.hydra_check). :func:`check` judges the composed config: it resolves it once
(resolvers and credentials first, :func:`checked_config`), judges the ``app`` target, then binds
every component against its signature, builds the components the app names (rlvr.pipeline.wiring)
and runs their own validate(), the rules between components, the run directory's and the memory
checks, reporting every problem at once. Command-line mistakes the check before Hydra held back
(returned by :func:`before_hydra`, passed to :func:`check`) join that report. What passes is handed
to the app as it was built and resolved (:class:`GateResult`): the app builds nothing again and reads no
checkpoint the gate has read.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlvr.config.validation import check_targets, run_key_issues
from rlvr.issues import ConfigIssue, ConfigValidationError
from rlvr.runtime.hardware import fp32_cpu_choices
from rlvr.security.hydra_policy import job_code_issues, output_dir_issues
from rlvr.security.trust import check_resolvers, credential_issues, decoded_json, rebuilt_interpolations


def _resolved(cfg: DictConfig) -> Any:
    """The config resolved to plain data; a value a resolver refuses (rlvr.prompt_families) becomes a
    ConfigIssue naming the key, the value as written and the resolver's rule."""
    from omegaconf.errors import InterpolationResolutionError

    from rlvr.prompt_families import ResolverArgumentError

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


def checked_config(cfg: DictConfig, held: Sequence[ConfigIssue] = ()) -> DictConfig:
    """The config resolved into a fresh node, after the resolver check and the ``app`` target check.

    Everything downstream instantiates from the returned copy, so nothing a resolver could
    produce later escapes :func:`check`'s :func:`check_targets` of every node.
    """
    issues = check_resolvers(cfg)
    if issues:
        refuse(issues, held)
    # Resolving records every value oc.env returns (rlvr.runtime.secrets.watch_env_reads): from here on
    # they are masked in every output of this process.
    container = _resolved(cfg)
    # String values a library decodes as JSON are judged as what they decode to (SECURITY.md
    # "Code shipped with a model"); one that does not decode where a library would is refused.
    decoded, _, json_issues = decoded_json(container)
    issues = credential_issues(decoded) + json_issues + rebuilt_interpolations(container)
    issues += output_dir_issues()
    issues += [i for i in job_code_issues(container) if i not in json_issues]
    if issues:
        refuse(issues, held)
    resolved = OmegaConf.create(container)
    # Every other node is judged by check() next, together with each component's own validation,
    # before the app instantiates anything (so a user sees all problems at once).
    issues = [i for i in check_targets(resolved, targets_only=True) if i.key.startswith("app.")]
    if issues:
        refuse(issues, held)
    return resolved


def before_hydra(
    argv: list[str], script: Path, config_path: str, config_name: str
) -> tuple[list[str], list[ConfigIssue]]:
    """The check before Hydra composes the config (a multi-process launch's run directory, Hydra's
    own settings, the config files, every override): raise ConfigValidationError with every problem
    found, else return the command line Hydra gets and the issues held back: the overrides of keys
    the config lacks, left out of that command line so that :func:`check` reports them with every
    other problem (a misspelt key never hides the rest; a sweep refuses them at once)."""
    from rlvr.config.hydra_check import screen_command_line
    from rlvr.runtime.distributed import unnamed_run_dir_issue

    found = [issue for issue in [unnamed_run_dir_issue(argv)] if issue is not None]
    try:
        held = screen_command_line(argv, script, config_path, config_name)
    except ConfigValidationError as exc:
        raise ConfigValidationError([*found, *exc.issues]) from None
    if found:
        raise ConfigValidationError([*found, *(issue for _, issue in held)])
    return [a for a in argv if a not in {line for line, _ in held}], [issue for _, issue in held]


def run_dir_of(cfg: DictConfig) -> Path:
    """Hydra's output directory for this run (or ``paths.run_dir`` when called outside Hydra)."""
    from hydra.core.hydra_config import HydraConfig

    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return Path(cfg.paths.run_dir)


@dataclass
class GateResult:
    """What the gate hands the app (:func:`check`): the resolved config, the run's directory, the
    components the app names, built and validated, and for a training run the checkpoint it continues
    from, resolved once, here (``resume_lines``: what resolving it found to say; ``checkpoints_seen``:
    the complete checkpoints it chose among, so the app can tell whether another process of the run
    wrote one since). The gate's return value, for any app: it holds what the gate found, not a run's
    state; a training run's is one rlvr.pipeline.orchestrator.Run, made from it under the lock."""

    cfg: DictConfig
    run_dir: Path
    components: dict[str, Any] = field(default_factory=dict)
    resume: tuple[str, Path] | None = None
    resume_lines: list[str] = field(default_factory=list)
    checkpoints_seen: tuple[Path, ...] = ()

    def close(self) -> None:
        """Stop what building started (a verifier's workers) when the app ends without running the
        components (a run that runs them closes them at its end)."""
        close_components(self.components)


def check(cfg: DictConfig, run_dir: Path | None = None, held: Sequence[ConfigIssue] = ()) -> GateResult:
    """Every check after composition; raise ConfigValidationError with every problem found (and the
    ``held`` command-line issues of :func:`before_hydra`), else return what checked, built, for the
    app to run. ``run_dir``: the run's directory (default :func:`run_dir_of`). Issues that carry one
    value from one key into the keys that copy it by interpolation are reported as one
    (rlvr.config.copies)."""
    from rlvr.config.copies import merged

    try:
        return _checked(cfg, run_dir, held)
    except ConfigValidationError as exc:
        raise ConfigValidationError(merged(exc.issues, cfg)) from None


def _checked(cfg: DictConfig, run_dir: Path | None, held: Sequence[ConfigIssue]) -> GateResult:
    resolved = checked_config(cfg, held)
    checked = GateResult(resolved, run_dir_of(resolved) if run_dir is None else run_dir)
    try:
        refuse(_validate(checked), held)
    except BaseException:  # a refusal, or a bug in a component (its own exception and traceback)
        checked.close()
        raise
    # What ${rlvr.fp32_cpu:...} chose, for the console and provenance.json (TrainingLoop.hardware_record)
    if hasattr(loop := checked.components.get("training_loop", ()), "fp32_cpu_settings"):
        loop.fp32_cpu_settings = fp32_cpu_choices(cfg, checked.cfg)
    return checked


def close_components(components: dict[str, Any]) -> None:
    """Close the built components that hold workers (a verifier's); observers close with a run."""
    for key, component in components.items():
        if not key.startswith("observers.") and hasattr(component, "close"):
            component.close()


def _app_components(cfg: DictConfig) -> tuple[str, ...]:
    """The components the ``app`` builds: its function's ``components`` (none for an app that
    builds nothing of the pipeline's)."""
    from hydra.utils import get_method

    return tuple(getattr(get_method(cfg.app._target_), "components", ()))


def _broken(issues: list[ConfigIssue]) -> set[str]:
    """The component keys an issue names (an observer by its entry): not built, their config is
    wrong (a value breaking only its declared range or choice still builds: ConfigIssue.builds)."""
    parts = [issue.key.split(".") for issue in issues if not issue.builds]
    return {".".join(p[:2]) if p[0] == "observers" else p[0] for p in parts}


def component_issues(cfg: DictConfig, run_dir: Path) -> list[ConfigIssue]:
    """The issues :func:`check` finds in a resolved config's components (:func:`checked_config`),
    with what it built closed again."""
    checked = GateResult(cfg, run_dir)
    try:
        return _validate(checked)
    finally:
        close_components(checked.components)


def _validate(checked: GateResult) -> list[ConfigIssue]:
    """The app's components judged: present, bound against their signatures, built (their
    constructors' checks), each one's validate(), the rules between them, the run directory and,
    when nothing else is wrong, the memory the run needs. What was built and the resume point are
    kept in ``checked``."""
    from rlvr.pipeline.wiring import OPTIONAL_KEYS, build_all, runtime_args

    cfg = checked.cfg
    keys = _app_components(cfg)
    missing = [k for k in keys if k not in cfg and k not in OPTIONAL_KEYS]
    if missing:
        return [
            ConfigIssue(k, None, "component config missing", f"add '{k}' to the defaults list")
            for k in missing
        ]
    from rlvr.runtime.cards import KEY, card_of

    card, card_issues = card_of(OmegaConf.select(cfg, KEY, default=None))
    issues = run_key_issues(cfg) + check_targets(cfg, runtime_args(cfg)) + _resume_issues(checked)
    issues += card_issues
    built = build_all(cfg, keys, skip=_broken(issues))
    checked.components = c = built.components
    issues += built.issues
    refused = [issue.key for issue in issues]
    # A verdict on a whole node under which a key is already refused adds nothing (TRL's on a phase
    # node with a value off its bound: the bound is the one check of that value, and the fix).
    validated = [issue for x in c.values() if hasattr(x, "validate") for issue in x.validate()]
    issues += [i for i in validated if not any(k.startswith(f"{i.key}.") for k in refused)]
    issues += _between_issues(c)
    from rlvr.training_loop.budget import config_issues as budget_issues

    issues += budget_issues(cfg, c)  # budget_minutes and what it cannot plan
    validate_only = OmegaConf.select(cfg, "validate_only", default=False) is True
    if not issues and validate_only:  # a run's data stage draws these itself, once
        issues += [i for x in c.values() if hasattr(x, "drawn_size_issues") for i in x.drawn_size_issues()]
    if not issues:
        issues += _memory_issues(c, card, say=card is not None or validate_only)
    return issues


def _resume_issues(checked: GateResult) -> list[ConfigIssue]:
    """A training run's ``resume`` and what its directory already holds
    (rlvr.training_loop.resume); the resume point is kept in ``checked``. A finished run continued
    with ``resume=auto`` and its own settings passes (the run then says there is nothing to resume);
    with other critical settings it is refused."""
    cfg, run_dir = checked.cfg, checked.run_dir
    if "resume" not in cfg:
        return []
    from rlvr.training_loop.checkpoints import checkpoints_in
    from rlvr.training_loop.resume import foreign_run_dir_issues, resolve_resume

    checked.checkpoints_seen = checkpoints_in(run_dir)
    checked.resume_lines = []
    checked.resume, issues = resolve_resume(cfg, run_dir, say=checked.resume_lines.append)
    from rlvr.training_loop.budget import resume_issues as budget_issues

    issues += budget_issues(cfg, checked.resume)  # a budgeted run's checkpoint: the plan it followed
    return issues + foreign_run_dir_issues(cfg, run_dir, checked.resume)


# Said beside a rule the directory broke only by the time the app held its lock.
_UNDER_LOCK = (
    "(found once this command held the run directory's lock: another run wrote there after the config check)"
)


def judge_run_dir_under_lock(checked: GateResult) -> None:
    """The run directory judged again once the app holds its lock (rlvr.runtime.run_lock), by the
    rules the gate judged it with (:func:`_resume_issues`: another run's records, another run's
    settings fingerprint; the finished run is the app's, rlvr.training_loop.resume.finished_run): a
    run that passed the gate in an empty directory, then waited for the lock, must not start in the
    run that finished there meanwhile (SECURITY.md "One owner per run directory"). The resume point is
    resolved again only when the complete checkpoints changed since the gate looked; the records and
    the fingerprint are judged every time. Raise ConfigValidationError, naming ``hydra.run.dir``."""
    if "resume" not in checked.cfg:
        return
    from rlvr.training_loop.checkpoints import checkpoints_in
    from rlvr.training_loop.resume import foreign_run_dir_issues

    if checkpoints_in(checked.run_dir) != checked.checkpoints_seen:
        issues = _resume_issues(checked)
    else:
        issues = foreign_run_dir_issues(checked.cfg, checked.run_dir, checked.resume)
    refuse([dataclasses.replace(i, problem=f"{i.problem} {_UNDER_LOCK}") for i in issues])


def _between_issues(c: dict[str, Any]) -> list[ConfigIssue]:
    """Rules between built components, each kept by the component that owns the data it reads."""
    from rlvr.data.references import stage_issues
    from rlvr.reward.terms import success_term_issues

    issues = success_term_issues(c.get("data"), c.get("reward"))
    issues += stage_issues(c.get("data"), c.get("training_loop"))
    if "distributed" in c:
        issues += c["distributed"].model_issues(c.get("model"))
    return issues


def _memory_issues(c: dict[str, Any], card: Any, say: bool) -> list[ConfigIssue]:
    """The memory check with the budget the run assumes before its data is loaded
    (rlvr.model.memory), against ``card`` (``runtime.memory.target``) or this machine's device;
    its warnings are printed, its refusals returned, and with ``say`` (validate_only or a card) a
    run that fits is told so with its estimate."""
    if "model" not in c or "training_loop" not in c:
        return []
    from rlvr.model.memory import run_checks, summary

    issues, warnings = run_checks(c["model"], c["training_loop"], c.get("distributed"), card=card)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    line = summary(c["model"], c["training_loop"], c.get("distributed"), card) if say else None
    if line is not None and not any(i.key == "model" and i.value == "(memory)" for i in issues):
        print(line)
    return issues


def refuse(issues: Sequence[ConfigIssue], held: Sequence[ConfigIssue] = ()) -> None:
    """Raise ConfigValidationError with the ``held`` command-line issues and ``issues``, if any."""
    found = [*held, *issues]
    if found:
        raise ConfigValidationError(found)
