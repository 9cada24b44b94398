"""Two tiny models (one a LoRA adapter directory) x two tasks through the real benchmark entry point."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tests import in_process
from tests.conftest import ROOT

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A tiny base model on disk and a LoRA adapter on it whose weights are randomised (a fresh adapter
    has B = 0 and would be indistinguishable from its base), plus a copy of the base whose training
    manifest lists the benchmark's own test questions."""
    import torch
    from peft import LoraConfig, get_peft_model
    from tests.conftest import tiny_model

    from rlvr.data import identity
    from rlvr.data.reasoning_gym import split_entries

    root = tmp_path_factory.mktemp("models")
    loaded = tiny_model(seed=3).load()
    base = root / "tiny-base"
    loaded.model.save_pretrained(base)
    loaded.tokenizer.save_pretrained(base)
    ids = loaded.tokenizer("What is 2 + 3?", return_tensors="pt").input_ids
    with torch.no_grad():
        base_logits = loaded.model(ids).logits.clone()
    peft_model = get_peft_model(loaded.model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(0)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
        assert not torch.allclose(peft_model(ids).logits, base_logits)
    peft_model.peft_config["default"].base_model_name_or_path = str(base)
    adapter = root / "tiny-adapter"
    peft_model.save_pretrained(adapter)

    overlap = root / "run" / "final"
    tiny_model(seed=3).load().model.save_pretrained(overlap)
    loaded.tokenizer.save_pretrained(overlap)
    test = split_entries("leg_counting", {}, "test", 6, 1234, "k")
    manifest = identity.manifest(
        ["leg_counting"], {}, identity.ids_of(("leg_counting", e["question"]) for e in test[:2])
    )
    (overlap / identity.MANIFEST).write_text(json.dumps(manifest))
    return base, adapter, overlap


def model_overrides(models: dict[str, str]) -> list[str]:
    """Each name -> a conf/model option (``tiny``) or a model directory through model/hf, as
    conf/benchmark.yaml tells a user to write them; the default model is dropped."""
    overrides = ["~model@benchmark.models.smollm2_135m"]
    for name, spec in models.items():
        if spec == "tiny":
            overrides.append(f"+model@benchmark.models.{name}=tiny")
        else:
            overrides += [
                f"+model@benchmark.models.{name}=hf",
                f"benchmark.models.{name}.name_or_path={spec}",
            ]
    return overrides


def bench(out, models, *extra):
    """The benchmark with its results in this run's own directory (hydra.run.dir=out)."""
    cmd = [
        "--config-name",
        "benchmark",
        f"hydra.run.dir={out}",
        *model_overrides(models),
        "benchmark.tasks=[leg_counting,basic_arithmetic]",
        "benchmark.num_examples=6",
        "evaluation.max_new_tokens=8",
        *extra,
    ]
    return in_process.run(cmd)


def plot(*args):
    return subprocess.run(
        [sys.executable, "-m", "rlvr.benchmark.plot", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_benchmark_two_models_two_tasks_and_resume(tmp_path, models):
    base, adapter_dir, _ = models
    out = tmp_path / "bench"
    three = {"tiny": "tiny", "adapter": str(adapter_dir), "base": str(base)}
    proc = bench(out, three)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    cells = sorted((out / "cells").glob("*.json"))  # in hydra.run.dir: benchmark.output_dir is unset
    assert len(cells) == 6
    report = json.loads((out / "results_leg_counting.json").read_text())
    assert report["kind"] == "task" and set(report["models"]) == {"tiny", "adapter", "base"}
    assert len(report["prompt_hash"]) == 12
    every = json.loads((out / "results_all_tasks.json").read_text())
    assert set(every["tasks"]) == {"leg_counting", "basic_arithmetic"}
    for model in ("tiny", "adapter"):
        summary = every["tasks"]["leg_counting"]["models"][model]
        assert summary["n"] == 6 and 0 <= summary["ci_low"] <= summary["accuracy"] <= summary["ci_high"] <= 1
    assert sorted(p.name for p in out.glob("*.png")) == [
        "results_all_tasks.png", "results_basic_arithmetic.png", "results_leg_counting.png"
    ]  # fmt: skip
    # The console ends with the results, not only the files' paths: a row per model, n in each cell.
    table = proc.stdout[proc.stdout.index("Benchmark accuracy") :]
    assert all(
        any(line.startswith(f"│ {m} ") and line.count("n=6") == 2 for line in table.splitlines())
        for m in three
    )
    cell = json.loads(cells[0].read_text())
    samples = cell["evaluation"]["samples"]
    assert len(samples) == 6 and {"question", "completions", "answers", "scores", "status"} <= set(samples[0])
    assert cell["train_overlap"] is None  # no training manifest: unknown, not zero

    def completions(model):
        [path] = [
            c for c in cells if json.loads(c.read_text())["model"] == model and "leg_counting" in c.name
        ]
        return [s["completions"] for s in json.loads(path.read_text())["evaluation"]["samples"]]

    # the adapter's answers are its own, not its base's (same questions, same greedy decoding)
    assert completions("adapter") != completions("base")

    # Rerun: every cell is already done, nothing is recomputed.
    mtimes = {c: c.stat().st_mtime_ns for c in cells}
    again = bench(out, three)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {c: c.stat().st_mtime_ns for c in cells} == mtimes
    assert "[1/" not in again.stdout  # no cell measured: nothing ran ...
    assert again.stdout.count("[reused] ") == 6  # ... and every reused cell says so

    # Different task parameters: only that task's cells are recomputed, and the run says why.
    changed = bench(
        out, {"tiny": "tiny"}, "+benchmark.task_params.leg_counting={min_animals: 2, max_animals: 4}"
    )
    assert changed.returncode == 0, changed.stderr[-3000:]
    assert "recomputing tiny on leg_counting: task_params" in changed.stdout + changed.stderr
    redone = {c for c in cells if c.stat().st_mtime_ns != mtimes[c]}
    assert {json.loads(c.read_text())["task"] for c in redone} == {"leg_counting"}

    # After three benchmarks in one directory, the README's plot command names one file: the latest
    # report, which covers only the requested models.
    [latest] = out.glob("results_all_tasks*.json")
    assert set(json.loads(latest.read_text())["average"]) == {"tiny"}
    png = tmp_path / "custom.png"
    drawn = plot(latest, "--rename", "tiny=Tiny", "--title", "T", "--output", png)
    assert drawn.returncode == 0, drawn.stderr
    assert png.stat().st_size > 1000
    unknown = plot(out / "results_leg_counting.json", "--rename", "adapter=LoRA")  # not in the latest report
    assert unknown.returncode == 2 and "no model or task named 'adapter'" in unknown.stderr
    assert "'tiny'" in unknown.stderr


def test_unknown_task_model_name_and_bad_model_paths_fail_before_loading(tmp_path):
    models = {"tiny": "tiny", "a": "./no/such/checkpoint", "b": "../model/tiny"}
    proc = bench(tmp_path, models, "benchmark.tasks=[leg_countin]", "benchmark.only=[tiny,tinny]")
    assert proc.returncode == 2
    assert "leg_counting" in proc.stderr
    assert "benchmark.only='tinny': not a name in benchmark.models" in proc.stderr and "'tiny'" in proc.stderr
    for name in ("a", "b"):
        assert (
            f"benchmark.models.{name}.name_or_path='{models[name]}': local path does not exist" in proc.stderr
        )
    assert not (tmp_path / "cells").exists()


def test_a_model_trained_on_test_questions_is_refused_or_flagged(tmp_path, models):
    _, _, overlap = models
    proc = bench(tmp_path, {"run": str(overlap)}, "benchmark.tasks=[leg_counting]")
    assert proc.returncode == 2 and "was trained on 2 of the 6 leg_counting test questions" in proc.stderr
    allowed = bench(
        tmp_path,
        {"run": str(overlap)},
        "benchmark.tasks=[leg_counting]",
        "benchmark.allow_train_overlap=true",
    )
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    assert "TRAINED ON 2 OF THESE QUESTIONS" in allowed.stdout
    report = json.loads((tmp_path / "results_leg_counting.json").read_text())
    assert report["models"]["run"]["train_overlap"] == 2


@pytest.mark.long  # the sweep launcher's own processes (make test-long, CI)
def test_benchmark_models_fan_out_as_sweep_jobs_then_one_report(tmp_path, models):
    """Each model as its own job of a multirun (joblib here, SLURM array tasks on a cluster), writing
    cells to the shared output_dir; a final run over all models reuses every cell and draws one report."""
    base, _, _ = models
    out = tmp_path / "bench"
    both = model_overrides({"tiny": "tiny", "base": str(base)})
    shared = ["benchmark.tasks=[leg_counting]", "benchmark.num_examples=6", f"benchmark.output_dir={out}",
              "evaluation.max_new_tokens=8"]  # fmt: skip
    cmd = [
        sys.executable,
        str(ROOT / "run_pipeline.py"),
        "--config-name",
        "benchmark",
        "-m",
        "hydra/launcher=local_parallel",
        f"hydra.sweep.dir={tmp_path}/sweep",
        *both,
        "benchmark.only=[tiny],[base]",
        *shared,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    cells = sorted((out / "cells").glob("*.json"))
    assert sorted(json.loads(c.read_text())["model"] for c in cells) == ["base", "tiny"]
    mtimes = {c: c.stat().st_mtime_ns for c in cells}
    collect = bench(tmp_path / "collect", {"tiny": "tiny", "base": str(base)}, *shared)
    assert collect.returncode == 0, collect.stderr[-3000:]
    assert {c: c.stat().st_mtime_ns for c in cells} == mtimes  # nothing recomputed
    every = json.loads((out / "results_all_tasks.json").read_text())
    assert set(every["average"]) == {"tiny", "base"}


def test_the_benchmark_emits_the_training_runs_lifecycle_events(tmp_path, models):
    """Issue 57 item 3: the benchmark's lifecycle goes to the observers the config names, as a
    training run's does (the same event classes, timed by rlvr.pipeline.orchestrator.stage): here a
    JSONL observer named on the command line. Mutation: runner.run without its hub (the benchmark
    emitting nothing, as before) -> no metrics.jsonl -> red."""
    out = tmp_path / "bench"
    proc = bench(
        out,
        {"tiny": "tiny"},
        "benchmark.tasks=[leg_counting]",
        "+observers.jsonl._target_=rlvr.observers.files.JsonlObserver",
        "+observers.jsonl.path=metrics.jsonl",
        "+observers.jsonl.completions_path=completions.jsonl",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["event"], r.get("stage")) for r in rows] == [
        ("pipeline_start", None),
        ("stage_start", "evaluate"),
        ("stage_end", "evaluate"),
        ("stage_start", "report"),
        ("stage_end", "report"),
        ("pipeline_end", None),
    ]
    assert rows[-1]["status"] == "COMPLETED" and all(
        r["status"] == "ok" for r in rows if r["event"] == "stage_end"
    )
