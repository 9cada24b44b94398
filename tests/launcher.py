"""`python run_pipeline.py ...` for the tests, without paying Python's imports each time.

Most of the suite's time went to integration tests that each start ``run_pipeline.py`` as a
subprocess, and most of each start (~20 s of CPU on this project's 2-core machine) is importing
torch, transformers, TRL (which imports vLLM where it is installed), PEFT and bitsandbytes. Here a
"zygote" process imports them once per test process; each run is then a fork of it that executes the
script as ``__main__``, exactly as ``python script args`` would from there on: its own process, its
own argv, cwd and environment, its own stdin/stdout/stderr (the caller's pipes or files, passed
over a Unix socket), its exit code, its signals.

:class:`Popen` is :class:`subprocess.Popen` with only the start replaced, so ``communicate``,
``wait``, ``poll``, ``kill`` and timeouts are subprocess's own. The forked process is made a child of
the test process (the zygote forks twice and the test process is a child subreaper, Linux's
``PR_SET_CHILD_SUBREAPER``), so subprocess waits for it as for any child.

A fresh interpreter is used instead (plain subprocess) where a fork could not behave the same:
another program than ``python <script.py>``, a ``preexec_fn``, interpreter flags, an environment
that differs from the zygote's in a variable libraries read when they are imported (``HF_*``,
``TORCH*``, ``OMP_*``, ...), a platform other than Linux, ``RLVR_TEST_FRESH=1`` (the whole suite the
old way), or ``fresh=True`` for a test whose claim is about what happens while those libraries are
imported (a warning they print then would go to the zygote's stderr, not the run's).

Exit statuses that cannot lie (issue 45). The run is forked inside the middle process's code, so
:func:`_run` ends in its own ``os._exit`` whatever raises (an exit hook, a failed error report): the
status is the one python gives, the script's code with the error printed, or 1 for an exception that
escaped, never the middle's 0. ECHILD, which subprocess reads as 0, is :data:`LOST_STATUS` here. Kept
rather than retired for in-process runs: this is a fix of one file, and the suite's ~30 users of it
assert on real processes' exit codes, signals and console output, which an in-process call cannot show.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

ROOT = Path(__file__).resolve().parents[1]
PIPE, STDOUT, DEVNULL = subprocess.PIPE, subprocess.STDOUT, subprocess.DEVNULL
CompletedProcess, TimeoutExpired = subprocess.CompletedProcess, subprocess.TimeoutExpired

# What run_pipeline.py sets before the libraries are imported; the zygote sets it before its own imports
# (HF_HUB_OFFLINE is read once, when huggingface_hub is imported; VLLM_CONFIGURE_LOGGING when vLLM is:
# rlvr.runtime.logs.route_library_loggers sets it so that vLLM adds no console handler of its own).
_ENTRY_ENV = {
    "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "VLLM_CONFIGURE_LOGGING": "0",
}  # fmt: skip
# Variables a library may read while it is imported: a request that differs in one runs fresh.
_IMPORT_TIME_PREFIXES = (
    "HF_", "HUGGINGFACE", "TRANSFORMERS", "TORCH", "PYTORCH", "OMP_", "MKL_", "OPENBLAS", "KMP_", "CUDA",
    "NVIDIA", "VLLM", "TRL", "ACCELERATE", "DATASETS", "TOKENIZERS", "BNB", "BITSANDBYTES", "WANDB",
    "PYTHON", "LD_", "MALLOC", "GLIBC", "RLVR_MALLOC", "TMP", "TEMP", "HOME", "XDG_", "NUMBA", "TRITON", "PEFT", "UNSLOTH",
)  # fmt: skip
_PRELOAD = (
    "torch", "transformers", "peft", "datasets", "trl", "hydra", "omegaconf", "rich",
    "reasoning_gym", "math_verify", "rlvr.app", "rlvr.pipeline.orchestrator",
    # TRL's trainers load lazily, on a run's first SFT or GRPO phase: about 5 s a run on this machine
    # (GRPO's module imports vLLM's). Importing them starts no thread, so the fork stays safe.
    "trl.trainer.sft_trainer", "trl.trainer.grpo_trainer",
)  # fmt: skip
_PR_SET_CHILD_SUBREAPER = 36
LOST_STATUS = 255  # the exit code of a run whose status no wait here can know: never 0


def _import_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_IMPORT_TIME_PREFIXES)}


def _entry_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment run_pipeline.py runs in once it has started: its offline defaults, and glibc's
    malloc settings, for which it re-executes itself when they are missing (rlvr.runtime.allocator).
    The zygote starts with them, so a fork of it has them from the start and never re-executes."""
    from rlvr.runtime.allocator import tuned_environment

    env = {**env, **{k: v for k, v in _ENTRY_ENV.items() if k not in env}}
    return tuned_environment(env) or env


class _Zygote:
    """The process that has imported everything; one per test process, started on first use."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = _entry_env(os.environ)
        self.env = _import_env(env)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
             f"from tests.launcher import _serve; _serve({child.fileno()})"],
            pass_fds=(child.fileno(),), cwd=ROOT, env=env, stdin=DEVNULL,
        )  # fmt: skip
        child.close()
        self.sock = parent
        self.reader = parent.makefile("r")
        ready = self.reader.readline()
        if not ready.startswith("ready "):
            raise RuntimeError(f"the test launcher's zygote did not start: {ready!r}")
        # what its imports set (torch, vLLM and cv2 set defaults such as TORCHINDUCTOR_CACHE_DIR): a
        # test process that has imported them too passes the same values on, which is no difference
        self.imported_env: dict[str, str] = json.loads(ready[len("ready ") :])
        atexit.register(self.close)

    def same_imports(self, env: dict[str, str]) -> bool:
        """Whether a fresh interpreter with ``env`` would import the libraries as the zygote did. A
        PYTHONPATH that only adds folders in front of the zygote's is the same: the fork puts them in
        front on sys.path (:func:`_extra_path`), and a module the zygote imported is found as it was
        unless one of them shadows it, which :func:`_exec_script` refuses."""
        wanted = _import_env(env)
        if _extra_path(env, self.env) is not None:
            wanted.pop("PYTHONPATH", None)
        own = {k: v for k, v in self.env.items() if k != "PYTHONPATH"}
        return all(wanted.get(k) in (own.get(k), self.imported_env.get(k)) for k in {*wanted, *own})

    def spawn(self, request: dict[str, Any], fds: list[int]) -> int:
        with self.lock:
            socket.send_fds(self.sock, [json.dumps(request).encode() + b"\n"], fds)
            reply = json.loads(self.reader.readline() or '{"error": "the zygote exited"}')
        if "error" in reply:
            raise OSError(reply["error"])
        return int(reply["pid"])

    def close(self) -> None:
        self.sock.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_zygote: _Zygote | None = None
_start_lock = threading.Lock()


def _the_zygote() -> _Zygote:
    global _zygote
    with _start_lock:
        if _zygote is None or _zygote.proc.poll() is not None:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
            _zygote = _Zygote()
        return _zygote


def _note(line: str) -> None:
    """``RLVR_TEST_LAUNCHER_LOG=<file>``: why a run started fresh, a line each (to find what costs time)."""
    if path := os.environ.get("RLVR_TEST_LAUNCHER_LOG"):
        with open(path, "a") as f:
            f.write(f"{os.getpid()} {line}\n")


def _extra_path(env: Mapping[str, str], zygote_env: Mapping[str, str]) -> list[str] | None:
    """The PYTHONPATH folders ``env`` puts before the zygote's own, or None if it does not end with them."""
    wanted = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    own = [p for p in zygote_env.get("PYTHONPATH", "").split(os.pathsep) if p]
    if own and wanted[len(wanted) - len(own) :] != own:
        return None
    return wanted[: len(wanted) - len(own)]


def _forkable(args: Any, kwargs: dict[str, Any]) -> bool:
    if os.environ.get("RLVR_TEST_FRESH") == "1" or not sys.platform.startswith("linux"):
        return False
    if isinstance(args, (str, bytes)) or len(args) < 2 or str(args[0]) != sys.executable:
        return False
    if not str(args[1]).endswith(".py") or kwargs.get("shell") or kwargs.get("executable"):
        return False
    unsupported = ("preexec_fn", "pass_fds", "user", "group", "extra_groups", "umask", "process_group")
    return not any(kwargs.get(k) for k in unsupported)


class Popen(subprocess.Popen):
    """subprocess.Popen; ``[sys.executable, "<script>.py", *args]`` starts as a fork of the zygote."""

    def __init__(self, args: Any, *pargs: Any, fresh: bool = False, **kwargs: Any) -> None:
        self._forked = not fresh and not pargs and _forkable(args, kwargs)
        self._new_session = bool(kwargs.get("start_new_session"))
        if self._forked:
            env = kwargs.get("env")
            env = dict(os.environ if env is None else env)
            zygote = _the_zygote()
            if not zygote.same_imports(_entry_env(env)):
                self._forked = False
                _note(
                    f"fresh (import-time environment differs): {_import_env(_entry_env(env))} vs {zygote.env}"
                )
        super().__init__(args, *pargs, **kwargs)

    # subprocess reads ECHILD (the status was taken by another wait, or SIGCHLD is ignored) as exit
    # code 0: a run whose status is unknown would pass. Here it is LOST_STATUS, said on stderr.
    def _try_wait(self, wait_flags: int) -> tuple[int, int]:
        return _waitpid(self.pid, wait_flags)

    def _internal_poll(self, _deadstate: int | None = None, **_: Any) -> int | None:
        return super()._internal_poll(_deadstate, _waitpid=_waitpid)  # type: ignore[call-arg]

    def _execute_child(  # type: ignore[override]
        self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo, creationflags,
        shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, restore_signals, *rest,
    ):  # fmt: skip
        if not self._forked:
            return super()._execute_child(
                args, executable, preexec_fn, close_fds, pass_fds, cwd, env, startupinfo, creationflags,
                shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, restore_signals, *rest,
            )  # fmt: skip
        # -1: the caller's own stream, as a subprocess inherits it
        fds = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1]
        fds.append(errwrite if errwrite != -1 else 2)
        run_env = _entry_env(
            {os.fsdecode(k): os.fsdecode(v) for k, v in (os.environ if env is None else env).items()}
        )
        request = {
            "argv": [os.fsdecode(a) for a in args[1:]],
            "cwd": os.fsdecode(cwd) if cwd is not None else os.getcwd(),
            "env": run_env,
            "extra_path": _extra_path(run_env, _the_zygote().env) or [],
            "new_session": self._new_session,
        }
        try:
            self.pid = _the_zygote().spawn(request, fds)
            self._child_created = True
        finally:  # the child has its own copies now: close ours as subprocess does after its fork
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)


def _waitpid(pid: int, flags: int) -> tuple[int, int]:
    try:
        return os.waitpid(pid, flags)
    except ChildProcessError:
        print(f"tests.launcher: pid {pid}: its exit status was taken elsewhere (ECHILD): reported as "
              f"{LOST_STATUS}, not known", file=sys.stderr)  # fmt: skip
        return pid, LOST_STATUS << 8  # a wait status that says "exited with LOST_STATUS"


def run(args: Any, *, input: Any = None, capture_output: bool = False, timeout: float | None = None,
        check: bool = False, fresh: bool = False, **kwargs: Any) -> subprocess.CompletedProcess:  # fmt: skip
    """subprocess.run over :class:`Popen`."""
    if input is not None:
        kwargs["stdin"] = PIPE
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = PIPE
    with Popen(args, fresh=fresh, **kwargs) as proc:
        try:
            stdout, stderr = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            exc.stdout, exc.stderr = proc.communicate()
            raise
        except BaseException:
            proc.kill()
            raise
        code = proc.poll()
    result = subprocess.CompletedProcess(proc.args, code, stdout, stderr)
    if check:
        result.check_returncode()
    return result


# ---------------------------------------------------------------------------------------- the zygote


def _serve(fd: int) -> None:
    """The zygote: import, then fork one run per request until the test process closes the socket."""
    import importlib
    import warnings

    sock = socket.socket(fileno=fd)
    for name in _PRELOAD:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with contextlib.suppress(ImportError):  # an optional library absent here: the run imports it
                importlib.import_module(name)
    sock.sendall(b"ready " + json.dumps(_import_env(dict(os.environ))).encode() + b"\n")
    buffer = b""
    while True:
        data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, 3)
        if not data:
            return
        buffer += data
        line, _, buffer = buffer.partition(b"\n")
        request = json.loads(line)
        try:
            pid = _fork_run(request, fds, sock)
            reply = {"pid": pid}
        except OSError as exc:
            reply = {"error": repr(exc)}
        finally:
            for f in fds:
                os.close(f)
        sock.sendall(json.dumps(reply).encode() + b"\n")


def _fork_run(request: dict[str, Any], fds: list[int], sock: socket.socket) -> int:
    """Fork twice: the run is orphaned at once and so adopted by the test process (a subreaper)."""
    sys.stdout.flush()
    sys.stderr.flush()
    read_pid, write_pid = os.pipe()
    middle = os.fork()
    if middle == 0:  # the middle process: start the run, say its pid, leave
        said = False
        try:
            os.close(read_pid)
            if request["new_session"]:
                os.setsid()
            run_pid = os.fork()
            if run_pid == 0:
                _run(request, fds, closing=(write_pid, sock.fileno()))  # never returns
            os.write(write_pid, str(run_pid).encode())
            said = True
        finally:
            # 0 only once the pid is said. The run never gets here (it ends in its own os._exit): a
            # run that fell into this code would exit with the middle's status, not its own.
            os._exit(0 if said else 1)
    os.close(write_pid)
    with os.fdopen(read_pid, "rb") as f:
        pid = f.read()
    _, status = os.waitpid(middle, 0)  # the run's parent is gone: it is the test process's child now
    if not pid or status != 0:
        raise OSError(f"the fork of the run failed (middle process status {status})")
    return int(pid)


def _run(request: dict[str, Any], fds: list[int], closing: tuple[int, ...]) -> NoReturn:
    """The forked run from start to end, ``python script args``. Whatever raises in it, even while it
    reports an error or runs its exit hooks, it ends here in ``os._exit`` with the status python would
    give: the script's own exit code, 1 for an exception that escaped, or death by SIGINT."""
    code = 1  # something escaped before the script's status was known: python's code for it
    try:
        for fd in closing:
            os.close(fd)
        code = _exec_script(request, fds)
        _exit_functions()
        if code < 0:  # as python does after a KeyboardInterrupt: die of SIGINT, once finalised
            _flush_std()
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
            code = 128 - code
    except BaseException:
        with contextlib.suppress(BaseException):  # stderr may be the thing that failed
            traceback.print_exc()
    finally:
        _flush_std()
        os._exit(code & 0xFF)


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):  # a closed pipe: nothing more to say
            stream.flush()


def _exec_script(request: dict[str, Any], fds: list[int]) -> int:
    """In the forked run: what ``python script args`` does up to its exit; returns its exit code
    (minus the signal number for a KeyboardInterrupt: python then dies of SIGINT)."""
    import runpy

    for target, fd in enumerate(fds):
        os.dup2(fd, target)  # stdin, stdout, stderr (dup2 clears close-on-exec)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    try:
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        script = os.path.abspath(request["argv"][0])
        sys.argv = request["argv"]
        sys.orig_argv = [sys.executable, *request["argv"]]
        sys.path[0] = os.path.dirname(script)
        sys.path[1:1] = [os.path.abspath(p) for p in request["extra_path"]]  # as PYTHONPATH puts them
        _refuse_shadowing(request["extra_path"])
        # sys.stdin/stdout/stderr still wrap fds 0-2: fresh buffers, since the zygote flushed before the fork
        runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # as python does: the traceback, then (in _run) die of SIGINT
        traceback.print_exc()
        return -signal.SIGINT
    except BaseException:
        traceback.print_exc()
        return 1


def _refuse_shadowing(folders: list[str]) -> None:
    """A PYTHONPATH folder with a module of the same top-level name as one the zygote imported would
    have been found first by a fresh interpreter: such a run must not be a fork (fail loudly)."""
    for folder in folders:
        for entry in os.listdir(folder) if os.path.isdir(folder) else ():
            name = entry[:-3] if entry.endswith(".py") else entry
            if name.isidentifier() and name in sys.modules:
                raise RuntimeError(f"tests.launcher: PYTHONPATH {folder} shadows the imported module {name}")


def _exit_functions() -> None:
    """What the interpreter runs when a script ends, in its order: threading's shutdown first (it
    joins non-daemon threads and runs ``threading._register_atexit`` hooks, e.g. joblib/loky and
    concurrent.futures stopping their worker processes; without it they idle out after 300 s),
    then the atexit functions. An exception in threading's shutdown is printed and the exit goes
    on with the script's status, as python's ``Py_FinalizeEx`` does; ``atexit`` prints its own."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]
    except BaseException:
        print(f"Exception ignored in: {threading!r}", file=sys.stderr)
        traceback.print_exc()
    atexit._run_exitfuncs()
