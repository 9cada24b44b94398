"""Benchmark: N models x M tasks, one resumable result cell each (``runner``), stored one file per cell
(``results``), reported as JSON files and charts (``plot``, the ``rlvr-plot`` command)."""
