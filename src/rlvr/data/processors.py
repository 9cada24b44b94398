"""Processors: turn one row of any question/answer dataset into a :class:`QAItem`.

A processor is a small class named by ``data.processor._target_``: called with one row (a
dict, as ``datasets`` yields it), it returns the question text, the gold answer and any
metadata worth keeping, or ``None`` to skip the row. Bring your own dataset by writing one
in your plugin package (``RLVR_PLUGINS=<package>``, the rule for every ``_target_``)::

    from rlvr.data.processors import QAItem

    class TriviaProcessor:
        def __call__(self, row):
            return QAItem(question=row["q"], answer=row["a"].strip())

A processor raises :class:`RowError` (or KeyError for a missing field) for a malformed row;
the data component reports it with the row number and the config key to change. A gold answer
goes through :func:`gold`: a null, empty or non-finite one (``NaN``, an empty CSV cell) is a
malformed row, never a question whose empty answer a checker would score 1.0.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class QAItem:
    """One question with its gold answer (None: the row has only a checker, no reference answer:
    rlvr.data.references); ``metadata`` must be JSON-serialisable."""

    question: str
    answer: str | None
    metadata: dict[str, Any] = field(default_factory=dict)


class RowError(ValueError):
    """A row that does not follow the format the processor reads."""


def _field(row: dict[str, Any], dotted: str) -> Any:
    """``row["qa"]["question"]`` for ``"qa.question"``; KeyError names the dotted field."""
    value: Any = row
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(dotted)
        value = value[part]
    return value


def gold(value: Any, field: str) -> str:
    """The gold answer text of ``value`` (read from ``field``); RowError for a null, empty or
    non-finite one. The value is never quoted: a data file from elsewhere may be anything.

    >>> gold(" 42 ", "answer"), gold(0.5, "answer")
    ('42', '0.5')
    """
    fix = "every row needs a gold answer: fill it in, or drop the row"
    if value is None:
        raise RowError(f"field {field!r} is null; {fix}")
    text = _number_text(value)
    if not text:
        raise RowError(f"field {field!r} is empty; {fix}")
    try:
        number = float(text.replace(",", ""))
    except ValueError:
        return text
    if not math.isfinite(number):
        raise RowError(f"field {field!r} holds a non-finite number (NaN or infinity) as gold answer; {fix}")
    return text


# A processor turns one source row into a question and gold answer (None: skip the row).
Processor = Callable[[dict[str, Any]], "QAItem | None"]


@dataclass(frozen=True)
class QuestionAnswer:
    """Any dataset with a question column and an answer column, used as they are.

    Args:
        question_field, answer_field: the columns (dotted names reach nested fields); answer_field
            null declares a dataset without reference answers (a checker scores the answers alone).

    >>> QuestionAnswer(question_field="q", answer_field="a")({"q": "2+2?", "a": " 4 "})
    QAItem(question='2+2?', answer='4', metadata={})
    >>> QuestionAnswer(question_field="q", answer_field=None)({"q": "Colour the graph."}).answer is None
    True
    """

    question_field: str
    answer_field: str | None

    def __call__(self, row: dict[str, Any]) -> QAItem | None:
        question = str(_field(row, self.question_field)).strip()
        if self.answer_field is None:
            return QAItem(question, None)
        return QAItem(question, gold(_field(row, self.answer_field), self.answer_field))


@dataclass(frozen=True)
class GSM8K:
    """GSM8K: the answer field holds a worked solution ending in ``#### <final answer>``.

    Args:
        question_field, answer_field: the columns holding the question and the worked solution.

    The gold answer is the text after the last ``####`` (thousands separators kept: the
    math-verify checker reads ``1,000`` and ``1000`` as the same number); the worked solution
    stays in the metadata.

    >>> GSM8K("question", "answer")({"question": "Q?", "answer": "3 + 4 = <<3+4=7>>7\\n#### 7"}).answer
    '7'
    """

    question_field: str
    answer_field: str

    def __call__(self, row: dict[str, Any]) -> QAItem | None:
        solution = str(_field(row, self.answer_field))
        if "####" not in solution:
            # The field's text is not quoted: a file from elsewhere may be anything (a credential file).
            raise RowError(
                f"field {self.answer_field!r} ({len(solution)} characters) has no '#### <answer>' line"
            )
        final = gold(solution.rsplit("####", 1)[1], f"{self.answer_field} (after '####')")
        return QAItem(str(_field(row, self.question_field)).strip(), final, {"solution": solution})


def _text(value: Any) -> str:
    """FinQA keeps pre/post text as lists of sentences; some exports join them already."""
    if isinstance(value, (list, tuple)):
        return "\n".join(str(v).strip() for v in value if str(v).strip())
    return str(value or "").strip()


def _table(rows: Any) -> str:
    """A FinQA table (list of rows of cells) as pipe-separated lines, header first."""
    if not rows:
        return ""
    if isinstance(rows, str):
        return rows.strip()
    return "\n".join(" | ".join(str(cell).strip() for cell in row) for row in rows)


@dataclass(frozen=True)
class FinQA:
    """FinQA: a financial report excerpt (text before a table, the table, text after it) and a
    question whose answer is a number (often a percentage, rounded in the human answer).

    Reads the original release (``qa.question``, ``qa.exe_ans``, ``qa.answer``) and flat exports
    (``question``, ``exe_ans`` / ``final_result``, ``answer``). The gold answer is the executed
    program result ``exe_ans`` (unrounded, e.g. ``0.14136``) when present, else the human
    answer (``14.1%``); pair it with ``MathVerify(rel_tol=0.01, percent_scale=true)`` so
    ``14.1%``, ``14.1`` and ``0.141`` all count (conf/data/finqa.yaml does).

    >>> row = {"pre_text": ["Revenue grew."], "table": [["", "2019"], ["revenue", "$ 5"]],
    ...        "post_text": [], "qa": {"question": "What is revenue?", "exe_ans": 5.0, "answer": "5"}}
    >>> print(FinQA()(row).question)
    Revenue grew.
    <BLANKLINE>
     | 2019
    revenue | $ 5
    <BLANKLINE>
    Question: What is revenue?
    """

    def __call__(self, row: dict[str, Any]) -> QAItem | None:
        qa = row.get("qa")
        qa = qa if isinstance(qa, dict) else row
        question = str(_field(qa, "question")).strip()
        field = next((k for k in ("exe_ans", "final_result", "answer") if qa.get(k) not in (None, "")), None)
        if field is None:
            raise RowError("row has none of the answer fields exe_ans, final_result, answer")
        parts = [_text(row.get("pre_text")), _table(row.get("table")), _text(row.get("post_text"))]
        context = "\n\n".join(p for p in parts if p)
        metadata = {k: str(row[k]) for k in ("id", "filename") if row.get(k) not in (None, "")}
        if qa.get("answer") not in (None, ""):
            metadata["human_answer"] = str(qa["answer"])
        return QAItem(f"{context}\n\nQuestion: {question}".strip(), gold(qa[field], field), metadata)


def _number_text(value: Any) -> str:
    """A float gold as plain decimal text (``0.14136``, never ``1.4136e-01``)."""
    if isinstance(value, float):
        import numpy as np

        return np.format_float_positional(value, trim="-")
    return str(value).strip()
