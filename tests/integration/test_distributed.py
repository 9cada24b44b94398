"""Two processes on CPU (gloo) through `accelerate launch`: experiment=smoke (SFT + GRPO) as DDP.

One run directory, one report, rank 0 alone writing, the expected step counts, both ranks ending with
the same weights; and a failure on one rank ends the whole run with its error, without a hang.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.conftest import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.long]  # a minute or more: make test-long, CI

ACCELERATE_CONFIG = "infrastructure/accelerate/ddp_cpu.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(*args: str, env: dict[str, str] | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """``accelerate launch --config_file <ddp_cpu> --num_processes 2 run_pipeline.py <args>``."""
    cmd = [
        str(Path(sys.executable).parent / "accelerate"),
        "launch",
        "--config_file",
        ACCELERATE_CONFIG,
        "--num_processes",
        "2",
        "--main_process_port",
        str(free_port()),
        "run_pipeline.py",
        *args,
    ]
    return subprocess.run(
        cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout, env={**os.environ, **(env or {})}
    )


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    parent = tmp_path_factory.mktemp("ddp")
    run_dir = parent / "run"
    # paths.root_dir: a second (timestamped) directory made by either rank would land in parent/outputs
    proc = launch(
        "experiment=smoke", "distributed=ddp_cpu", f"hydra.run.dir={run_dir}", f"paths.root_dir={parent}"
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return parent, run_dir, proc


def test_one_run_directory_one_report_one_record(ddp_run):
    parent, run_dir, proc = ddp_run
    assert [p.name for p in parent.iterdir()] == ["run"]
    for name in ("config_resolved.yaml", "report.md", "report.json", "provenance.json"):
        assert (run_dir / name).is_file(), name
    records = events(run_dir)
    # rank 1 emits to no observer: one start, one end, each training step once
    assert [r["event"] for r in records].count("pipeline_start") == 1
    # COMPLETED_WITH_WARNINGS: the tiny model learns nothing the verifier counts (rlvr.records.learning)
    assert records[-1]["event"] == "pipeline_end" and records[-1]["status"] == "COMPLETED_WITH_WARNINGS"
    assert [r["event"] for r in records].count("pipeline_end") == 1
    assert proc.stdout.count("pipeline COMPLETED") == 1 and proc.stdout.count("▶ train") == 1
    provenance = json.loads((run_dir / "provenance.json").read_text())
    assert provenance["distributed"] == {
        "strategy": "MULTI_GPU",
        "accelerate_config": ACCELERATE_CONFIG,
        "processes": 2,
        "sharded_weights": False,
    }
    # every rank re-executed itself with glibc's malloc settings (rlvr.runtime.allocator) before loading torch
    assert "glibc.malloc.mmap_max=0" in provenance["environment"]["GLIBC_TUNABLES"]


def test_expected_step_counts_and_evaluations_once(ddp_run):
    _, run_dir, _ = ddp_run
    assert json.loads((run_dir / "report.json").read_text())["steps"] == {"sft": 4, "grpo": 4}
    records = events(run_dir)
    for phase in ("sft", "grpo"):
        steps = [r["step"] for r in records if r["event"] == "train_step" and r["phase"] == phase]
        assert steps == [1, 2, 3, 4], (phase, steps)
    labels = [(r["label"], r["step"]) for r in records if r["event"] == "evaluation"]
    assert len(labels) == len(set(labels))  # rank 0 alone evaluates
    assert labels[0] == ("baseline", 0) and [lb for lb, _ in labels[-2:]] == ["final", "final_sampled"]
    assert ("after_sft_sampled", 4) in labels  # the GRPO stage's start, sampled (evaluation.sampled)
    assert sorted(p.name for p in (run_dir / "eval").iterdir()) == sorted(
        f"{lb}_step{s}.json" for lb, s in labels
    )


def test_both_ranks_end_with_the_saved_weights(ddp_run):
    """Every rank hashes its own final parameters; rank 0 saves them and the hashes beside them."""
    import torch
    from safetensors.torch import load_file
    from tests.conftest import tiny_model
    from transformers import AutoModelForCausalLM

    from rlvr.runtime.distributed import weights_sha256

    _, run_dir, _ = ddp_run
    record = json.loads((run_dir / "final" / "rank_weights.json").read_text())
    assert record["world_size"] == 2 and len(record["sha256"]) == 2
    assert record["sha256"][0] == record["sha256"][1]
    saved = AutoModelForCausalLM.from_pretrained(run_dir / "final", dtype=torch.float32)
    assert weights_sha256(saved) == record["sha256"][0]
    # and training really moved them
    init = tiny_model(seed=42).load().model.state_dict()
    final = load_file(run_dir / "final" / "model.safetensors")
    changed = [k for k, v in final.items() if k in init and not torch.equal(v, init[k])]
    assert len(changed) > len(final) // 2


def test_a_failure_on_one_rank_ends_the_run_with_its_error(tmp_path):
    run_dir = tmp_path / "run"
    plugins = {
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "plugins"), os.environ.get("PYTHONPATH", "")]),
        "RLVR_PLUGINS": "rlvr_example_plugin",
    }
    start = time.perf_counter()
    proc = launch(
        "experiment=smoke",
        "distributed=ddp_cpu",
        f"hydra.run.dir={run_dir}",
        "evaluation.baseline=false",
        "+reward.terms.boom._target_=rlvr_example_plugin.rewards.FailsOnRank",
        "+reward.terms.boom.rank=1",
        env=plugins,
        timeout=900,
    )
    seconds = time.perf_counter() - start
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-3000:]
    # No hang: the launcher ends rank 0 when rank 1 is gone, instead of rank 0 waiting for the
    # process group's 30-minute timeout. (The bound is loose: the machine is shared.)
    assert seconds < 600
    assert output.count("[rank 1] RuntimeError: reward.terms.boom failed on the gold answers") == 1, output[
        -4000:
    ]
    assert "this term fails on rank 1 on purpose" in output
    # rank 0 only noticed: one line from it, not a second traceback
    assert output.count("[rank 0] stopped: another process of this run failed") == 1, output[-4000:]
    assert output.count("Error executing job") == 1  # Hydra's report of rank 1's error, the cause
    last = events(run_dir)[-1]
    assert last["event"] == "pipeline_end" and last["status"] == "FAILED"  # rank 0 recorded the end
    assert not (run_dir / "final").exists()


def test_a_multi_process_launch_must_name_its_run_directory(tmp_path):
    proc = launch("experiment=smoke", "distributed=ddp_cpu", f"paths.root_dir={tmp_path}", timeout=120)
    assert proc.returncode != 0
    assert proc.stderr.count("hydra.run.dir=None: this is a 2-process launch") == 1, proc.stderr[-3000:]
    assert not (tmp_path / "outputs").exists()
