"""A Hydra sweep through ``hydra/launcher=slurm`` to the real slurmctld (submitit's SLURM executor,
sbatch, a job array), then the sweep report over the points' folders."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from omegaconf import OmegaConf
from tests.conftest import ROOT
from tests.slurm.conftest import array_jobs, finished, launch, wait_launcher

pytestmark = pytest.mark.slurm

TINY_POINT = (
    "experiment=smoke",
    "training_loop.sft.max_steps=1",
    "training_loop.grpo.max_steps=1",
    "data.eval_size=8",
    "evaluation.every_n_steps=0",
)


def test_two_point_sweep_runs_as_a_slurm_array_and_reports(slurm, tmp_path):
    proc = launch(tmp_path, slurm, *TINY_POINT, "seed=1,2")
    ids = array_jobs(tmp_path, 2)
    out = wait_launcher(proc, tmp_path)
    assert proc.returncode == 0, out[-4000:]

    # Both points were tasks of one SLURM job array, and SLURM says they COMPLETED with status 0.
    array_ids = {i.split("_")[0] for i in ids}
    assert len(array_ids) == 1 and sorted(i.split("_")[1] for i in ids) == ["0", "1"], ids
    for task in ids:
        info = finished(task)
        assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), info
        assert info["Partition"] == "debug" and info["NumCPUs"] == "1", info
        # submitit's SLURM job environment started the task (array id and task from SLURM's variables)
        log = next((tmp_path / ".submitit" / task).glob("*_log.out")).read_text()
        assert f"Starting with JobEnvironment(job_id={task}, hostname=" in log, log[-2000:]

    seeds = []
    for num in ("0", "1"):
        point = tmp_path / num
        report = json.loads((point / "report.json").read_text())
        assert report["steps"] == {"sft": 1, "grpo": 1}
        seeds.append(OmegaConf.load(point / "config_resolved.yaml").seed)
    assert sorted(seeds) == [1, 2]

    report = subprocess.run(
        [sys.executable, "-m", "rlvr.records.sweep_report", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=slurm,
        timeout=300,
    )
    assert report.returncode == 0, report.stderr
    table = json.loads((tmp_path / "sweep_report.json").read_text())
    # the tiny model learns nothing the verifier counts: a warning (rlvr.records.learning.verifier_silent)
    assert [(p["status"], p["overrides"]["seed"]) for p in table] == [
        ("COMPLETED_WITH_WARNINGS", s) for s in seeds
    ]
    assert set(table[0]["accuracy"]) == {"base model", "after SFT", "final"}
    assert (tmp_path / "sweep_report.png").is_file()


def test_benchmark_models_fan_out_as_a_slurm_array_then_one_run_reuses_every_cell(slurm, tmp_path):
    """The benchmark's fan-out (docs/benchmark.md): one array task per model, each writing its cells to
    the shared output_dir; then one ordinary run over all models reuses every cell (nothing evaluated
    again: the files are untouched) and draws the combined report."""
    out = tmp_path / "bench"
    models = ["~model@benchmark.models.smollm2_135m", "+model@benchmark.models.a=tiny",
              "+model@benchmark.models.b=tiny", "benchmark.models.b.seed=3"]  # fmt: skip
    shared = ["benchmark.tasks=[leg_counting]", "benchmark.num_examples=6", f"benchmark.output_dir={out}",
              "evaluation.max_new_tokens=8"]  # fmt: skip
    proc = launch(tmp_path / "sweep", slurm, *models, *shared, "benchmark.only=[a],[b]", config="benchmark")
    ids = array_jobs(tmp_path / "sweep", 2)
    log = wait_launcher(proc, tmp_path / "sweep")
    assert proc.returncode == 0, log[-4000:]
    assert len({i.split("_")[0] for i in ids}) == 1, ids  # one job array, a task a model
    for task in ids:
        info = finished(task)
        assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), info
    cells = sorted((out / "cells").glob("*.json"))
    assert sorted(json.loads(c.read_text())["model"] for c in cells) == ["a", "b"]
    mtimes = {c: c.stat().st_mtime_ns for c in cells}

    combine = subprocess.run(
        [
            sys.executable,
            str(ROOT / "run_pipeline.py"),
            "--config-name",
            "benchmark",
            f"hydra.run.dir={tmp_path / 'combine'}",
            *models,
            *shared,
        ],  # fmt: skip
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=slurm,
        timeout=600,
    )
    assert combine.returncode == 0, combine.stderr[-3000:]
    assert {c: c.stat().st_mtime_ns for c in cells} == mtimes  # every cell reused, none evaluated again
    every = json.loads((out / "results_all_tasks.json").read_text())
    assert set(every["average"]) == {"a", "b"}
    assert (out / "results_all_tasks.png").is_file()
