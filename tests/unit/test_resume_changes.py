"""Resume tells what changed (issue 56 item 5): a resume with other step budgets or another learning-rate
schedule than the checkpoint's run is refused, naming each key with both values; with
``resume_allow_changes=true`` it goes on, and the attempt's record and report.md list the changes."""

from __future__ import annotations

import json
from types import SimpleNamespace

from tests.unit.test_checkpoints import make_ckpt

from rlvr import events as ev
from rlvr.records.report import write_report
from rlvr.records.run_history import AttemptLog, RunHistory, read_attempts
from rlvr.training_loop.checkpoints import write_fingerprint
from rlvr.training_loop.resume import changed_settings, fingerprint, foreign_run_dir_issues, resolve_resume


def _run_with_sft_checkpoint(tmp_path, compose_cfg, overrides):
    run = tmp_path / "run"
    write_fingerprint(run, fingerprint(compose_cfg(overrides)))
    ckpt = make_ckpt(run, "sft", 10)  # copies the run's fingerprint into the checkpoint
    return run, ckpt


def test_a_changed_step_budget_is_refused_with_both_values(tmp_path, compose_cfg):
    """The issue's case: SFT max_steps 60 -> 20 changes the cosine schedule the checkpoint was on."""
    run, ckpt = _run_with_sft_checkpoint(tmp_path, compose_cfg, ["training_loop.sft.max_steps=60"])
    found, [issue] = resolve_resume(compose_cfg(["training_loop.sft.max_steps=20", "resume=auto"]), run)
    assert found == ("sft", ckpt)
    assert issue.key == "resume"
    assert "step budgets or learning-rate schedule differ" in issue.problem
    assert "training_loop.sft.max_steps: 60 -> 20" in issue.problem
    assert "resume_allow_changes=true" in issue.fix and "new hydra.run.dir" in issue.fix


def test_every_schedule_setting_is_compared(tmp_path, compose_cfg):
    run, _ = _run_with_sft_checkpoint(tmp_path, compose_cfg, [])
    now = [
        "training_loop.sft.lr_scheduler_type=linear",
        "training_loop.sft.warmup_steps=3",
        "training_loop.grpo.learning_rate=2e-5",
        "+training_loop.sft.num_train_epochs=2",
        "resume=auto",
    ]
    _, [issue] = resolve_resume(compose_cfg(now), run)
    for change in (
        "training_loop.sft.lr_scheduler_type: 'cosine' -> 'linear'",
        "training_loop.sft.warmup_steps: 10 -> 3",
        "training_loop.grpo.learning_rate: 1e-05 -> 2e-05",
        "training_loop.sft.num_train_epochs: None -> 2",
    ):
        assert change in issue.problem, issue.problem


def test_allowed_changes_are_said_recorded_in_the_attempt_and_listed_in_report_md(tmp_path, compose_cfg):
    run, ckpt = _run_with_sft_checkpoint(tmp_path, compose_cfg, ["training_loop.sft.max_steps=60"])
    cfg = compose_cfg(["training_loop.sft.max_steps=20", "resume=auto", "resume_allow_changes=true"])
    said: list[str] = []
    found, issues = resolve_resume(cfg, run, say=said.append)
    assert issues == [] and found == ("sft", ckpt)
    assert any(
        "changed settings" in line and "training_loop.sft.max_steps: 60 -> 20" in line for line in said
    )
    changed = changed_settings(cfg, found)
    assert changed == ["training_loop.sft.max_steps: 60 -> 20"]
    # the attempt's record (attempts.json), as the orchestrator builds it, and the report from it
    log = AttemptLog(run, continues=True, resumed_from=str(ckpt), changed_settings=changed)
    log.on_pipeline_start(ev.PipelineStart(run_dir=run, config={}))
    [entry] = read_attempts(run)
    assert entry["changed_settings"] == changed
    outcome = SimpleNamespace(steps={"sft": 20}, seconds={}, history=[])
    write_report(
        run, [], outcome, {"model": "m", "tasks": ["t"]}, 1.0, RunHistory(), log.snapshot("COMPLETED")
    )
    md = (run / "report.md").read_text()
    assert "Settings changed on resume (resume_allow_changes=true; saved -> now):" in md
    assert f"- attempt 1, from {ckpt}: training_loop.sft.max_steps: 60 -> 20" in md
    report = json.loads((run / "report.json").read_text())
    assert report["attempts"][-1]["changed_settings"] == changed


def test_a_run_without_changes_records_none_and_its_report_says_nothing(tmp_path, compose_cfg):
    run, ckpt = _run_with_sft_checkpoint(tmp_path, compose_cfg, [])
    cfg = compose_cfg(["resume=auto"])
    found, issues = resolve_resume(cfg, run)
    assert issues == [] and changed_settings(cfg, found) == [] and changed_settings(cfg, None) == []
    outcome = SimpleNamespace(steps={"sft": 20}, seconds={}, history=[])
    write_report(run, [], outcome, {"model": "m", "tasks": ["t"]}, 1.0)
    assert "changed on resume" not in (run / "report.md").read_text()


def test_a_run_recorded_before_the_schedule_was_fingerprinted_resumes(tmp_path, compose_cfg):
    """A record without the schedule keys says nothing about them: nothing to compare, no refusal."""
    run = tmp_path / "run"
    old = fingerprint(compose_cfg(["training_loop.sft.max_steps=60"]))
    write_fingerprint(run, {k: v for k, v in old.items() if not k.startswith("training_loop.sft.")})
    make_ckpt(run, "sft", 10)
    _, issues = resolve_resume(compose_cfg(["training_loop.sft.max_steps=20", "resume=auto"]), run)
    assert issues == []


def test_without_a_checkpoint_a_new_budget_starts_afresh(tmp_path, compose_cfg):
    """A run that died before its first checkpoint has no schedule to continue: resume=auto starts it
    afresh under the new budget (its critical settings are still compared)."""
    run = tmp_path / "run"
    write_fingerprint(run, fingerprint(compose_cfg(["training_loop.sft.max_steps=60"])))
    cfg = compose_cfg(["training_loop.sft.max_steps=20", "resume=auto"])
    assert resolve_resume(cfg, run) == (None, [])
    assert foreign_run_dir_issues(cfg, run, None) == []
    [issue] = foreign_run_dir_issues(compose_cfg(["seed=7", "resume=auto"]), run, None)
    assert "seed: 42 -> 7" in issue.problem
