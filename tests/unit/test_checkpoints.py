"""Checkpoint completeness markers, resume discovery and the run fingerprint."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.issues import ConfigValidationError
from rlvr.training_loop.checkpoints import (
    MARKER,
    check_fingerprint,
    complete_checkpoints,
    latest_checkpoint,
    mark_complete,
    phase_of,
    write_fingerprint,
)


def make_ckpt(root, phase, step, complete=True):
    """A checkpoint as transformers writes it, in small: weights (safetensors), optimizer, trainer state."""
    import torch
    from safetensors.torch import save_file

    path = root / "checkpoints" / phase / f"checkpoint-{step}"
    path.mkdir(parents=True)
    save_file({"w": torch.arange(256, dtype=torch.float32)}, str(path / "model.safetensors"))
    (path / "optimizer.pt").write_bytes(b"o" * 64)
    (path / "trainer_state.json").write_text(f'{{"global_step": {step}}}')
    if complete:
        mark_complete(path)
    return path


def test_incomplete_checkpoints_are_never_resumed(tmp_path):
    make_ckpt(tmp_path, "sft", 50)
    make_ckpt(tmp_path, "grpo", 2)
    make_ckpt(tmp_path, "grpo", 10)
    make_ckpt(tmp_path, "grpo", 12, complete=False)  # crashed mid-write
    assert [p.name for p in complete_checkpoints(tmp_path / "checkpoints" / "grpo")] == [
        "checkpoint-2",
        "checkpoint-10",
    ]  # numeric, not lexical, order
    assert latest_checkpoint(tmp_path) == ("grpo", tmp_path / "checkpoints" / "grpo" / "checkpoint-10")


def test_sft_checkpoint_found_when_no_grpo_one(tmp_path):
    make_ckpt(tmp_path, "sft", 50)
    assert latest_checkpoint(tmp_path)[0] == "sft"
    assert latest_checkpoint(tmp_path / "nothing") is None


def test_phase_of_rejects_incomplete_or_foreign_dirs(tmp_path):
    good = make_ckpt(tmp_path, "grpo", 4)
    assert phase_of(good) == "grpo"
    (good / MARKER).unlink()
    with pytest.raises(ValueError, match="incomplete"):
        phase_of(good)
    other = tmp_path / "somewhere"
    other.mkdir()
    with pytest.raises(ValueError, match="not a pipeline checkpoint"):
        phase_of(other)


def test_fingerprint_detects_changed_critical_settings(tmp_path):
    write_fingerprint(tmp_path, {"seed": 1, "data.task": "leg_counting"})
    assert check_fingerprint(tmp_path, {"seed": 1, "data.task": "leg_counting"}, False) == []
    diffs = check_fingerprint(tmp_path, {"seed": 2, "data.task": "leg_counting"}, False)
    assert diffs == ["seed: 1 -> 2"]
    assert check_fingerprint(tmp_path, {"seed": 2, "data.task": "leg_counting"}, True) == []


def _checkpoint_of_run(run: Path, fingerprint: dict | None) -> Path:
    from rlvr.training_loop.checkpoints import mark_complete, write_fingerprint

    ckpt = run / "checkpoints" / "grpo" / "checkpoint-2"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text('{"global_step": 2}')  # as transformers saves it
    mark_complete(ckpt)
    if fingerprint is not None:
        write_fingerprint(run, fingerprint)
    return ckpt


@pytest.mark.parametrize("how", ["path", "auto"])
def test_resume_checks_settings_against_the_run_that_owns_the_checkpoint(tmp_path, compose_cfg, how):
    """resume=<path> used to compare with the NEW run dir (no fingerprint there), so any seed passed."""
    from rlvr.training_loop.resume import fingerprint, resolve_resume

    old = tmp_path / "old_run"
    original = fingerprint(compose_cfg(["seed=42"]))
    ckpt = _checkpoint_of_run(old, original)
    resume = str(ckpt) if how == "path" else "auto"
    new_dir = tmp_path / "new_run" if how == "path" else old

    assert resolve_resume(compose_cfg(["seed=42", f"resume={resume}"]), new_dir) == (("grpo", ckpt), [])
    changed = compose_cfg(["seed=7", "data.task=leg_counting", f"resume={resume}"])
    _, [issue] = resolve_resume(changed, new_dir)
    assert "seed: 42 -> 7" in issue.problem and "data.task" in issue.problem
    allowed = compose_cfg(["seed=7", f"resume={resume}", "resume_allow_changes=true"])
    assert resolve_resume(allowed, new_dir)[1] == []


def test_resume_from_a_run_without_settings_record_is_refused(tmp_path, compose_cfg):
    from rlvr.training_loop.resume import resolve_resume

    ckpt = _checkpoint_of_run(tmp_path / "downloaded", None)
    _, [issue] = resolve_resume(compose_cfg([f"resume={ckpt}"]), tmp_path / "new")
    assert "cannot be checked" in issue.problem and "resume_allow_changes" in issue.fix


# -- preemption signals -------------------------------------------------------------------------------
# SLURM sends the warning signal (USR2, conf/hydra/launcher/slurm.yaml) before a time limit, and SIGTERM
# at preemption or at the limit itself. Inside a submitit job submitit's USR2 handler requeues and exits
# at once; the guard must hold that handler back until the checkpoint is written.


class FakeSubmititHandler:
    """Stands in for submitit's SignalHandler.checkpoint_and_try_requeue: records its calls."""

    def __init__(self):
        self.calls = []

    def __call__(self, signum, frame):
        self.calls.append(signum)


def test_guard_holds_the_warning_signal_back_from_the_previous_handler():
    import os
    import signal

    from rlvr.training_loop.checkpoints import PreemptionGuard

    previous = FakeSubmititHandler()
    before = signal.signal(signal.SIGUSR2, previous)
    before_term = signal.getsignal(signal.SIGTERM)
    try:
        with PreemptionGuard() as guard:
            guard.training = True
            os.kill(os.getpid(), signal.SIGUSR2)
            assert guard.requested and guard.signum == signal.SIGUSR2
            assert previous.calls == []  # not run from the signal: training must reach a checkpoint first
            os.kill(os.getpid(), signal.SIGTERM)  # SLURM's SIGTERM while saving: ignored, no second save
            assert guard.signum == signal.SIGUSR2
            hand_over = guard.hand_over()
        assert signal.getsignal(signal.SIGUSR2) is previous  # restored on exit
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN  # stopping: no default death
        hand_over()
        assert previous.calls == [signal.SIGUSR2]
    finally:
        signal.signal(signal.SIGUSR2, before)
        signal.signal(signal.SIGTERM, before_term)


def _library_loop(kill: bool = True) -> list[str]:
    """Library code as some is written: a bare ``except:`` around its work. What it swallowed."""
    import os
    import signal
    import time

    swallowed = []
    for _ in range(3):
        try:
            if kill:
                os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)
        except:  # noqa: E722 - the point of the test
            swallowed.append("swallowed")
        kill = False
    return swallowed


def test_a_stop_request_cannot_be_swallowed_by_library_code_and_stops_at_the_next_boundary():
    """The handler records the request and raises nothing (a bare ``except:`` in a library caught the
    old ``Preempted``, and no later SIGTERM stopped the run); the pipeline stops before its next stage."""
    import signal

    from rlvr.training_loop.checkpoints import Preempted, PreemptionGuard

    with PreemptionGuard():
        pass
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # no stop: the default action is back
    try:
        with PreemptionGuard() as guard:
            assert _library_loop() == []  # nothing raised into the library's code
            assert guard.requested and guard.signum == signal.SIGTERM
            with pytest.raises(
                Preempted, match="SIGTERM received outside training; stopped before the train"
            ):
                guard.stop_if_requested("train")
            assert guard.hand_over() is None  # the default SIGTERM action is not a handler to call
        # On its way to exit code 75 the process ignores a later SIGTERM (SLURM's, after its warning)
        # instead of dying of it.
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_a_launchers_stop_cannot_be_swallowed_by_library_code_and_stops_at_the_next_boundary():
    """Under a multi-process launcher SIGTERM is LauncherStop's: its handler raised StoppedByLauncher,
    which a library's bare ``except:`` swallowed. It now only records the request; rlvr's code stops
    training at the end of the step (no checkpoint: ranks cannot agree on one) and before the next
    stage. Mutation: ``LauncherStop._handle`` raising StoppedByLauncher again -> red (swallowed)."""
    import signal
    from types import SimpleNamespace

    from rlvr.runtime.distributed import LauncherStop, StoppedByLauncher
    from rlvr.training_loop.checkpoints import PreemptionGuard
    from rlvr.training_loop.loop import _stop_if_preempted
    from rlvr.training_loop.phase import TrainOutcome

    guard = PreemptionGuard()
    try:
        with LauncherStop(guard) as stop:
            assert _library_loop() == []  # nothing raised into the library's code
            assert stop.requested and guard.stopping and not guard.requested
            control = guard.on_step_end(
                None, None, SimpleNamespace(should_save=False, should_training_stop=False)
            )
            assert control.should_training_stop and not control.should_save
            with pytest.raises(
                StoppedByLauncher, match="stopped by the launcher .*before the evaluate stage"
            ):
                stop.stop_if_requested("evaluate")
            with pytest.raises(StoppedByLauncher, match="before the evaluate stage"):
                guard.stop_if_requested("evaluate")  # the orchestrator's check between stages
            with pytest.raises(StoppedByLauncher, match="grpo stopped at step 3"):
                _stop_if_preempted(guard, "grpo", TrainOutcome(model=None, steps={"grpo": 3}))
            stop.finished = True  # completed: a SIGTERM now changes nothing
            assert _library_loop() == []
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_warning_signal_follows_submitit_inside_a_submitit_job(monkeypatch):
    import signal

    import submitit

    from rlvr.training_loop.checkpoints import warning_signal

    monkeypatch.delenv("SUBMITIT_EXECUTOR", raising=False)
    assert warning_signal() == signal.SIGUSR2
    monkeypatch.setenv("SUBMITIT_EXECUTOR", "slurm")
    monkeypatch.setattr(submitit.JobEnvironment, "USR_SIG", "USR1")  # SUBMITIT_PREEMPT_SIGNAL=USR1
    assert warning_signal() == signal.SIGUSR1


@pytest.mark.parametrize(
    ("before", "after", "key"),
    [
        (["data=gsm8k", "data.path=a.jsonl"], ["data=gsm8k", "data.path=b.jsonl"], "data.path"),
        (
            ["data=mixture", "data.tasks={basic_arithmetic: 0.7, leg_counting: 0.3}"],
            ["data=mixture", "data.tasks={basic_arithmetic: 0.3, leg_counting: 0.7}"],
            "data.tasks",
        ),
    ],
)
def test_resume_refuses_another_file_or_mixture(tmp_path, compose_cfg, before, after, key):
    """File datasets and mixtures have no data.task: their path and weights are what must not change."""
    from rlvr.training_loop.resume import fingerprint, resolve_resume

    ckpt = _checkpoint_of_run(tmp_path / "run", fingerprint(compose_cfg(before)))
    assert resolve_resume(compose_cfg([*before, f"resume={ckpt}"]), tmp_path / "n")[1] == []
    _, [issue] = resolve_resume(compose_cfg([*after, f"resume={ckpt}"]), tmp_path / "n")
    # a nested setting is named by its dotted key (data.tasks.leg_counting: 0.3 -> 0.7)
    assert issue.problem.count(":") >= 2 and (f"{key}:" in issue.problem or f"{key}." in issue.problem)


# -- a fresh run never adopts another run's directory (SECURITY.md "Resume") ---------------------------
def test_a_checkpoint_carries_the_fingerprint_of_the_run_that_saved_it(tmp_path):
    from rlvr.training_loop.checkpoints import FINGERPRINT

    write_fingerprint(tmp_path, {"seed": 1})
    ckpt = make_ckpt(tmp_path, "grpo", 2)
    assert (ckpt / FINGERPRINT).read_text() == (tmp_path / FINGERPRINT).read_text()
    write_fingerprint(tmp_path, {"seed": 2})  # the run directory's record rewritten later
    assert check_fingerprint(tmp_path, {"seed": 2}, False, checkpoint=ckpt) == ["seed: 1 -> 2"]


def test_a_fresh_run_in_a_directory_holding_another_run_is_refused(tmp_path, compose_cfg):
    """The old flow: a fresh run B started in run A's directory rewrote run_fingerprint.json at start;
    if B died before its first checkpoint, resume=auto with B's settings passed the check and continued
    A's checkpoint under B's name."""
    from rlvr.config.gate import check
    from rlvr.training_loop.checkpoints import FINGERPRINT
    from rlvr.training_loop.resume import fingerprint, foreign_run_dir_issues, resolve_resume

    run = tmp_path / "run"
    write_fingerprint(run, fingerprint(compose_cfg(["seed=42"])))
    ckpt = make_ckpt(run, "grpo", 2)
    before = (run / FINGERPRINT).read_text()

    [issue] = foreign_run_dir_issues(compose_cfg(["seed=7"]), run, None)
    assert issue.key == "hydra.run.dir" and "resume=auto" in issue.fix and FINGERPRINT in issue.problem
    with pytest.raises(ConfigValidationError, match="holds another run"):
        check(compose_cfg(["seed=42"]), run)  # even with the same settings
    assert (run / FINGERPRINT).read_text() == before

    # The attack's second half, with the run's record already overwritten (an older version, or by hand):
    # the checkpoint's own copy still says seed 42.
    write_fingerprint(run, fingerprint(compose_cfg(["seed=7"])))
    resume, [issue] = resolve_resume(compose_cfg(["seed=7", "resume=auto"]), run)
    assert "seed: 42 -> 7" in issue.problem and resume == ("grpo", ckpt)


def test_resume_auto_without_a_checkpoint_still_compares_with_the_runs_settings(tmp_path, compose_cfg):
    """A run that died before its first checkpoint: resume=auto starts afresh in its directory, only
    with its settings."""
    from rlvr.training_loop.resume import fingerprint, foreign_run_dir_issues, resolve_resume

    run = tmp_path / "run"
    write_fingerprint(run, fingerprint(compose_cfg(["seed=42"])))
    same = compose_cfg(["seed=42", "resume=auto"])
    assert resolve_resume(same, run) == (None, []) and foreign_run_dir_issues(same, run, None) == []
    other = compose_cfg(["seed=7", "resume=auto"])
    assert resolve_resume(other, run) == (None, [])  # no checkpoint: a fresh start ...
    [issue] = foreign_run_dir_issues(other, run, None)  # ... but not in another run's directory
    assert "seed: 42 -> 7" in issue.problem and issue.key == "hydra.run.dir"
    allowed = compose_cfg(["seed=7", "resume=auto", "resume_allow_changes=true"])
    assert foreign_run_dir_issues(allowed, run, None) == []
    assert foreign_run_dir_issues(compose_cfg(["seed=7"]), tmp_path / "new", None) == []


@pytest.mark.parametrize(
    ("before", "after", "key"),
    [
        (["model=tiny"], ["model=smollm2_135m"], "model"),
        (["model=tiny"], ["model=tiny", "model.seed=3"], "model"),
        (
            ["training_loop.grpo.num_generations=4"],
            ["training_loop.grpo.num_generations=2"],
            "training_loop.grpo.num_generations",
        ),
    ],
)
def test_resume_refuses_another_model_or_group_size(tmp_path, compose_cfg, before, after, key):
    """Removing ``model`` or ``training_loop.grpo.num_generations`` from the compared settings
    (rlvr.training_loop.resume.CRITICAL_KEYS) turns this red; before, no test did."""
    from rlvr.training_loop.resume import fingerprint, resolve_resume

    ckpt = _checkpoint_of_run(tmp_path / "run", fingerprint(compose_cfg(before)))
    assert resolve_resume(compose_cfg([*before, f"resume={ckpt}"]), tmp_path / "n")[1] == []
    _, [issue] = resolve_resume(compose_cfg([*after, f"resume={ckpt}"]), tmp_path / "n")
    assert issue.problem.startswith("critical settings differ")
    assert f"{key}:" in issue.problem or f"{key}." in issue.problem


def test_the_fingerprint_is_among_the_records_a_fresh_run_refuses():
    from rlvr.runtime.io import RUN_RECORDS
    from rlvr.training_loop.checkpoints import FINGERPRINT

    assert FINGERPRINT in RUN_RECORDS


def test_a_signal_after_the_stop_was_carried_out_keeps_the_exit_code_75():
    """CI, 2026-11-29 (test_preemption_signal_checkpoints_once_and_exits_75[SIGUSR2]): USR2 stopped a run
    at a GRPO checkpoint; SLURM's SIGTERM 0.5 s later came while the run wrote its report, outside
    training, and "a second stop request; ending at once" killed it: exit -15 instead of 75, with the
    checkpoint already saved. Once Preempted is raised, one more signal is noted and changes nothing."""
    import os
    import signal

    from rlvr.training_loop.checkpoints import Preempted, PreemptionGuard

    before = signal.getsignal(signal.SIGUSR2)
    try:
        with PreemptionGuard() as guard:
            os.kill(os.getpid(), signal.SIGUSR2)
            with pytest.raises(Preempted):
                guard.stop_if_requested("final_eval")
            assert guard.stopped
            os.kill(os.getpid(), signal.SIGTERM)  # would end this process with -15 before the fix
            assert guard.signum == signal.SIGUSR2  # the stop that counts stays the first
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN  # and after the guard, on the way to 75
    finally:
        signal.signal(signal.SIGUSR2, before)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_a_completed_run_leaves_the_warning_signal_ignored_not_with_submitits_requeue():
    """After every stage is done (Run.run sets ``finished``) a scheduler warning has nothing to save:
    submitit's handler, restored, would requeue the finished task, and any Python handler is reset to
    the default action (death by USR2) while CPython finalizes. The guard leaves SIG_IGN, which the
    kernel keeps to the process's end; SIGTERM gets its previous handler back."""
    import os
    import signal
    from pathlib import Path

    from rlvr.training_loop.checkpoints import PreemptionGuard

    previous = FakeSubmititHandler()
    before = signal.signal(signal.SIGUSR2, previous)
    try:
        with PreemptionGuard() as guard:
            guard.finished = True
        assert signal.getsignal(signal.SIGUSR2) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        ignored = int(
            next(
                ln for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith("SigIgn:")
            ).split()[1],
            16,
        )
        assert ignored >> (signal.SIGUSR2 - 1) & 1  # the kernel's own disposition, not a Python handler
        os.kill(os.getpid(), signal.SIGUSR2)
        assert previous.calls == []  # no requeue of a completed run
        signal.signal(signal.SIGUSR2, previous)
        with PreemptionGuard():  # a run that did not complete gives submitit its handler back
            pass
        assert signal.getsignal(signal.SIGUSR2) is previous
    finally:
        signal.signal(signal.SIGUSR2, before)
