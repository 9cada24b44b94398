"""benchmarks/learning.py end to end with the tiny model: both runs, the equal-time step count, the table."""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys

import pytest
from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.long]  # a minute or more: make test-long, CI


def test_learning_benchmark_gives_sft_only_the_same_training_time(tmp_path):
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "learning.py"),
        "--sft-steps", "4", "--grpo-steps", "2", "--eval-every", "2", "--out", str(tmp_path),
        "--eval-size", "8", "--sampled-size", "4", "--samples", "2",
        "experiment=smoke", "data.train_size=256",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    def records(run: str) -> list[dict]:
        path = tmp_path / "seed42" / run / "metrics.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]

    def step_seconds(recs: list[dict], phase: str) -> list[float]:
        return [
            r["metrics"][f"{phase}/step_seconds"]
            for r in recs
            if r["event"] == "train_step" and r["phase"] == phase and f"{phase}/step_seconds" in r["metrics"]
        ]

    default, sft_only = records("default_run"), records("sft_only")
    k = max(r["step"] for r in sft_only if r["event"] == "train_step")
    # SFT only gets its own run of K steps, where K x the default run's median SFT step time covers
    # the default run's SFT + GRPO training time (and K - 1 steps would not).
    sft_step = statistics.median(step_seconds(default, "sft"))
    budget = 4 * sft_step + 2 * statistics.median(step_seconds(default, "grpo"))
    assert (k - 1) * sft_step < budget <= k * sft_step + 1e-9
    row = re.search(rf"SFT only, {k} steps \(equal time\)\s+{k}\s+[\d.]+\s+[\d.]+%", proc.stdout)
    assert row, proc.stdout
    assert re.search(r"SFT\+GRPO minus SFT only at equal time: [+-]\d+\.\d points", proc.stdout)
    # Three models on four axes, each paired on the same questions, then the summary across seeds.
    for axis in ("in-distribution", "harder", "retention", "sampled"):
        assert re.search(rf"  {axis} \(.*n=(8|4)\):", proc.stdout), proc.stdout
    assert proc.stdout.count("GRPO stage: ") == 4 and proc.stdout.count("SFT+GRPO vs SFT only: ") == 4
    assert "pass@2" in proc.stdout and "majority@2" in proc.stdout
    assert re.search(r"harder\s+GRPO stage\s+[+-]\d+\.\d points", proc.stdout), proc.stdout
    harder = json.loads(next((tmp_path / "seed42" / "axis_harder" / "cells").glob("*.json")).read_text())
    assert harder["fingerprint"]["task_params"]["max_terms"] == 4  # really the harder difficulty
    # A finished run is reused, not trained again.
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert again.returncode == 0 and again.stdout.count("reusing the finished run") == 2
