"""Resume at every boundary, without a model (SECURITY.md "Resume at every boundary", "Faults end in one
message"): damaged checkpoints are passed over with the reason, a completed run is not resumed, the
printed resume command carries the run's overrides, settings differences name nested keys with both
values, a re-saved step loses its old marker first, and a full disk is recognised in every shape."""

from __future__ import annotations

import errno
import importlib
import inspect
import json
import os
from types import SimpleNamespace

import pytest
from tests.unit.test_checkpoints import make_ckpt

from rlvr.training_loop.checkpoints import MARKER, CompletionMarker, differences, find_checkpoint, phase_of


@pytest.mark.parametrize(
    ("harm", "reason"),
    [
        (lambda c: os.truncate(c / "model.safetensors", 100), "model.safetensors is 100 bytes"),
        (lambda c: (c / "trainer_state.json").unlink(), "trainer_state.json is missing"),
        (lambda c: (c / "optimizer.pt").write_bytes(b""), "optimizer.pt is 0 bytes"),
    ],
    ids=["truncated-weights", "no-trainer-state", "empty-optimizer"],
)
def test_damaged_checkpoints_are_passed_over_with_the_reason(tmp_path, harm, reason):
    older = make_ckpt(tmp_path, "grpo", 2)
    newest = make_ckpt(tmp_path, "grpo", 4)
    assert find_checkpoint(tmp_path) == (("grpo", newest), [])
    harm(newest)
    found, [(damaged, why)] = find_checkpoint(tmp_path)
    assert found == ("grpo", older) and damaged == newest and why.startswith(reason), why
    with pytest.raises(ValueError, match="checkpoint is damaged"):
        phase_of(newest)  # resume=<that path> is refused with the reason


def test_a_checkpoint_of_an_older_version_is_checked_by_its_files(tmp_path):
    """Markers written before file lists existed ("ok"): the weights' header and the trainer state."""
    ckpt = make_ckpt(tmp_path, "sft", 3)
    (ckpt / MARKER).write_text("ok\n")
    assert find_checkpoint(tmp_path) == (("sft", ckpt), [])
    os.truncate(ckpt / "model.safetensors", 200)
    found, [(_, why)] = find_checkpoint(tmp_path)
    assert found is None and why.startswith("model.safetensors cannot be read"), why


def test_resume_auto_names_the_damaged_checkpoint(tmp_path, compose_cfg, capsys):
    from rlvr.training_loop.checkpoints import write_fingerprint
    from rlvr.training_loop.resume import fingerprint, resolve_resume

    cfg = compose_cfg(["resume=auto"])
    write_fingerprint(tmp_path, fingerprint(cfg))
    sft = make_ckpt(tmp_path, "sft", 2)
    grpo = make_ckpt(tmp_path, "grpo", 2)
    os.truncate(grpo / "model.safetensors", 10)
    assert resolve_resume(cfg, tmp_path) == (("sft", sft), [])
    out = capsys.readouterr().out
    assert f"passing over {grpo}: it is damaged (model.safetensors is 10 bytes" in out
    assert f"continuing from {sft} instead" in out


def test_the_marker_of_a_step_about_to_be_saved_again_goes_first(tmp_path):
    """A resumed run saving a step an earlier attempt saved writes into that folder: a crash mid-save
    must not leave the old marker over new files."""
    ckpt = make_ckpt(tmp_path, "grpo", 4)
    args = SimpleNamespace(output_dir=str(ckpt.parent))
    state = SimpleNamespace(global_step=4, is_world_process_zero=True)
    CompletionMarker().on_step_end(args, state, SimpleNamespace(should_save=False))
    assert (ckpt / MARKER).is_file()  # not saving this step: untouched
    CompletionMarker().on_step_end(args, state, SimpleNamespace(should_save=True))
    assert not (ckpt / MARKER).exists()
    assert find_checkpoint(tmp_path) == (None, [])


def test_a_completed_run_is_not_resumed(tmp_path, compose_cfg):
    from rlvr.training_loop.resume import finished_run

    auto = compose_cfg(["resume=auto"])
    assert finished_run(auto, tmp_path) is None  # nothing recorded: a fresh start
    attempts = [
        {"status": "KILLED", "ended_at": "a"},
        {"status": "COMPLETED", "ended_at": "2026-11-26T06:00:00"},
    ]
    (tmp_path / "attempts.json").write_text(json.dumps(attempts))
    line = finished_run(auto, tmp_path)
    assert "completed at 2026-11-26T06:00:00 (attempt 2)" in line and "nothing changed" in line
    assert f"model.name_or_path={tmp_path}/final" in line
    assert finished_run(compose_cfg(), tmp_path) is None  # not a resume: the fresh-run rules apply
    (tmp_path / "attempts.json").write_text(json.dumps([*attempts, {"status": "RUNNING"}]))
    assert finished_run(auto, tmp_path) is None  # a later attempt died: resume it


def test_a_refusal_for_changed_settings_shows_both_values_and_the_runs_own_command(tmp_path, compose_cfg):
    from rlvr.training_loop.checkpoints import mark_complete, write_fingerprint
    from rlvr.training_loop.resume import fingerprint, resolve_resume

    run = tmp_path / "run"
    write_fingerprint(run, fingerprint(compose_cfg(["model=tiny", "model.hidden_size=32"])))
    ckpt = run / "checkpoints" / "grpo" / "checkpoint-2"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text('{"global_step": 2}')  # as transformers saves it
    mark_complete(ckpt)
    (run / "provenance.json").write_text(json.dumps({"overrides": ["model=tiny", "model.hidden_size=32"]}))
    _, [issue] = resolve_resume(compose_cfg(["model=tiny", "resume=auto"]), run)
    assert "model.hidden_size: 32 -> 64" in issue.problem and "_target_" not in issue.problem
    assert "model=tiny model.hidden_size=32 resume=auto hydra.run.dir=" in issue.fix


def test_differences_name_nested_settings():
    assert differences("model", {"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 3}, "d": 4}) == [
        "model.b.c: 2 -> 3",
        "model.d: None -> 4",
    ]
    assert differences("seed", 42, 7) == ["seed: 42 -> 7"]


def test_a_class_recorded_under_its_old_name_is_refused_with_the_new_name():
    """No alias for a renamed class: a run recorded with an old ``_target_`` (rlvr.model.HFModel,
    rlvr.training_loop.loop.GRPOLoop) is a difference that names the new class and the way to continue
    it, and the old name as a config target is refused with the new one as the fix."""
    from rlvr.security.trust import RENAMED_TARGETS, judge_target

    for old, (new, _) in RENAMED_TARGETS.items():
        module, name = new.rsplit(".", 1)
        assert inspect.isclass(getattr(importlib.import_module(module), name))
        [line] = differences("model", {"_target_": old, "name": "m"}, {"_target_": new, "name": "m"})
        assert f"{old} is the old name of {new}" in line and "resume_allow_changes=true" in line
        issue = judge_target("training_loop._target_", old)
        assert issue is not None and issue.fix == (
            f"set training_loop._target_={new} (in the config file, or as an override: training_loop._target_={new})"
        )
    assert not hasattr(importlib.import_module("rlvr.training_loop.loop"), "GRPOLoop")
    assert judge_target("model._target_", "rlvr.model.loader.HFModel") is None


@pytest.mark.parametrize(
    ("error", "what"),
    [
        (OSError(errno.ENOSPC, "No space left on device"), "the disk is full"),
        (OSError(errno.EFBIG, "File too large"), "a file hit the process's file size limit"),
        (
            RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 64 vs 0"),
            "the disk is full",
        ),
        (
            RuntimeError("PytorchStreamWriter failed writing file data/3: file write failed"),
            "the disk is full",
        ),
    ],
)
def test_a_full_disk_is_recognised_in_every_shape(tmp_path, error, what):
    from rlvr.training_loop.run_dir import disk_fault

    wrapped = RuntimeError("saving failed")
    wrapped.__cause__ = error
    fault = disk_fault(wrapped, "train", tmp_path, "python run_pipeline.py resume=auto")
    assert fault is not None and str(fault).startswith(what)
    assert "stage 'train'" in str(fault) and str(fault).endswith(
        "continue with: python run_pipeline.py resume=auto"
    )
    assert disk_fault(ValueError("bad value"), "train", tmp_path, "x") is None


def test_the_step_a_checkpoint_reports_is_its_own_trainer_states_checked_against_max_steps(tmp_path):
    """A folder's name is a claim: renamed checkpoint-1000000000, a 4-step checkpoint reported 10^9
    steps. The step comes from its trainer_state.json, must match the name and stay within the phase's
    max_steps; otherwise the checkpoint is passed over (resume=auto) or refused in one message."""
    from rlvr.runtime.faults import CheckpointDamaged
    from rlvr.training_loop.checkpoints import resumed_step

    older = make_ckpt(tmp_path, "grpo", 2)
    newest = make_ckpt(tmp_path, "grpo", 4)
    assert resumed_step(newest, "grpo", 4) == 4
    with pytest.raises(
        CheckpointDamaged, match=r"saved at step 4, past this phase's max_steps \(3\)"
    ) as past:
        resumed_step(newest, "grpo", 3)
    assert "training_loop.grpo.max_steps" in str(past.value)
    renamed = newest.rename(newest.parent / "checkpoint-1000000000")  # its marker's file list still holds
    found, [(damaged, why)] = find_checkpoint(tmp_path)
    assert found == ("grpo", older) and damaged == renamed
    assert why == "its trainer_state.json records step 4, its folder name says 1000000000"
    with pytest.raises(ValueError, match="records step 4, its folder name says 1000000000"):
        phase_of(renamed)  # resume=<that path>
    with pytest.raises(CheckpointDamaged, match="folder name says 1000000000"):
        resumed_step(renamed, "grpo", 10**9)
