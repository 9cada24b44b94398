"""The note the console and report.md put beside the GRPO stage's paired change, for the runs the
GRPO budget measurement covers; the measurement and why a reader needs the note are in docs/grpo.md
("The RL budget curve")."""

from __future__ import annotations

from typing import Any

# The largest GRPO budget of the measured curve (benchmarks/grpo_budget.md), in optimizer steps.
MEASURED_STEPS = 256
MEASURED_TASKS = ["basic_arithmetic"]


def grpo_stage_note(model: Any, tasks: list[str], grpo: Any) -> str | None:
    """The note for a run's GRPO stage, or None where the measurement does not cover the run.

    ``model`` is the run's model component, ``grpo`` the training loop's GRPO phase (its
    ``enabled`` and TRL fields).
    """
    from rlvr.model.embedded import NAME
    from rlvr.model.loader import EmbeddedModel

    steps = int(grpo.trl_fields.get("max_steps", 0) or 0) if grpo is not None and grpo.enabled is True else 0
    if (
        not isinstance(model, EmbeddedModel)
        or model.source.name != NAME  # measured on the default embedded model only
        or list(tasks) != MEASURED_TASKS
        or not 0 < steps <= MEASURED_STEPS
    ):
        return None
    return (
        f"GRPO stage ({steps} steps): on this model and task (2-core CPU, 3 seeds each) a 16-step stage "
        "after the default's 160 worked SFT steps moved greedy accuracy by -3.5 to +0.5 points and "
        "accuracy at the sampling temperature by -0.8 to +1.6 (benchmarks/cpu_fp32.md); after 640 "
        "answer-only SFT steps by -2.6 to -0.2 and +1.3 to +1.6, and 16, 64 and 256 GRPO steps did not "
        "beat more SFT for the same time, greedy or sampled, on 2 seeds (benchmarks/grpo_budget.md). At "
        "this budget the GRPO stage demonstrates the RL path and is not expected to gain."
    )
