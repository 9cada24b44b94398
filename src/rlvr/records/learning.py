"""What a completed run learned, said where its verdict is read (issue 45): a phase that trained no
step, a phase that stopped early and said why (RFT with no verified sample), a GRPO phase whose
groups never had reward variance. Each is a warning in report.json (``warnings``, and among the
``notes``), report.md, the console summary and the sweep report's ``warnings`` column; the run then
ends :data:`COMPLETED_WITH_WARNINGS` (exit 0, unless ``strict=true``)."""

from __future__ import annotations

from typing import Any

COMPLETED, COMPLETED_WITH_WARNINGS = "COMPLETED", "COMPLETED_WITH_WARNINGS"
# a run that ended normally, whatever it learned: resume has nothing left to do, a sweeper reads it
COMPLETED_STATUSES = frozenset({COMPLETED, COMPLETED_WITH_WARNINGS})
# The share of a GRPO step's groups with no reward variance: the pipeline's own check when the
# reward set logs it (rlvr.reward.terms), else TRL's.
ZERO_STD_KEYS = ("grpo/reward/zero_std_groups_frac", "grpo/frac_reward_zero_std")
FLAT_GRPO_FIX = (
    "warm start with SFT (training_loop.sft.enabled=true), raise training_loop.grpo.temperature or "
    "training_loop.grpo.num_generations, or use an easier task"
)


def end_status(warnings: list[str]) -> str:
    return COMPLETED_WITH_WARNINGS if warnings else COMPLETED


def flat_grpo_steps(history: list[dict[str, Any]]) -> tuple[int, int]:
    """(GRPO steps logged with a zero-variance share, those where every group had none)."""
    shares = []
    for row in history:
        key = next((k for k in ZERO_STD_KEYS if k in row), None)
        if key is not None:
            shares.append(float(row[key]))
    return len(shares), sum(share >= 1.0 for share in shares)


def learning_warnings(
    steps: dict[str, int], history: list[dict[str, Any]], stopped: dict[str, str]
) -> list[str]:
    """The warnings of a completed run: ``steps`` per phase (the whole run's), its step metrics
    (``history``), and what a phase said when it stopped early (``stopped``, phase -> why).

    >>> learning_warnings({"sft": 0, "grpo": 2}, [{"grpo/frac_reward_zero_std": 1.0}] * 2, {})[0]
    'SFT trained 0 steps: the model after it is the model it was given. Check training_loop.sft (max_steps, data)'
    """
    found = [stopped[phase] for phase in steps if phase in stopped]
    found += [
        f"{phase.upper()} trained 0 steps: the model after it is the model it was given. Check "
        f"training_loop.{phase} (max_steps, data)"
        for phase, n in steps.items()
        if n == 0 and phase not in stopped
    ]
    logged, flat = flat_grpo_steps(history)
    if steps.get("grpo") and logged and flat == logged:
        found.append(
            f"GRPO had no reward variance in any group at any of its {logged} logged steps: every "
            f"advantage was 0, so it learned nothing from the rewards. Fix: {FLAT_GRPO_FIX}"
        )
    return found


def run_warnings(outcome: Any, history: Any) -> list[str]:
    """:func:`learning_warnings` of a run's training outcome (rlvr.training_loop.loop.TrainOutcome)
    with what its earlier attempts left (rlvr.records.run_history.RunHistory)."""
    return learning_warnings(
        history.steps(outcome.steps), history.train_history(outcome.history), outcome.stopped
    )
