"""Saving a chart in the format its file name asks for (PNG, SVG or PDF), atomically.

Every chart of the product (the benchmark's ``rlvr-plot``, a run's training chart, the sweep
report's chart) is saved here, so ``chart.pdf`` is a PDF and ``chart.jpg`` is an error that names
the allowed suffixes, never a PNG under another name.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from rlvr.runtime.io import atomic_write_bytes

CHART_FORMATS = ("png", "svg", "pdf")


class ChartFormatError(ValueError):
    """An output path whose suffix is not one of :data:`CHART_FORMATS`."""


def chart_format(path: str | os.PathLike[str], what: str = "chart output") -> str:
    """The format a chart at ``path`` is written in: its suffix, lower case, without the dot.

    >>> chart_format("results/gsm8k.PDF")
    'pdf'
    >>> try:
    ...     chart_format("chart.jpg")
    ... except ChartFormatError as e:
    ...     print(e)
    chart output chart.jpg: suffix '.jpg' is not a chart format; use .png, .svg or .pdf
    """
    suffix = Path(path).suffix
    if suffix.lower().lstrip(".") not in CHART_FORMATS:
        shown = repr(suffix) if suffix else "no suffix"
        raise ChartFormatError(
            f"{what} {path}: {'suffix ' if suffix else ''}{shown} is not a chart format; use .png, .svg or .pdf"
        )
    return suffix.lower().lstrip(".")


def save_chart(fig: Any, path: str | os.PathLike[str], dpi: int = 120) -> Path:
    """Write ``fig`` (a matplotlib Figure) to ``path`` in the format of its suffix, atomically
    (rlvr.runtime.io), so a reader never sees a half-written chart. ``dpi`` sets a PNG's pixels;
    SVG and PDF are vector formats."""
    fmt = chart_format(path)
    buffer = io.BytesIO()
    # No creation date in SVG/PDF metadata: the same chart twice is the same file.
    metadata = {"Date": None} if fmt in ("svg", "pdf") else None
    fig.savefig(buffer, format=fmt, dpi=dpi, metadata=metadata)
    return atomic_write_bytes(path, buffer.getvalue())
