"""The multi-node path on the real scheduler: infrastructure/slurm/multinode.sbatch submitted with 2 tasks;
``srun`` starts one ``accelerate launch`` per task, each as one machine of a 2-machine run (gloo on this
CPU node), meeting at the first node's address: one run directory, one report, both ranks with the same
final weights, each rank's environment from its own SLURM task."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tests.conftest import ROOT
from tests.slurm.conftest import finished

pytestmark = pytest.mark.slurm

SCRIPT = "infrastructure/slurm/multinode.sbatch"
ACCELERATE_CONFIG = "infrastructure/accelerate/ddp_cpu.yaml"


def sbatch(env: dict[str, str], out: Path, *args: str) -> str:
    proc = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--partition=debug",
            "--nodes=1",
            "--ntasks=2",
            "--ntasks-per-node=2",
            "--cpus-per-task=1",
            "--time=20",
            f"--output={out}",
            f"--chdir={ROOT}",
            SCRIPT,
            *args,
        ],
        capture_output=True,
        text=True,
        env={**env, "PYTHON": sys.executable},
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().split(";")[0]


def test_two_srun_tasks_start_one_gloo_run_as_the_multi_node_path_does(slurm, tmp_path):
    run_dir, out = tmp_path / "run", tmp_path / "job.out"
    job = sbatch(
        slurm,
        out,
        ACCELERATE_CONFIG,
        "1",
        "experiment=smoke",
        "distributed=ddp_cpu",
        f"hydra.run.dir={run_dir}",
        f"paths.root_dir={tmp_path}",
    )
    info = finished(job, timeout=900)
    log = out.read_text()
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), log[-4000:]
    assert info["NumTasks"] == "2" and info["NumCPUs"] == "2", info
    assert f"job {job}, 2 task(s) x 1 process(es), rendezvous " in log

    # one run of two ranks: rank 0 alone wrote the records, the report and the final weights
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.out", "run"]
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["event"] for r in records].count("pipeline_start") == 1
    assert records[-1]["event"] == "pipeline_end"
    assert records[-1]["status"] in ("COMPLETED", "COMPLETED_WITH_WARNINGS")
    provenance = json.loads((run_dir / "provenance.json").read_text())
    assert provenance["distributed"]["processes"] == 2, provenance["distributed"]
    assert json.loads((run_dir / "report.json").read_text())["steps"] == {"sft": 4, "grpo": 4}
    weights = json.loads((run_dir / "final" / "rank_weights.json").read_text())
    assert weights["world_size"] == 2 and weights["sha256"][0] == weights["sha256"][1]
    # the two ranks were the two SLURM tasks (srun --label prefixes each line with its task): task 0
    # printed the run's console, task 1 hosted rank 1 (torch's DDP names it in its own warning)
    lines = log.splitlines()
    assert sum(line.startswith("0: pipeline COMPLETED") for line in lines) == 1, log[-3000:]
    assert not any(line.startswith("1: pipeline ") for line in lines)
    assert any(line.startswith("1: [rank1]") for line in lines), log[-3000:]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((ACCELERATE_CONFIG, "1", "experiment=smoke"), "set hydra.run.dir=<dir> among the overrides"),
        (("nope.yaml", "1", "hydra.run.dir=x"), "accelerate config 'nope.yaml' not found"),
        ((ACCELERATE_CONFIG, "two", "hydra.run.dir=x"), "must be a whole number >= 1, got 'two'"),
    ],
)
def test_the_script_refuses_what_would_split_or_break_the_run(slurm, tmp_path, args, message):
    out = tmp_path / "job.out"
    info = finished(sbatch(slurm, out, *args), timeout=120)
    assert (info["JobState"], info["ExitCode"]) == ("FAILED", "2:0"), info
    assert message in out.read_text()
