"""The run's evaluation schedule: which weights are evaluated under which stage label, and when an
evaluation already made is reused instead of generating again.

A run evaluates the base model (``baseline``), every ``evaluation.every_n_steps`` steps of each
training phase (labelled by the phase), the weights SFT hands to GRPO (``after_sft``) and the final
weights (``final``); the GRPO stage's start and end are also sampled at the training temperature
(``evaluation.sampled``). The training loop only reports new weights (:meth:`EvalSchedule.on_weights`);
it never names a stage.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr import events as ev
from rlvr.stages import SAMPLED, EvalLabel

if TYPE_CHECKING:
    from datasets import Dataset
    from torch import nn
    from transformers import PreTrainedTokenizerBase

    from rlvr.evaluation.evaluator import Evaluator
    from rlvr.observers.base import ObserverHub
    from rlvr.records.run_history import RunHistory
    from rlvr.runtime.distributed import Distributed


def eval_of_last_weights(evaluations: list[ev.EvalResult], steps: dict[str, int]) -> ev.EvalResult | None:
    """The evaluation of the weights training ended with (``steps``: phase -> last step, in phase
    order), if one was made: an evaluation at the last phase's last step (after SFT counts for SFT)
    measured the model the after-SFT or final evaluation would measure again (greedy, same
    questions). ``evaluations`` in the order they were made or reloaded: the newest wins, so this
    attempt's own evaluation comes before an earlier attempt's (rlvr.records.run_history) of those weights."""
    if not steps:
        return None
    phase, last_step = list(steps.items())[-1]
    labels = {EvalLabel.SFT, EvalLabel.AFTER_SFT} if phase == EvalLabel.SFT else {phase}
    same = [e for e in evaluations if e.label in labels and e.step == last_step]
    return same[-1] if same else None


@dataclass
class EvalSchedule:
    """Evaluates the run's weights at the schedule's points, on the held-out split, and keeps every
    evaluation the run has (``evaluations``, reloaded ones of earlier attempts included).

    Rank 0 evaluates; every rank calls at the same points: under FSDP / ZeRO-3 every rank takes part
    in gathering the full weights, always (whether rank 0 reuses an evaluation is known on rank 0
    only, and a gather skipped on some ranks would hang the others), and rank 0 evaluates a
    full-weight copy (rlvr.runtime.distributed.Distributed.on_rank0).
    """

    evaluator: Evaluator
    hub: ObserverHub
    tokenizer: PreTrainedTokenizerBase
    eval_data: Dataset  # the held-out split
    out_dir: Path
    meta: dict[str, Any]  # what every evaluation file records about the run
    main: bool  # rank 0 (or the only process)
    distributed: Distributed | None = None  # None = one process
    evaluations: list[ev.EvalResult] = field(default_factory=list)
    # What earlier attempts of this run left (rlvr.records.run_history); its evaluations are in ``evaluations``.
    history: RunHistory | None = None

    def baseline(self, model: nn.Module) -> ev.EvalResult | None:
        return self.evaluate(model, EvalLabel.BASELINE, 0)

    def on_weights(
        self, model: nn.Module, phase: str, step: int, next_phase: str | None = None
    ) -> ev.EvalResult | None:
        """The training loop's report of new weights: every ``every_n_steps`` steps of ``phase``, and
        when ``phase`` ended and hands its weights to ``next_phase``. The weights SFT hands to GRPO
        are the GRPO stage's start (after SFT); an evaluation of them made at SFT's last step is
        reused."""
        if next_phase is None:
            return self.evaluate(model, EvalLabel(phase), step)
        if phase != EvalLabel.SFT:
            return None
        return self.evaluate(
            model, EvalLabel.AFTER_SFT, step, eval_of_last_weights(self.evaluations, {phase: step})
        )

    def continue_from(self, history: RunHistory) -> None:
        """A resumed run: the evaluations earlier attempts left are this run's; none is made again."""
        self.history = history
        self.evaluations.extend(history.evaluations)

    def final(self, model: nn.Module, steps: dict[str, int], trained: int) -> ev.EvalResult | None:
        """The final weights' evaluation at step ``trained`` (the run's steps, earlier attempts'
        included), reusing one of the same weights if this attempt's training (``steps``: phase ->
        last step) ended on one, or the baseline when nothing was trained."""
        same_weights = eval_of_last_weights(self.evaluations, steps) or next(
            (e for e in self.evaluations if e.label == EvalLabel.BASELINE and not trained), None
        )
        return self.evaluate(model, EvalLabel.FINAL, trained, same_weights)

    def evaluate(
        self, model: nn.Module, label: EvalLabel, step: int, reuse: ev.EvalResult | None = None
    ) -> ev.EvalResult | None:
        """Evaluate ``model`` (rank 0 only; other ranks get None); ``reuse`` = an evaluation of these
        same weights (greedy decoding repeats it exactly), recorded under ``label`` without
        generating. One an earlier attempt of this run made is returned as it is."""
        if self.distributed is not None:
            return self.distributed.on_rank0(
                model, lambda full: self._evaluate_here(full, label, step, reuse), f"evaluating {label}"
            )
        return self._evaluate_here(model, label, step, reuse) if self.main else None

    def _evaluate_here(
        self, model: nn.Module, label: EvalLabel, step: int, reuse: ev.EvalResult | None
    ) -> ev.EvalResult:
        earlier = self.history.find(label, step) if self.history is not None else None
        if earlier is not None:
            self._evaluate_sampled(model, label, step)  # unless an earlier attempt made that one too
            return earlier
        if reuse is not None:
            path = self.evaluator.relabel(reuse.path, label, step) if reuse.path else None
            event = dataclasses.replace(reuse, label=label, step=step, path=path)
        else:
            event = self._generate_and_score(self.evaluator, model, label, step)
        self._record(event, self.evaluator)
        self._evaluate_sampled(model, label, step)
        return event

    def _record(self, event: ev.EvalResult, evaluator: Evaluator) -> None:
        self.hub.emit(event)
        self.evaluations.append(event)
        table = evaluator.completions(event, self.eval_data)
        if table is not None:
            self.hub.emit(table)

    def _generate_and_score(
        self, evaluator: Evaluator, model: nn.Module, label: str, step: int
    ) -> ev.EvalResult:
        n = len(self.eval_data)
        bar = self.hub.progress(
            f"eval {label}",
            n if evaluator.max_examples is None else min(n, evaluator.max_examples),
            "question",
        )
        try:
            return evaluator.evaluate(
                model, self.tokenizer, self.eval_data, label, step, self.out_dir, self.meta, bar
            )
        finally:
            bar.close()

    def _evaluate_sampled(self, model: nn.Module, label: EvalLabel, step: int) -> None:
        """The GRPO stage's start (after SFT) and end (final) sampled at the training temperature
        (``evaluation.sampled``), so the report pairs what GRPO optimises, not only greedy accuracy.
        The final one only when its start was sampled in this run: no GRPO stage, nothing to pair."""
        view = self.evaluator.sampled_view()
        if view is None or label not in SAMPLED:
            return
        made = {(e.label, e.step) for e in self.evaluations}
        if label == EvalLabel.FINAL and not any(
            made_label == EvalLabel.AFTER_SFT_SAMPLED for made_label, _ in made
        ):
            return
        sampled = EvalLabel(label).sampled
        if (sampled, step) in made:
            return  # reloaded from an earlier attempt of this run (rlvr.records.run_history)
        self._record(self._generate_and_score(view, model, sampled, step), view)
