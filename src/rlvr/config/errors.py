"""Configuration problems, collected and reported all at once before anything heavy loads."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ConfigIssue:
    """One problem: where (dotted config key), what value, which rule, and how to fix it."""

    key: str
    value: Any
    problem: str
    fix: str
    # A value of the right type that breaks a rule its parameter declares (a range, a choice): the
    # component is still built, so its own validate() reports the rules between its fields too.
    builds: bool = field(default=False, compare=False, repr=False)

    def __str__(self) -> str:
        from rlvr.runtime.secrets import redact_text  # a message quotes values: it is an output too

        return redact_text(f"{self.key}={self.value!r}: {self.problem}. Fix: {self.fix}")


class ConfigValidationError(ValueError):
    """Raised with every ConfigIssue found, so a user fixes them in one pass."""

    def __init__(self, issues: Iterable[ConfigIssue]):
        self.issues = list(issues)
        lines = "\n".join(f"  - {issue}" for issue in self.issues)
        super().__init__(f"{len(self.issues)} configuration problem(s):\n{lines}")


def suggest(value: str, choices: Iterable[str], n: int = 3) -> str:
    """'did you mean ...' text for a misspelt name."""
    close = difflib.get_close_matches(value, list(choices), n=n, cutoff=0.5)
    return f"did you mean {', '.join(repr(c) for c in close)}?" if close else "no close match"


def key_issues(key: str, raw: Any, names: Iterable[str], missing_fix: str = "") -> list[ConfigIssue]:
    """Unknown keys (with a close match) and missing keys of a nested settings node ``key`` that
    must hold exactly ``names`` (a typed settings dataclass's fields)."""
    names = list(names)
    issues = [
        ConfigIssue(f"{key}.{name}", raw[name], f"unknown key (valid: {', '.join(names)})",
                    f"{suggest(name, names)} remove {key}.{name}")
        for name in raw if name not in names
    ]  # fmt: skip
    return issues + [
        ConfigIssue(f"{key}.{name}", None, "missing", f"set +{key}.{name}=...{missing_fix}")
        for name in names
        if name not in raw
    ]
