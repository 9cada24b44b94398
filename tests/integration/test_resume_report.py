"""A run preempted during GRPO and continued with resume=auto reports the whole run: the evaluations
made before the interruption (baseline, in SFT, after SFT, early GRPO), the SFT steps, both attempts
and their total wall time, equal in evaluations and steps to an uninterrupted run's report."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests import in_process
from tests.conftest import ROOT
from tests.integration.test_resume import steps, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.long]  # a minute or more: make test-long, CI

# Tiny model; the length reward gives GRPO non-zero advantages (its weights really move). Every
# step is evaluated, so each stage and phase leaves an evaluation file before the interruption.
BASE = [
    "experiment=smoke",
    "model.vocab_size=49152",  # test_resume's reason: a GRPO step long enough for a signal to land in
    "reward=with_brevity",
    "reward.terms.length.free_chars=0",
    "reward.terms.length.scale_chars=40",
    "training_loop.sft.max_steps=2",
    "training_loop.grpo.max_steps=4",
    "training_loop.grpo.save_steps=1000",  # the only GRPO checkpoint before the end is the signal's
    "evaluation.baseline=true",
    "evaluation.every_n_steps=1",
    "observers=default",
]


def cmd(run_dir: Path, *overrides: str) -> list[str]:
    return [sys.executable, str(ROOT / "run_pipeline.py"), f"hydra.run.dir={run_dir}", *BASE, *overrides]


def run(run_dir: Path, *overrides: str) -> in_process.Run:
    return in_process.run_command(cmd(run_dir, *overrides))


def events(run_dir: Path) -> list[list[dict]]:
    """metrics.jsonl split into attempts (each begins with pipeline_start)."""
    out: list[list[dict]] = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["event"] == "pipeline_start":
            out.append([])
        out[-1].append(record)
    return out


def evaluated(report: dict) -> list[tuple]:
    """Each evaluation of a report without its file path: stage/label, step, accuracy, CI, n."""
    rows = [("stage", r) for r in report["accuracy"]] + [("label", r) for r in report["in_training"]]
    return [(r[k], r["step"], r["accuracy"], r["ci_low"], r["ci_high"], r["n"]) for k, r in rows]


def completions(report: dict) -> dict[tuple, list]:
    """The generated answers behind each evaluation of a report, read from its eval file."""
    out = {}
    for r in report["accuracy"] + report["in_training"]:
        payload = json.loads(Path(r["path"]).read_text())
        out[(payload["label"], payload["step"])] = [s["completions"] for s in payload["samples"]]
    return out


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    run_dir = tmp_path_factory.mktemp("full")
    proc = run(run_dir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((run_dir / "report.json").read_text())


@pytest.fixture(scope="module")
def preempted(tmp_path_factory) -> tuple[Path, int]:
    """A run stopped by SIGTERM during GRPO (after SFT): exit 75, a GRPO checkpoint, no report.

    The signal races the run: its four GRPO steps (each evaluated) took 0.24 s on 2026-11-29, and CI
    under load saw step 1 only after the phase had ended (its one checkpoint was step 4's, the phase's
    own). An attempt whose signal landed after GRPO did not test a stop in GRPO: it is tried again.
    """
    for attempt in range(3):
        run_dir = tmp_path_factory.mktemp(f"preempted{attempt}") / "run"
        proc = subprocess.Popen(
            cmd(run_dir), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        wait_for(
            lambda d=run_dir: 1 in steps(d) if (d / "metrics.jsonl").exists() else False,
            proc,
            interval=0.01,
        )
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 75, out[-3000:]
        assert not (run_dir / "report.json").exists()
        (saved,) = [e for e in events(run_dir)[0] if e["event"] == "checkpoint" and e["phase"] == "grpo"]
        assert 1 <= saved["step"] <= 4, saved
        if saved["step"] < 4:
            return run_dir, saved["step"]
    pytest.fail("three runs ended GRPO before their SIGTERM landed: the poll saw step 1 too late each time")


def test_resumed_run_reports_every_attempt_like_an_uninterrupted_run(uninterrupted, preempted, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(preempted[0], run_dir)
    k = preempted[1]
    before = {p.name: p.stat().st_mtime_ns for p in (run_dir / "eval").glob("*.json")}
    # what the first attempt evaluated: the base model, both SFT steps, after SFT, GRPO up to the checkpoint
    assert set(before) >= {
        "baseline_step0.json",
        "sft_step2.json",
        "after_sft_step2.json",
        f"grpo_step{k}.json",
    }

    proc = run(run_dir, "resume=auto")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((run_dir / "report.json").read_text())

    assert [r["stage"] for r in report["accuracy"]] == ["base model", "after SFT", "final"]
    assert report["steps"] == {"sft": 2, "grpo": 4} == uninterrupted["steps"]
    # the same evaluations (stage, step, accuracy, CI, n) and the same answers as the uninterrupted run
    assert evaluated(report) == evaluated(uninterrupted)
    assert completions(report) == completions(uninterrupted)
    assert report["paired_changes"] == uninterrupted["paired_changes"]
    assert [c["stage"] for c in report["paired_changes"]] == [
        "SFT",
        "GRPO",
        "whole run",
        "GRPO, sampled at the training temperature",
    ]  # the sampled start (before the requeue) pairs with the sampled end (after it)

    first, second = report["attempts"]
    # COMPLETED_WITH_WARNINGS: the tiny model learns nothing the verifier counts (rlvr.records.learning)
    assert (first["status"], second["status"]) == ("PREEMPTED", "COMPLETED_WITH_WARNINGS")
    assert first["phases"]["sft"] == {
        "steps": 2,
        "max_steps": 2,
        "seconds": first["phases"]["sft"]["seconds"],
    }
    assert second["resumed_from"] == str(run_dir / "checkpoints" / "grpo" / f"checkpoint-{k}")
    assert report["wall_seconds"] == pytest.approx(first["seconds"] + second["seconds"], abs=0.11)
    assert report["wall_seconds"] >= max(first["seconds"], second["seconds"]) > 0
    assert "over 2 attempts" in (run_dir / "report.md").read_text()
    assert [a["status"] for a in json.loads((run_dir / "attempts.json").read_text())] == [
        "PREEMPTED",
        "COMPLETED_WITH_WARNINGS",
    ]

    # nothing made before the interruption was evaluated again: the second attempt evaluated only the
    # GRPO steps after the checkpoint (the final evaluation reuses the last one), and left the files as they were
    made = [(e["label"], e["step"]) for e in events(run_dir)[1] if e["event"] == "evaluation"]
    assert made == [("grpo", s) for s in range(k + 1, 5)] + [("final", 6), ("final_sampled", 6)]
    reused = {n for n in before if not n.startswith("grpo_step") or int(n[9:-5]) <= k}
    assert {n: (run_dir / "eval" / n).stat().st_mtime_ns for n in reused} == {n: before[n] for n in reused}
    assert f"reusing {len(reused)} evaluation(s) from earlier attempts" in proc.stdout


def test_an_evaluation_file_that_is_not_this_runs_is_made_again_and_the_log_says_why(
    uninterrupted, preempted, tmp_path
):
    run_dir = tmp_path / "run"
    shutil.copytree(preempted[0], run_dir)
    baseline = run_dir / "eval" / "baseline_step0.json"
    payload = json.loads(baseline.read_text())
    baseline.write_text(json.dumps({**payload, "prompt_hash": "not-this-run"}))

    proc = run(run_dir, "resume=auto")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    warnings = [e["message"] for e in events(run_dir)[1] if e["event"] == "warning"]
    assert any(
        m.startswith("resume: baseline_step0.json: not reused, its prompt_hash is 'not-this-run'")
        for m in warnings
    ), warnings
    made = [(e["label"], e["step"]) for e in events(run_dir)[1] if e["event"] == "evaluation"]
    assert made[0] == ("baseline", 0)  # made again, on the base model: the checkpoint loads in training
    report = json.loads((run_dir / "report.json").read_text())
    assert evaluated(report) == evaluated(uninterrupted)
    assert completions(report) == completions(uninterrupted)
    assert json.loads(baseline.read_text())["prompt_hash"] == payload["prompt_hash"]
