"""Checkpoint completeness, discovery for ``resume``, the run fingerprint, and preemption signals.

transformers writes a checkpoint file by file, so a crash mid-write leaves a
directory that looks like a checkpoint. After the trainer has written
everything (``on_save``) we fsync the files and atomically add a ``COMPLETE``
marker that lists every file with its size; resume only ever considers marked
checkpoints whose files are still all there at those sizes (:func:`damage`): a
truncated weights file or a deleted trainer state is named and skipped, and
``resume=auto`` continues from the newest intact checkpoint instead. A step about
to be saved again (a resumed run re-saving a step it had saved before) loses its
marker first, so a crash during that save cannot leave old marker and new files.

The run fingerprint (the settings resume must not change) is bound to the
checkpoints it describes: each checkpoint gets its own copy before it is marked
complete, and resume compares with that copy. A later run that rewrote the run
directory's record cannot make an old checkpoint look like one of its own.

Preemption (docs/scaling.md "SLURM"): SIGTERM and the scheduler's warning signal (USR2, or
submitit's ``SUBMITIT_PREEMPT_SIGNAL``) both mean "finish the step, save, stop".
Inside a submitit job submitit has its own handler for the warning signal, which
requeues the task and exits at once, mid-step; the guard takes that signal over
while the pipeline runs and hands it back to submitit's handler only after the
checkpoint is on disk.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from rlvr.runtime.faults import CheckpointDamaged
from rlvr.runtime.io import atomic_write_bytes, atomic_write_json
from rlvr.runtime.safe_json import loads
from rlvr.security.trust import renamed
from rlvr.stages import PHASES

log = logging.getLogger(__name__)

MARKER = "COMPLETE"
FINGERPRINT = "run_fingerprint.json"
PREEMPTED_EXIT_CODE = 75  # EX_TEMPFAIL: "try again later"; a scheduler can requeue with resume=auto
_STEP = re.compile(r"checkpoint-(\d+)$")


def _fsync_tree(path: Path) -> None:
    for file in path.rglob("*"):
        if file.is_file():
            with file.open("rb") as fh:
                os.fsync(fh.fileno())


def _files(path: Path) -> dict[str, int]:
    return {f.relative_to(path).as_posix(): f.stat().st_size for f in sorted(path.rglob("*")) if f.is_file()}


def mark_complete(path: Path) -> None:
    """Bind the run's fingerprint to the checkpoint (a copy inside it), then mark it complete with
    the list of its files and their sizes."""
    record = path.parent.parent.parent / FINGERPRINT  # <run>/checkpoints/<phase>/checkpoint-N
    if record.is_file() and not record.is_symlink():
        atomic_write_bytes(path / FINGERPRINT, record.read_bytes(), root=path)
    _fsync_tree(path)
    atomic_write_json(path / MARKER, {"files": _files(path)}, root=path, sort_keys=True)


def _safetensors_damage(file: Path) -> str | None:
    """Why a safetensors file cannot be loaded (its header's tensors run past its end), or None."""
    from safetensors import safe_open

    try:
        with safe_open(file, framework="pt"):
            return None
    except Exception as exc:  # safetensors raises its own SafetensorError (and OSError)
        return f"{file.name} cannot be read ({type(exc).__name__}: {exc})"


def damage(path: Path) -> str | None:
    """Why a marked checkpoint cannot be resumed (a file listed by its marker is missing or has
    another size; a weights file is truncated), or None when it is intact."""
    try:
        listed = json.loads((path / MARKER).read_text()).get("files")
    except (OSError, ValueError, AttributeError):
        listed = None  # a marker of an older version ("ok"): no list to compare with
    if isinstance(listed, dict):
        for name, size in listed.items():
            file = path / name
            if not file.is_file():
                return f"{name} is missing (the {MARKER} marker lists it)"
            if file.stat().st_size != size:
                return f"{name} is {file.stat().st_size} bytes, {size} when the checkpoint was saved"
    elif not (path / "trainer_state.json").is_file():
        return "trainer_state.json is missing"
    for weights in sorted(path.glob("*.safetensors")):
        why = _safetensors_damage(weights)
        if why:
            return why
    return _step_damage(path)


def saved_step(path: Path) -> int | str:
    """The step the checkpoint's own ``trainer_state.json`` records (``global_step``), or why it cannot
    be read. The folder's name is a claim anyone can rename; the trainer's state is what was trained."""
    state_file = path / "trainer_state.json"
    try:
        state = loads(state_file.read_bytes(), state_file)
    except FileNotFoundError:
        return "trainer_state.json is missing"
    except (OSError, ValueError) as exc:
        return f"trainer_state.json cannot be read ({exc})"
    step = state.get("global_step") if isinstance(state, dict) else None
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return "trainer_state.json records no step (global_step)"
    return step


def _step_damage(path: Path) -> str | None:
    """Why the checkpoint's step is in doubt (its trainer state unreadable, or another step than its
    folder's name says), or None."""
    step = saved_step(path)
    if isinstance(step, str):
        return step
    if step != step_of(path):
        return f"its trainer_state.json records step {step}, its folder name says {step_of(path)}"
    return None


def resumed_step(checkpoint: Path, phase: str, max_steps: int) -> int:
    """The step ``phase`` continues from: the checkpoint's own trainer state's, checked against the
    folder's name and the phase's ``max_steps``; :class:`CheckpointDamaged` (one message) otherwise."""
    why = _step_damage(checkpoint)
    step = saved_step(checkpoint)
    if why is None and isinstance(step, int) and step > max_steps:
        why = f"it was saved at step {step}, past this phase's max_steps ({max_steps})"
    if why is None and isinstance(step, int):
        return step
    raise CheckpointDamaged(
        f"checkpoint {checkpoint} cannot continue {phase}: {why}. Continue from another checkpoint "
        f"with resume=<its path> (they are in {checkpoint.parent}), or, for a checkpoint past "
        f"max_steps, set training_loop.{phase}.max_steps to at least its step"
    )


def complete_checkpoints(folder: Path) -> list[Path]:
    """Marked checkpoints in ``folder``, oldest first."""
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if _STEP.search(p.name) and (p / MARKER).is_file()]
    return sorted(found, key=step_of)


def checkpoints_in(run_dir: Path) -> tuple[Path, ...]:
    """The complete checkpoints of every phase under ``run_dir`` (names and markers only, no weights
    read): what a resume point was chosen among, to tell later whether it still stands."""
    return tuple(p for phase in PHASES for p in complete_checkpoints(run_dir / "checkpoints" / phase))


def step_of(checkpoint: Path) -> int:
    """``.../checkpoint-N`` -> N."""
    match = _STEP.search(checkpoint.name)
    if match is None:
        raise ValueError(f"{checkpoint}: not a checkpoint-<step> folder")
    return int(match.group(1))


def find_checkpoint(run_dir: Path) -> tuple[tuple[str, Path] | None, list[tuple[Path, str]]]:
    """The phase ("grpo" before "sft", since GRPO comes later) and path of the newest complete and
    intact checkpoint (None if there is none), and the newer marked ones passed over as damaged,
    each with the reason."""
    damaged: list[tuple[Path, str]] = []
    for phase in reversed(PHASES):
        for path in reversed(complete_checkpoints(run_dir / "checkpoints" / phase)):
            why = damage(path)
            if why is None:
                return (phase, path), damaged
            damaged.append((path, why))
    return None, damaged


def latest_checkpoint(run_dir: Path) -> tuple[str, Path] | None:
    """The phase and path of the newest complete, intact checkpoint (:func:`find_checkpoint`)."""
    return find_checkpoint(run_dir)[0]


def phase_of(checkpoint: Path) -> str:
    """``.../checkpoints/<phase>/checkpoint-N`` -> phase."""
    phase = checkpoint.parent.name
    if phase not in PHASES or not _STEP.search(checkpoint.name):
        raise ValueError(
            f"resume={checkpoint}: not a pipeline checkpoint (expected <run_dir>/checkpoints/<sft|grpo>/checkpoint-N)"
        )
    if not (checkpoint / MARKER).is_file():
        raise ValueError(
            f"resume={checkpoint}: checkpoint is incomplete (no {MARKER} marker); pick an older one"
        )
    why = damage(checkpoint)
    if why:
        raise ValueError(f"resume={checkpoint}: checkpoint is damaged ({why}); pick an older one")
    return phase


class CompletionMarker(TrainerCallback):
    """Marks each checkpoint complete once the trainer has finished writing it.

    With several processes every rank writes part of a checkpoint (its RNG state): all ranks wait
    here until each has written its part, then rank 0 alone adds the marker.
    """

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # TRL's flow callback (first in the list) has decided by now whether this step saves. A
        # resumed run re-saving a step an earlier attempt saved writes into that folder: its old
        # marker goes first, so a crash mid-save leaves an unmarked folder, not a marked mixture.
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if control.should_save and state.is_world_process_zero and (path / MARKER).is_file():
            (path / MARKER).unlink()

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            dist.barrier()
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if state.is_world_process_zero and path.is_dir():
            mark_complete(path)


def check_fingerprint(
    run_dir: Path, current: dict[str, Any], allow_changes: bool, checkpoint: Path | None = None
) -> list[str]:
    """Compare critical settings with the run being resumed; returns the differences (empty = same).

    With ``checkpoint``, its own copy of the fingerprint (written when it was marked complete) is
    the one compared; the run directory's record only for checkpoints saved before copies existed.
    """
    path = run_dir / FINGERPRINT
    if checkpoint is not None and (checkpoint / FINGERPRINT).is_file():
        path = checkpoint / FINGERPRINT
    if not path.is_file():
        if allow_changes:
            return []
        return [f"{path} is missing, so the run's settings cannot be checked"]
    saved = json.loads(path.read_text())
    # A key the record lacks was added to the fingerprint after that run was recorded (the schedule
    # keys, rlvr.training_loop.resume.SCHEDULE_KEYS, 2026-11-29): it cannot be compared.
    diffs = [line for k in current if k in saved for line in differences(k, saved[k], current.get(k))]
    if diffs and allow_changes:
        log.warning("resuming with changed settings (allowed): %s", "; ".join(diffs))
        return []
    return diffs


def differences(key: str, saved: Any, current: Any) -> list[str]:
    """``key: saved -> current`` for each setting that differs, nested settings by their dotted key
    (``model.hidden_size: 64 -> 32``, not the two whole model configs). A class recorded under a name
    it has since lost says so (rlvr.security.trust.RENAMED_TARGETS): the saved name is never equated
    with the new one, as the run that recorded it may have built another class."""
    old = renamed(saved) if key.endswith("._target_") and isinstance(saved, str) else None
    if old is not None and saved != current:
        return [
            f"{key}: {saved!r} -> {current!r} ({old}; if that run built the same class, "
            "resume_allow_changes=true continues it)"
        ]
    if isinstance(saved, dict) and isinstance(current, dict):
        return [
            line
            for name in dict.fromkeys([*saved, *current])
            for line in differences(f"{key}.{name}", saved.get(name), current.get(name))
        ]
    return [] if saved == current else [f"{key}: {saved!r} -> {current!r}"]


def write_fingerprint(run_dir: Path, current: dict[str, Any]) -> None:
    atomic_write_json(run_dir / FINGERPRINT, current, sort_keys=True, default=str)


def warning_signal() -> signal.Signals:
    """The signal a scheduler sends ahead of a time limit or preemption: submitit's preemption signal
    inside a submitit job (USR2 unless ``SUBMITIT_PREEMPT_SIGNAL`` says otherwise), else USR2, the
    signal conf/hydra/launcher/slurm.yaml asks SLURM for (``--signal=USR2@<signal_delay_s>``)."""
    if os.environ.get("SUBMITIT_EXECUTOR"):
        from submitit import JobEnvironment

        return signal.Signals[f"SIG{JobEnvironment.USR_SIG}"]
    return signal.SIGUSR2


def _handler_name(handler: Any) -> str:
    """A signal handler as a reader can look it up: its module and name, or what the constant means."""
    if handler is None:
        return "a handler installed outside Python"
    if handler in (signal.SIG_DFL, signal.SIG_IGN):
        return "the default action" if handler == signal.SIG_DFL else "ignored (SIG_IGN)"
    owner = getattr(handler, "__self__", None)
    name = getattr(handler, "__qualname__", None) or type(handler).__qualname__
    module = getattr(handler, "__module__", None) or type(owner or handler).__module__
    return f"{module}.{name}"


class Preempted(Exception):
    """Raised after a preemption signal once the current step finished and a checkpoint was written.

    ``hand_over``, when set, is the handler that owned the signal before the pipeline (submitit's
    requeue); the entry point calls it once the run has shut down.
    """

    exit_code = PREEMPTED_EXIT_CODE
    hand_over: Callable[[], None] | None = None

    def __init__(self, message: str, signum: int | None = None):
        super().__init__(message)
        self.signum = signum  # the signal that stopped the run


class PreemptionGuard(TrainerCallback):
    """SIGTERM and the warning signal: finish the current step, save a checkpoint, stop.

    The handler only records the request (SECURITY.md "A stop no library can swallow"): an exception
    raised from a signal handler surfaces wherever the main thread happens to be, and a library's bare
    ``except:`` there swallowed it, after which no later signal stopped the run. The stop is made at
    the next boundary by rlvr's own code: the end of the training step (:meth:`on_step_end`), the end
    of an RFT round or a phase, or, outside training, before the next pipeline stage
    (:meth:`stop_if_requested`: ``Preempted``; what was already written stays on disk). A second
    signal while training is ignored (SLURM's SIGTERM after its warning must not cut the checkpoint
    save short); outside training it is not: the signal's default action ends the process at once,
    unless the stop was already carried out (:attr:`stopped`): then one more signal changes nothing,
    so the exit code stays 75 while the report is written.
    A Python handler that owned the signal before (submitit's) is not run from the signal;
    ``hand_over()`` returns it for the caller to run after the checkpoint is saved.

    The stop belongs to the pipeline (SECURITY.md "A stop no library can take"): a library may put
    its own handler on SIGTERM (transformers' ``enable_jit_checkpoint`` does when its Trainer is
    built), and then a SIGTERM in the middle of training ended the phase the library's way, and the
    run COMPLETED. Before every training step (:meth:`reclaim`, from ``on_train_begin`` and
    ``on_step_begin``, and by the phase right after it built its trainer) the guard's handler is put
    back wherever another replaced it, and what it displaced is kept in ``displaced``. A stop someone
    else asks of the trainer in the middle of a phase gets a checkpoint (:meth:`on_step_end`); the
    phase then ends the run INTERRUPTED, never COMPLETED (rlvr.training_loop.phase).
    """

    def __init__(self) -> None:
        self.requested = False
        self.training = False
        # Every stage done (the run has completed): a signal now is noted and changes nothing, so the
        # final prune of checkpoints finishes and the run ends COMPLETED, not PREEMPTED.
        self.finished = False
        # The stop was carried out (Preempted raised: the step finished, its checkpoint is on disk):
        # the run is writing its report on its way to exit code 75. One more signal (SLURM's SIGTERM
        # after its USR2 warning) is noted and changes nothing; a further one ends it at once.
        self.stopped = False
        self._after_stop = 0
        self.signum: int | None = None
        # Why training must stop without a checkpoint (a multi-process launcher's SIGTERM: LauncherStop).
        self.abandoned: str | None = None
        # Handlers something else had put on the guard's signals while it held them (one line each).
        self.displaced: list[str] = []
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> PreemptionGuard:
        if threading.current_thread() is threading.main_thread():
            for signum in dict.fromkeys((signal.SIGTERM, warning_signal())):  # one entry if equal
                self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        warning = warning_signal()
        for signum, previous in self._previous.items():
            # Once a stop is under way the process is on its way out with exit code 75: a later
            # signal (SLURM's SIGTERM after its warning) must not kill it with the default action
            # between here and that exit. A Python handler that owned the signal (submitit's) is
            # restored: it is handed over and run by the caller.
            stopping = self.requested and not callable(previous)
            # A completed run ignores the scheduler's warning from here to its exit. Restored, a
            # warning landing while the process shuts down requeues the finished task (submitit's
            # handler) or kills it: CPython puts the default action back on every Python handler as
            # it finalizes, and SLURM then says FAILED for a run that COMPLETED (CI, 2026-12-03: the
            # time-limit test's last attempt died of USR2 just after submitit wrote its result).
            # SIG_IGN is the disposition finalization leaves in place.
            done = self.finished and signum == warning
            signal.signal(signum, signal.SIG_IGN if stopping or done else previous)
        self._previous = {}

    def hand_over(self) -> Callable[[], None] | None:
        """The previous Python handler of the signal that stopped the run, bound to that signal."""
        previous = self._previous.get(self.signum) if self.signum is not None else None
        if callable(previous):
            return partial(previous, self.signum, None)
        return None

    def reclaim(self) -> list[str]:
        """Put the guard's handler back on each of its signals where another handler replaced it;
        returns what was displaced (also added to ``displaced``), one line each."""
        if threading.current_thread() is not threading.main_thread():
            return []  # signal.signal works only there; __enter__ took nothing elsewhere
        found = []
        for signum in self._previous:
            current = signal.getsignal(signum)
            if current != self._handle:  # a bound method: equal, not identical, to the one installed
                signal.signal(signum, self._handle)
                found.append(f"{signal.Signals(signum).name}: {_handler_name(current)}")
        for line in found:
            log.warning("%s replaced the pipeline's handler; taken back", line)
        self.displaced += found
        return found

    def _handle(self, signum: int, frame: Any) -> None:
        """Record the request; never raise (a library's bare ``except:`` would swallow it)."""
        name = signal.Signals(signum).name
        if self.finished:
            log.warning("%s: the run has completed; finishing its last clean-up, then exiting", name)
            return
        if self.requested and self.training:
            log.warning("%s: already stopping, not starting a second save", name)
            return
        if self.stopped and self._after_stop == 0:
            self._after_stop += 1
            log.warning(
                "%s: already stopped, its checkpoint saved; writing the report, then exiting 75", name
            )
            return
        if self.requested:  # a second signal outside training: no save to protect, stop now
            log.warning("%s: a second stop request; ending at once", name)
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.requested = True
        self.signum = signum
        if self.training:
            log.warning("%s: finishing the current step, then saving a checkpoint and exiting", name)
        else:
            log.warning("%s: stopping before the next stage (send it again to stop at once)", name)

    def abandon(self, reason: str) -> None:
        """Stop training at the end of the step, saving nothing; the loop then raises StoppedByLauncher."""
        self.abandoned = reason

    def stop_if_requested(self, before: str) -> None:
        """Raise ``Preempted`` when a stop was requested (``StoppedByLauncher`` when the launcher's was:
        LauncherStop): called by the pipeline between its stages."""
        if self.abandoned:
            from rlvr.runtime.distributed import StoppedByLauncher

            raise StoppedByLauncher(f"{self.abandoned}; stopped before the {before} stage")
        if self.requested and self.signum is not None:
            name = signal.Signals(self.signum).name
            self.stopped = True
            raise Preempted(
                f"{name} received outside training; stopped before the {before} stage", self.signum
            )

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.training = True
        self.reclaim()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.training = False

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.reclaim()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.requested:
            control.should_save = True
            control.should_training_stop = True
        elif control.should_training_stop and not self.abandoned and state.global_step < state.max_steps:
            # Another callback stops the trainer before the phase's end (a library's own stop, or an
            # RFT round's end, which saves anyway): the step is saved and marked like the pipeline's
            # own stop, so resume=auto continues from it.
            control.should_save = True
        if self.abandoned:
            control.should_training_stop = True
        return control

    @property
    def stopping(self) -> bool:
        """A stop was requested or training was abandoned: rounds and phases must not go on."""
        return self.requested or self.abandoned is not None
