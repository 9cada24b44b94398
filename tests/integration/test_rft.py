"""Data with a checker and no reference answer, and the rejection-sampling fine-tuning phase, through
run_pipeline.py with the tiny model: SFT is refused, GRPO trains from the checker alone, RFT keeps only
verified samples and resumes exactly after a kill."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file
from tests import in_process
from tests.conftest import ROOT
from tests.integration.test_resume import wait_for

pytestmark = pytest.mark.integration

ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "plugins"), os.environ.get("PYTHONPATH", "")]),
    "RLVR_PLUGINS": "rlvr_example_plugin",
}
# In-process verifier: on a loaded shared machine a sandbox worker's start can outlast its timeout, and a
# timed-out score would change what a round keeps between two runs that are meant to be equal.
QUIET = [
    "evaluation.baseline=false",
    "evaluation.every_n_steps=0",
    "evaluation.sampled=null",
    "observers=default",
    "verifier=inprocess",
    "keep_checkpoints=all",  # the tests read the rounds' checkpoints after the run
]


def cmd(run_dir: Path, *overrides: str) -> list[str]:
    return [
        sys.executable,
        str(ROOT / "run_pipeline.py"),
        f"hydra.run.dir={run_dir}",
        "experiment=smoke",
        *overrides,
    ]


def run(run_dir: Path, *overrides: str) -> in_process.Run:
    return in_process.run_command(cmd(run_dir, *overrides), env=ENV)


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_verifier_only_task_refuses_sft_and_trains_grpo_from_the_checker(tmp_path):
    """graph_color: reasoning-gym gives no reference answer (any valid colouring is right)."""
    task = ["data.task=graph_color"]  # reasoning-gym defaults: 10 vertices, 3 colours
    refused = run(tmp_path / "sft", *task, "validate_only=true")
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert "training_loop.sft.enabled=True" in refused.stderr and "graph_color" in refused.stderr
    assert "training_loop=rft_grpo" in refused.stderr

    run_dir = tmp_path / "grpo"
    done = run(run_dir, *task, *QUIET, "training_loop=grpo", "training_loop.grpo.max_steps=2")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    steps = [e for e in events(run_dir) if e["event"] == "train_step" and e["phase"] == "grpo"]
    assert [e["step"] for e in steps if "grpo/loss" in e["metrics"]] == [1, 2]
    # the verifier scored every rollout (no reference needed): errors would be counted
    assert all(e["metrics"].get("grpo/reward/errors", 0) == 0 for e in steps)
    final = json.loads(next((run_dir / "eval").glob("final_step*.json")).read_text())
    assert final["samples"] and all(s["reference"] is None for s in final["samples"])
    assert {st for s in final["samples"] for st in s["status"]} <= {"ok", "no_answer", "rejected"}


def _questions(path: Path) -> Path:
    path.write_text(
        "".join(json.dumps({"question": f"Write a word, puzzle {i}."}) + "\n" for i in range(160))
    )
    return path


def rft_overrides(data: Path) -> list[str]:
    """A file without reference answers (declared), scored by the test plugin's OddLength checker; the
    answer markers ``a``/``e`` make the tiny random model's samples parse, so some pass and some fail."""
    return [
        "data=qa_file",
        f"data.path={data}",
        "data.train_size=64",
        "data.eval_size=8",
        "data.processor.answer_field=null",
        "data.checker._target_=rlvr_example_plugin.data.OddLength",
        "~data.checker.ignore_case",
        "prompts.answer_start=a",
        "prompts.answer_end=e",
        "training_loop=rft",
        "training_loop.rft.rounds=2",
        "training_loop.rft.steps_per_round=4",
        "training_loop.rft.prompts_per_round=8",
        "training_loop.rft.samples_per_prompt=4",
        "training_loop.rft.per_device_train_batch_size=4",
        "training_loop.rft.learning_rate=1e-3",
        "training_loop.rft.save_steps=2",
        "training_loop.rft.save_total_limit=4",
        *QUIET,
    ]


def rft_steps(run_dir: Path) -> dict[int, dict]:
    return {
        e["step"]: e["metrics"]
        for e in events(run_dir)
        if e["event"] == "train_step" and e["phase"] == "rft" and "rft/loss" in e["metrics"]
    }


@pytest.fixture(scope="module")
def rft_uninterrupted(tmp_path_factory):
    base = tmp_path_factory.mktemp("rft")
    data = _questions(base / "questions.jsonl")
    run_dir = base / "full"
    done = run(run_dir, *rft_overrides(data))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return data, run_dir


def test_file_without_references_refuses_sft(rft_uninterrupted, tmp_path):
    data, _ = rft_uninterrupted
    over = [o for o in rft_overrides(data) if o != "training_loop=rft"]
    refused = run(tmp_path / "sft", *over, "validate_only=true")
    assert refused.returncode == 2 and "training_loop.sft.enabled=True" in refused.stderr, refused.stderr[
        -2000:
    ]
    exact = [o for o in over if not o.startswith(("data.checker", "~data.checker"))]
    refused = run(tmp_path / "exact", *exact, "training_loop=rft", "validate_only=true")
    assert refused.returncode == 2 and "data.checker='ExactMatch'" in refused.stderr, refused.stderr[-2000:]


def test_rft_rounds_keep_only_verified_samples(rft_uninterrupted):
    _, run_dir = rft_uninterrupted
    steps = rft_steps(run_dir)
    assert sorted(steps) == list(range(1, 9))
    rounds = json.loads((run_dir / "checkpoints" / "rft" / "checkpoint-8" / "rft_rounds.json").read_text())[
        "rounds"
    ]
    assert [r["index"] for r in rounds] == [0, 1]
    assert steps[1]["rft/round"] == 0 and steps[8]["rft/round"] == 1
    for r in rounds:
        assert 0 < r["stats"]["sample_accuracy"] < 1  # some samples pass the checker and some do not
        assert r["stats"]["kept"] == len(r["rows"]) <= 8 * 2  # max_per_prompt 2
        for row in r["rows"]:  # every kept completion passes the checker, read with the run's markers
            text = row["completion"][0]["content"]
            answer = text[text.rfind("a", 0, text.find("e")) + 1 : text.find("e")].strip()
            assert len(answer) % 2 == 1, text
        assert steps[8 if r["index"] else 1]["rft/round/kept"] == r["stats"]["kept"]


def test_rft_rounds_without_padding_train_the_padded_runs_losses(rft_uninterrupted, tmp_path):
    """``training_loop.rft.padding_free=true``: every round's rows concatenated without padding (TRL's
    collator, position ids restarting at each row) give each step the padded run's loss, to rounding
    (bf16 autocast on this CPU: within 3e-5 of the loss). Mutation: TRL's collator with position ids
    counting on across rows, and the probe that refuses it switched off -> the first step's loss moves
    by 7e-4 of it, the last by 8e-3 -> red."""
    data, full_dir = rft_uninterrupted
    free = run(tmp_path / "free", *rft_overrides(data), "training_loop.rft.padding_free=true",
               "training_loop.rft.max_length=null")  # fmt: skip
    assert free.returncode == 0, free.stdout[-3000:] + free.stderr[-3000:]
    padded, unpadded = rft_steps(full_dir), rft_steps(tmp_path / "free")
    assert sorted(unpadded) == sorted(padded) == list(range(1, 9))
    for step in padded:
        assert unpadded[step]["rft/loss"] == pytest.approx(padded[step]["rft/loss"], rel=2e-4), step


def test_rft_resumes_exactly_after_a_kill(rft_uninterrupted, tmp_path):
    """Killed after checkpoint 2 (in round 0), resumed: round 1 is sampled from the same weights and
    every later step (loss, learning rate) and the final weights equal the uninterrupted run's."""
    data, full_dir = rft_uninterrupted
    run_dir = tmp_path / "killed"
    proc = subprocess.Popen(
        cmd(run_dir, *rft_overrides(data)),
        cwd=ROOT,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    # every 10 ms: a tiny model's RFT steps take less than the default 0.2 s poll, and a kill that
    # lands after checkpoint-4 (the round boundary) leaves nothing inside round 0 to resume
    wait_for(
        (run_dir / "checkpoints" / "rft" / "checkpoint-2" / "COMPLETE").exists,
        proc,
        timeout=600,
        interval=0.01,
    )
    proc.kill()
    proc.wait()
    assert not (run_dir / "final").exists()
    from rlvr.training_loop.checkpoints import latest_checkpoint

    phase, newest = latest_checkpoint(run_dir)
    resumed = run(run_dir, *rft_overrides(data), "resume=auto")
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    first_step = int(newest.name.split("-")[1]) + 1
    assert phase == "rft" and first_step <= 4  # resumed inside round 0: the round boundary is crossed again
    full, again = rft_steps(full_dir), rft_steps(run_dir)
    for step in range(first_step, 9):
        for key in ("rft/loss", "rft/learning_rate", "rft/round/kept", "rft/round/sample_accuracy"):
            assert again[step][key] == pytest.approx(full[step][key], abs=1e-6), (step, key)
    name = "checkpoints/rft/checkpoint-8/rft_rounds.json"
    for a, b in zip(
        *(json.loads((d / name).read_text())["rounds"] for d in (run_dir, full_dir)), strict=True
    ):
        assert a["rows"] == b["rows"]  # the same kept completions, in the same order
        assert {k: v for k, v in a["stats"].items() if k != "sample_seconds"} == {
            k: v for k, v in b["stats"].items() if k != "sample_seconds"
        }
    a, b = (
        load_file(full_dir / "final" / "model.safetensors"),
        load_file(run_dir / "final" / "model.safetensors"),
    )
    assert max((a[k] - b[k]).abs().max().item() for k in a) <= 1e-6


def test_an_rft_phase_that_kept_nothing_says_so_and_strict_makes_it_fail(rft_uninterrupted, tmp_path):
    """Answer markers the tiny model never writes: no sample is verified, RFT trains 0 steps. The
    run completes, but its status, report, console and (strict=true) exit code say it learned nothing."""
    data, _ = rft_uninterrupted
    over = [
        o for o in rft_overrides(data) if not o.startswith(("prompts.answer_", "training_loop.rft.rounds"))
    ]
    run_dir = tmp_path / "nothing"
    over += ["prompts.answer_start=zqxjv", "prompts.answer_end=vjxqz", "training_loop.rft.rounds=1"]
    done = run(run_dir, *over, "strict=true")
    console = done.stdout + done.stderr
    assert done.returncode == 3, console[-3000:]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["status"] == "COMPLETED_WITH_WARNINGS" and report["steps"] == {"rft": 0}
    (warning,) = report["warnings"]
    assert warning.startswith("RFT stopped at step 0 of 4: round 0 kept none of its 32 samples")
    assert report["notes"][0] == warning
    assert f"- {warning}" in (run_dir / "report.md").read_text()
    assert "Warning: RFT stopped at step 0 of 4" in console
    assert (
        "pipeline COMPLETED_WITH_WARNINGS" in console
        and "strict=true: the run completed with 1 warning" in console
    )
    assert events(run_dir)[-1] == {
        **events(run_dir)[-1],
        "event": "pipeline_end",
        "status": "COMPLETED_WITH_WARNINGS",
    }
    assert json.loads((run_dir / "attempts.json").read_text())[-1]["status"] == "COMPLETED_WITH_WARNINGS"
    assert report["attempts"][-1]["status"] == "COMPLETED_WITH_WARNINGS"
    # it completed all the same: resume=auto has nothing to redo
    again = run(run_dir, *over, "resume=auto")
    assert again.returncode == 0 and "nothing to resume, nothing changed" in again.stdout, again.stdout[
        -2000:
    ]
