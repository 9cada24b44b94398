"""Free-form answer checking: math-verify's measured behaviour, exact match, and both inside the sandbox."""

from __future__ import annotations

import pytest
from tests.conftest import ROOT, conf_checker, verifier_pool

from rlvr.issues import ConfigValidationError
from rlvr.security.trust import PLUGINS_ENV
from rlvr.verifier import ScoreRequest
from rlvr.verifier.checkers import build

PLUGIN_DIR = ROOT / "tests" / "plugins"

# (gold, answer, score): the table in rlvr.verifier.checkers' docstring and docs/data.md.
MATH_VERIFY_CASES = [
    ("1000", "1,000", 1.0),
    ("1,000", "1000", 1.0),
    ("1000", "1000.0", 1.0),
    ("0.5", "50%", 1.0),
    ("14.1", "14.1%", 1.0),
    ("0.5", "1/2", 1.0),
    ("0.5", "\\frac{1}{2}", 1.0),
    ("72", "\\boxed{72}", 1.0),
    ("72", "$72", 1.0),
    ("72", "72 dollars", 1.0),
    ("72", "The answer is 72", 1.0),
    ("3", "x = 3", 1.0),
    ("\\sqrt{2}", "2^{1/2}", 1.0),
    ("0.14136", "0.141", 0.0),
    ("72", "71", 0.0),
    ("72", "five", 0.0),
    ("-3", "3", 0.0),
    ("yes", "Yes", 1.0),
    ("yes", "no", 0.0),
]


@pytest.mark.parametrize(("gold", "answer", "expected"), MATH_VERIFY_CASES)
def test_math_verify_behaviour_as_documented(gold, answer, expected):
    assert conf_checker("math_verify")(answer, {"answer": gold}) == expected


@pytest.mark.parametrize(
    ("answer", "expected"), [("14.1%", 1.0), ("0.141", 1.0), ("14.1", 1.0), ("14.5%", 0.0), ("0.15", 0.0)]
)
def test_finqa_tolerance_and_percent_scale(answer, expected):
    """FinQA golds are unrounded (0.14136): 1% relative tolerance accepts the rounded forms."""
    assert (
        conf_checker("math_verify", rel_tol=0.01, percent_scale=True)(answer, {"answer": "0.14136"})
        == expected
    )


def test_without_percent_scale_a_bare_percentage_number_is_wrong():
    assert conf_checker("math_verify", rel_tol=0.01)("14.1", {"answer": "0.14136"}) == 0.0


def test_exact_match_stays_literal():
    assert [
        conf_checker("exact_match")(a, {"answer": "1000"}) for a in ("1000", " 1000\n", "1,000", "1000.0")
    ] == [
        1.0,
        1.0,
        0.0,
        0.0,
    ]
    assert conf_checker("exact_match", ignore_case=True)("PARIS", {"answer": "paris"}) == 1.0


def test_bad_tolerance_names_the_key():
    with pytest.raises(ConfigValidationError, match=r"data\.checker\.rel_tol"):
        conf_checker("math_verify", rel_tol=2)


def test_spec_round_trips():
    checker = conf_checker("math_verify", rel_tol=0.01, percent_scale=True)
    assert build(checker.spec()) == checker


def entry(gold: str, checker) -> dict:
    return {
        "question": "q",
        "answer": gold,
        "metadata": {"source_dataset": "gsm8k"},
        "checker": checker.spec(),
    }


def test_checkers_score_inside_sandbox_workers():
    requests = [
        ScoreRequest("gsm8k", "1,200", entry("1200", conf_checker("math_verify"))),
        ScoreRequest("gsm8k", "\\boxed{1200}", entry("1200", conf_checker("math_verify"))),
        ScoreRequest("gsm8k", "1201", entry("1200", conf_checker("math_verify"))),
        ScoreRequest("gsm8k", "1,200", entry("1200", conf_checker("exact_match"))),
        ScoreRequest("gsm8k", None, entry("1200", conf_checker("math_verify"))),
    ]
    with verifier_pool(num_workers=1, timeout_s=20.0) as pool:
        scores = pool.score(requests)
    assert [(s.value, s.status) for s in scores] == [
        (1.0, "ok"),
        (1.0, "ok"),
        (0.0, "ok"),
        (0.0, "ok"),
        (0.0, "no_answer"),
    ]


def test_checker_outside_allowed_packages_is_not_built():
    bad = {
        **entry("1", conf_checker("math_verify")),
        "checker": {"_target_": "os.system", "command": "touch pwned"},
    }
    with verifier_pool(num_workers=0) as pool:
        (score,) = pool.score([ScoreRequest("qa", "1", bad)])
    assert score.status == "error" and "outside the allowed packages" in score.detail


def test_plugin_checker_runs_in_sandbox_with_its_timeout(monkeypatch):
    """A user's checker from a plugin package scores in the worker, and a slow one is killed."""
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    monkeypatch.setenv(PLUGINS_ENV, "rlvr_example_plugin")
    from rlvr_example_plugin.data import SlowChecker

    # 6 s: at 3 s the fast check timed out on a 2-core machine running a benchmark beside the suite;
    # the slow check sleeps 60 s, so it is still killed.
    with verifier_pool(num_workers=1, timeout_s=6.0) as pool:
        fast, slow, after = pool.score(
            [
                ScoreRequest("qa", "ok", entry("ok", SlowChecker(0.0))),
                ScoreRequest("qa", "ok", entry("ok", SlowChecker(60.0))),
                ScoreRequest("qa", "ok", entry("ok", SlowChecker(0.0))),
            ]
        )
    assert (fast.value, fast.status) == (1.0, "ok")
    assert slow.status == "timeout"
    assert (after.value, after.status) == (1.0, "ok")


def test_the_worker_judges_a_checker_by_the_pipelines_trust_rule():
    """The worker instantiates a checker as the pipeline instantiates any _target_ (Hydra, after
    rlvr.security.trust.judge_target): a path spelt inside rlvr that resolves elsewhere is refused
    for where it is defined, and an rlvr class that is no Checker is not built."""
    smuggled = {
        **entry("1", conf_checker("math_verify")),
        "checker": {"_target_": "rlvr.verifier.checkers.asdict"},
    }
    not_a_checker = {
        **entry("1", conf_checker("math_verify")),
        "checker": {"_target_": "rlvr.prompts.PromptTemplate"},
    }
    with verifier_pool(num_workers=0) as pool:
        first, second = pool.score(
            [ScoreRequest("qa", "1", smuggled), ScoreRequest("qa", "1", not_a_checker)]
        )
    assert first.status == "error" and "dataclasses.asdict, which is defined outside" in first.detail
    assert second.status == "error" and "not a rlvr.verifier.checkers.Checker subclass" in second.detail
