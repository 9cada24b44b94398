"""The reward catalogue beyond correctness/format/length: each a TRL reward function with a weight.

Every term here is ``(completions, **dataset_columns) -> list[float | None]`` (TRL's contract; None
abstains and TRL averages over the terms that scored) and has a config drop-in in conf/reward/.

- :class:`AnswerMatchReward`: the task verifier's verdict as configurable values (+3 / -1 in the seed).
- :class:`ApproxFormatReward`: partial credit per marker of the template present exactly once.
- :class:`NumericToleranceReward`: numbers within a relative/absolute tolerance (math-verify parses).
- :class:`OverlongPenalty`: DAPO's soft overlong punishment, in tokens.
- :class:`FunctionReward`: any plain TRL reward function, e.g. from your plugin package.
"""

from __future__ import annotations

import functools
import math
import re
import threading
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from rlvr.evaluation.metrics import SUCCESS_THRESHOLD
from rlvr.issues import ConfigIssue
from rlvr.prompts import PromptTemplate
from rlvr.reward.terms import CorrectnessReward, _Term, completion_text
from rlvr.verifier.sandbox import Scorer


class AnswerMatchReward(CorrectnessReward):
    """Answer matching: ``correct_reward`` when the task's verifier accepts the extracted answer,
    ``wrong_penalty`` when it rejects it, ``no_answer_reward`` when there is no answer to check.

    The verdict is the one evaluation counts (the verifier sandbox, success threshold), so only
    the values differ from :class:`CorrectnessReward`; the seed system used +3 / -1.

    Args:
        weight: weight of this term in the summed reward.
        correct_reward: value for an accepted answer.
        wrong_penalty: value for a rejected answer.
        no_answer_reward: value when the completion holds no closed answer markers.
    """

    name = "answer_match"

    def __init__(
        self,
        correct_reward: float,
        wrong_penalty: float,
        no_answer_reward: float,
        weight: float,
        *,
        prompt: PromptTemplate,
        verifier: Scorer | None = None,
    ):
        super().__init__(weight, partial_credit=False, prompt=prompt, verifier=verifier)
        self.correct_reward = float(correct_reward)
        self.wrong_penalty = float(wrong_penalty)
        self.no_answer_reward = float(no_answer_reward)

    def validate(self, key: str) -> list[ConfigIssue]:
        if not self.correct_reward > self.wrong_penalty:
            return [
                ConfigIssue(
                    f"{key}.correct_reward",
                    self.correct_reward,
                    f"must be greater than wrong_penalty ({self.wrong_penalty}) or GRPO learns to be wrong",
                    "e.g. correct_reward=3.0 wrong_penalty=-1.0",
                )
            ]
        return []

    def __call__(self, completions: list[Any], task: list[str], entry: list[str], **_: Any) -> list[float]:
        out = []
        for answer, score in self.verdicts(completions, task, entry):
            if answer is None:
                out.append(self.no_answer_reward)
            else:
                out.append(self.correct_reward if score >= SUCCESS_THRESHOLD else self.wrong_penalty)
        return out


class ApproxFormatReward(_Term):
    """Approximate format: for each marker of the template, ``present_once`` when the completion
    holds it exactly once, else ``otherwise``; the sum over the markers.

    A model that gets half the format right earns half the credit, a signal the strict format
    term (all or nothing) does not give early in training.

    Args:
        present_once: reward per marker found exactly once.
        otherwise: reward per marker missing or repeated.
        weight: weight of this term in the summed reward.

    >>> from rlvr.prompts import PromptTemplate
    >>> r = ApproxFormatReward(present_once=0.5, otherwise=-1.0, weight=1.0, prompt=PromptTemplate("{question}"))
    >>> r(["<answer>4</answer>", "<answer>4", "4", "<answer>4</answer><answer>"])
    [1.0, -0.5, -2.0, -0.5]
    """

    name = "format_approx"

    def __init__(
        self,
        present_once: float,
        otherwise: float,
        weight: float,
        *,
        prompt: PromptTemplate,
        verifier: Scorer | None = None,
    ):
        super().__init__(weight, prompt=prompt, verifier=verifier)
        self.present_once = float(present_once)
        self.otherwise = float(otherwise)

    def validate(self, key: str) -> list[ConfigIssue]:
        if not self.present_once > self.otherwise:
            return [
                ConfigIssue(
                    f"{key}.present_once",
                    self.present_once,
                    f"must be greater than otherwise ({self.otherwise}) or the term rewards a broken format",
                    "e.g. present_once=0.5 otherwise=-1.0",
                )
            ]
        return []

    def __call__(self, completions: list[Any], **_: Any) -> list[float]:
        markers = self.prompt.markers
        return [
            sum(self.present_once if completion_text(c).count(m) == 1 else self.otherwise for m in markers)
            for c in completions
        ]


# What may reach math-verify: digits, signs, separators, currency/percent signs, fractions and
# \boxed/\frac. math-verify hands expressions to sympy's parse_expr (an eval) and sympy evaluates
# powers and factorials exactly: "9^9^9^9" took over a minute here without returning. Without
# letters, '^', '*' and '!' a string can only name numbers and their sums and quotients.
_NUMERIC_TEXT = re.compile(r"(?:[0-9\s.,%$+\-/(){}]|\\(?:d?frac|boxed|%|\$))*")
_MAX_NUMERIC_CHARS = 64


@functools.lru_cache(maxsize=4096)
def parse_number(text: str | None) -> float | None:
    """The number a short answer states, read by math-verify (``1,000``, ``50%``, ``$3.50``,
    ``\\frac{1}{2}``, ``\\boxed{7}``), or None when it states none or is not screened as numeric.

    >>> [parse_number(t) for t in ["1,000", "50%", "$3.50", "\\\\frac{1}{2}", "seven", "2^10"]]
    [1000.0, 0.5, 3.5, 0.5, None, None]
    """
    import sympy
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    if text is None or len(text) > _MAX_NUMERIC_CHARS or not _NUMERIC_TEXT.fullmatch(text):
        return None
    # math-verify's own timeout uses signal.alarm, which exists only in the main thread.
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    try:
        parsed = parse(
            text, extraction_config=[LatexExtractionConfig(), ExprExtractionConfig()], parsing_timeout=timeout
        )
        value = parsed[0] if parsed else None
        if not isinstance(value, sympy.Expr) or not value.is_number:
            return None
        number = complex(sympy.N(value.doit(), 30))
    except Exception:  # math-verify and sympy raise many types on odd input: it states no number
        return None
    if number.imag != 0 or not math.isfinite(number.real):
        return None
    return float(number.real)


class NumericToleranceReward(_Term):
    """1.0 when the extracted answer is a number within tolerance of the gold ``answer`` column,
    0.0 when it is another number or none; None (abstain) when the gold answer is not a number.

    Within tolerance: ``|answer - gold| <= max(abs_tol, rel_tol * |gold|)``. Numbers are read by
    math-verify (:func:`parse_number`), so ``1,000``, ``$1000`` and ``1000.0`` are all 1000.

    Args:
        weight: weight of this term in the summed reward.
        rel_tol: relative tolerance (0.01 accepts 14.1 for a gold of 14.136).
        abs_tol: absolute tolerance (0.5 accepts rounding to an integer).
    """

    name = "numeric"

    def __init__(
        self,
        rel_tol: Annotated[float, Field(ge=0, examples=[0.01])],
        abs_tol: Annotated[float, Field(ge=0, examples=[0.0])],
        weight: float,
        *,
        prompt: PromptTemplate,
        verifier: Scorer | None = None,
    ):
        super().__init__(weight, prompt=prompt, verifier=verifier)
        self.rel_tol = float(rel_tol)
        self.abs_tol = float(abs_tol)

    def __call__(self, completions: list[Any], answer: list[str], **_: Any) -> list[float | None]:
        out: list[float | None] = []
        for c, gold_text in zip(completions, answer, strict=True):
            gold = parse_number(str(gold_text))
            if gold is None:
                out.append(None)
                continue
            value = parse_number(self.prompt.extract(completion_text(c)))
            ok = value is not None and abs(value - gold) <= max(self.abs_tol, self.rel_tol * abs(gold))
            out.append(1.0 if ok else 0.0)
        return out


class OverlongPenalty(_Term):
    """DAPO's soft overlong punishment on the completion's length L in tokens: 0 up to
    ``max_tokens - buffer_tokens``, then linear down to -1 at ``max_tokens`` (and -1 beyond).

    It reads TRL's ``completion_ids``; called without them (outside a GRPO step) it abstains.

    Args:
        max_tokens: the length at which the penalty reaches -1 (conf: the GRPO completion budget).
        buffer_tokens: the tokens before ``max_tokens`` over which the penalty ramps from 0 to -1.
        weight: weight of this term in the summed reward.

    >>> r = OverlongPenalty(max_tokens=16, buffer_tokens=4, weight=1.0, prompt=PromptTemplate("{question}"))
    >>> r(["a"] * 4, completion_ids=[[0] * 12, [0] * 13, [0] * 14, [0] * 16])
    [0.0, -0.25, -0.5, -1.0]
    """

    name = "overlong"

    def __init__(
        self,
        max_tokens: int,
        buffer_tokens: int,
        weight: float,
        *,
        prompt: PromptTemplate,
        verifier: Scorer | None = None,
    ):
        super().__init__(weight, prompt=prompt, verifier=verifier)
        self.max_tokens = max_tokens
        self.buffer_tokens = buffer_tokens

    def validate(self, key: str) -> list[ConfigIssue]:
        if not 0 < self.buffer_tokens <= self.max_tokens:
            return [
                ConfigIssue(
                    f"{key}.buffer_tokens",
                    self.buffer_tokens,
                    f"must be > 0 and <= max_tokens ({self.max_tokens})",
                    "e.g. a quarter of training_loop.grpo.max_completion_length",
                )
            ]
        return []

    def __call__(
        self, completions: list[Any], completion_ids: list[list[int]] | None = None, **_: Any
    ) -> list[float | None]:
        if completion_ids is None:
            return [None] * len(completions)
        free = self.max_tokens - self.buffer_tokens
        return [max(-1.0, min(0.0, (free - len(ids)) / self.buffer_tokens)) for ids in completion_ids]


class FunctionReward(_Term):
    """Any plain TRL reward function, with a weight: ``function`` is a ``_partial_`` config node.

    This is how your own reward from your plugin package joins a run (SECURITY.md: the package
    must be named in ``RLVR_PLUGINS`` on the command line)::

        RLVR_PLUGINS=my_rewards python run_pipeline.py \\
          '+reward.terms.mine={_target_: rlvr.reward.FunctionReward, weight: 0.5,
                                function: {_target_: my_rewards.score, _partial_: true}}'

    The function receives what TRL passes (``prompts``, ``completions``, ``completion_ids``, the
    dataset's columns, ``trainer_state``, ...) and returns one float or None per completion.

    Args:
        function: the reward function (a ``_partial_`` node, called as TRL calls reward functions).
        weight: weight of this term in the summed reward.
    """

    name = "function"

    def __init__(
        self,
        function: Callable[..., list[float | None]],
        weight: float,
        *,
        prompt: PromptTemplate,
        verifier: Scorer | None = None,
    ):
        super().__init__(weight, prompt=prompt, verifier=verifier)
        self.function = function

    def validate(self, key: str) -> list[ConfigIssue]:
        if not callable(self.function):
            return [
                ConfigIssue(
                    f"{key}.function",
                    repr(self.function),
                    "is not callable",
                    "give a node {_target_: <package.function>, _partial_: true}",
                )
            ]
        return []

    def __call__(self, completions: list[Any], **kwargs: Any) -> list[float | None]:
        return self.function(completions=completions, **kwargs)
