"""The one evaluation result type: its summary is always what its per-sample scores give."""

from __future__ import annotations

import json

import pytest
from tests.conftest import compose_config

from rlvr.config.validation import check_targets
from rlvr.evaluation.results import Evaluation, SampleRecord
from rlvr.pipeline.wiring import runtime_args


def sample(i: int, scores: list[float], answers: list[str | None]) -> SampleRecord:
    return SampleRecord(
        index=i, task="t", question=f"q{i}", reference="4", completions=["c"] * len(scores),
        answers=answers, scores=scores, status=["ok"] * len(scores),
    )  # fmt: skip


def test_summary_counts_only_full_scores_and_round_trips():
    ev = Evaluation(
        [sample(0, [1.0], ["4"]), sample(1, [0.5], ["44"])], ks=[1], seconds=1.0, samples_per_second=2.0
    )
    assert ev.summary.n == 2 and ev.accuracy == 0.5  # partial credit 0.5 is not a success
    again = Evaluation.from_dict(json.loads(json.dumps(ev.to_dict())))
    assert again.summary == ev.summary and again.samples == ev.samples


def test_edited_stored_accuracy_is_refused():
    data = Evaluation([sample(0, [0.0], ["5"])], ks=[1], seconds=1.0, samples_per_second=1.0).to_dict()
    data["summary"]["accuracy"] = 1.0
    with pytest.raises(ValueError, match="does not match"):
        Evaluation.from_dict(data)


def test_edited_per_sample_score_changes_the_recomputed_summary():
    data = Evaluation([sample(0, [0.0], ["5"])], ks=[1], seconds=1.0, samples_per_second=1.0).to_dict()
    data["samples"][0]["scores"] = [1.0]
    with pytest.raises(ValueError, match="does not match"):
        Evaluation.from_dict(data)


def test_multi_sample_metrics():
    ev = Evaluation(
        [sample(0, [1.0, 0.0], ["4", "5"]), sample(1, [0.0, 0.0], ["7", "7"])],
        ks=[1, 2], seconds=1.0, samples_per_second=1.0,
    )  # fmt: skip
    assert ev.summary.pass_at_k == {1: 0.25, 2: 0.5}
    assert ev.summary.majority_vote == 0.5


def _evaluator(**kwargs):
    from tests.conftest import make_evaluator

    return make_evaluator(**kwargs)


SAMPLED = {"num_samples": 4, "temperature": 1.0, "max_examples": 300}


def test_sampled_view_takes_the_sampled_settings_and_keeps_the_rest():
    ev_ = _evaluator(max_new_tokens=16, batch_size=8, sampled=SAMPLED)
    view = ev_.sampled_view()
    assert (view.num_samples, view.temperature, view.max_examples, view.ks) == (4, 1.0, 300, [1, 4])
    assert (view.max_new_tokens, view.batch_size, view.prompt) == (16, 8, ev_.prompt) and view.sampled is None
    assert (ev_.num_samples, ev_.temperature, ev_.max_examples) == (1, 0.0, None)  # the greedy one unchanged
    # a quick-check cap on the greedy evaluation also caps the sampled one
    assert _evaluator(max_examples=50, sampled=SAMPLED).sampled_view().max_examples == 50
    assert _evaluator(sampled=None).sampled_view() is None


def _sampled_issues(*overrides):
    """What the config gate's binding says of evaluation.sampled (its type: SampledNode)."""
    from tests.conftest import compose_config

    from rlvr.config.validation import check_targets
    from rlvr.pipeline.wiring import runtime_args

    cfg = compose_config(list(overrides))
    return [i for i in check_targets(cfg, runtime_args(cfg)) if i.key.startswith("evaluation.sampled")]


def test_sampled_settings_are_checked():
    """Mutation: Evaluator's ``sampled`` annotated Mapping[str, Any] -> red."""

    def keys(key, value):
        return [(i.key, i.value) for i in _sampled_issues(f"evaluation.sampled.{key}={value}")]

    assert _sampled_issues() == []
    assert keys("temperature", 0.0) == [("evaluation.sampled.temperature", 0.0)]
    assert keys("num_samples", 0) == [("evaluation.sampled.num_samples", 0)]
    assert keys("max_examples", 0) == [("evaluation.sampled.max_examples", 0)]
    assert _evaluator(sampled={**SAMPLED, "temperature": 0.0}).sampled is None  # never half-built


def test_sampled_settings_are_typed_and_an_unknown_key_names_its_fix():
    from rlvr.evaluation.evaluator import SampledEvaluation
    from rlvr.runtime.hardware import trains_fp32_on_cpu

    evaluator = _evaluator()
    k = 2 if trains_fp32_on_cpu(compose_config([])) else 4  # conf: ${rlvr.fp32_cpu:2,4}
    assert evaluator.sampled == SampledEvaluation(num_samples=k, temperature=1.0, max_examples=300)
    [typo] = _sampled_issues("+evaluation.sampled.num_sample=8")
    assert (typo.key, typo.value) == ("evaluation.sampled.num_sample", 8)
    assert "num_samples" in typo.fix and typo.problem == "not a SampledNode field"
    [missing] = _sampled_issues("~evaluation.sampled.max_examples")
    assert (missing.key, missing.problem) == ("evaluation.sampled.max_examples", "missing")


def test_the_vllm_generators_settings_are_checked_under_its_own_key(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    evaluator = _evaluator_from(["evaluation/generator=vllm", "evaluation.generator.cpu_kv_cache_gb=0"])
    issues = {i.key: i for i in evaluator.validate()}
    assert evaluator.backend == "vllm"
    assert issues["evaluation.generator.cpu_kv_cache_gb"].value == 0
    cfg = compose_config(["evaluation/generator=vllm", "evaluation.generator.gpu_memory_utilization=1.5"])
    [share] = check_targets(cfg, runtime_args(cfg))  # a range of VLLMBackend's signature: the gate's
    assert (share.key, share.value, share.problem) == (
        "evaluation.generator.gpu_memory_utilization",
        1.5,
        "must be < 1",
    )
    assert "evaluation/generator=hf" in issues["evaluation.generator"].fix  # one process only
    assert _evaluator_from([]).backend == "hf" and _evaluator_from([]).validate() == []


def _evaluator_from(overrides):
    from tests.conftest import make_evaluator

    return make_evaluator(overrides)
