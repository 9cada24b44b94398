"""Entry functions that ``run_pipeline.py`` dispatches to through the config's ``app._target_``."""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

from rlvr.config.gate import GateResult, judge_run_dir_under_lock
from rlvr.events import COMPLETED_STATUSES
from rlvr.issues import ConfigValidationError
from rlvr.pipeline import Run, RunResult
from rlvr.pipeline.wiring import TRAINING
from rlvr.runtime import distributed
from rlvr.runtime.faults import RunFault
from rlvr.runtime.run_lock import RunDirBusy, RunDirLock
from rlvr.runtime.slurm_requeue import requeue_if_preempted_in_grace
from rlvr.stages import EvalLabel
from rlvr.training_loop.checkpoints import Preempted, latest_checkpoint, step_of
from rlvr.training_loop.resume import continue_command, finished_run

# strict=true and a run that completed with warnings about what it learned (rlvr.records.learning)
WARNINGS_EXIT_CODE = 3


def objective(result: object) -> float | None:
    """What ``run_pipeline.py`` returns to Hydra: the final held-out accuracy of a completed training
    run (a sweeper maximises it), None for anything else (validate_only, the benchmark app)."""
    if isinstance(result, RunResult) and result.status in COMPLETED_STATUSES:
        final = [e for e in result.evaluations if e.label == EvalLabel.FINAL]
        return final[-1].accuracy if final else None
    return None


def resume_hint(run_dir: Path) -> str:
    """After Ctrl-C or a preemption: where a rerun would continue, and the command that does it (with
    this run's own overrides, so its settings match)."""
    found = latest_checkpoint(run_dir)
    if found is None:
        return f"no checkpoint was saved yet: {continue_command(run_dir)} starts it afresh"
    phase, path = found
    return f"the last checkpoint is {phase} step {step_of(path)}. Resume with: {continue_command(run_dir)}"


def train(checked: GateResult) -> RunResult | None:
    """Run the training pipeline over what the config gate built and passed (rlvr.config.gate.check),
    unless ``validate_only``, in a run directory this process owns (rlvr.runtime.run_lock)."""
    import datasets

    from rlvr.runtime.logs import library_output_to_log_file

    # The console observer shows progress; library bars and warnings go to the run's log file.
    datasets.disable_progress_bars()
    library_output_to_log_file()
    cfg, run_dir = checked.cfg, checked.run_dir
    if cfg.validate_only:
        checked.close()
        for line in checked.resume_lines:
            print(line)
        print("configuration OK: every component built and validated; nothing was loaded or trained")
        return None
    lock = RunDirLock(run_dir)
    running = False
    try:
        lock.acquire()
        # Another run may have written here since the gate looked (one that finished meanwhile):
        # the gate's run-directory rules again, now that no other run can start here.
        judge_run_dir_under_lock(checked)
        done = finished_run(cfg, run_dir)
        if done:
            print(done)
            return None
        if lock.taken_over():
            print(f"warning: {lock.taken_over()}", file=sys.stderr)
        for line in checked.resume_lines:
            print(line)
        run = Run(cfg, run_dir, checked.components, checked.resume)
        running = True  # the run closes its components at its end
        result = _run(run, lock)
    except RunDirBusy as exc:
        print(f"\nrefused: {exc}\n", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None
    finally:
        lock.release()
        if not running:
            checked.close()
    if cfg.strict and result.warnings:
        print(
            f"\nstrict=true: the run completed with {len(result.warnings)} warning(s) about what it did not "
            f"learn (above, and in {run_dir}/report.md); exit {WARNINGS_EXIT_CODE}. Fix the "
            "cause, or set strict=false to exit 0 with the warnings in the report",
            file=sys.stderr,
        )
        raise SystemExit(WARNINGS_EXIT_CODE)
    return result


# What the config gate builds and judges for this app (rlvr.config.gate.check).
train.components = TRAINING  # type: ignore[attr-defined]


def _run(run: Run, lock: RunDirLock) -> RunResult:
    """Run the recipe (setup, train, cleanup); a stop or a fault ends in one message and its exit code
    (the traceback in the run's log file)."""
    from rlvr.runtime.logs import INTERRUPTED_EXIT_CODE, traceback_to_log_file

    try:
        return run.run()
    except Preempted as exc:
        print(f"preempted: {exc}. Resume with: {continue_command(run.run_dir)}")
        if exc.signum == signal.SIGTERM:  # a preemption's grace time: SLURM would not requeue an early exit
            lock.release()
            requeued = requeue_if_preempted_in_grace()
            if requeued:
                print(requeued)
        if exc.hand_over is not None:
            # Inside a submitit job: submitit's own handler of the signal requeues the task
            # (`scontrol requeue` on SLURM) and exits; it runs only now, with the checkpoint on disk
            # and the run directory released for the requeued task.
            lock.release()
            print("handing the signal back to the job's own handler (submitit: requeue)")
            exc.hand_over()
        raise SystemExit(exc.exit_code) from exc
    except (ConfigValidationError, KeyboardInterrupt, RunFault) as exc:
        # Handled: the console observer has shown the problem (or where Ctrl-C stopped the run), and
        # the traceback would bury it; it goes to the run's log file.
        traceback_to_log_file(exc)
        if isinstance(exc, ConfigValidationError):
            raise SystemExit(2) from exc
        if isinstance(exc, RunFault):
            logs = [
                h.baseFilename for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)
            ]
            print(f"(the traceback is in {', '.join(logs) or 'the run log'})", file=sys.stderr)
            raise SystemExit(exc.exit_code) from exc
        if distributed.is_main():
            print(f"interrupted (Ctrl-C): {resume_hint(run.run_dir)}")
        raise SystemExit(INTERRUPTED_EXIT_CODE) from exc
    except Exception as exc:
        # Under accelerate launch: this rank only noticed that another one failed. Its error (and
        # traceback) is the cause and is printed by that rank; one line here instead of a second trace.
        if distributed.world_size() > 1 and distributed.peer_lost(exc):
            print(
                f"{distributed.rank_prefix()}stopped: another process of this run failed (its error is above)",
                file=sys.stderr,
            )
            raise SystemExit(1) from exc
        raise
