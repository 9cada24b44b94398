"""Input bounds that need a process of their own (a parser that would exhaust the stack); the rest of
the bounds are unit tests in tests/unit/test_bounds.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from tests.conftest import ROOT
from tests.unit.test_bounds import good_rows

pytestmark = pytest.mark.integration


def test_a_data_row_nested_two_million_levels_is_refused_before_any_parser_sees_it(tmp_path):
    """It killed the process with a segmentation fault (in a subprocess here, so the mutation's
    crash cannot take pytest down). Mutation: no ``check_nesting`` call in load_source -> red
    (the child dies by a signal or with a traceback, and without the message)."""
    path = tmp_path / "deep.jsonl"
    depth = 2_000_000
    deep = '{"question": "q", "answer": "1", "x": ' + "[" * depth + "]" * depth + "}\n"
    path.write_text(json.dumps(good_rows(1)[0]) + "\n" + deep)
    code = (
        "import sys; from tests.unit.test_bounds import file_data; from pathlib import Path\n"
        "issues = file_data(Path(sys.argv[1])).validate(); print(issues[0]); sys.exit(3)\n"
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code, str(path)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 3, (done.returncode, done.stderr[-2000:])
    assert f"{path}, line 2: brackets nested deeper than 100 levels" in done.stdout
    assert time.monotonic() - started < 60
