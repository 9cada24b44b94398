"""The real conf/ through the real entry point with the tiny model: files written, overrides applied."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from tests import launcher
from tests.conftest import ROOT

pytestmark = pytest.mark.integration


def run_pipeline(tmp_path: Path, *overrides: str, fresh: bool = False) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "run_pipeline.py"), f"hydra.run.dir={tmp_path}", *overrides]
    return launcher.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600, fresh=fresh)


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("smoke")
    # Gradient accumulation as in the default GRPO stage (the smoke file turns it off to save time).
    proc = run_pipeline(
        run_dir,
        "experiment=smoke",
        "data.task=leg_counting",
        "training_loop.grpo.max_steps=3",
        "training_loop.grpo.gradient_accumulation_steps=2",
        "observers.console.log_every=2",
        fresh=True,  # a fresh interpreter: what the libraries print while they are imported is console noise too
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return run_dir, proc


def test_smoke_run_writes_every_artifact(smoke_run):
    run_dir, proc = smoke_run
    for name in ("config_resolved.yaml", "metrics.jsonl", "report.md", "report.json", "training.png"):
        assert (run_dir / name).is_file(), name
    assert (run_dir / "final" / "config.json").is_file()
    assert (run_dir / "final" / "model.safetensors").is_file()
    assert "Held-out accuracy" in proc.stdout


def test_console_eval_files_and_report_give_each_evaluation_the_same_step(smoke_run):
    """ "eval final step 7" on the console, eval/final_step7.json, "| final | 7 |" in report.md: one
    number per evaluation (the run's total for a stage, split into its phases on the console)."""
    run_dir, proc = smoke_run
    printed = set(re.findall(r"^  eval (\w+) step (\d+)\b", proc.stdout, re.MULTILINE))
    files = {re.fullmatch(r"(\w+)_step(\d+)\.json", p.name).groups() for p in (run_dir / "eval").iterdir()}
    assert printed == files and ("final", "7") in files, (printed, files)
    assert "eval final step 7 (sft 4 + grpo 3):" in proc.stdout
    names = {"base model": "baseline", "after SFT": "after_sft", "final": "final"}
    rows = re.findall(
        r"^\| (base model|after SFT|final) \| (\d+) \|", (run_dir / "report.md").read_text(), re.M
    )
    assert {(names[stage], step) for stage, step in rows} == {p for p in files if p[0] in names.values()}
    # Off a terminal each shown step says its step time and ETA; every step is in the run's log file.
    assert re.search(r"^  grpo step 2/3  \d+\.\d (s/step|steps/s)  ETA \d+:\d\d  ", proc.stdout, re.M), (
        proc.stdout
    )
    log = (run_dir / "run_pipeline.log").read_text()
    assert all(f"sft step {n}/4" in log for n in range(1, 5)) and "sft step 1/4" not in proc.stdout


def test_console_holds_only_the_runs_own_lines(smoke_run):
    """Library deprecation warnings and save progress bars go to the run's log file, not the console."""
    run_dir, proc = smoke_run
    console = proc.stdout + proc.stderr
    for noise in ("FutureWarning", "Writing model shards", "it/s]", "bitsandbytes"):
        assert noise not in console, noise
    # kept, in the log file: the libraries' own records (bitsandbytes' warning about its optional
    # CPU kernels package where this CPU kind makes it warn; transformers' tokenizer warning always)
    log = next(run_dir.glob("*.log")).read_text()
    assert "[transformers." in log and "Ignoring clean_up_tokenization_spaces" in log


def test_overrides_took_effect(smoke_run):
    run_dir, _ = smoke_run
    cfg = OmegaConf.load(run_dir / "config_resolved.yaml")
    assert cfg.data.task == "leg_counting"
    assert cfg.training_loop.grpo.gradient_accumulation_steps == 2
    report = json.loads((run_dir / "report.json").read_text())
    assert report["tasks"] == ["leg_counting"]
    assert report["steps"] == {"sft": 4, "grpo": 3}


def test_metrics_file_has_events_in_order(smoke_run):
    run_dir, _ = smoke_run
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    kinds = [r["event"] for r in records]
    assert kinds[0] == "pipeline_start" and kinds[-1] == "pipeline_end"
    assert records[-1]["status"] == "COMPLETED"
    grpo_steps = [r for r in records if r["event"] == "train_step" and r["phase"] == "grpo"]
    assert [r["step"] for r in grpo_steps] == [1, 2, 3]
    assert "grpo/reward/correctness/mean" in grpo_steps[0]["metrics"]
    assert grpo_steps[0]["metrics"]["grpo/reward/verifier_timeouts"] == 0
    assert grpo_steps[-1]["metrics"]["grpo/reward/scored"] > 0
    evals = [r["label"] for r in records if r["event"] == "evaluation"]
    assert evals[0] == "baseline" and evals[-2:] == ["final", "final_sampled"] and "after_sft" in evals
    # the GRPO stage's start sampled at the training temperature right after its greedy evaluation
    assert evals[evals.index("after_sft") + 1] == "after_sft_sampled"


def test_evaluation_at_the_last_sft_step_is_not_repeated(smoke_run):
    """SFT ends on an evaluation step (4, every 2): "after SFT" reuses it instead of generating again."""
    run_dir, _ = smoke_run
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = {(r["label"], r["step"]): r for r in records if r["event"] == "evaluation"}
    assert evals[("after_sft", 4)]["accuracy"] == evals[("sft", 4)]["accuracy"]
    after_sft = json.loads((run_dir / "eval" / "after_sft_step4.json").read_text())
    assert after_sft["reused_from"] == "sft_step4.json" and after_sft["label"] == "after_sft"
    assert "reused_from" not in json.loads((run_dir / "eval" / "sft_step4.json").read_text())
    assert list((run_dir / "eval").glob("final_step7.json"))  # GRPO's last step (3) had no evaluation


def test_eval_json_records_prompt_hash_model_and_samples(smoke_run):
    run_dir, _ = smoke_run
    final = json.loads(next((run_dir / "eval").glob("final_step*.json")).read_text())
    assert final["model"] == "tiny-random-llama"
    assert final["tasks"] == ["leg_counting"]
    assert len(final["prompt_hash"]) == 12
    assert len(final["samples"]) == 16
    assert 0.0 <= final["summary"]["accuracy"] <= 1.0


def test_parameters_changed_by_training(smoke_run, tmp_path):
    """The saved final model differs from the tiny model's initialisation."""
    import torch
    from safetensors.torch import load_file
    from tests.conftest import tiny_model

    run_dir, _ = smoke_run
    init = tiny_model(seed=42).load().model.state_dict()
    final = load_file(run_dir / "final" / "model.safetensors")
    changed = [k for k, v in final.items() if k in init and not torch.equal(v, init[k])]
    assert len(changed) > len(final) // 2


def test_grpo_steps_carry_signal_and_gradient(smoke_run):
    """Every GRPO step of the smoke run has reward variance and a nonzero gradient, so a broken policy
    loss or advantage (zeroed, detached) fails here (mutation: advantages zeroed in the trainer)."""
    run_dir, _ = smoke_run
    events = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    grpo = [e["metrics"] for e in events if e["event"] == "train_step" and e["phase"] == "grpo"]
    assert len(grpo) == 3
    for step in grpo:
        assert step["grpo/reward/length/std"] > 0 and step["grpo/frac_reward_zero_std"] < 1
        assert step["grpo/grad_norm"] > 0


def test_bad_config_fails_fast_with_named_key(tmp_path):
    proc = run_pipeline(tmp_path, "experiment=smoke", "data.task=leg_countin")
    assert proc.returncode == 2
    assert "data.task='leg_countin'" in proc.stderr and "leg_counting" in proc.stderr
    assert not (tmp_path / "final").exists()


def test_validate_only_loads_nothing(tmp_path):
    proc = run_pipeline(tmp_path, "validate_only=true")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "configuration OK" in proc.stdout
    assert not (tmp_path / "metrics.jsonl").exists()
