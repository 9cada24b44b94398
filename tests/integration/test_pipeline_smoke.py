"""The real conf/ through the real entry point with the tiny model: files written, overrides applied."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf
from tests import in_process
from tests.conftest import ROOT

pytestmark = pytest.mark.integration


def run_pipeline(tmp_path: Path, *overrides: str) -> in_process.Run:
    return in_process.run([f"hydra.run.dir={tmp_path}", *overrides])


GRPO_ROWS, EVAL_ROWS = 5, 3


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    run_dir = tmp_path_factory.mktemp("smoke")
    # Gradient accumulation as in the default GRPO stage (the smoke file turns it off to save time).
    # A fresh interpreter: what the libraries print while they are imported is console noise too.
    cmd = [
        sys.executable,
        "run_pipeline.py",
        f"hydra.run.dir={run_dir}",
        "experiment=smoke",
        "data.task=leg_counting",
        "training_loop.grpo.max_steps=3",
        "training_loop.grpo.gradient_accumulation_steps=2",
        "observers.console.log_every=2",
        # Fewer rows than a GRPO step's 16 rollouts and an evaluation's 16 questions: sampled, not all.
        f"completions.per_grpo_step={GRPO_ROWS}",
        f"completions.per_evaluation={EVAL_ROWS}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
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
    # the tiny random model never answers right: the run learned nothing the verifier counts, though
    # the length term gave its groups reward variance (rlvr.records.learning.verifier_silent)
    assert records[-1]["status"] == "COMPLETED_WITH_WARNINGS"
    warnings = json.loads((run_dir / "report.json").read_text())["warnings"]
    assert [w[:40] for w in warnings] == [
        "GRPO's verifier term correctness was 0 a",
        "Held-out accuracy was 0% at every one of",
    ]
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
        assert step["grpo/reward/length/std"] > 0 and step["grpo/reward/zero_std_groups_frac"] < 1
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


def test_each_grpo_step_records_its_rollout_time_and_tokens(smoke_run):
    """The rollout clock (rlvr.training_loop.trainer): every GRPO step's metrics carry the rollout's
    seconds and the completion tokens it made: TRL's own mean completion length times the step's rows
    (read from the run's config), and tokens/s is the one over the other."""
    run_dir, _ = smoke_run
    cfg = OmegaConf.load(run_dir / "config_resolved.yaml")
    grpo = cfg.training_loop.grpo
    rows = grpo.per_device_train_batch_size * grpo.gradient_accumulation_steps  # completions a step
    steps = [
        json.loads(line)["metrics"]
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
        if '"train_step"' in line and '"phase": "grpo"' in line
    ]
    assert len(steps) == 3, steps
    for m in steps:
        assert 0 < m["grpo/rollout/seconds"] <= m["grpo/step_seconds"], m
        assert m["grpo/rollout/tokens"] == pytest.approx(rows * m["grpo/completions/mean_length"]), m
        assert m["grpo/rollout/tokens_per_second"] == pytest.approx(
            m["grpo/rollout/tokens"] / m["grpo/rollout/seconds"]
        ), m


@contextlib.contextmanager
def _rebuilt(run_dir: Path) -> Iterator[tuple[Any, dict[str, dict[str, Any]]]]:
    """The run's reward set built anew from its resolved config, and its training rows by prompt text."""
    from rlvr import events as ev
    from rlvr.pipeline.wiring import build

    cfg = OmegaConf.load(run_dir / "config_resolved.yaml")
    built: dict[str, Any] = {}
    for key in ("prompts", "verifier", "data", "reward"):
        built[key] = build(key, cfg[key], built)
    try:
        train = built["data"].load(built["prompts"]).train
        yield built["reward"], {ev.as_text(row["prompt"]): row for row in train}
    finally:
        built["verifier"].close()


def _values(rewards: Any, row: dict[str, Any], data: dict[str, Any]) -> tuple[dict, float, dict]:
    """Each term's value for ``row``'s completion of training row ``data``, called as TRL calls it,
    and their weighted total."""
    completions = [[{"role": "assistant", "content": row["completion"]}]]
    columns = {"task": [data["task"]], "entry": [data["entry"]], "answer": [data["answer"]]}
    values = {name: term(completions, **columns)[0] for name, term in rewards.terms.items()}
    return values, sum(rewards.terms[n].weight * v for n, v in values.items()), data


def test_completions_jsonl_holds_the_sampled_rows_of_each_grpo_step_and_each_evaluation(smoke_run):
    """completions.jsonl: ``completions.per_grpo_step`` rollouts of every GRPO step and
    ``completions.per_evaluation`` questions of every evaluation (the same questions each time), and
    each GRPO row's term values are what the run's reward set gives that completion."""
    run_dir, _ = smoke_run
    rows = [json.loads(line) for line in (run_dir / "completions.jsonl").read_text().splitlines()]
    counts: dict[tuple[str, int], int] = {}
    for row in rows:
        counts[(row["source"], row["step"])] = counts.get((row["source"], row["step"]), 0) + 1
    evals = {re.fullmatch(r"(\w+)_step(\d+)\.json", p.name).groups() for p in (run_dir / "eval").iterdir()}
    expected = {("grpo", step): GRPO_ROWS for step in (1, 2, 3)}
    expected.update({(f"eval/{label}", int(step)): EVAL_ROWS for label, step in evals})
    assert counts == expected
    asked: dict[tuple[str, int], set[str]] = {}
    for row in rows:
        if row["source"] != "grpo":
            asked.setdefault((row["source"], row["step"]), set()).add(row["prompt"])
    assert len({frozenset(questions) for questions in asked.values()}) == 1, (
        "each evaluation, the same questions"
    )

    grpo = [r for r in rows if r["source"] == "grpo"]
    with _rebuilt(run_dir) as (rewards, train):
        values = [_values(rewards, row, train[row["prompt"]]) for row in grpo]
    for row, value in zip(grpo, values, strict=True):
        terms, total, data = value
        assert row["rewards"] == pytest.approx(terms), row
        assert row["score"] == pytest.approx(total)
        assert row["reference"] == data["answer"] and row["task"] == data["task"]
    # the length term tells the completions apart: a row whose values belonged to another completion fails
    assert len({r["rewards"]["length"] for r in grpo}) > 1


def test_trackers_of_a_run_hold_the_completions_tables_and_tags_named_once(tmp_path, monkeypatch):
    """observers=all, W&B offline: a ``completions/grpo`` table per GRPO step and a
    ``completions/eval/<label>`` table per evaluation, each with the rows completions.jsonl holds;
    TensorBoard tags are ``phase/metric`` once."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    proc = run_pipeline(
        tmp_path,
        "experiment=smoke",
        "training_loop.sft.max_steps=2",
        "training_loop.grpo.max_steps=2",
        "observers=all",
        "completions.per_grpo_step=2",
        "completions.per_evaluation=2",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [offline] = (tmp_path / "wandb").glob("offline-run-*")
    media = offline / "files" / "media" / "table" / "completions"
    tables: dict[str, list] = {}
    for path in sorted(media.rglob("*.table.json")):
        tables.setdefault(str(path.relative_to(media)).rsplit("_", 2)[0], []).append(
            json.loads(path.read_text())
        )
    rows = [json.loads(line) for line in (tmp_path / "completions.jsonl").read_text().splitlines()]
    sources = {r["source"] for r in rows}
    assert "grpo" in sources and "eval/baseline" in sources and "eval/final" in sources
    assert set(tables) == sources, proc.stdout[-3000:] + proc.stderr[-3000:]
    for source, logged in tables.items():
        table_rows = sorted((d[0], d[2], d[3]) for t in logged for d in t["data"])  # step, prompt, completion
        file_rows = sorted((r["step"], r["prompt"], r["completion"]) for r in rows if r["source"] == source)
        assert table_rows == file_rows, source
    assert len(tables["grpo"]) == 2  # one table a GRPO step
    assert [c for c in tables["grpo"][0]["columns"] if c.startswith("reward/")] == [
        "reward/correctness", "reward/format", "reward/length",
    ]  # fmt: skip
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert "grpo/loss" in tags and "sft/loss" in tags
    assert not [t for t in tags if re.match(r"(\w+)/\1/", t)], tags
