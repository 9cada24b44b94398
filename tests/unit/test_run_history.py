"""What a resumed run reloads from its earlier attempts (rlvr.records.run_history), without a model: which
evaluation files are reused and why others are not, the attempt record, and the merged report."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from tests.conftest import make_eval_result

from rlvr import events as ev
from rlvr.data.identity import ids_of, set_hash
from rlvr.records.report import write_report
from rlvr.records.run_history import (
    ATTEMPTS,
    AttemptLog,
    RunHistory,
    read_train_history,
    reload_evaluations,
)
from rlvr.stages import on_resumed_path

META = {"model": "tiny", "tasks": ["t"], "data_seed": 1, "seed": 42, "data_manifest_sha256": "abc"}
SAMPLING = {"num_samples": 1, "temperature": 0.0, "max_new_tokens": 12, "seed": 0}
N = 20


def identity(n: int = N) -> dict:
    """What Evaluator.identity gives for make_eval_result's questions (task "t", question "q<i>")."""
    return {
        **META,
        "prompt_hash": "p1",
        "sampling": SAMPLING,
        "question_set": set_hash(ids_of(("t", f"q{i}") for i in range(n))),
    }


def write_eval(eval_dir: Path, label: str, step: int, correct: int, n: int = N, **changes) -> Path:
    """An evaluation file as Evaluator.evaluate writes it; ``changes`` alter its recorded fields."""
    result = make_eval_result(label, step, correct, n)
    payload = {
        "label": label,
        "step": step,
        **META,
        "prompt_hash": "p1",
        "sampling": SAMPLING,
        **result.evaluation.to_dict(),
    }
    payload.update(changes)
    eval_dir.mkdir(parents=True, exist_ok=True)
    path = eval_dir / f"{label}_step{step}.json"
    path.write_text(json.dumps(payload))
    return path


@pytest.mark.parametrize(
    ("label", "step", "resume", "expected"),
    [
        ("baseline", 0, None, True),  # the base model is on every path, even a restart from scratch
        ("sft", 2, None, False),
        ("after_sft", 4, ("grpo", 2), True),  # a GRPO checkpoint continues the finished SFT
        ("sft", 3, ("grpo", 2), True),
        ("grpo", 2, ("grpo", 2), True),
        ("grpo", 3, ("grpo", 2), False),  # after the checkpoint: the resumed run redoes that step
        ("sft", 2, ("sft", 2), True),
        ("sft", 3, ("sft", 2), False),
        ("after_sft", 4, ("sft", 2), False),
        ("grpo", 1, ("sft", 2), False),
        ("final", 6, ("grpo", 4), False),
    ],
)
def test_which_weights_a_resumed_run_continues_from(label, step, resume, expected):
    assert on_resumed_path(label, step, resume) is expected


def test_reloads_the_evaluations_on_the_resumed_path_that_are_this_runs(tmp_path):
    eval_dir = tmp_path / "eval"
    write_eval(eval_dir, "baseline", 0, 2)
    write_eval(eval_dir, "sft", 2, 8)
    write_eval(eval_dir, "after_sft", 2, 8)
    write_eval(eval_dir, "grpo", 1, 9)
    write_eval(eval_dir, "grpo", 3, 11)  # made after checkpoint-2, before the kill
    found, notes = reload_evaluations(eval_dir, identity(), ("grpo", 2))
    assert [(e.label, e.step) for e in found] == [("baseline", 0), ("sft", 2), ("after_sft", 2), ("grpo", 1)]
    assert [e.evaluation.summary.n for e in found] == [N] * 4
    assert found[2].accuracy == pytest.approx(8 / N) and found[2].path == eval_dir / "after_sft_step2.json"
    assert notes == [
        "grpo_step3.json: not reused, it measured weights after the resume point (grpo checkpoint-2); "
        "the resumed run evaluates that step again"
    ]


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"prompt_hash": "p2"}, "its prompt_hash is 'p2', this run's is 'p1'"),
        ({"data_manifest_sha256": "old"}, "its data_manifest_sha256 is 'old', this run's is 'abc'"),
        ({"data_manifest_sha256": None}, "records no data_manifest_sha256 (written by an older version)"),
        ({"sampling": {**SAMPLING, "max_new_tokens": 64}}, "its sampling is"),
        ({"model": "other"}, "its model is 'other', this run's is 'tiny'"),
        ({"summary": {**make_eval_result("x", 0, 5, N).evaluation.summary.to_dict()}}, "does not match"),
    ],
)
def test_an_evaluation_that_is_not_this_runs_is_left_out_with_the_reason(tmp_path, changes, reason):
    write_eval(tmp_path / "eval", "baseline", 0, 2, **changes)
    found, notes = reload_evaluations(tmp_path / "eval", identity(), ("grpo", 2))
    assert found == []
    assert len(notes) == 1 and notes[0].startswith("baseline_step0.json: not reused, ") and reason in notes[0]


def test_an_evaluation_of_other_questions_is_left_out(tmp_path):
    write_eval(tmp_path / "eval", "baseline", 0, 2, n=N - 1)  # the eval split changed size
    found, notes = reload_evaluations(tmp_path / "eval", identity(), ("grpo", 2))
    assert found == [] and "its question_set is" in notes[0]
    (tmp_path / "eval" / "after_sft_step2.json").write_text("{not json")
    found, notes = reload_evaluations(tmp_path / "eval", identity(N - 1), ("grpo", 2))
    assert [e.label for e in found] == ["baseline"]
    assert notes[0].startswith("after_sft_step2.json: not reused, unreadable (JSONDecodeError")


def test_sampled_evaluations_are_reloaded_against_the_sampled_settings(tmp_path):
    """after_sft_sampled (k samples at T, evaluation.sampled) is checked against the sampled view's
    identity, not the greedy one's, and follows its greedy label's resume path."""
    eval_dir = tmp_path / "eval"
    sampled = {**SAMPLING, "num_samples": 4, "temperature": 1.0}
    write_eval(eval_dir, "after_sft", 2, 8)
    write_eval(eval_dir, "after_sft_sampled", 2, 7, sampling=sampled)
    write_eval(eval_dir, "final_sampled", 4, 9, sampling=sampled)  # the run was killed after it
    found, notes = reload_evaluations(eval_dir, identity(), ("grpo", 2), {**identity(), "sampling": sampled})
    assert [(e.label, e.step) for e in found] == [("after_sft", 2), ("after_sft_sampled", 2)]
    assert notes == [
        "final_sampled_step4.json: not reused, it measured weights after the resume point "
        "(grpo checkpoint-2); the resumed run evaluates that step again"
    ]
    # checked against the greedy identity it would not be this run's; with sampling off, not reused
    assert reload_evaluations(eval_dir, identity(), ("grpo", 2), identity())[0][1:] == []
    found, notes = reload_evaluations(eval_dir, identity(), ("grpo", 2))
    assert [e.label for e in found] == ["after_sft"] and "evaluation.sampled is off" in notes[0]


def _start(log: AttemptLog, run_dir: Path) -> None:
    log.on_pipeline_start(ev.PipelineStart(run_dir, {}))


def test_attempt_log_keeps_each_attempt_and_marks_a_killed_one(tmp_path):
    first = AttemptLog(tmp_path, continues=True, resumed_from=None)
    _start(first, tmp_path)
    first.on_phase_end(ev.PhaseEnd("sft", 2, 2, 6.84))
    record = json.loads((tmp_path / ATTEMPTS).read_text())
    # written at once: a SIGKILL now still leaves the finished SFT phase on disk
    assert record[0]["status"] == "RUNNING" and record[0]["phases"] == {
        "sft": {"steps": 2, "max_steps": 2, "seconds": 6.8}
    }
    # no pipeline_end: killed. The next attempt says so and keeps the first one's record.
    second = AttemptLog(tmp_path, continues=True, resumed_from="ckpt")
    _start(second, tmp_path)
    second.on_phase_end(ev.PhaseEnd("grpo", 4, 4, 3.0))
    second.on_pipeline_end(ev.PipelineEnd("COMPLETED", 1.0))
    record = json.loads((tmp_path / ATTEMPTS).read_text())
    assert [(a["attempt"], a["status"], a["resumed_from"]) for a in record] == [
        (1, "KILLED", None),
        (2, "COMPLETED", "ckpt"),
    ]
    assert all(a["seconds"] >= 0 and a["ended_at"] >= a["started_at"] for a in record)
    assert second.earlier == record[:1]
    # a fresh run (resume unset) in the same directory starts a new record
    fresh = AttemptLog(tmp_path, continues=False, resumed_from=None)
    _start(fresh, tmp_path)
    assert [a["attempt"] for a in json.loads((tmp_path / ATTEMPTS).read_text())] == [1]


def test_history_merges_steps_and_training_time_of_earlier_attempts():
    history = RunHistory(
        attempts=[
            {
                "seconds": 20.0,
                "phases": {"sft": {"steps": 2, "seconds": 7.0}, "grpo": {"steps": 2, "seconds": 6.0}},
            },
            {"seconds": 5.0, "phases": {}},  # killed before a phase ended
        ]
    )
    # resumed in GRPO: this attempt's GRPO count includes the steps before the checkpoint
    assert history.steps({"grpo": 4}) == {"sft": 2, "grpo": 4}
    assert history.train_seconds({"grpo": 8.0}) == {"sft": 7.0, "grpo": 14.0}
    assert RunHistory().steps({"sft": 2, "grpo": 4}) == {"sft": 2, "grpo": 4}


def test_earlier_training_curves_come_from_the_metrics_file(tmp_path):
    def step(phase, n):
        return {
            "event": "train_step",
            "phase": phase,
            "step": n,
            "max_steps": 4,
            "metrics": {f"{phase}/loss": n},
        }

    lines = [
        {"event": "pipeline_start"},
        step("sft", 1),
        step("sft", 2),
        step("grpo", 1),
        step("grpo", 2),
        step("grpo", 3),  # after checkpoint-2: redone by the resumed attempt
        {"event": "pipeline_start"},  # the current attempt (its rows are its own history)
        step("grpo", 3),
    ]
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"event": "train_st')
    rows = read_train_history(metrics, ("grpo", 2))
    assert [(next(iter(k for k in r if k != "step")), r["step"]) for r in rows] == [
        ("sft/loss", 1),
        ("sft/loss", 2),
        ("grpo/loss", 1),
        ("grpo/loss", 2),
    ]
    assert read_train_history(metrics, None) == [] and read_train_history(None, ("grpo", 2)) == []


def test_report_of_a_resumed_run_covers_every_attempt(tmp_path):
    baseline, after_sft = make_eval_result("baseline", 0, 2, N), make_eval_result("after_sft", 2, 8, N)
    history = RunHistory(
        attempts=[
            {
                "attempt": 1,
                "seconds": 60.0,
                "status": "PREEMPTED",
                "phases": {"sft": {"steps": 2, "seconds": 30.0}},
            }
        ],
        evaluations=[baseline, after_sft],
        notes=["grpo_step3.json: not reused, ..."],
    )
    outcome = SimpleNamespace(
        steps={"grpo": 4}, seconds={"grpo": 12.0}, history=[{"step": 3, "grpo/reward/mean": 0.1}]
    )
    final = make_eval_result("final", 6, 12, N)
    this = {"attempt": 2, "seconds": 30.0, "status": "COMPLETED"}
    write_report(tmp_path, [baseline, after_sft, final], outcome, META, 29.0, history=history, attempt=this)
    report = json.loads((tmp_path / "report.json").read_text())
    assert [(r["stage"], r["step"]) for r in report["accuracy"]] == [
        ("base model", 0),
        ("after SFT", 2),
        ("final", 6),
    ]
    assert [c["stage"] for c in report["paired_changes"]] == ["SFT", "GRPO", "whole run"]
    assert report["steps"] == {"sft": 2, "grpo": 4} and report["train_seconds"] == {"sft": 30.0, "grpo": 12.0}
    assert [a["attempt"] for a in report["attempts"]] == [1, 2] and report["wall_seconds"] == 90.0
    assert report["not_reused"] == history.notes
    md = (tmp_path / "report.md").read_text()
    assert "SFT 2 steps in 0.5 min, GRPO 4 steps in 0.2 min" in md
    assert "1.5 min over 2 attempts (1.0 min PREEMPTED, 0.5 min COMPLETED)" in md


def test_the_final_evaluation_reuses_an_earlier_attempts_evaluation_of_the_same_weights():
    """A run stopped during its final evaluation resumes at its last GRPO checkpoint and trains no
    step: the GRPO evaluation an earlier attempt made at that step measured the final weights."""
    from rlvr.evaluation.schedule import eval_of_last_weights

    grpo4 = make_eval_result("grpo", 4, 5, N)
    history = RunHistory(evaluations=[make_eval_result("baseline", 0, 1, N), grpo4])
    assert eval_of_last_weights(history.evaluations, {"grpo": 4}) is grpo4
    assert eval_of_last_weights(history.evaluations, {"grpo": 3}) is None
    made = make_eval_result("grpo", 4, 6, N)  # this attempt's own evaluation of those weights wins
    assert eval_of_last_weights([*history.evaluations, made], {"grpo": 4}) is made
    after_sft = make_eval_result("after_sft", 2, 3, N)
    assert eval_of_last_weights([after_sft], {"sft": 2}) is after_sft


def test_a_damaged_attempt_record_loses_the_earlier_attempts_not_the_run(tmp_path):
    (tmp_path / ATTEMPTS).write_text('[{"attempt": 1, "sec')  # cut by a full disk, say
    log = AttemptLog(tmp_path, continues=True, resumed_from="ckpt")
    _start(log, tmp_path)
    assert log.earlier == [] and "attempts.json is unreadable (JSONDecodeError" in log.problem
    assert [a["attempt"] for a in json.loads((tmp_path / ATTEMPTS).read_text())] == [1]
    assert log.snapshot("COMPLETED")["status"] == "COMPLETED"


def test_history_load_takes_the_resume_point_from_the_checkpoint_directory(tmp_path):
    write_eval(tmp_path / "eval", "grpo", 2, 9)
    write_eval(tmp_path / "eval", "grpo", 3, 9)
    checkpoint = tmp_path / "checkpoints" / "grpo" / "checkpoint-2"
    history = RunHistory.load(tmp_path, [{"attempt": 1}], identity(), ("grpo", checkpoint))
    assert [(e.label, e.step) for e in history.evaluations] == [("grpo", 2)]
    assert history.attempts == [{"attempt": 1}] and len(history.notes) == 1
    assert RunHistory.load(tmp_path, [], identity(), None).evaluations == []  # from scratch: no GRPO step
