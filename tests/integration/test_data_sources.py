"""GSM8K and FinQA files, and a task mixture with an extra evaluation set, through run_pipeline.py
with the tiny model: the real conf/, fixtures in the real formats, nothing from a hub."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests import in_process
from tests.data_fixtures import finqa_rows, gsm8k_rows, write_json, write_jsonl

from rlvr.data import identity

pytestmark = pytest.mark.integration


# The claims here are about the data (read, split, scored in the sandbox, reported per task): the
# final evaluation and the GRPO steps' reward metrics hold them, so the baseline and the sampled
# evaluations (about half of a smoke run's time) are left out. In-training evaluations stay only
# where a test reads them (the mixture test: NO_CURVE is not passed there).
QUIET = ["evaluation.baseline=false", "evaluation.sampled=null"]
NO_CURVE = ["evaluation.every_n_steps=0"]


def run_pipeline(run_dir: Path, *overrides: str) -> Path:
    cmd = [
        f"hydra.run.dir={run_dir}",
        "experiment=smoke",
        *QUIET,
        *overrides,
    ]
    proc = in_process.run(cmd)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return run_dir


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def check_scored_in_sandbox(run_dir: Path, task: str) -> dict:
    """Every answer went through the checker in the sandbox without an error, and the held-out
    questions are test-side and not in the training manifest."""
    final = json.loads(next((run_dir / "eval").glob("final_step*.json")).read_text())
    samples = [s for s in final["samples"] if s["task"] == task]
    assert samples and {st for s in samples for st in s["status"]} <= {"ok", "no_answer"}
    assert all(identity.split_of(task, s["question"]) == "test" for s in samples)
    trained = set(json.loads((run_dir / "data_manifest.json").read_text())["train_question_ids"])
    assert trained and not trained & {identity.question_id(task, s["question"]) for s in samples}
    steps = [r for r in records(run_dir) if r["event"] == "train_step" and r["phase"] == "grpo"]
    assert steps[-1]["metrics"]["grpo/reward/scored"] > 0
    assert steps[-1]["metrics"]["grpo/reward/verifier_errors"] == 0
    return final


def test_gsm8k_file_end_to_end(tmp_path):
    path = write_jsonl(tmp_path / "gsm8k_train.jsonl", gsm8k_rows(150))
    run_dir = run_pipeline(tmp_path / "run", "data=gsm8k", f"data.path={path}", *NO_CURVE)
    report = json.loads((run_dir / "report.json").read_text())
    assert report["tasks"] == ["gsm8k"] and report["steps"] == {"sft": 4, "grpo": 4}
    final = check_scored_in_sandbox(run_dir, "gsm8k")
    gold = {r["question"]: r["answer"].rsplit("####", 1)[1].strip() for r in gsm8k_rows(150)}
    assert all(s["reference"] == gold[s["question"]] for s in final["samples"])
    assert len(final["samples"]) == 16


def test_finqa_file_end_to_end(tmp_path):
    rows = finqa_rows(150)
    path = write_json(tmp_path / "finqa_train.json", rows)
    run_dir = run_pipeline(tmp_path / "run", "data=finqa", f"data.path={path}", *NO_CURVE)
    final = check_scored_in_sandbox(run_dir, "finqa")
    by_question = {r["qa"]["question"]: r for r in rows}
    for s in final["samples"]:
        row = by_question[s["question"].rsplit("Question: ", 1)[1]]
        assert s["reference"] == str(row["qa"]["exe_ans"]) and "revenue | $" in s["question"]


def test_mixture_with_a_file_source_and_an_extra_eval_set(tmp_path):
    path = write_jsonl(tmp_path / "gsm8k.jsonl", gsm8k_rows(150))
    run_dir = run_pipeline(
        tmp_path / "run",
        "data=mixture",
        "data.tasks={basic_arithmetic: 0.5, gsm8k: 0.5}",
        "+data/source@data.sources.gsm8k=gsm8k",
        f"data.sources.gsm8k.path={path}",
        "+data/source@data.eval_sets.legs=reasoning_gym",
        "data.eval_sets.legs.task=leg_counting",
        "data.eval_sets.legs.eval_size=8",
    )
    check_scored_in_sandbox(run_dir, "gsm8k")
    check_scored_in_sandbox(run_dir, "basic_arithmetic")
    report = json.loads((run_dir / "report.json").read_text())
    assert report["tasks"] == ["basic_arithmetic", "gsm8k"]
    groups = {g["group"]: g for g in report["groups"]}
    assert set(groups) == {"task/basic_arithmetic", "task/gsm8k", "set/legs"}
    assert {g["final"]["n"] for g in groups.values()} == {16, 8}
    assert report["accuracy"][-1]["n"] == 32  # the headline: both training tasks, not the extra set
    # an accuracy curve per task and set: every in-training evaluation carries the groups
    assert report["in_training"] and all(set(e["groups"]) == set(groups) for e in report["in_training"])
    steps = [r for r in records(run_dir) if r["event"] == "train_step" and r["phase"] == "grpo"]
    # TRL scores a generation batch once and trains on it for several steps: not every step has them
    per_task = [{k for k in s["metrics"] if k.startswith("grpo/reward/task/")} for s in steps]
    assert set().union(*per_task) == {
        "grpo/reward/task/gsm8k/mean",
        "grpo/reward/task/basic_arithmetic/mean",
    }
    assert "| set/legs |" in (run_dir / "report.md").read_text()


def test_an_extra_set_with_prompts_longer_than_the_context_is_refused_before_any_work(tmp_path):
    """SECURITY.md "Bounds and timeouts": refused after the model loads, before any evaluation or
    training step, naming the set, the tokens and the context. Mutation: the orchestrator's
    ``prompt_length_issues`` call removed -> red (the run goes on and completes)."""
    long = [{**r, "question": r["question"] + " Think of apples." * 700} for r in gsm8k_rows(40)]
    path = write_jsonl(tmp_path / "long.jsonl", long)
    cmd = [
        f"hydra.run.dir={tmp_path / 'run'}",
        "experiment=smoke",
    ]
    cmd += ["+data/source@data.eval_sets.long=gsm8k", f"data.eval_sets.long.path={path}"]
    cmd += ["data.eval_sets.long.eval_size=2"]
    proc = in_process.run(cmd)
    out = " ".join((proc.stdout + proc.stderr).split())  # the console wraps long lines
    assert proc.returncode != 0, out[-3000:]
    assert "data.eval_sets.long" in out and "the context 2048" in out, out[-3000:]
    assert not (tmp_path / "run" / "eval").exists() and not (tmp_path / "run" / "checkpoints").exists()
