"""The console's closing summary reads the run's typed result (rlvr.events.RunResult)."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console
from tests.conftest import make_eval_result

from rlvr import events as ev
from rlvr.observers.console import ConsoleObserver
from rlvr.records.learning import stage_changes


def printed(event: ev.PipelineEnd) -> str:
    observer = ConsoleObserver(log_every=5)
    observer.console = Console(file=io.StringIO(), width=200, highlight=False)
    observer.on_pipeline_end(event)
    return observer.console.file.getvalue()


def test_the_closing_summary_shows_every_evaluation_each_stages_change_and_the_files():
    evaluations = [make_eval_result("baseline", 0, 50, 200), make_eval_result("final", 7, 80, 200)]
    result = ev.RunResult(
        "COMPLETED", Path("run"), evaluations, stage_changes(evaluations), {"report": "run/report.md"}
    )
    out = printed(ev.PipelineEnd("COMPLETED", 60.0, result))
    assert "baseline" in out and "25.0%" in out and "final" in out and "40.0%" in out
    (change,) = result.changes
    assert change.stage == "whole run" and f"whole run: {change.text}" in out
    assert "report: run/report.md" in out and "pipeline COMPLETED in 1.0 min" in out


def test_a_run_that_ended_before_it_had_a_result_still_closes():
    assert "pipeline FAILED in 0.0 min" in printed(ev.PipelineEnd("FAILED", 0.0))


def test_the_closing_summary_gives_each_phase_s_tokens_per_second_and_mfu():
    throughput = {
        "sft": {"tokens_per_second": 7578.4, "mfu": 0.0062, "peak_tflops": 989.4, "device": "NVIDIA H200"},
        "grpo": {"tokens_per_second": 53.7, "mfu": None, "peak_tflops": None, "device": "cpu"},
    }
    result = ev.RunResult("COMPLETED", Path("run"), throughput=throughput)
    out = printed(ev.PipelineEnd("COMPLETED", 60.0, result))
    assert "sft throughput: 7,578 tokens/s, MFU 0.6% of 989.4 TFLOP/s (NVIDIA H200)" in out
    assert "grpo throughput: 54 tokens/s (cpu)" in out
