"""The test tiers: `make test` leaves out the `long` tests only because CI runs them right after it.
A test marked long that no CI step runs would never run anywhere a reviewer sees."""

from __future__ import annotations

import re

from tests.conftest import ROOT

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def _make_recipe(target: str) -> str:
    makefile = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{re.escape(target)}:[^\n]*\n((?:\t[^\n]*\n)+)", makefile, re.M)
    assert match, f"no {target} target in the Makefile"
    return match.group(1)


def test_ci_runs_the_default_tier_then_the_long_tier_then_the_slurm_tier():
    """With the CPU-kind-sensitive tests again as the AVX2 fp32 kind right after the default tier."""
    steps = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    steps = [s for s in steps if s and not s.startswith("#")]
    assert steps[-4:] == ["make test", "make test-avx2", "make test-long", "make test-slurm"]


def test_make_test_leaves_out_exactly_what_make_test_long_selects():
    pytest_ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "-m 'not slow and not long and not slurm'" in pytest_ini["addopts"]
    assert all(any(m.startswith(f"{name}:") for m in pytest_ini["markers"]) for name in ("long", "slurm"))
    recipe = _make_recipe("test-long")
    assert "-m pytest -m long " in recipe
    assert "-m pytest -m slurm " in _make_recipe("test-slurm")
    assert "-m pytest -m" not in _make_recipe("test")  # the default tier is addopts' selection, unchanged
