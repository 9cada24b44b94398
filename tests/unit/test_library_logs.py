"""Library log records go to the run's log file, not the console (rlvr.logs)."""

from __future__ import annotations

import io
import logging

from rlvr.logs import route_library_loggers


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
