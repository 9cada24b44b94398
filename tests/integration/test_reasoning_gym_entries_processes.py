"""Entries that must not depend on the interpreter's hash seed, checked across interpreters; the
entries' rules are unit tests in tests/unit/test_reasoning_gym_entries.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_set_text_does_not_depend_on_the_hash_seed():
    # str hashes (so set order) differ per process unless PYTHONHASHSEED is fixed; the text must not.
    code = (
        "import json; from rlvr.verifier.entries import to_json_safe; "
        "print(json.dumps(to_json_safe({'s': {f'w{i}' for i in range(30)}})))"
    )
    texts = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in (1, 2, 3)
    }
    assert len(texts) == 1
