"""Worked solutions for SFT targets (``training_loop.sft.target: worked``), written from an entry's own data.

A reasoning-gym entry of an arithmetic task carries its expression (``metadata.expression``:
basic_arithmetic, chain_sum). :func:`arithmetic_working` writes it out one operation at a time, in
the order Python evaluates it, each with its operands' values and its result: ``3 + -6 + -6`` becomes
``3 + -6 = -3, -3 + -6 = -9``. A model trained on answers alone has to compute a whole chain in the
positions before the answer; with the working, each token after the first operation depends on one
operation of two numbers it has just read or written (benchmarks/cpu_fp32.md, "A worked target").

Only what can be checked is written: ``+``, ``-`` and ``*`` on integers, with parentheses and negation,
and only where the working's last value is the entry's reference answer; anything else (division, whose
semantics differ between tasks, a float, a name) gets no working, and SFT trains that row on its answer.
"""

from __future__ import annotations

import ast
import json
from typing import Any

_OPS = {
    ast.Add: ("+", lambda a, b: a + b),
    ast.Sub: ("-", lambda a, b: a - b),
    ast.Mult: ("*", lambda a, b: a * b),
}
# Longer expressions are not parsed (a model's working would not fit a completion anyway).
_MOST_CHARS = 500


class _Unsupported(Exception):
    pass


def _steps(node: ast.AST, out: list[str]) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        if isinstance(node.operand, ast.Constant) and type(node.operand.value) is int:  # a literal: -5
            return -node.operand.value if isinstance(node.op, ast.USub) else node.operand.value
        value = _steps(node.operand, out)
        if isinstance(node.op, ast.UAdd):
            return value
        out.append(f"-({value}) = {-value}")
        return -value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _steps(node.left, out), _steps(node.right, out)
        symbol, apply = _OPS[type(node.op)]
        value = apply(left, right)
        out.append(f"{left} {symbol} {right} = {value}")
        return value
    raise _Unsupported(ast.dump(node)[:80])


def arithmetic_working(expression: str, answer: str | None) -> str | None:
    """The operations of ``expression`` one at a time, or None where it is not integer ``+ - *``
    arithmetic or its value is not ``answer``.

    >>> arithmetic_working("3 + -6 + -6", "-9")
    '3 + -6 = -3, -3 + -6 = -9'
    >>> arithmetic_working("-( -5 + 4 + 5 )", "-4")
    '-5 + 4 = -1, -1 + 5 = 4, -(4) = -4'
    >>> arithmetic_working("7", "7") is None  # nothing to work out
    True
    >>> arithmetic_working("6 / 4", "1") is None  # division: not written
    True
    >>> arithmetic_working("2 + 2", "5") is None  # not the reference answer
    True
    """
    if answer is None or len(expression) > _MOST_CHARS:
        return None
    try:
        tree = ast.parse(expression.strip(), mode="eval")
        out: list[str] = []
        value = _steps(tree.body, out)
    except (SyntaxError, ValueError, _Unsupported, RecursionError):
        return None
    if not out or str(value) != str(answer).strip():
        return None
    return ", ".join(out)


def working_of(entry: str | dict[str, Any] | None, answer: str | None) -> str | None:
    """The worked solution of one dataset row (its ``entry`` column: the task's own entry as JSON), or
    None where its task gives nothing to write one from."""
    if entry is None:
        return None
    data = json.loads(entry) if isinstance(entry, str) else entry
    metadata = data.get("metadata") if isinstance(data, dict) else None
    expression = metadata.get("expression") if isinstance(metadata, dict) else None
    if not isinstance(expression, str):
        return None
    return arithmetic_working(expression, answer)
