"""The sbatch script the SLURM launcher would submit, rendered without a cluster.

The real hydra-submitit SlurmLauncher runs its own launch() (parameter translation, executor
set-up) up to the point where it hands the jobs to submitit; there the executor is captured and
submitit's own sbatch renderer writes the script that ``sbatch`` would receive.
"""

from __future__ import annotations

import pytest
import submitit
from hydra import compose, initialize_config_dir
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
from tests.conftest import CONF


class Captured(Exception):
    def __init__(self, executor, args):
        self.executor, self.args = executor, args


def render(
    tmp_path, monkeypatch, *overrides: str, sweep=("seed=1", "seed=2"), config="config", launcher="slurm"
):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            config,
            overrides=[
                f"hydra/launcher={launcher}",
                "hydra.launcher.partition=gpu",
                f"hydra.sweep.dir={tmp_path}",
                *overrides,
            ],
            return_hydra_config=True,
        )
    launcher_cfg = dict(cfg.hydra.launcher)
    launcher_cfg.pop("_target_")
    launcher = SlurmLauncher(**launcher_cfg)
    launcher.config = cfg

    def capture(self, fn, *args):
        raise Captured(self, args)

    monkeypatch.setattr(submitit.AutoExecutor, "map_array", capture)
    # submitit refuses to build a SLURM executor where no `srun` is on PATH (this machine)
    monkeypatch.setattr(submitit.slurm.slurm.SlurmExecutor, "affinity", classmethod(lambda cls: 1))
    with pytest.raises(Captured) as caught:
        launcher.launch([["resume=auto", s] for s in sweep], initial_job_idx=0)
    executor = caught.value.executor._executor
    text = executor._make_submission_file_text("python -u -m submitit.core._submit " + str(tmp_path), "uid")
    return text, caught.value.args[0], executor


def test_sbatch_has_gpus_time_requeue_and_signal(tmp_path, monkeypatch):
    text, job_overrides, executor = render(tmp_path, monkeypatch, "hydra.launcher.timeout_min=600")
    lines = text.splitlines()
    assert "#SBATCH --partition=gpu" in lines
    assert "#SBATCH --gpus-per-node=1" in lines
    assert "#SBATCH --time=600" in lines
    assert "#SBATCH --cpus-per-task=8" in lines
    assert "#SBATCH --mem=32GB" in lines
    assert "#SBATCH --requeue" in lines
    assert "#SBATCH --open-mode=append" in lines
    # SLURM warns signal_delay_s seconds before the limit: time for the checkpoint + exit 75
    assert "#SBATCH --signal=USR2@120" in lines
    assert executor.max_num_timeout == 3
    # every point of the array carries resume=auto, so a requeued task continues its own run
    assert [o for o in job_overrides] == [["resume=auto", "seed=1"], ["resume=auto", "seed=2"]]


def test_account_and_qos_reach_sbatch(tmp_path, monkeypatch):
    text, _, _ = render(tmp_path, monkeypatch, "hydra.launcher.account=proj", "hydra.launcher.qos=high")
    assert "#SBATCH --account=proj" in text.splitlines() and "#SBATCH --qos=high" in text.splitlines()


def test_benchmark_models_fan_out_as_slurm_array_tasks(tmp_path, monkeypatch):
    """One array task per model, with the same launcher settings; the cells land in the shared
    benchmark.output_dir, and a final run over all models only draws the report (docs/scaling.md "SLURM")."""
    qwen = (
        "+model@benchmark.models.qwen=hf",
        "benchmark.models.qwen.name_or_path=Qwen/Qwen2.5-0.5B-Instruct",
    )
    models = ("benchmark.only=[smollm2_135m]", "benchmark.only=[qwen]")
    text, job_overrides, _ = render(tmp_path, monkeypatch, *qwen, sweep=models, config="benchmark")
    assert "#SBATCH --gpus-per-node=1" in text.splitlines() and "#SBATCH --requeue" in text.splitlines()
    assert [o[-1] for o in job_overrides] == list(models)


def test_slurm_cpu_asks_what_a_small_cpu_node_has_and_keeps_the_rest(tmp_path, monkeypatch):
    """hydra/launcher=slurm_cpu (issue 56 item 4): slurm.yaml's 1 GPU, 8 CPUs and 32 GB leave a job
    pending for ever on a CPU cluster (or sbatch refuses it: "Invalid generic resource (gres)
    specification" on tests/slurm's one-node cluster). Only those three keys differ; requeue, signal,
    time limit and resume=auto stay. The real scheduler's run: tests/slurm/test_cpu_launcher.py."""
    gpu, _, _ = render(tmp_path, monkeypatch)
    cpu, job_overrides, _ = render(tmp_path, monkeypatch, launcher="slurm_cpu")
    gpu_lines, cpu_lines = set(gpu.splitlines()), set(cpu.splitlines())
    assert gpu_lines - cpu_lines == {
        "#SBATCH --gpus-per-node=1",
        "#SBATCH --cpus-per-task=8",
        "#SBATCH --mem=32GB",
    }
    assert cpu_lines - gpu_lines == {
        "#SBATCH --gpus-per-node=0",
        "#SBATCH --cpus-per-task=2",
        "#SBATCH --mem=8GB",
    }
    assert {"#SBATCH --requeue", "#SBATCH --signal=USR2@120", "#SBATCH --time=240"} <= cpu_lines
    assert list(job_overrides) == [["resume=auto", "seed=1"], ["resume=auto", "seed=2"]]
