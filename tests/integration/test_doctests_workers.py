"""The docstring examples that start the verifier's worker interpreter (rlvr.verifier.sandbox), run
and checked as tests/unit/test_doctests.py checks the others."""

from __future__ import annotations

import pytest
from tests.unit.test_doctests import MODULES, WORKER_MODULES, check_examples

pytestmark = pytest.mark.integration

WORKERS = [(m, n) for m, n in MODULES if m in WORKER_MODULES]


@pytest.mark.parametrize(("module", "examples"), WORKERS, ids=[m for m, _ in WORKERS])
def test_the_examples_that_start_a_worker_run_and_show_their_output(module, examples):
    check_examples(module, examples)
