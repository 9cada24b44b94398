"""Keep the console to the run's own lines: library warnings and progress bars go to the log file.

transformers and TRL emit a deprecation warning per training phase and a "Writing model
shards" bar per save; interleaved with the console observer's progress they bury it. They
still matter when something goes wrong, so they are written to the run's log file (Hydra's
``<run_dir>/<job>.log``) instead of being dropped. Errors and tracebacks are not affected.
"""

from __future__ import annotations

import logging


def library_output_to_log_file() -> None:
    import transformers

    file_handlers = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
    logging.captureWarnings(True)  # warnings.warn(...) -> the "py.warnings" logger
    transformers.utils.logging.disable_default_handler()
    for name in ("py.warnings", "transformers"):
        logger = logging.getLogger(name)
        logger.propagate = False
        for handler in file_handlers:
            if handler not in logger.handlers:
                logger.addHandler(handler)
    transformers.utils.logging.disable_progress_bar()
    try:
        from huggingface_hub.utils import disable_progress_bars
    except ImportError:  # older huggingface_hub: its bars are off in offline runs anyway
        return
    disable_progress_bars()
