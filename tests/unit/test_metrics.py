"""Unit tests for rlvr.evaluation.metrics: values checked against independent computations."""

from __future__ import annotations

import itertools
import json
import math
from decimal import Decimal, getcontext
from fractions import Fraction

import pytest

from rlvr.evaluation.metrics import (
    AccuracySummary,
    majority_vote,
    normalize_answer,
    pass_at_k,
    summarize,
    wilson_interval,
)


def _wilson_reference(successes: Fraction, n: int, z: Decimal = Decimal("1.96")) -> tuple[float, float]:
    """Wilson bounds as the roots of (p_hat - pi)^2 = z^2 pi (1 - pi) / n, in 50-digit decimals.

    A different formulation from the implementation's centre +- half-width, so the two check each other.
    """
    getcontext().prec = 50
    p = Decimal(successes.numerator) / Decimal(successes.denominator) / n
    a = 1 + z * z / n
    b = -(2 * p + z * z / n)
    c = p * p
    root = (b * b - 4 * a * c).sqrt()
    return float((-b - root) / (2 * a)), float((-b + root) / (2 * a))


@pytest.mark.parametrize(
    ("successes", "n", "expected"),
    [
        # Rounded published values for z = 1.96 (e.g. Newcombe 1998, statsmodels proportion_confint).
        (0, 10, (0.0, 0.2775)),
        (10, 10, (0.7225, 1.0)),
        (5, 10, (0.2366, 0.7634)),
        (81, 100, (0.7222, 0.8749)),
    ],
)
def test_wilson_known_values(successes: int, n: int, expected: tuple[float, float]) -> None:
    low, high = wilson_interval(successes, n)
    assert low == pytest.approx(expected[0], abs=1e-4)
    assert high == pytest.approx(expected[1], abs=1e-4)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 10, 50, 100, 1000])
def test_wilson_matches_quadratic_roots(n: int) -> None:
    for successes in sorted({0, 1, n // 3, n // 2, n - 1, n}):
        low, high = wilson_interval(successes, n)
        ref_low, ref_high = _wilson_reference(Fraction(successes), n)
        assert low == pytest.approx(ref_low, abs=1e-12)
        assert high == pytest.approx(ref_high, abs=1e-12)
        assert 0.0 <= low <= successes / n <= high <= 1.0


def test_wilson_fractional_successes_is_mean_score_times_n() -> None:
    # Partial credit: 10 questions with mean score 0.45 -> successes = 4.5.
    low, high = wilson_interval(4.5, 10)
    ref = _wilson_reference(Fraction(9, 2), 10)
    assert (low, high) == pytest.approx(ref, abs=1e-12)
    assert low < 0.45 < high


def test_wilson_edge_cases_and_errors() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)
    assert wilson_interval(0, 10)[0] == 0.0
    assert wilson_interval(10, 10)[1] == 1.0
    narrow, wide = wilson_interval(5, 10, z=1.0), wilson_interval(5, 10, z=2.58)
    assert wide[0] < narrow[0] < 0.5 < narrow[1] < wide[1]
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(11, 10)
    with pytest.raises(ValueError, match="n"):
        wilson_interval(0, -1)


def _pass_at_k_closed_form(n: int, c: int, k: int) -> float:
    return float(1 - Fraction(math.comb(n - c, k), math.comb(n, k)))


def test_pass_at_k_matches_closed_form() -> None:
    for n in range(1, 21):
        for c, k in itertools.product(range(n + 1), range(1, n + 1)):
            assert pass_at_k(n, c, k) == pytest.approx(_pass_at_k_closed_form(n, c, k), abs=1e-12), (n, c, k)


def test_pass_at_k_large_n_is_stable() -> None:
    # C(200, 100) overflows a float; the product form must not.
    assert pass_at_k(200, 3, 100) == pytest.approx(_pass_at_k_closed_form(200, 3, 100), abs=1e-12)
    assert pass_at_k(1000, 1, 1) == pytest.approx(0.001)


def test_pass_at_k_edges() -> None:
    assert pass_at_k(10, 0, 1) == 0.0
    assert pass_at_k(10, 0, 10) == 0.0
    assert pass_at_k(10, 10, 1) == 1.0
    assert pass_at_k(10, 1, 10) == 1.0  # k = n: the one correct sample is always drawn
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # pass@1 is the fraction correct
    assert pass_at_k(1, 1, 1) == 1.0


def test_pass_at_k_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match=r"pass@5 needs at least k=5 samples.*only n=4"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError, match="c"):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError, match="k"):
        pass_at_k(4, 1, 0)
    with pytest.raises(ValueError, match="at least one sample"):
        pass_at_k(0, 0, 1)


def test_normalize_answer() -> None:
    assert normalize_answer("  4 2\n") == "4 2"
    assert normalize_answer("Yes") == "Yes"  # case is kept: some tasks are case-sensitive
    assert normalize_answer("   ") is None
    assert normalize_answer(None) is None


def test_majority_vote_picks_most_common_normalised_answer() -> None:
    assert majority_vote(["5", " 4", "4 ", "5", "4"], [0.0, 1.0, 1.0, 0.0, 1.0]) == 1.0
    assert majority_vote(["5", "5", "4"], [0.0, 0.0, 1.0]) == 0.0


def test_majority_vote_tie_goes_to_first_seen() -> None:
    assert majority_vote(["7", "4", "4", "7"], [0.0, 1.0, 1.0, 0.0]) == 0.0
    assert majority_vote(["4", "7", "7", "4"], [1.0, 0.0, 0.0, 1.0]) == 1.0
    # None does not count as an answer, so it cannot win or break a tie.
    assert majority_vote([None, None, "4", "7"], [0.0, 0.0, 1.0, 0.0]) == 1.0


def test_majority_vote_none_and_blank() -> None:
    assert majority_vote([None, None], [0.0, 0.0]) == 0.0
    assert majority_vote([None, "  "], [1.0, 1.0]) == 0.0
    assert majority_vote([], []) == 0.0
    assert majority_vote([None, "3"], [0.0, 0.5]) == 0.5
    with pytest.raises(ValueError, match="2 answers but 1 scores"):
        majority_vote(["1", "2"], [1.0])


def test_majority_vote_averages_partial_credit_of_the_winner() -> None:
    assert majority_vote(["a", "a", "b"], [0.5, 1.0, 0.0]) == pytest.approx(0.75)


def test_summarize_values() -> None:
    scores = [[1.0, 0.0, 0.0], [0.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]
    answers = [["4", "5", "6"], ["1", "2", "2"], [None, None, None], ["9", "9", "9"]]
    s = summarize(scores, answers, ks=(1, 2, 3))
    assert (s.n, s.correct, s.accuracy) == pytest.approx((4, 2.0, 0.5))  # per-question means 1/3, 2/3, 0, 1
    assert (s.ci_low, s.ci_high) == pytest.approx(wilson_interval(2, 4))
    expected = {k: sum(_pass_at_k_closed_form(3, c, k) for c in (1, 2, 0, 3)) / 4 for k in (1, 2, 3)}
    assert s.pass_at_k == pytest.approx(expected)
    assert s.majority_vote == pytest.approx((1.0 + 1.0 + 0.0 + 1.0) / 4)


def test_the_accuracy_of_several_samples_is_their_mean_pass_at_1_not_the_first_samples() -> None:
    """A sampled evaluation's file and the report must say the same number (issue: the file's
    accuracy counted the first sample only while the report showed pass@1)."""
    s = summarize([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]], None, ks=(1, 4))
    assert s.accuracy == pytest.approx(s.pass_at_k[1]) == pytest.approx(0.375)
    assert s.correct == pytest.approx(0.75)
    assert (s.ci_low, s.ci_high) == pytest.approx(wilson_interval(0.75, 2))


def test_summarize_partial_credit_counts_for_accuracy_not_pass_at_k() -> None:
    s = summarize([[0.5, 0.99], [1.0, 0.5]], None, ks=(1, 2))
    assert s.accuracy == pytest.approx((0.745 + 0.75) / 2)
    assert s.pass_at_k == pytest.approx({1: 0.25, 2: 0.5})
    assert s.majority_vote is None  # no answers given
    assert summarize([[0.5, 0.99]], None, ks=(1,), success_threshold=0.9).pass_at_k == {1: 0.5}


def test_summarize_single_sample_has_no_majority_vote() -> None:
    s = summarize([[1.0], [0.0]], [["1"], ["2"]], ks=(1,))
    assert s.majority_vote is None
    assert s.pass_at_k == {1: 0.5}


def test_summarize_empty_and_errors() -> None:
    s = summarize([], None, ks=(1,))
    assert (s.n, s.accuracy, s.ci_low, s.ci_high, s.pass_at_k) == (0, 0.0, 0.0, 1.0, {})
    with pytest.raises(ValueError, match="question 1 has 1"):
        summarize([[1.0, 0.0], [1.0]], None, ks=(2,))
    with pytest.raises(ValueError, match="question 0 has no samples"):
        summarize([[]], None)
    with pytest.raises(ValueError, match="answers for 1 questions but scores for 2"):
        summarize([[1.0], [0.0]], [["1"]])
    with pytest.raises(ValueError, match="question 0 has 2 answers but 1 scores"):
        summarize([[1.0]], [["1", "2"]])


def test_accuracy_summary_json_round_trip() -> None:
    s = summarize([[1.0, 0.0], [0.0, 0.0]], [["4", "5"], ["7", "7"]], ks=(1, 2))
    data = json.loads(json.dumps(s.to_dict()))
    assert data["pass_at_k"] == {"1": 0.25, "2": 0.5}
    assert AccuracySummary.from_dict(data) == s
    with pytest.raises(ValueError, match="missing"):
        AccuracySummary.from_dict({"n": 1})


# -- paired statistics (issue: stage-to-stage changes are paired, not two Wilson intervals) ----------


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [(14, 4, 0.030884), (0, 6, 0.03125), (1, 9, 0.021484), (5, 5, 1.0), (0, 0, 1.0), (10, 0, 0.001953)],
)
def test_exact_mcnemar_matches_the_binomial_test(b, c, p):
    from rlvr.evaluation.metrics import mcnemar_exact

    assert mcnemar_exact(b, c) == pytest.approx(p, abs=1e-6)
    assert mcnemar_exact(c, b) == pytest.approx(p, abs=1e-6)  # two-sided


def test_paired_change_matches_agresti_presidential_approval_example():
    """Agresti, Categorical Data Analysis, 10.1: 1600 people, 794 approve twice, 150 approve then
    not, 86 not then approve, 570 not twice; difference -0.04 with 95% CI (-0.059, -0.021)."""
    from rlvr.evaluation.metrics import paired_change

    before = [1.0] * 794 + [1.0] * 150 + [0.0] * 86 + [0.0] * 570
    after = [1.0] * 794 + [0.0] * 150 + [1.0] * 86 + [0.0] * 570
    change = paired_change(before, after)
    assert change.n == 1600
    assert change.delta == pytest.approx(-0.04)
    assert (round(change.ci_low, 3), round(change.ci_high, 3)) == (-0.059, -0.021)
    assert (change.right_to_wrong, change.wrong_to_right) == (150, 86)
    assert change.p_value < 1e-4


def test_the_issue_numbers_are_reproduced():
    """200 questions, 14 right->wrong, 4 wrong->right: -5.0 points, CI [-9.0, -1.0], p = 0.03."""
    from rlvr.evaluation.metrics import paired_change

    before = [1.0] * 14 + [0.0] * 4 + [1.0] * 114 + [0.0] * 68
    after = [0.0] * 14 + [1.0] * 4 + [1.0] * 114 + [0.0] * 68
    change = paired_change(before, after)
    assert (round(change.delta * 100, 1), round(change.ci_low * 100, 1), round(change.ci_high * 100, 1)) == (
        -5.0,
        -9.1,
        -0.9,
    )
    assert round(change.p_value, 2) == 0.03
    assert "-5.0 points" in change.text() and "14 right->wrong" in change.text()


def test_sampled_scores_get_a_paired_interval_but_no_flip_count():
    """pass@1 over 4 samples per question: 0.5 -> 0.75 on every question is +25 points with a
    zero-width interval, and no question 'flipped' (McNemar needs 0/1 scores)."""
    from rlvr.evaluation.metrics import paired_change

    change = paired_change([0.5] * 10, [0.75] * 10)
    assert (change.delta, change.ci_low, change.ci_high) == (0.25, 0.25, 0.25)
    assert not change.binary
    assert change.text() == "+25.0 points (every question changed by this much, n=10)"
    assert paired_change([0.0, 1.0], [1.0, 1.0]).binary


def test_a_stage_that_changed_no_question_says_so_instead_of_a_zero_width_interval():
    from rlvr.evaluation.metrics import paired_change

    assert paired_change([1.0, 0.0, 0.0], [1.0, 0.0, 0.0]).text() == "+0.0 points (no question changed, n=3)"
    assert paired_change([0.5, 0.25], [0.5, 0.25]).text() == "+0.0 points (no question changed, n=2)"
    assert "[" in paired_change([1.0, 0.0, 0.0], [0.0, 1.0, 0.0]).text()  # changes that cancel out


def test_paired_change_refuses_unpaired_inputs():
    from rlvr.evaluation.metrics import paired_change

    with pytest.raises(ValueError, match="same questions"):
        paired_change([1.0, 0.0], [1.0])


def test_pairing_matches_questions_not_positions():
    from rlvr.evaluation.results import Evaluation, SampleRecord, paired

    def ev(scores_by_q):
        samples = [
            SampleRecord(i, "t", q, "1", ["x"], ["1"], [s], ["ok"]) for i, (q, s) in enumerate(scores_by_q)
        ]
        return Evaluation(samples=samples, ks=[1], seconds=1.0, samples_per_second=1.0)

    before = ev([("a", 1.0), ("b", 0.0), ("c", 1.0)])
    after = ev([("c", 1.0), ("a", 1.0), ("b", 1.0)])  # same questions, other order: one gain
    change = paired(before, after)
    assert (change.right_to_wrong, change.wrong_to_right, round(change.delta, 4)) == (0, 1, 0.3333)
    with pytest.raises(ValueError, match="same questions"):
        paired(before, ev([("a", 1.0), ("b", 0.0), ("d", 1.0)]))
