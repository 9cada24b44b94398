"""What a completed run learned, said where its verdict is read (issue 45): a phase that trained no
step, a phase that stopped early and said why (RFT with no verified sample), a GRPO phase whose
groups never had reward variance, and a reward-hacking alarm (:func:`reward_hacking`). Each is a warning in report.json (``warnings``, and among the
``notes``), report.md, the console summary and the sweep report's ``warnings`` column; the run then
ends :data:`COMPLETED_WITH_WARNINGS` (exit 0, unless ``strict=true``). Issue 55/56 added: the
verifier's term never above 0 (or 0% at every evaluation) though a shaping term gave variance
(:func:`verifier_silent`), and degenerate outputs, one answer to every question or far fewer answers
than the gold has, with a stage gain that is only a constant answer's frequency (:func:`degenerate_warnings`)."""

from __future__ import annotations

import math
from typing import Any

from rlvr.evaluation.results import answer_spread, constant_gain, paired, task_spreads
from rlvr.events import COMPLETED, COMPLETED_WITH_WARNINGS, EvalResult, StageChange
from rlvr.stages import STAGE_CHANGES, EvalLabel

SAMPLED_GRPO_STAGE = next(name for name, before, _ in STAGE_CHANGES if before == EvalLabel.AFTER_SFT_SAMPLED)

# The share of a GRPO step's groups with no reward variance: the pipeline's own check when the
# reward set logs it (rlvr.reward.terms), else TRL's, under this one name (TRL_NAMES in
# rlvr.training_loop.callbacks maps TRL's frac_reward_zero_std to it where its logs enter).
ZERO_STD = "grpo/reward/zero_std_groups_frac"
FLAT_GRPO_FIX = (
    "warm start with SFT (training_loop.sft.enabled=true), raise training_loop.grpo.temperature or "
    "training_loop.grpo.num_generations, or use an easier task"
)


def stage_changes(evaluations: list[EvalResult]) -> list[StageChange]:
    """Paired change of each stage that ran (same questions before and after), for report and console."""
    by_label = {e.label: e for e in evaluations}
    changes = []
    for name, before, after in STAGE_CHANGES:
        if before in by_label and after in by_label:
            try:
                change = paired(by_label[before].evaluation, by_label[after].evaluation)
            except ValueError:  # different question sets (e.g. eval size changed on resume): no pairing
                continue
            changes.append(StageChange(name, before, after, change))
    return changes


# The greedy stage evaluations whose answers the degenerate-output rules read (a sampled one's first
# sample is one draw at the training temperature, not the model's answer).
GREEDY_STAGES: dict[str, str] = {
    EvalLabel.BASELINE: "base model",
    EvalLabel.AFTER_SFT: "after SFT",
    EvalLabel.FINAL: "final",
}
DEGENERATE_FIX = (
    "read its answers (eval/<stage>_step<N>.json, completions.jsonl); train longer or on more "
    "questions (data.train_size), lower the learning rate (training_loop.<phase>.learning_rate), or "
    "check that the gold answers vary (data.task_params)"
)


def degenerate_warnings(evaluations: list[EvalResult]) -> list[str]:
    """Degenerate outputs (issue 56): a greedy stage evaluation whose answers are one constant answer,
    or far less varied than the gold answers (rlvr.evaluation.results.AnswerSpread), in the whole or
    (a mixture) in one task, and a paired
    stage change that is the frequency of a constant answer among the gold answers, not learning."""
    found = []
    for e in evaluations:
        if e.label not in GREEDY_STAGES:
            continue
        problem = answer_spread(e.evaluation).problem()
        if problem:
            found.append(
                f"Degenerate outputs {GREEDY_STAGES[e.label]} (step {e.step}): {problem}. Fix: {DEGENERATE_FIX}"
            )
            continue
        # A mixture: one task's collapse hides in the whole, whose other tasks' answers vary.
        for task, spread in task_spreads(e.evaluation).items():
            problem = spread.problem()
            if problem:
                found.append(
                    f"Degenerate outputs {GREEDY_STAGES[e.label]} (step {e.step}) on task {task}: {problem}. "
                    f"Fix: {DEGENERATE_FIX}"
                )
    by_label = {e.label: e.evaluation for e in evaluations}
    for c in stage_changes(evaluations):
        why = constant_gain(by_label[c.before], by_label[c.after], c.change)
        if why:
            found.append(f"{c.stage}: {c.text}: {why}")
    return found


VERIFIER_SILENT_FIX = (
    "warm start with SFT (training_loop.sft.enabled=true, or more training_loop.sft.max_steps), use an "
    "easier task, or check that the verifier accepts the gold answers in the prompt's answer format"
)


def verifier_silent(
    steps: dict[str, int], history: list[dict[str, Any]], success: str | None, evaluations: list[EvalResult]
) -> list[str]:
    """Learned nothing, per term (issue 55 finding 9): the verifier's term (``success``) was 0 at every
    logged GRPO step, or held-out accuracy was 0% at every evaluation of a run that trained. A shaping
    term (format, length) can still give the groups reward variance, so the no-variance check of
    :func:`learning_warnings` stays silent then."""
    found = []
    key = f"grpo/reward/{success}/mean"
    scored = [float(r[key]) for r in history if key in r] if success and steps.get("grpo") else []
    logged, flat = flat_grpo_steps(history)
    if scored and not any(scored) and not (logged and flat == logged):  # all flat: said by learning_warnings
        found.append(
            f"GRPO's verifier term {success} was 0 at every one of its {len(scored)} logged steps: no "
            "completion was ever verified correct, so whatever reward the groups had came from the "
            f"shaping terms alone. Fix: {VERIFIER_SILENT_FIX}"
        )
    if any(steps.values()) and evaluations and not any(e.accuracy for e in evaluations):
        found.append(
            f"Held-out accuracy was 0% at every one of the run's {len(evaluations)} evaluations "
            f"({', '.join(dict.fromkeys(str(e.label) for e in evaluations))}): the run learned nothing the "
            f"task's verifier counts. Fix: {VERIFIER_SILENT_FIX}"
        )
    return found


def end_status(warnings: list[str]) -> str:
    return COMPLETED_WITH_WARNINGS if warnings else COMPLETED


def flat_grpo_steps(history: list[dict[str, Any]]) -> tuple[int, int]:
    """(GRPO steps logged with a zero-variance share, those where every group had none)."""
    shares = [float(row[ZERO_STD]) for row in history if ZERO_STD in row]
    return len(shares), sum(share >= 1.0 for share in shares)


def learning_warnings(
    steps: dict[str, int], history: list[dict[str, Any]], stopped: dict[str, str]
) -> list[str]:
    """The warnings of a completed run: ``steps`` per phase (the whole run's), its step metrics
    (``history``), and what a phase said when it stopped early (``stopped``, phase -> why).

    >>> learning_warnings({"sft": 0, "grpo": 2}, [{"grpo/reward/zero_std_groups_frac": 1.0}] * 2, {})[0]
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


# The reward-hacking alarm compares a GRPO phase's first third of logged steps with its last third;
# fewer steps than this give thirds too short to tell a trend from the noise of one batch.
MIN_TREND_STEPS = 9
MIN_RISE = 0.05  # in reward units (weighted), or a share of completions for the verifier's term
HACKING_FIX = (
    "read completions.jsonl (what the rewarded completions say), then lower that term's weight "
    "(reward.terms.{name}.weight), tighten it, or drop it (~reward.terms.{name})"
)


def _thirds(values: list[float]) -> tuple[float, float, float]:
    """(mean of the last third - mean of the first, its standard error, mean of the first)."""
    k = len(values) // 3
    first, last = values[:k], values[-k:]

    def var(xs: list[float]) -> float:
        m = sum(xs) / len(xs)
        return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)

    m1, m2 = sum(first) / k, sum(last) / k
    return m2 - m1, math.sqrt(var(first) / k + var(last) / k), m1


def reward_hacking(
    history: list[dict[str, Any]],
    weights: dict[str, float],
    success: str | None,
    held_out: StageChange | None,
    held_out_sampled: StageChange | None = None,
) -> list[str]:
    """The reward-hacking alarm of a GRPO phase: what it was rewarded for rose, the task did not.

    - The shaping terms outran the verifier: from the first third of the logged GRPO steps to the
      last, the other terms' weighted reward rose (by >= 0.05 and two standard errors) while the
      verifier's term (``success``) did not rise.
    - Training correctness rose while held-out accuracy fell: the verifier's term rose by >= 5
      points of its completions while a paired change on the held-out questions across GRPO fell
      with its whole 95% interval below 0: ``held_out_sampled`` (after SFT -> final at the training
      temperature, the measure the training correctness is), or ``held_out`` (greedy). A greedy fall
      beside a sampled rise is not the alarm: what GRPO learned to earn carried to new questions at
      the temperature it trained at (the report's paired changes show both).

    ``history``: the run's training rows (``grpo/reward/<term>/mean`` per logged step), ``weights``:
    term -> weight (rlvr.reward.terms.RewardSet).
    """
    if success is None or success not in weights:
        return []
    keys = {name: f"grpo/reward/{name}/mean" for name in weights}
    rows = [r for r in history if all(k in r for k in keys.values())]
    if len(rows) < MIN_TREND_STEPS:
        return []
    found = []
    shaping = [name for name in weights if name != success]
    verified, _, start = _thirds([float(r[keys[success]]) for r in rows])
    if shaping:
        series = [sum(weights[n] * float(r[keys[n]]) for n in shaping) for r in rows]
        rise, se, _ = _thirds(series)
        if verified <= 0 and rise >= max(MIN_RISE, 2 * se):
            gains = {n: weights[n] * _thirds([float(r[keys[n]]) for r in rows])[0] for n in shaping}
            rose = ", ".join(f"{n} {d:+.3f}" for n, d in sorted(gains.items(), key=lambda x: -x[1]) if d > 0)
            top = max(gains, key=lambda n: gains[n])
            found.append(
                f"Reward-hacking alarm: from the first to the last third of GRPO's {len(rows)} logged "
                f"steps the shaping terms' weighted reward rose {rise:+.3f} ({rose}; standard error "
                f"{se:.3f}) while the verifier's term {success} did not ({verified:+.3f}, from "
                f"{start:.3f}): the model earns reward the task does not give. Fix: {HACKING_FIX.format(name=top)}"
            )
    sampled_rose = held_out_sampled is not None and held_out_sampled.change.delta > 0
    fell = [
        c
        for c in (held_out_sampled, None if sampled_rose else held_out)
        if c is not None and c.change.ci_high < 0
    ]
    if fell and verified >= MIN_RISE:
        c, grpo = fell[0].change, fell[0]
        found.append(
            f"Reward-hacking alarm: GRPO's training correctness ({success}) rose {100 * verified:+.1f} "
            f"points from the first to the last third of its {len(rows)} logged steps while held-out "
            f"accuracy fell {-100 * c.delta:.1f} points ({grpo.before} {100 * c.before:.1f}% -> "
            f"{grpo.after} {100 * c.after:.1f}%, 95% CI [{100 * c.ci_low:+.1f}, {100 * c.ci_high:+.1f}]): "
            "what it learned to earn on its training questions does not carry to new ones. Fix: "
            "read completions.jsonl for answers the verifier accepts but should not; more training "
            "questions (data.train_size) or fewer steps (training_loop.grpo.max_steps)"
        )
    return found


def run_warnings(
    outcome: Any, history: Any, evaluations: list[EvalResult] | None = None, reward: Any = None
) -> list[str]:
    """:func:`learning_warnings` of a run's training outcome (rlvr.training_loop.loop.TrainOutcome)
    with what its earlier attempts left (rlvr.records.run_history.RunHistory), :func:`verifier_silent`,
    the :func:`degenerate_warnings` of its evaluations, then the :func:`reward_hacking` alarm with the paired stage changes of the run's ``evaluations`` and its
    ``reward`` set (rlvr.reward.terms.RewardSet)."""

    rows, steps = history.train_history(outcome.history), history.steps(outcome.steps)
    found = learning_warnings(steps, rows, outcome.stopped)
    success = reward.success_term() if getattr(reward, "terms", None) else None
    found += verifier_silent(steps, rows, success, evaluations or [])
    found += degenerate_warnings(evaluations or [])
    if getattr(reward, "terms", None) and steps.get("grpo"):
        weights = {name: term.weight for name, term in reward.terms.items()}
        # GRPO's own change; the whole run's when GRPO was the only phase that trained
        only_grpo = not any(n for phase, n in steps.items() if phase != "grpo")
        wanted = ("GRPO", "whole run") if only_grpo else ("GRPO",)
        every = stage_changes(evaluations or [])
        changes = [c for c in every if c.stage in wanted]
        sampled = [c for c in every if c.stage == SAMPLED_GRPO_STAGE]
        found += reward_hacking(
            rows,
            weights,
            reward.success_term(),
            changes[0] if changes else None,
            sampled[0] if sampled else None,
        )
    return found
