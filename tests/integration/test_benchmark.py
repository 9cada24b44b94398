"""Two tiny models (one a LoRA adapter directory) x two tasks through the real benchmark entry point."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tests.conftest import ROOT

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def adapter_dir(tmp_path_factory):
    """A LoRA adapter saved on a tiny base model saved to disk: the benchmark must detect and load it."""
    from peft import LoraConfig, get_peft_model

    from rlvr.models import TinyRandomModel

    root = tmp_path_factory.mktemp("models")
    loaded = TinyRandomModel(seed=3).load()
    base = root / "tiny-base"
    loaded.model.save_pretrained(base)
    loaded.tokenizer.save_pretrained(base)
    peft_model = get_peft_model(loaded.model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    peft_model.peft_config["default"].base_model_name_or_path = str(base)
    adapter = root / "tiny-adapter"
    peft_model.save_pretrained(adapter)
    return adapter


def bench(out, models, *extra):
    cmd = [
        sys.executable,
        str(ROOT / "run_pipeline.py"),
        "--config-name",
        "benchmark",
        f"hydra.run.dir={out}/hydra",
        f"benchmark.models=[{','.join(models)}]",
        "benchmark.tasks=[leg_counting,basic_arithmetic]",
        "benchmark.num_examples=6",
        f"benchmark.output_dir={out}",
        "evaluation.max_new_tokens=8",
        *extra,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)


def test_benchmark_two_models_two_tasks_and_resume(tmp_path, adapter_dir):
    out = tmp_path / "bench"
    proc = bench(out, ["tiny", str(adapter_dir)])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    cells = sorted((out / "cells").glob("*.json"))
    assert len(cells) == 4
    per_task = sorted(out.glob("results_leg_counting_*.json"))
    assert len(per_task) == 1
    report = json.loads(per_task[0].read_text())
    assert report["kind"] == "task" and set(report["models"]) == {"tiny", str(adapter_dir)}
    assert len(report["prompt_hash"]) == 12
    every = json.loads(next(out.glob("results_all_tasks_*.json")).read_text())
    assert set(every["tasks"]) == {"leg_counting", "basic_arithmetic"}
    for model in ("tiny", str(adapter_dir)):
        summary = every["tasks"]["leg_counting"]["models"][model]
        assert summary["n"] == 6 and 0 <= summary["ci_low"] <= summary["accuracy"] <= summary["ci_high"] <= 1
    assert (
        len(list(out.glob("comparison_*.png"))) == 2 and len(list(out.glob("summary_all_tasks_*.png"))) == 1
    )
    cell = json.loads(cells[0].read_text())
    assert len(cell["samples"]) == 6 and {"question", "completions", "answers", "scores", "seconds"} <= set(
        cell["samples"][0]
    )

    # Rerun: every cell is already done, nothing is recomputed.
    mtimes = {c: c.stat().st_mtime_ns for c in cells}
    again = bench(out, ["tiny", str(adapter_dir)])
    assert again.returncode == 0, again.stderr[-3000:]
    assert {c: c.stat().st_mtime_ns for c in cells} == mtimes
    assert "accuracy" not in again.stdout.split("results_")[0]  # no cell line printed: nothing ran

    # The plot command redraws from the result file with renamed models.
    png = tmp_path / "custom.png"
    plot = subprocess.run(
        [sys.executable, "-m", "rlvr.benchmark.plot", str(per_task[0]), "--rename", f"{adapter_dir}=LoRA",
         "--title", "T", "--output", str(png)],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert plot.returncode == 0, plot.stderr
    assert png.stat().st_size > 1000


def test_unknown_task_and_missing_model_fail_before_loading(tmp_path):
    proc = bench(tmp_path, ["tiny", "./no/such/checkpoint"], "benchmark.tasks=[leg_countin]")
    assert proc.returncode == 2
    assert "leg_counting" in proc.stderr and "./no/such/checkpoint" in proc.stderr
