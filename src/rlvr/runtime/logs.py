"""Keep the console to the run's own lines: library warnings and progress bars go to the log file.

transformers and TRL emit a deprecation warning per training phase and a "Writing model
shards" bar per save, bitsandbytes and vLLM their start-up notes; interleaved with the console observer's progress they bury it. They
still matter when something goes wrong, so they are written to the run's log file (Hydra's
``<run_dir>/<job>.log``) instead of being dropped. Other warnings and errors still reach the console;
the traceback of an error the console already showed as a message goes to the log file only
(:func:`traceback_to_log_file`).
"""

from __future__ import annotations

import logging
import os

# The loggers whose records go to the log file only. bitsandbytes logs (not warns) at import on CPUs
# with AVX512-BF16 that lack the optional `kernels` package ("Failed to load CPU gemm_4bit_forward from
# kernels-community"), from its logger "bitsandbytes.backends.cpu.ops": a child of "bitsandbytes".
LIBRARY_LOGGERS = ("py.warnings", "transformers", "bitsandbytes", "vllm")
# What a shell reports for a process ended by SIGINT (128 + 2): scripts and schedulers read it as Ctrl-C.
INTERRUPTED_EXIT_CODE = 130
# Every training step's line and each evaluation's start and result (rlvr.observers.console): the
# console prints every ``log_every``-th step only.
PROGRESS = "rlvr.progress"
# The traceback of a handled error (rlvr.app): the console has its message already.
TRACEBACKS = "rlvr.traceback"


def _file_handlers() -> list[logging.Handler]:
    return [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]


def _to_log_file_only(name: str, file_handlers: list[logging.Handler]) -> None:
    logger = logging.getLogger(name)
    logger.propagate = False
    # This run's log files only: a file handler of an earlier run in this process (a multirun's
    # previous job) would reopen that run's log and write this run's records into it.
    logger.handlers[:] = [
        h for h in logger.handlers if not isinstance(h, (logging.FileHandler, logging.NullHandler))
    ] + file_handlers
    if not logger.handlers:  # no log file (hydra/job_logging=disabled): dropped, not Python's last resort
        logger.addHandler(logging.NullHandler())


def route_library_loggers() -> None:
    """The library loggers write to the run's log file only (cheap: imports no library). Called
    before anything imports bitsandbytes, which warns at import on CPUs without `kernels`."""
    file_handlers = _file_handlers()
    logging.captureWarnings(True)  # warnings.warn(...) -> the "py.warnings" logger
    # vLLM would add its own console handler at import; its records reach the root logger instead,
    # and, like bitsandbytes' (a warning per run on CPUs without the optional `kernels` package),
    # go to the log file only.
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
    for name in (*LIBRARY_LOGGERS, PROGRESS):
        _to_log_file_only(name, file_handlers)
    # DeepSpeed gives its logger a stdout handler of its own when imported (accelerate imports it when
    # the package is present): a logger-level filter hands its records to the log file instead.
    deepspeed = logging.getLogger("DeepSpeed")
    routed = [f for f in deepspeed.filters if isinstance(f, _ToFiles)]
    if routed:
        routed[0].handlers = file_handlers  # this run's log files, as above
    else:
        deepspeed.addFilter(_ToFiles(file_handlers))


class _ToFiles(logging.Filter):
    """Sends a record to the given handlers only: the logger's own handlers never see it."""

    def __init__(self, handlers: list[logging.Handler]):
        super().__init__()
        self.handlers = handlers

    def filter(self, record: logging.LogRecord) -> bool:
        for handler in self.handlers:
            if record.levelno >= handler.level:
                handler.handle(record)
        return False


# submitit's SLURM launcher asks sacct for its jobs' states, at 0, 2, 4, 8, 16 s ... after a submission
# and every 10 min later on. A cluster that keeps no accounting (no slurmdbd: many small CPU clusters,
# infrastructure/slurm/local_cluster.sh) fails each call, and submitit logs a "Bypassing sacct error"
# warning that its two handlers and Hydra's console printed three times each (issue 56; measured:
# 18 lines for one 52 s job, docs/scaling.md "SLURM on a CPU cluster").
SUBMITIT_LOGGER = "submitit"
SACCT_ERROR = "Bypassing sacct error"
LAUNCHER_NOTES = "rlvr.launcher"


class _SacctOnce(logging.Filter):
    """On submitit's logger: its sacct errors become one line of ours, said once per process."""

    def __init__(self) -> None:
        super().__init__()
        self.said = False

    def filter(self, record: logging.LogRecord) -> bool:
        if SACCT_ERROR not in record.getMessage():
            return True  # every other submitit record as submitit prints it
        if not self.said:
            self.said = True
            logging.getLogger(LAUNCHER_NOTES).warning(
                "sacct does not answer on this cluster (%s): SLURM keeps no job accounting here, so "
                "submitit follows the jobs by their result files and job states may lag; further sacct "
                "errors of this launch are not shown",
                record.getMessage().split(SACCT_ERROR, 1)[1].split(", status may be")[0].strip(),
            )
        return False


def quiet_submitit_sacct() -> None:
    """Install :class:`_SacctOnce` on submitit's logger (idempotent; cheap: imports no library).
    Called in the launching process before Hydra starts a launcher; a logger's filters survive the
    ``dictConfig`` that submitit runs at import."""
    logger = logging.getLogger(SUBMITIT_LOGGER)
    if not any(isinstance(f, _SacctOnce) for f in logger.filters):
        logger.addFilter(_SacctOnce())


def traceback_to_log_file(exc: BaseException) -> None:
    """The full traceback of ``exc`` in the run's log file only: for an error whose message the
    console already showed (a configuration problem found while running, Ctrl-C)."""
    _to_log_file_only(TRACEBACKS, _file_handlers())
    logging.getLogger(TRACEBACKS).error(
        "%s: %s", type(exc).__name__, exc, exc_info=(type(exc), exc, exc.__traceback__)
    )


def library_output_to_log_file() -> None:
    route_library_loggers()
    import transformers  # after the loggers are routed: it can import bitsandbytes

    transformers.utils.logging.disable_default_handler()
    transformers.utils.logging.disable_progress_bar()
    try:
        from huggingface_hub.utils import disable_progress_bars
    except ImportError:  # older huggingface_hub: its bars are off in offline runs anyway
        return
    disable_progress_bars()
