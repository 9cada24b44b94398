"""Answer checkers for free-form data (GSM8K, FinQA, your own files): math-verify and exact match.

reasoning-gym entries are scored by the task's own verifier. A data source that is not a
reasoning-gym task names a checker in its config (``data.checker._target_``); the data
component writes the checker's :meth:`spec` into every entry (``entry["checker"]``), and
:func:`rlvr.verifier.worker.call_verifier` rebuilds it inside the sandboxed worker, so these
checks run with the same timeouts, memory limit and crash isolation as reasoning-gym's.

A checker is a small picklable class: ``checker(answer, entry) -> float`` in [0, 1], the gold
answer being ``entry["answer"]``. A user's own checker lives in their plugin package
(``RLVR_PLUGINS``, the same rule as every ``_target_``) and subclasses :class:`Checker`.

What :class:`MathVerify` accepts, measured with math-verify 0.9.0 (gold vs answer):

=============  ================  ======  =========================================
gold           answer            score   why
=============  ================  ======  =========================================
``1000``       ``1,000``         1.0     thousands separators are read as one number
``1,000``      ``1000``          1.0
``1000``       ``1000.0``        1.0
``0.5``        ``50%``           1.0     a percentage is its fraction ...
``14.1``       ``14.1%``         1.0     ... or its number: either reading matches
``0.5``        ``1/2``           1.0     and ``\\frac{1}{2}``
``72``         ``\\boxed{72}``   1.0     and ``$72``, ``72 dollars``, ``x = 3`` for 3
``\\sqrt{2}``  ``2^{1/2}``       1.0     symbolic equality (bare LaTeX is read as LaTeX)
``0.14136``    ``0.141``         0.0     exact to ``float_rounding`` decimals; set
                                         ``rel_tol`` (FinQA: 0.01) to accept rounding
``72``         ``71``, ``five``  0.0     words are not numbers
=============  ================  ======  =========================================

:class:`ExactMatch` keeps plain string equality (after ``strip``, optionally case-folded)
for answers that are labels rather than numbers.
"""

from __future__ import annotations

import functools
import logging
import math
import re
from dataclasses import asdict, dataclass, is_dataclass
from typing import Any, ClassVar

_BARE_LATEX = re.compile(r"\\[A-Za-z]|\^\{|_\{")


class Checker:
    """Base of answer checkers: ``spec()`` is what an entry carries to the worker.

    ``needs_reference``: whether the checker compares with ``entry["answer"]``. A checker that
    scores an answer from the question alone (constraints, unit tests) sets it False, and then
    serves data without reference answers (rlvr.data.references).
    """

    needs_reference: ClassVar[bool] = True

    def __call__(self, answer: str, entry: dict) -> float:
        raise NotImplementedError

    def spec(self) -> dict[str, Any]:
        """``{"_target_": <class path>, **fields}``: JSON, rebuilt in the worker by :func:`build`."""
        cls = type(self)
        fields: dict[str, Any] = asdict(self) if is_dataclass(self) else {}
        return {"_target_": f"{cls.__module__}.{cls.__qualname__}", **fields}


def _quiet_math_verify() -> None:
    # math-verify warns once per process that its signal-based timeout is off; the sandbox's
    # killable worker is the timeout here (signal.alarm would also fail outside the main thread).
    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).setLevel(logging.ERROR)


@dataclass(frozen=True)
class MathVerify(Checker):
    """Numeric and symbolic equality with math-verify (LaTeX, plain numbers, percentages, ``\\boxed{}``).

    Args:
        float_rounding: decimals to which numbers are compared (math-verify's ``float_rounding``).
        rel_tol: also accept an answer within this relative distance of a numeric gold answer
            (0 = off). FinQA golds are unrounded program results such as 0.14136; a model that
            writes 14.1% is right, so the FinQA config sets 0.01.
        percent_scale: also accept a number that equals the gold times 100 (``14.1`` for a gold
            of 0.141): FinQA asks "what percentage ..." and keeps the fraction as the gold.

    >>> check = MathVerify(float_rounding=6, rel_tol=0.0, percent_scale=False)
    >>> [check(a, {"answer": "1000"}) for a in ("1,000", "\\\\boxed{1000}", "999")]
    [1.0, 1.0, 0.0]
    >>> MathVerify(float_rounding=6, rel_tol=0.01, percent_scale=False)("14.1%", {"answer": "0.14136"})
    1.0
    """

    float_rounding: int
    rel_tol: float
    percent_scale: bool

    def __post_init__(self) -> None:
        from rlvr.issues import ConfigIssue, ConfigValidationError

        if not (isinstance(self.rel_tol, (int, float)) and 0 <= self.rel_tol < 1):
            raise ConfigValidationError(
                [
                    ConfigIssue(
                        "data.checker.rel_tol", self.rel_tol, "must be in [0, 1)", "set e.g. 0.01, or 0"
                    )
                ]
            )
        if not (isinstance(self.float_rounding, int) and 0 <= self.float_rounding <= 15):
            raise ConfigValidationError(
                [ConfigIssue("data.checker.float_rounding", self.float_rounding, "must be 0..15", "set 6")]
            )

    @staticmethod
    def _parse(text: str) -> list:
        from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

        _quiet_math_verify()
        config = [LatexExtractionConfig(), ExprExtractionConfig()]
        if "$" not in text and _BARE_LATEX.search(text):
            # math-verify finds LaTeX only inside delimiters; golds and tagged answers are often bare
            # LaTeX (``2^{1/2}`` would otherwise be read as the number 2).
            parsed = parse(f"${text}$", extraction_config=config, parsing_timeout=None)
            if parsed:
                return parsed
        return parse(text, extraction_config=config, parsing_timeout=None)

    @staticmethod
    def _number(parsed: list) -> float | None:
        try:
            expr = parsed[0]
            # A percentage parses as 14.1*UnevaluatedExpr(1/100): doit() applies the division.
            value = float(expr.doit() if hasattr(expr, "doit") else expr)
        except (TypeError, ValueError, IndexError, AttributeError):
            return None
        return value if math.isfinite(value) else None

    def __call__(self, answer: str, entry: dict) -> float:
        from math_verify import verify

        gold = self._parse(str(entry["answer"]))
        if not gold:  # not a number or formula (FinQA has yes/no questions): compare the words
            return 1.0 if answer.strip().casefold() == str(entry["answer"]).strip().casefold() else 0.0
        predicted = self._parse(answer)
        if not predicted:
            return 0.0
        if verify(gold, predicted, float_rounding=self.float_rounding, timeout_seconds=None):
            return 1.0
        g, p = self._number(gold), self._number(predicted)
        if g is None or p is None:
            return 0.0
        candidates = [p, p / 100] if self.percent_scale else [p]
        tol = max(self.rel_tol * abs(g), 0.5 * 10.0**-self.float_rounding)
        return 1.0 if any(abs(c - g) <= tol for c in candidates) else 0.0


@dataclass(frozen=True)
class ExactMatch(Checker):
    """String equality of the stripped answer and gold; ``ignore_case`` folds case.

    Args:
        ignore_case: compare case-folded strings.

    >>> [ExactMatch(ignore_case=False)(a, {"answer": "Paris"}) for a in (" Paris ", "paris", "1,000")]
    [1.0, 0.0, 0.0]
    """

    ignore_case: bool

    def __call__(self, answer: str, entry: dict) -> float:
        a, g = answer.strip(), str(entry["answer"]).strip()
        if self.ignore_case:
            a, g = a.casefold(), g.casefold()
        return 1.0 if a == g else 0.0


@functools.lru_cache(maxsize=64)
def _build_cached(spec_json: str) -> Checker:
    import json

    from hydra.utils import get_object, instantiate

    from rlvr.security.trust import judge_target

    spec = json.loads(spec_json)
    # Entries come from the run's own (trust-checked) config, but the worker judges the target again
    # by the pipeline's rule (a class defined in rlvr or a plugin package) before it builds anything.
    problem = judge_target("data.checker._target_", spec.get("_target_"))
    if problem is not None:
        raise ValueError(f"checker spec refused: {problem}")
    if not issubclass(get_object(spec["_target_"]), Checker):
        raise ValueError(f"checker {spec['_target_']!r} is not a rlvr.verifier.checkers.Checker subclass")
    return instantiate(spec, _convert_="all")


def build(spec: dict[str, Any]) -> Checker:
    """The checker an entry names (cached per spec), instantiated as the pipeline instantiates."""
    import json

    return _build_cached(json.dumps(spec, sort_keys=True))
