"""A benchmark cell file from an earlier run is data, not a measurement (SECURITY.md "Benchmark").

The attacker edits a stored cell to all-correct for a random model and recomputes its summary so
it parses: the rerun scores the stored answers again with the same verifier, finds they do not
score as stored, and measures the cell afresh. An attacker who rewrites the completions too passes
the re-scoring (only generating again could tell), so every reused cell is marked reused in the
results JSON and on the console.
"""

from __future__ import annotations

import json

import pytest
from tests.integration.test_benchmark import bench

from rlvr.evaluation.results import Evaluation

pytestmark = pytest.mark.integration

TINY = {"tiny": "tiny"}
ONE_TASK = ("benchmark.tasks=[leg_counting]",)


def _forge(path, completions: bool) -> None:
    """Every answer correct, the summary recomputed so the file parses; the completions too if asked."""
    cell = json.loads(path.read_text())
    samples = cell["evaluation"]["samples"]
    for s in samples:
        s["scores"] = [1.0] * len(s["scores"])
        s["answers"] = [s["reference"]] * len(s["answers"])
        s["status"] = ["ok"] * len(s["status"])
        if completions:
            s["completions"] = [f"<answer>{s['reference']}</answer>"] * len(s["completions"])
    forged = Evaluation(samples=samples, ks=cell["evaluation"]["ks"], seconds=1.0, samples_per_second=1.0)
    cell["evaluation"] = forged.to_dict()
    path.write_text(json.dumps(cell))


def test_an_edited_cell_is_rescored_and_a_reused_cell_is_marked(tmp_path):
    out = tmp_path / "bench"
    first = bench(out, TINY, *ONE_TASK)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    [cell_file] = (out / "cells").glob("*.json")
    measured = json.loads((out / "results_leg_counting.json").read_text())["models"]["tiny"]
    assert measured["reused"] is False and measured["accuracy"] < 1.0  # a random model

    _forge(cell_file, completions=False)
    again = bench(out, TINY, *ONE_TASK)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "its stored answers were re-scored" in again.stdout + again.stderr
    report = json.loads((out / "results_leg_counting.json").read_text())["models"]["tiny"]
    assert report["accuracy"] == measured["accuracy"] and report["reused"] is False  # measured again

    _forge(cell_file, completions=True)  # consistent with itself: re-scoring cannot tell
    third = bench(out, TINY, *ONE_TASK)
    assert third.returncode == 0, third.stderr[-3000:]
    assert "[reused] tiny | leg_counting: accuracy 100.0%" in third.stdout
    assert "re-scored, not regenerated" in third.stdout
    report = json.loads((out / "results_leg_counting.json").read_text())["models"]["tiny"]
    assert report["reused"] is True and report["measured"] == json.loads(cell_file.read_text())["finished"]
    every = json.loads((out / "results_all_tasks.json").read_text())
    assert every["reused"] == {"tiny": ["leg_counting"]}
