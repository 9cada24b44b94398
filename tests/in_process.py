"""``python run_pipeline.py ARGS`` inside the test process: the real script, its gate and its app.

The integration tests check what a run writes and prints; paying an interpreter start and the
imports of torch, transformers and TRL for each run would buy nothing for that. :func:`run` executes ``run_pipeline.py`` as ``__main__`` with ``runpy``
under a patched ``sys.argv`` (as torchtune's recipe tests do), so the very code a user starts runs:
``gate.before_hydra``, ``hydra.main``, ``gate.check``, the app. Its stdout and stderr are captured at
the file-descriptor level (what Python, C libraries and child processes write), and its exit status is
the one python would give: the ``SystemExit`` code, or 1 with the traceback for an escaped exception.

The run changes the process: Hydra configures logging and its singletons, ``redact_console`` wraps
``sys.stdout``/``sys.stderr``, the training phases install signal handlers, the generation sets torch's
threads, the entry sets environment variables. :class:`_State` records all of that before and puts it
back after, then checks that it did (a leak fails the test that caused it, not a later one).

Two things differ from a fresh interpreter, and tests whose claim depends on them start one instead
(``subprocess.run([sys.executable, "run_pipeline.py", ...])``, marked ``integration``): the libraries
are already imported (a variable they read at import, a warning they print then), and glibc's malloc
settings (``rlvr.runtime.allocator`` re-executes the script to set them: here ``RLVR_MALLOC_TUNING=0``
turns that off, since re-executing would replace the test process). Likewise the process's own
behaviour: exit codes as a shell sees them, signals, sweeps (``-m``), several ranks, SLURM.
"""

from __future__ import annotations

import contextlib
import gc
import io
import logging
import os
import random
import runpy
import signal
import sys
import tempfile
import threading
import traceback
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "run_pipeline.py"

# What run_pipeline.py imports on its way (and the first run would import while the state is being
# recorded): imported before the first record, so that a library's import-time set-up (transformers'
# logger, rlvr's OmegaConf resolvers) is part of the process as found, not undone as the run's leak.
_PRELOAD = ("torch", "numpy", "transformers", "datasets", "huggingface_hub", "trl", "peft", "rlvr.app")


@dataclass
class Run:
    """What a run gave back: its exit status and what it printed (the fields of subprocess's
    ``CompletedProcess`` that the tests read)."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def run(
    args: Sequence[str | os.PathLike[str]], *, env: Mapping[str, str] | None = None, cwd: Path = ROOT
) -> Run:
    """``python run_pipeline.py *args`` in this process; ``env`` replaces the environment (as
    subprocess's ``env=``), ``cwd`` the working directory, for the run only."""
    argv = [os.fspath(a) for a in args]
    for name in _PRELOAD:
        __import__(name)
    before = _State.record()
    added: list[Path] = []
    try:
        os.environ.clear()
        os.environ.update(dict(before.seen["environ"] if env is None else env))
        os.environ["RLVR_MALLOC_TUNING"] = "0"  # re-executing would replace the test process
        os.chdir(cwd)
        sys.argv = [str(SCRIPT), *argv]
        added = _python_path(os.environ.get("PYTHONPATH", ""))
        with _captured() as (out, err), warnings.catch_warnings():
            code = _main()
        stdout, stderr = out.getvalue(), err.getvalue()
    finally:
        _end_of_process_services()
        _forget_modules_under(added)
        before.restore()
    return Run(argv, code, stdout, stderr)


def run_command(cmd: Sequence[str | os.PathLike[str]], **kwargs: Any) -> Run:
    """:func:`run` of the command line a user types, ``[sys.executable, "run_pipeline.py", *args]``
    (a test that also starts that command as a process builds it once)."""
    if len(cmd) < 2 or os.fspath(cmd[0]) != sys.executable or (ROOT / cmd[1]).resolve() != SCRIPT:
        raise ValueError(f"not a command line of run_pipeline.py: {cmd[:2]}")
    return run(cmd[2:], **kwargs)


def _python_path(value: str) -> list[Path]:
    """As python does at start for ``PYTHONPATH``: its folders go on ``sys.path`` after the script's
    own (a plugin package a test names this way); returns those that were not there already."""
    added = [Path(p).resolve() for p in value.split(os.pathsep) if p and Path(p).resolve() != ROOT]
    added = [p for p in added if str(p) not in sys.path]
    for folder in added:  # a fresh interpreter would import the folder's module, this process has another
        shadowing = sorted(
            p.stem
            for p in folder.glob("*")
            if p.stem.isidentifier() and p.stem in sys.modules and not _imported_from(p.stem, folder)
        )
        if shadowing:
            raise RuntimeError(f"tests.in_process: PYTHONPATH {folder} shadows imported modules {shadowing}")
    sys.path[1:1] = [str(p) for p in added]
    return added


def _imported_from(name: str, folder: Path) -> bool:
    file = getattr(sys.modules[name], "__file__", None)
    return file is not None and Path(file).resolve().is_relative_to(folder)


def _forget_modules_under(folders: list[Path]) -> None:
    """Modules the run imported from its own PYTHONPATH folders: a later test without them in its
    environment must not find them already imported."""
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if file and any(Path(file).resolve().is_relative_to(f) for f in folders):
            del sys.modules[name]


def _end_of_process_services() -> None:
    """What a fresh interpreter's exit would stop: W&B's service process, which lives for the process
    that started it (W&B's own ``teardown`` is what its exit hook calls)."""
    if "wandb" in sys.modules:
        sys.modules["wandb"].teardown()


def _main() -> int:
    """``run_pipeline.py`` as ``__main__``; the exit status python would give."""
    try:
        runpy.run_path(str(SCRIPT), run_name="__main__")
        return 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except Exception:  # as python does for one that escapes the script (Ctrl-C stops pytest itself)
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


@contextlib.contextmanager
def _captured() -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """fds 1 and 2 (and new ``sys.stdout``/``sys.stderr`` on them) go to files for the block."""
    out, err = io.StringIO(), io.StringIO()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
        try:
            for fd, f in ((1, out_file), (2, err_file)):
                os.dup2(f.fileno(), fd)
            sys.stdout, sys.stderr = (
                io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), line_buffering=True, write_through=True)
                for fd in (1, 2)
            )
            yield out, err
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            for fd, keep in zip((1, 2), saved, strict=True):
                os.dup2(keep, fd)
                os.close(keep)
            for f, text in ((out_file, out), (err_file, err)):
                f.seek(0)
                text.write(f.read().decode(errors="replace"))


def _loggers() -> dict[str, logging.Logger]:
    # the loggers only: getLogger() on a placeholder's name would make it a logger (a change of its own)
    found = {k: v for k, v in list(logging.root.manager.loggerDict.items()) if isinstance(v, logging.Logger)}
    return {"": logging.getLogger(), **found}


def _logger_state(lg: logging.Logger) -> tuple[Any, ...]:
    return (lg.level, lg.propagate, lg.disabled, list(lg.handlers), list(lg.filters))


def _progress_bars() -> tuple[bool, bool, bool]:
    import datasets
    import huggingface_hub.utils as hub
    import transformers

    return (
        transformers.utils.logging.is_progress_bar_enabled(),
        datasets.utils.logging.is_progress_bar_enabled(),
        not hub.are_progress_bars_disabled(),
    )


def _set_progress_bars(state: tuple[bool, bool, bool]) -> None:
    import datasets
    import huggingface_hub.utils as hub
    import transformers

    for on, enable, disable in zip(
        state,
        (
            transformers.utils.logging.enable_progress_bar,
            datasets.enable_progress_bars,
            hub.enable_progress_bars,
        ),
        (
            transformers.utils.logging.disable_progress_bar,
            datasets.disable_progress_bars,
            hub.disable_progress_bars,
        ),
        strict=True,
    ):
        (enable if on else disable)()


def _signals() -> dict[int, Any]:
    handlers = {}
    for signum in signal.valid_signals():
        with contextlib.suppress(OSError, ValueError):
            handlers[signum] = signal.getsignal(signum)
    return handlers


def _seen() -> dict[str, Any]:
    """What a run may change in this process, as values that compare equal when nothing changed."""
    import torch

    from rlvr.runtime import secrets

    return {
        "environ": dict(os.environ),
        "cwd": os.getcwd(),
        "argv": list(sys.argv),
        "path": list(sys.path),
        "streams": (sys.stdout, sys.stderr),
        "signals": _signals(),
        "loggers": {name: _logger_state(lg) for name, lg in _loggers().items()},
        "captured warnings": logging._warnings_showwarning,  # type: ignore[attr-defined]
        "progress bars": _progress_bars(),
        # the values config resolution read from the environment (masked from then on); a fresh
        # interpreter starts with none
        "secrets": set(secrets._MARKED),
        "torch": (torch.get_num_threads(), torch.get_default_dtype()),
        "child processes": _children(),
        # a thread python would wait for at exit: a fresh interpreter would not have ended yet
        "non-daemon threads": {t.name for t in threading.enumerate() if not t.daemon and t.is_alive()},
    }


# A logger the run created (a module imported during it): kept, without what the run attached to it.
_NEW_LOGGER = (True, False, [], [])


@dataclass
class _State:
    """:func:`_seen` before a run, with what cannot be compared but can be put back."""

    seen: dict[str, Any]
    singletons: Any
    rng: tuple[Any, Any, Any]

    @classmethod
    def record(cls) -> _State:
        import numpy as np
        import torch
        from hydra.core.singleton import Singleton

        # Hydra's own record of its singletons (GlobalHydra, HydraConfig, the ConfigStore) and of
        # OmegaConf's resolvers: what its joblib launcher restores in each worker
        return cls(
            _seen(), Singleton.get_state(), (random.getstate(), np.random.get_state(), torch.get_rng_state())
        )

    def restore(self) -> None:
        import numpy as np
        import torch
        from hydra.core.singleton import Singleton

        from rlvr.runtime import secrets

        seen = self.seen
        os.environ.clear()
        os.environ.update(seen["environ"])
        os.chdir(seen["cwd"])
        sys.argv[:], sys.path[:] = seen["argv"], seen["path"]
        sys.stdout, sys.stderr = seen["streams"]
        for signum, handler in seen["signals"].items():
            if handler is not None and signal.getsignal(signum) is not handler:
                signal.signal(signum, handler)
        for name, lg in _loggers().items():
            if name in seen["loggers"]:
                level, *kept = seen["loggers"][name]
                if lg.level != level:  # setLevel clears every logger's cache: only when changed
                    lg.setLevel(level)
            else:
                kept = list(_NEW_LOGGER)
            for h in lg.handlers:
                if h not in kept[2] and isinstance(h, logging.FileHandler):
                    h.close()  # the run's log file (Hydra's <run_dir>/<job>.log)
            lg.propagate, lg.disabled, lg.handlers[:], lg.filters[:] = kept
        if seen["captured warnings"] is None:
            logging.captureWarnings(False)
        _set_progress_bars(seen["progress bars"])
        Singleton.set_state(self.singletons)
        secrets._MARKED.clear()
        secrets._MARKED.update(seen["secrets"])
        torch.set_num_threads(seen["torch"][0])
        torch.set_default_dtype(seen["torch"][1])
        random.setstate(self.rng[0])
        np.random.set_state(self.rng[1])
        torch.set_rng_state(self.rng[2])
        gc.collect()  # the run's model and datasets, before the next test builds its own
        self.check()

    def check(self) -> None:
        """Raises if the process is not as recorded: what :meth:`restore` missed, by name."""
        now = _seen()
        now["loggers"] = {
            name: state
            for name, state in now["loggers"].items()
            if name in self.seen["loggers"] or tuple(state[1:]) != _NEW_LOGGER
        }
        leaks = {
            name: _difference(self.seen[name], value)
            for name, value in now.items()
            if name != "child processes" and value != self.seen[name]
        }
        # a child that ended meanwhile is no leak (a process the test started before the run)
        started = now["child processes"] - self.seen["child processes"]
        if started:
            leaks["child processes"] = sorted(started)
        if leaks:
            raise AssertionError(f"tests.in_process: the run left this process changed: {leaks}")


def _difference(before: Any, after: Any) -> Any:
    if isinstance(before, dict) and isinstance(after, dict):
        return {k: (before.get(k), after.get(k)) for k in {*before, *after} if before.get(k) != after.get(k)}
    if isinstance(before, set) and isinstance(after, set):
        return {"added": sorted(map(str, after - before)), "gone": sorted(map(str, before - after))}
    return (before, after)


def _children() -> set[int]:
    """This process's live children (a verifier pool or a W&B service left running would be a leak)."""
    import psutil

    found = set()
    for p in psutil.Process().children():
        with contextlib.suppress(psutil.Error):  # gone meanwhile
            if p.status() != psutil.STATUS_ZOMBIE:
                found.add(f"{p.pid} {' '.join(p.cmdline())[:200]}")
    return found
