"""Every registered reasoning-gym task at the benchmark's sizes (tens of minutes on two shared
cores: `make test-slow`)."""

from __future__ import annotations

import pytest
from reasoning_gym.factory import DATASETS
from tests.unit.test_reasoning_gym_entries import _sweep_ok, pool, sweep  # noqa: F401 (pool: a fixture)

pytestmark = pytest.mark.slow


def test_sweep_of_every_registered_task(pool):  # noqa: F811 (the fixture)
    """The full registry at the benchmark's sizes (tens of minutes on two shared cores)."""
    checks = [sweep.check_task(task, 200, (42, 43), pool) for task in sorted(DATASETS)]
    for check in checks:
        _sweep_ok(check)
