"""Library log records go to the run's log file, not the console (rlvr.runtime.logs)."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

from rlvr.runtime.logs import LIBRARY_LOGGERS, route_library_loggers


@pytest.fixture(autouse=True)
def library_loggers_restored():
    """Each test leaves the library loggers as it found them: a handler left on one would write a
    later test's records into this test's (by then deleted) temp dir."""
    names = (*LIBRARY_LOGGERS, "DeepSpeed")
    saved = {
        name: (logger.propagate, list(logger.handlers), list(logger.filters))
        for name, logger in ((n, logging.getLogger(n)) for n in names)
    }
    yield
    for name, (propagate, handlers, filters) in saved.items():
        logger = logging.getLogger(name)
        logger.propagate, logger.handlers[:], logger.filters[:] = propagate, handlers, filters
    logging.captureWarnings(False)


def test_a_second_run_in_one_process_writes_library_records_to_its_own_log_only(tmp_path):
    """A multirun's jobs share one process: job 2's library records go to job 2's log file, not also
    to job 1's (whose handler Hydra closed; a closed FileHandler reopens its file on the next record)."""
    root = logging.getLogger()
    logs = {}
    for job in ("job1", "job2"):
        (tmp_path / job).mkdir()
        handler = logging.FileHandler(tmp_path / job / "run.log")
        root.addHandler(handler)
        try:
            route_library_loggers()
            logging.getLogger("transformers.modeling_utils").warning("record of %s", job)
            logging.getLogger("DeepSpeed").warning("deepspeed record of %s", job)
        finally:
            root.removeHandler(handler)
            handler.close()
        logs[job] = handler.baseFilename
    first, second = (Path(logs[j]).read_text() for j in ("job1", "job2"))
    assert "record of job1" in first and "deepspeed record of job1" in first
    assert "job2" not in first, first
    assert "record of job2" in second and "deepspeed record of job2" in second


def test_a_library_that_brings_its_own_console_handler_still_writes_to_the_log_file_only(tmp_path):
    """DeepSpeed adds a stdout handler to its "DeepSpeed" logger at import (after rlvr routed it)."""
    root = logging.getLogger()
    log_file = logging.FileHandler(tmp_path / "run.log")
    root.addHandler(log_file)
    deepspeed = logging.getLogger("DeepSpeed")
    try:
        route_library_loggers()
        console = io.StringIO()
        deepspeed.addHandler(logging.StreamHandler(console))  # what deepspeed's create_logger does
        deepspeed.propagate = False
        deepspeed.warning("Setting accelerator to CPU.")
        log_file.flush()
        assert console.getvalue() == ""
        assert "Setting accelerator to CPU." in (tmp_path / "run.log").read_text()
    finally:
        root.removeHandler(log_file)
        log_file.close()


def test_bitsandbytes_kernels_note_goes_to_the_log_file_and_other_warnings_still_reach_the_console(tmp_path):
    """bitsandbytes logs "Failed to load CPU gemm_4bit_forward from kernels-community" at import on
    CPUs with AVX512-BF16 when the optional `kernels` package is missing: every run on such a CPU."""
    import importlib.util

    spec = importlib.util.find_spec("bitsandbytes")
    if spec is None:
        pytest.skip("bitsandbytes is not installed")
    # It is a logger's record (not warnings.warn), from the module's own logger: read the installed source.
    source = (Path(spec.submodule_search_locations[0]) / "backends" / "cpu" / "ops.py").read_text()
    assert "logger = logging.getLogger(__name__)" in source and "from kernels-community" in source

    root = logging.getLogger()
    console, log_file = io.StringIO(), logging.FileHandler(tmp_path / "run.log")
    handlers = [logging.StreamHandler(console), log_file]
    for handler in handlers:
        root.addHandler(handler)
    library = logging.getLogger("bitsandbytes.backends.cpu.ops")
    try:
        route_library_loggers()
        library.warning(
            "Failed to load CPU gemm_4bit_forward from kernels-community: No module named 'kernels'"
        )
        logging.getLogger("rlvr.somewhere").warning("a warning of the run's own")
        log_file.flush()
        assert console.getvalue() == "a warning of the run's own\n"
        assert "kernels-community" in (tmp_path / "run.log").read_text()
    finally:
        for handler in handlers:
            root.removeHandler(handler)
        log_file.close()
