"""Library log records go to the run's log file, not the console (rlvr.logs)."""

from __future__ import annotations

import io
import logging

import pytest

from rlvr.logs import LIBRARY_LOGGERS, route_library_loggers


def test_a_library_that_brings_its_own_console_handler_still_writes_to_the_log_file_only(tmp_path):
    """DeepSpeed adds a stdout handler to its "DeepSpeed" logger at import (after rlvr routed it)."""
    root = logging.getLogger()
    log_file = logging.FileHandler(tmp_path / "run.log")
    root.addHandler(log_file)
    deepspeed = logging.getLogger("DeepSpeed")
    saved_filters, saved_handlers = list(deepspeed.filters), list(deepspeed.handlers)
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
        deepspeed.filters[:], deepspeed.handlers[:] = saved_filters, saved_handlers


def test_bitsandbytes_kernels_note_goes_to_the_log_file_and_other_warnings_still_reach_the_console(tmp_path):
    """bitsandbytes logs "Failed to load CPU gemm_4bit_forward from kernels-community" at import on
    CPUs with AVX512-BF16 when the optional `kernels` package is missing: every run on such a CPU."""
    import importlib.util
    from pathlib import Path

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
    saved = {
        name: (logging.getLogger(name).propagate, list(logging.getLogger(name).handlers))
        for name in LIBRARY_LOGGERS
    }
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
        for name, (propagate, own) in saved.items():
            logging.getLogger(name).propagate, logging.getLogger(name).handlers[:] = propagate, own
        logging.captureWarnings(False)
