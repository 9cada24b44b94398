"""Bounded JSON reading: a record from elsewhere cannot crash its reader with its nesting.

A results file, a sweep point's records and a benchmark cell may come from elsewhere (a colleague's
results, a bucket). ``json.loads`` recurses once per bracket: a file of a few kilobytes of ``[[[[``
raises RecursionError (or, deeper in C, overflows the stack), and a tree just under that limit
raises it later in whatever walks the tree (redaction, ``copy.deepcopy``). :func:`loads` measures
the nesting first, outside strings and in time linear in the text, and refuses a document deeper than
:data:`MAX_RECORD_NESTING` with :class:`JsonRefused` (a ValueError naming the file and the rule), so
every reader that already turns a ValueError into one message per file does so here too.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import numpy as np

# A record rlvr writes is a few levels deep (a report: 4; a cell with its per-sample entries and a
# FinQA table: under 10); Python's parser gives up near 1,000.
MAX_RECORD_NESTING = 100
# A JSON string; a bracket inside one is text, not nesting.
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
# +1 for an opening bracket, -1 for a closing one, 0 for any other byte.
_STEP = np.zeros(256, dtype=np.int32)
_STEP[list(b"[{")], _STEP[list(b"]}")] = 1, -1
_NOT_BRACKETS = bytes(b for b in range(256) if not _STEP[b])


class JsonRefused(ValueError):
    """A JSON document refused before it was parsed: ``source``, the rule it broke and the fix."""

    def __init__(self, source: str | os.PathLike[str], rule: str, fix: str):
        self.source, self.rule, self.fix = str(source), rule, fix
        super().__init__(f"{source}: {rule}. Fix: {fix}")


def nesting(raw: bytes) -> int:
    """The deepest bracket nesting of ``raw`` outside JSON strings."""
    brackets = _JSON_STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    return int(np.cumsum(_STEP[np.frombuffer(brackets, dtype=np.uint8)]).max())


def loads(raw: str | bytes, source: str | os.PathLike[str], limit: int = MAX_RECORD_NESTING) -> Any:
    """``json.loads(raw)``, or :class:`JsonRefused` when ``raw`` nests deeper than ``limit`` levels.
    ``source`` names the document in the message (a file's path)."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    depth = nesting(data)
    if depth > limit:
        raise JsonRefused(
            source,
            f"JSON nested {depth} levels deep, more than the {limit} a record holds (rlvr writes a few)",
            "this file was not written by rlvr or was damaged: remove it, or restore it from where it came",
        )
    return json.loads(raw)
