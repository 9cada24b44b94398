"""The one evaluation result type: its summary is always what its per-sample scores give."""

from __future__ import annotations

import json

import pytest

from rlvr.evaluation.results import Evaluation, SampleRecord


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
