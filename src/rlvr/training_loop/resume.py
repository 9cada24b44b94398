"""``resume`` and the run directory: which checkpoint a run continues from, and the settings fingerprint
that must match the run it continues (rlvr.training_loop.checkpoints keeps the checkpoints and their copies
of the fingerprint)."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlvr.events import COMPLETED_STATUSES
from rlvr.issues import ConfigIssue
from rlvr.runtime import distributed
from rlvr.runtime.io import run_records_in
from rlvr.runtime.secrets import redact
from rlvr.training_loop.checkpoints import FINGERPRINT, check_fingerprint, find_checkpoint, phase_of

# Settings that must not change when a run is resumed (resume_allow_changes=true overrides).
CRITICAL_KEYS = (
    "model",
    "data.task",
    "data.task_params",
    "data.tasks",
    "data.name",
    "data.path",
    "seed",
    "training_loop.grpo.num_generations",
)
# Each phase's step budget and learning-rate schedule: a checkpoint holds the scheduler's step, and
# transformers rebuilds the schedule from the settings on resume, so SFT max_steps 60 -> 20 puts the
# restored step on another cosine curve (issue 56 item 5). Compared only against a checkpoint: a run
# that died before its first one starts afresh under the new budget. rft's budget is its rounds;
# budget_minutes sizes the steps (rlvr.training_loop.budget: a resumed run reuses its recorded plan).
SCHEDULE_KEYS = tuple(
    f"training_loop.{phase}.{key}"
    for phase in ("sft", "rft", "grpo")
    for key in (
        "max_steps",
        "num_train_epochs",
        "learning_rate",
        "lr_scheduler_type",
        "lr_scheduler_kwargs",
        "warmup_steps",
        "warmup_ratio",
    )
) + (
    "training_loop.rft.rounds",
    "training_loop.rft.steps_per_round",
    "budget_minutes",
    # what SFT trains: a checkpoint's optimizer holds state for those parameters only
    "training_loop.sft.freeze_embeddings",
    "training_loop.sft.frozen_layers",
    "training_loop.sft.fp32_cpu",
    # what SFT imitates (the answer, or a working then the answer)
    "training_loop.sft.target",
)


def fingerprint(cfg: DictConfig, keys: tuple[str, ...] = CRITICAL_KEYS + SCHEDULE_KEYS) -> dict[str, Any]:
    """The critical settings and schedule (``keys``), secrets masked: the record on disk and the
    comparison on resume agree."""
    return redact(
        {k: OmegaConf.to_container(OmegaConf.create({"v": OmegaConf.select(cfg, k)}))["v"] for k in keys}
    )


def changed_settings(cfg: DictConfig, resume: tuple[str, Path] | None) -> list[str]:
    """``key: saved -> now`` for each critical or schedule setting this attempt changed from the
    checkpoint it continues (only with ``resume_allow_changes=true``: otherwise the gate refused the
    run); the attempt records them (attempts.json ``changed_settings``) and report.md lists them."""
    if resume is None:
        return []
    owner = resume[1].parent.parent.parent  # <run>/checkpoints/<phase>/checkpoint-N
    return check_fingerprint(owner, fingerprint(cfg), False, checkpoint=resume[1])


def continues(cfg: DictConfig) -> bool:
    """Whether ``resume`` is set: the run continues the one recorded in its directory."""
    return OmegaConf.select(cfg, "resume", default=None) not in (None, "", False)


def _allow_changes(cfg: DictConfig) -> bool:
    return bool(OmegaConf.select(cfg, "resume_allow_changes", default=False))


def recorded_overrides(run_dir: Path) -> list[str] | None:
    """The command-line overrides the run in ``run_dir`` was started with (its provenance.json,
    credentials masked), or None when it recorded none."""
    try:
        overrides = json.loads((Path(run_dir) / "provenance.json").read_text()).get("overrides")
    except (OSError, ValueError, AttributeError):
        return None
    return [str(o) for o in overrides] if isinstance(overrides, list) else None


def entry_command() -> list[str]:
    """The interpreter running this process and the entry script as it was started: a printed
    command runs as printed, also outside an activated venv (where a bare ``python`` has no hydra)."""
    script = sys.argv[0] if Path(sys.argv[0]).name == "run_pipeline.py" else "run_pipeline.py"
    return [sys.executable or "python", script]


def resume_command(run_dir: Path, overrides: list[str] | None) -> str:
    """The command that continues the run in ``run_dir``: its own overrides (``resume`` and the run
    directory replaced), so the critical settings match. Masked credentials must be given again."""
    kept = [o for o in overrides or [] if not o.lstrip("+~").startswith(("resume=", "hydra.run.dir="))]
    line = shlex.join([*entry_command(), *kept, "resume=auto", f"hydra.run.dir={run_dir}"])
    if any("***" in o for o in kept):
        line += "  (credentials were masked: give them again)"
    return line


def continue_command(run_dir: Path) -> str:
    """The command that continues this process's run in ``run_dir`` (its own overrides)."""
    from rlvr.records.provenance import command_line_overrides

    return resume_command(run_dir, command_line_overrides())


def finished_run(cfg: DictConfig, run_dir: Path) -> str | None:
    """``resume=auto`` in a run whose last attempt completed: the line saying there is nothing to do
    (the run is left as it is, exit 0: a requeued or relaunched sweep skips its finished points).
    None when there is something to resume."""
    from rlvr.records.run_history import read_attempts

    # Read on every rank of a launch (nothing has written yet): they all stop, none waits for rank 0.
    if OmegaConf.select(cfg, "resume", default=None) != "auto":
        return None
    try:
        attempts = read_attempts(run_dir)
    except (OSError, ValueError):
        return None  # unreadable: resume as before; the run's report names the problem
    if not attempts or attempts[-1].get("status") not in COMPLETED_STATUSES:
        return None
    return (
        f"resume=auto: the run in {run_dir} completed at {attempts[-1].get('ended_at')} "
        f"(attempt {len(attempts)}); nothing to resume, nothing changed. Its report: {run_dir}/report.md. "
        f"To train further, start a new run from its model (model=hf model.name_or_path={run_dir}/final "
        "hydra.run.dir=<new dir>)."
    )


def resolve_resume(
    cfg: DictConfig, run_dir: Path, say: Callable[[str], None] = print
) -> tuple[tuple[str, Path] | None, list[ConfigIssue]]:
    """``resume``: null (fresh run), ``auto`` (newest complete checkpoint in the run dir, else a
    fresh run) or a checkpoint path (which must exist). Returns (phase, checkpoint) or None, and
    the issues; ``say`` gets the lines about what ``auto`` passed over or found (the config gate
    checks quietly, the run says them once)."""
    value = OmegaConf.select(cfg, "resume", default=None)
    if not continues(cfg):
        return None, []
    if value == "auto":
        # The newest complete checkpoint, or a fresh run when there is none yet: the same command
        # starts a SLURM array task or a cloud VM and continues it after a requeue or a restart.
        found, damaged = find_checkpoint(run_dir)
        for path, why in damaged:
            say(
                f"resume=auto: passing over {path}: it is damaged ({why}); "
                + (f"continuing from {found[1]} instead" if found else "no intact checkpoint is left")
            )
        if found is None:
            say(f"resume=auto: no complete checkpoint under {run_dir}/checkpoints, starting fresh")
            return None, []
    else:
        path = Path(str(value))  # resume=123 names a folder too
        if not path.is_dir():
            return None, [
                ConfigIssue(
                    "resume",
                    value,
                    "checkpoint directory does not exist",
                    "pass an existing <run_dir>/checkpoints/<phase>/checkpoint-N or resume=auto",
                )
            ]
        try:
            found = (phase_of(path), path)
        except ValueError as exc:
            return None, [ConfigIssue("resume", value, str(exc), "pick a complete checkpoint")]
    # The settings are compared with the run that OWNS the checkpoint (<run>/checkpoints/<phase>/
    # checkpoint-N), whether it was found by resume=auto or given as a path; the checkpoint's own
    # copy of its run's fingerprint first (rlvr.training_loop.checkpoints).
    owner = found[1].parent.parent.parent
    diffs = check_fingerprint(owner, fingerprint(cfg), False, checkpoint=found[1])
    if diffs and _allow_changes(cfg):
        say(f"resume: continuing {found[1]} with changed settings (resume_allow_changes=true), recorded in "
            "the report: " + "; ".join(diffs))  # fmt: skip
        return found, []
    schedule = [d for d in diffs if d.startswith(SCHEDULE_KEYS)]
    critical = [d for d in diffs if d not in schedule]
    issues = []
    if critical:
        issues.append(
            ConfigIssue(
                "resume",
                value,
                "critical settings differ from the run being resumed (saved -> now): " + "; ".join(critical),
                _restore_fix(owner),
            )
        )
    if schedule:
        issues.append(
            ConfigIssue(
                "resume",
                value,
                "step budgets or learning-rate schedule differ from the checkpoint's run (saved -> now): "
                + "; ".join(schedule)
                + "; the checkpoint's scheduler would continue on another curve than the one it was on",
                _restore_fix(owner, "start a new run with the new budget (a new hydra.run.dir), "),
            )
        )
    return found, issues


def _restore_fix(owner: Path, other: str = "") -> str:
    """Restore the settings (the run's own overrides and the command with them, when it recorded
    them), ``other`` ways out, or allow the change."""
    overrides = recorded_overrides(owner)
    if overrides is None:
        return f"restore them, {other}or set resume_allow_changes=true"
    return (
        f"restore them: that run was started with the overrides {overrides or '(none)'}; continue "
        f"it with: {resume_command(owner, overrides)} ({other}or set resume_allow_changes=true)"
    )


def foreign_run_dir_issues(
    cfg: DictConfig, run_dir: Path, resume: tuple[str, Path] | None
) -> list[ConfigIssue]:
    """A fresh run never starts in a directory holding another run's records (it would rewrite
    its fingerprint and mix its metrics); a continued run (``resume`` set) only in one whose
    fingerprint matches its settings, found checkpoint or not: ``resume=auto`` in a run that
    died before its first checkpoint starts afresh, and must not adopt another run's directory.
    ``resume`` = what :func:`resolve_resume` found. Checked on rank 0 (the other ranks would see
    the records rank 0 is writing)."""
    if not distributed.is_main() or not run_dir.is_dir():
        return []
    found = run_records_in(run_dir)
    if not found:
        return []
    if not continues(cfg):
        return [
            ConfigIssue(
                "hydra.run.dir",
                str(run_dir),
                f"holds another run ({', '.join(found)}); a fresh run here would overwrite its "
                "records and settings fingerprint",
                "choose a new hydra.run.dir, or continue that run with resume=auto and its settings",
            )
        ]
    if resume is not None and resume[1].parent.parent.parent.resolve() == run_dir.resolve():
        return []  # resolve_resume compared the settings with the checkpoint's own fingerprint
    # No checkpoint to continue: the critical settings only (the schedule starts afresh anyway).
    diffs = check_fingerprint(run_dir, fingerprint(cfg, CRITICAL_KEYS), _allow_changes(cfg))
    if (run_dir / FINGERPRINT).is_file() and diffs:
        return [
            ConfigIssue(
                "hydra.run.dir",
                str(run_dir),
                "holds a run with other critical settings (saved -> now): " + "; ".join(diffs),
                _restore_fix(run_dir, "choose a new hydra.run.dir, "),
            )
        ]
    return []
