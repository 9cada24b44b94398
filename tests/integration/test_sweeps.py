"""Hydra multirun sweeps of the smoke experiment through the project's launcher configs, as real processes.

Each launcher runs a 2-point sweep (seed=1,2) of the smallest smoke run; every point must
complete in its own run directory with its own report and config record.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from tests.conftest import CONF, ROOT

pytestmark = [pytest.mark.integration, pytest.mark.long]  # a minute or more: make test-long, CI

TINY_POINT = (
    "experiment=smoke",
    "training_loop.sft.max_steps=1",
    "training_loop.grpo.max_steps=1",
    "data.eval_size=8",
    "evaluation.every_n_steps=0",
)


def run_sweep(sweep_dir: Path, launcher: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        str(ROOT / "run_pipeline.py"),
        "-m",
        f"hydra/launcher={launcher}",
        f"hydra.sweep.dir={sweep_dir}",
        *TINY_POINT,
        "seed=1,2",
    ]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)


@pytest.mark.parametrize("launcher", ["local_parallel", "submitit_local_run"])
def test_two_point_sweep_each_point_has_its_own_run(tmp_path, launcher):
    proc = run_sweep(tmp_path, launcher)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    seeds = []
    for num in ("0", "1"):
        point = tmp_path / num
        report = json.loads((point / "report.json").read_text())
        assert report["steps"] == {"sft": 1, "grpo": 1}
        seeds.append(OmegaConf.load(point / "config_resolved.yaml").seed)
    assert sorted(seeds) == [1, 2]

    # The sweep report reads the same points from their own records.
    report = subprocess.run(
        [sys.executable, "-m", "rlvr.records.sweep_report", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert report.returncode == 0, report.stderr
    table = json.loads((tmp_path / "sweep_report.json").read_text())
    # the tiny model learns nothing the verifier counts: a warning (rlvr.records.learning.verifier_silent)
    assert [(p["status"], p["overrides"]["seed"]) for p in table] == [
        ("COMPLETED_WITH_WARNINGS", s) for s in seeds
    ]
    assert set(table[0]["accuracy"]) == {"base model", "after SFT", "final"}
    assert (tmp_path / "sweep_report.png").is_file()


def test_slurm_launcher_config_carries_the_cluster_settings():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        full = compose("config", overrides=["hydra/launcher=slurm"], return_hydra_config=True)
    launcher = full.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert launcher.gpus_per_node == 1
    assert launcher.additional_parameters.requeue is True
    assert launcher.max_num_timeout >= 1
