"""TRL/transformers callbacks that turn trainer logs into pipeline events and run in-training evaluation."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from rlvr import events as ev

# Trainer's end-of-training summary keys; they are not a step's metrics.
_SUMMARY_KEYS = {
    "train_runtime",
    "train_samples_per_second",
    "train_steps_per_second",
    "total_flos",
    "train_loss",
}
# One name per metric (issue 56 item 8): TRL's name -> the pipeline's, for each metric TRL logs under
# another name than ours, mapped once, here, where TRL's logs enter the pipeline. Where the pipeline
# measures the metric itself, its value replaces TRL's under that name (EventBridge.on_log): the reward
# set's group check (rlvr.reward.terms.RewardSet: exact where TRL's float32 check misses a flat group)
# and the bridge's timer of the whole optimizer step (TRL's step_time times only training_step).
# Each key is checked against a real GRPO run's logs (tests/unit/test_metric_names.py).
TRL_NAMES = {
    "reward": "reward/mean",
    "reward_std": "reward/std",
    "frac_reward_zero_std": "reward/zero_std_groups_frac",
    "step_time": "step_seconds",
}


def namespaced(phase: str, logs: dict[str, Any]) -> dict[str, float]:
    """TRL log keys -> ``<phase>/...`` names (:data:`TRL_NAMES`; ``rewards/correctness/mean`` ->
    ``grpo/reward/correctness/mean``).

    >>> namespaced("grpo", {"reward": 0.5, "frac_reward_zero_std": 0.25, "step_time": 2.0, "train_loss": 1.0})
    {'grpo/reward/mean': 0.5, 'grpo/reward/zero_std_groups_frac': 0.25, 'grpo/step_seconds': 2.0}
    """
    out = {}
    for key, value in logs.items():
        if key in _SUMMARY_KEYS or not isinstance(value, (int, float)):
            continue
        name = TRL_NAMES.get(key) or key.replace("rewards/", "reward/", 1)
        out[f"{phase}/{name}"] = float(value)
    return out


class EventBridge(TrainerCallback):
    """Emits TrainStep / CheckpointSaved / EvalResult / warnings for one training phase.

    ``evaluate(step)`` is called every ``eval_every`` optimizer steps and returns the
    EvalResult it produced (or None). ``extra_metrics`` and ``extra_events`` are drained at each
    logged step: the phase's own metrics, and events its components have ready.
    """

    def __init__(
        self,
        emit: Callable[[Any], None],
        phase: str,
        max_steps: int,
        eval_every: int = 0,
        evaluate: Callable[[int], ev.EvalResult | None] | None = None,
        extra_metrics: Callable[[], dict[str, float]] | None = None,
        extra_events: Callable[[], list[Any]] | None = None,
    ):
        self.emit, self.phase, self.max_steps = emit, phase, max_steps
        self.extra_metrics, self.extra_events = extra_metrics, extra_events
        self.eval_every, self.evaluate = eval_every, evaluate
        self.history: list[dict[str, float]] = []
        self.evals: list[ev.EvalResult] = []
        self._step_start = time.perf_counter()
        self._last_tokens: float | None = None
        self._zero_var_steps = 0
        self._reward_at_last_eval: float | None = None

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._step_start = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._step_seconds = time.perf_counter() - self._step_start
        if self.eval_every and self.evaluate and state.global_step % self.eval_every == 0:
            result = self.evaluate(state.global_step)
            if result is not None:
                self._check_divergence(result)
                self.evals.append(result)

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if logs is None or "train_runtime" in logs:  # the end-of-training summary, not a step
            return
        metrics = namespaced(self.phase, logs)
        if not metrics:
            return
        seconds = getattr(self, "_step_seconds", None)
        if seconds:
            metrics[f"{self.phase}/step_seconds"] = seconds
            tokens = (logs or {}).get("num_tokens")
            if tokens is not None and self._last_tokens is not None:
                metrics[f"{self.phase}/tokens_per_second"] = (tokens - self._last_tokens) / seconds
            self._last_tokens = tokens
        if self.extra_metrics is not None:
            metrics.update({f"{self.phase}/{k}": v for k, v in self.extra_metrics().items()})
        self.history.append({"step": state.global_step, **metrics})
        self.emit(ev.TrainStep(self.phase, state.global_step, self.max_steps, metrics))
        for event in self.extra_events() if self.extra_events is not None else []:
            self.emit(event)  # e.g. the reward set's sampled completions (ev.Completions)
        # The pipeline's own group check when the reward set provides it (see RewardSet), else TRL's
        # under the same name (TRL_NAMES).
        zero = metrics.get(f"{self.phase}/reward/zero_std_groups_frac")
        if zero is not None and zero >= 1.0:
            self._zero_var_steps += 1
            # First occurrence, then every 10th, so a long flat run does not flood the console.
            if self._zero_var_steps == 1 or self._zero_var_steps % 10 == 0:
                self.emit(
                    ev.RunWarning(
                        f"no reward variance in any group ({self._zero_var_steps} step(s) so far): GRPO learns "
                        "nothing from such a batch. Try an SFT warm start, a higher temperature, more "
                        "num_generations or an easier task.",
                        step=state.global_step,
                    )
                )

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        self.emit(ev.CheckpointSaved(self.phase, state.global_step, path))

    def mean_reward_between(self, after: int, upto: int) -> float | None:
        key = f"{self.phase}/reward/mean"
        values = [h[key] for h in self.history if after < h["step"] <= upto and key in h]
        return sum(values) / len(values) if values else None

    def _check_divergence(self, result: ev.EvalResult) -> None:
        """Warn when the train reward of the window before this evaluation is above the window before
        the previous one, while held-out accuracy fell between the two evaluations."""
        if not self.evals:
            return
        previous = self.evals[-1]
        before = self.mean_reward_between(previous.step - self.eval_every, previous.step)
        now = self.mean_reward_between(previous.step, result.step)
        if before is None or now is None:
            return
        if now > before and result.accuracy < previous.accuracy:
            self.emit(
                ev.RunWarning(
                    f"train reward rose ({before:.3f} -> {now:.3f}) while held-out accuracy fell "
                    f"({previous.accuracy:.1%} -> {result.accuracy:.1%}): possible reward hacking or overfitting",
                    step=result.step,
                )
            )
