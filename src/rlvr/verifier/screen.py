"""Refuse model answers that could execute code in reasoning-gym verifiers that evaluate them.

Nine reasoning-gym 0.1.25 verifiers hand the model's answer to ``eval`` or ``sympy.parse_expr``
(which calls ``eval``): an answer such as ``__import__('os').system(...)`` runs, and
``9**9**9**9`` never returns. :func:`screen_answer` is a whitelist per task family, checked in
the parent before an answer reaches a verifier. It is defence in depth: the worker process
(see :mod:`rlvr.verifier.sandbox`) bounds time and memory for whatever gets through.

What each family lets through (anything else is refused):

* ``binary_matrix``, ``spiral_matrix``: digits, ASCII whitespace, ``[ ] , -``. Gold answers
  are digit grids; the ``eval`` path reads Python lists of ints.
* ``n_queens``: ``Q``, ``_``, whitespace, ``[ ] , ' "``. Gold answers are ``Q``/``_`` grids;
  the ``eval`` path reads lists of lists of cell strings.
* ``string_insertion``: either ASCII letters and whitespace only, or a Python list of
  single-letter string literals such as ``['A', 'B']`` (the two forms the verifier scores).
* ``countdown``, ``puzzle24``: an arithmetic expression of number literals with
  ``+ - * / **``, unary signs and parentheses.
* ``polynomial_multiplication``, ``simple_integration``, ``intermediate_integration``: the
  same plus single-letter symbols, ``pi``, ``oo`` and calls of a fixed set of elementary
  functions (and ``Integral(expr, x)``, which gold answers use).

Expressions (the last two families) must also parse as a Python expression made only of
those nodes, nested at most ``MAX_DEPTH`` deep, with every exponent a constant of absolute
value at most ``MAX_EXPONENT`` and a size estimate (digits of every literal, multiplied
through enclosing exponents) of at most ``MAX_SIZE``: this bounds exponent towers and
huge powers, which sympy would otherwise evaluate eagerly.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable

MAX_DEPTH = 60
MAX_EXPONENT = 1000
MAX_SIZE = 20_000

# Elementary functions seen in gold answers and integrands, plus their usual siblings. Eager
# integer functions (factorial, binomial, prime, N with a precision argument) are absent on
# purpose: they are where a short answer turns into a long computation.
_UNARY_FUNCTIONS = (
    "sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan", "acot",
    "sinh", "cosh", "tanh", "coth", "asinh", "acosh", "atanh", "exp", "sqrt", "Abs", "ln",
)  # fmt: skip
_FUNCTION_ARITY: dict[str, tuple[int, ...]] = {
    **dict.fromkeys(_UNARY_FUNCTIONS, (1,)),
    "log": (1, 2),
    "Integral": (2,),
}
_CONSTANT_NAMES = frozenset({"pi", "oo"})

# ASCII only: Python folds Unicode identifiers by NFKC, so a full-width name would become
# a real builtin after parsing.
_MATRIX_CHARS = re.compile(r"[0-9 \t\r\n\[\],\-]*")
_BOARD_CHARS = re.compile(r"[Q_ \t\r\n\[\],'\"]*")
_LETTERS = re.compile(r"[A-Za-z \t\r\n]*")
_CHAR_LIST = re.compile(r"\s*\[\s*(?:(['\"])[A-Za-z]\1\s*,\s*)*(?:(['\"])[A-Za-z]\2\s*)?\]\s*", re.ASCII)
_ARITHMETIC_CHARS = re.compile(r"[0-9 \t\r\n+\-*/().]*")
_SYMBOLIC_CHARS = re.compile(r"[0-9A-Za-z \t\r\n+\-*/().,]*")


_FLAT_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div)


class _Refused(Exception):
    pass


def _screen_matrix(answer: str) -> str | None:
    if not _MATRIX_CHARS.fullmatch(answer):
        return "matrix answers may contain only digits, whitespace, brackets, commas and minus"
    return None


def _screen_board(answer: str) -> str | None:
    if not _BOARD_CHARS.fullmatch(answer):
        return "board answers may contain only Q, _, whitespace, brackets, commas and quotes"
    return None


def _screen_char_list(answer: str) -> str | None:
    if _LETTERS.fullmatch(answer) or _CHAR_LIST.fullmatch(answer):
        return None
    return "string answers must be letters or a list of single-letter strings"


def _constant_value(node: ast.AST) -> float:
    """Value of an exponent built from number literals with + - * / and signs."""
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
    ):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _constant_value(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        left, right = _constant_value(node.left), _constant_value(node.right)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if right == 0:
            raise _Refused("division by zero in an exponent")
        return left / right
    raise _Refused("exponents must be constant numbers (no powers or symbols inside)")


def _size(node: ast.AST, symbolic: bool, depth: int = 0) -> float:
    """Upper estimate of the digits sympy may materialise; raises _Refused on a disallowed node."""
    if depth > MAX_DEPTH:
        raise _Refused(f"expression nested deeper than {MAX_DEPTH}")
    depth += 1
    if isinstance(node, ast.Constant):
        if type(node.value) is int:
            return max(1, math.ceil(node.value.bit_length() * math.log10(2)))
        if type(node.value) is float:
            return 1
        raise _Refused(f"literal {type(node.value).__name__} not allowed")
    if isinstance(node, ast.Name):
        if symbolic and (len(node.id) == 1 or node.id in _CONSTANT_NAMES):
            return 1
        raise _Refused(f"name {node.id!r} not allowed")
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        return _size(node.operand, symbolic, depth)
    if isinstance(node, ast.BinOp) and isinstance(node.op, _FLAT_OPS):
        # `a + b + c ...` nests to the left one level per term; a long polynomial is not
        # a deep expression, so walk that spine without spending depth.
        total = 0.0
        while isinstance(node, ast.BinOp) and isinstance(node.op, _FLAT_OPS):
            total += _size(node.right, symbolic, depth)
            node = node.left
        return total + _size(node, symbolic, depth)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        exponent = _constant_value(node.right)
        if not abs(exponent) <= MAX_EXPONENT:  # also catches nan
            raise _Refused(f"exponent {exponent:g} exceeds {MAX_EXPONENT}")
        # A tower multiplies exponents, so the base's estimate is scaled, not added.
        return _size(node.left, symbolic, depth) * max(1.0, math.ceil(abs(exponent)))
    if isinstance(node, ast.Call) and symbolic:
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name not in _FUNCTION_ARITY:
            raise _Refused(f"call of {ast.dump(node.func)[:40]} not allowed")
        if node.keywords or len(node.args) not in _FUNCTION_ARITY[name]:
            raise _Refused(f"{name} takes {_FUNCTION_ARITY[name]} positional arguments")
        if any(isinstance(arg, ast.Starred) for arg in node.args):
            raise _Refused("starred arguments not allowed")
        if name == "Integral" and not isinstance(node.args[1], ast.Name):
            raise _Refused("Integral's second argument must be a symbol")
        return 1 + sum(_size(arg, symbolic, depth) for arg in node.args)
    raise _Refused(f"{type(node).__name__} not allowed")


def _expression_screen(chars: re.Pattern[str], symbolic: bool) -> Callable[[str], str | None]:
    def screen(answer: str) -> str | None:
        if not chars.fullmatch(answer):
            what = "numbers, symbols, elementary functions" if symbolic else "numbers"
            return f"expression answers may contain only {what}, + - * / ** and parentheses"
        try:
            tree = ast.parse(answer.strip(), mode="eval")
            size = _size(tree.body, symbolic)
        except _Refused as refusal:
            return str(refusal)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
            # Unparseable here is unparseable for sympy too; refusing costs no reward.
            return f"not a Python expression: {type(error).__name__}"
        if size > MAX_SIZE:
            return f"expression size estimate {size:g} exceeds {MAX_SIZE}"
        return None

    return screen


_screen_arithmetic = _expression_screen(_ARITHMETIC_CHARS, symbolic=False)
_screen_symbolic = _expression_screen(_SYMBOLIC_CHARS, symbolic=True)

SCREENS: dict[str, Callable[[str], str | None]] = {
    "binary_matrix": _screen_matrix,
    "spiral_matrix": _screen_matrix,
    "n_queens": _screen_board,
    "string_insertion": _screen_char_list,
    "countdown": _screen_arithmetic,
    "puzzle24": _screen_arithmetic,
    "polynomial_multiplication": _screen_symbolic,
    "simple_integration": _screen_symbolic,
    "intermediate_integration": _screen_symbolic,
}
"""Task name -> screen. Tasks not listed are not screened: their verifiers do not evaluate answers."""


def screen_answer(task: str, answer: str) -> str | None:
    """Return why ``answer`` is refused for ``task``, or None if it may reach the verifier.

    >>> screen_answer("countdown", "82 + 20 + 67 - 50") is None
    True
    >>> screen_answer("countdown", "9**9**9**9")
    'exponents must be constant numbers (no powers or symbols inside)'
    >>> screen_answer("basic_arithmetic", "__import__('os')") is None  # verifier does not eval
    True
    """
    screen = SCREENS.get(task)
    return None if screen is None else screen(answer)
