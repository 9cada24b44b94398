"""The run's own top-level keys (conf/config.yaml) as one typed node: no component's signature declares
them, so the config gate binds them against :class:`RunSettings` (rlvr.config.validation.run_key_issues);
the code that acts on one reads its type from here (rlvr.training_loop.run_dir: ``keep_checkpoints``).
``resume`` is not a type's: what it may name depends on the run directory (rlvr.training_loop.resume)."""

from __future__ import annotations

import typing
from typing import Annotated, Literal, TypedDict

from pydantic import Field

# After a completed run: none = no checkpoint, last = the newest one, all (rlvr.training_loop.run_dir).
KeepCheckpoints = Literal["none", "last", "all"]
KEEP_CHOICES: tuple[str, ...] = typing.get_args(KeepCheckpoints)


class RunSettings(TypedDict):
    seed: int
    validate_only: bool
    resume_allow_changes: bool
    strict: bool
    keep_checkpoints: KeepCheckpoints
    # Minutes from the pipeline's start to its report; the steps are sized to fit (rlvr.training_loop.budget).
    # At most 30 days: every count a config sets is bounded.
    budget_minutes: (
        Annotated[float, Field(gt=0, le=43_200, examples=[30], description="null = no budget")] | None
    )
