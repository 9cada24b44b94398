"""The evaluation schedule (rlvr.evaluation.schedule): which stage the training loop's new weights are
evaluated under, and when an evaluation of the same weights is reused instead of generating again."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import make_eval_result

from rlvr.evaluation.schedule import EvalSchedule
from rlvr.stages import EvalLabel, run_order


class Hub:
    def __init__(self):
        self.emitted = []

    def emit(self, event):
        self.emitted.append(event)

    def progress(self, description, total, unit):
        return type("Bar", (), {"close": lambda self: None, "advance": lambda self, n=1: None})()


class Evaluator:
    max_examples = None

    def __init__(self):
        self.generated = []

    def evaluate(self, model, tokenizer, dataset, label, step, out_dir, meta, progress=None):
        self.generated.append((label, step))
        return make_eval_result(label, step, 1, 2)

    def completions(self, result, dataset):
        return None

    def sampled_view(self):
        return None

    @staticmethod
    def relabel(path, label, step):
        return path


def schedule() -> EvalSchedule:
    return EvalSchedule(Evaluator(), Hub(), None, ["q"] * 2, Path("eval"), {}, main=True)


def test_new_weights_are_evaluated_under_their_phase_and_sfts_handover_as_after_sft():
    s = schedule()
    assert s.on_weights("model", "sft", 2).label == EvalLabel.SFT
    # SFT hands the weights it evaluated at its last step to GRPO: "after SFT" reuses that evaluation
    after = s.on_weights("model", "sft", 2, next_phase="grpo")
    assert (after.label, after.step) == (EvalLabel.AFTER_SFT, 2)
    assert s.evaluator.generated == [("sft", 2)]
    # a handover after steps no evaluation measured is evaluated
    assert s.on_weights("model", "sft", 3, next_phase="grpo").label == EvalLabel.AFTER_SFT
    assert s.evaluator.generated == [("sft", 2), ("after_sft", 3)]
    # only SFT's handover is a stage of its own
    assert s.on_weights("model", "grpo", 4, next_phase="later") is None
    assert [e.label for e in s.evaluations] == ["sft", "after_sft", "after_sft"]
    assert [e.label for e in s.hub.emitted] == ["sft", "after_sft", "after_sft"]


def test_the_final_evaluation_reuses_the_last_steps_evaluation_or_the_baseline_when_nothing_trained():
    s = schedule()
    s.baseline("model")
    final = s.final("model", {}, trained=0)
    assert (final.label, final.step) == (EvalLabel.FINAL, 0) and s.evaluator.generated == [("baseline", 0)]
    s = schedule()
    s.on_weights("model", "grpo", 4)
    s.final("model", {"grpo": 4}, trained=4)
    s.final("model", {"grpo": 5}, trained=5)
    assert s.evaluator.generated == [("grpo", 4), ("final", 5)]


def test_run_order_is_the_stage_order():
    made = [
        make_eval_result(label, step, 1, 2) for label, step in [("final", 9), ("grpo", 4), ("baseline", 0)]
    ]
    assert [e.label for e in run_order(made)] == ["baseline", "grpo", "final"]
