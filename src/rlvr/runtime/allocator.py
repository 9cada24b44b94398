"""glibc malloc settings for training on CPU, applied by re-executing the entry point once.

Why: torch on CPU has no caching allocator, so every step allocates and frees the same large
buffers (SmolLM2's logits alone are batch x tokens x 49,152 floats, ~150 MB at batch 16). glibc
serves each allocation above its mmap threshold (at most 32 MiB) with a fresh ``mmap`` and returns
it with ``munmap`` on free, so the kernel zero-fills every page again on first touch: in an SFT
step of the default run a third of the CPU time was system time (page faults). With ``mmap``
disabled and a high trim threshold, freed memory stays in the heap and is reused.
Measured (benchmarks/allocator.md): SFT step 5.35 s -> 3.71 s on one core, peak RSS 4.5 -> 5.0 GB.

glibc reads ``GLIBC_TUNABLES`` only when a process starts, so ``run_pipeline.py`` calls
:func:`reexec_with_tunables` before anything heavy is imported. Processes it starts (accelerate
ranks, joblib/submitit sweep workers, verifier sandboxes) inherit the environment. Settings the
user already put in ``GLIBC_TUNABLES`` win; ``RLVR_MALLOC_TUNING=0`` turns this off.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping

OPT_OUT = "RLVR_MALLOC_TUNING"
TUNABLES = {
    # Never mmap: large buffers come from the heap and are reused instead of zero-filled again.
    "glibc.malloc.mmap_max": "0",
    # Give freed heap memory back to the kernel only when 4 GiB of it sits at the top.
    "glibc.malloc.trim_threshold": str(4 << 30),
    # Grow the heap 256 MiB at a time (fewer brk calls while the first steps allocate).
    "glibc.malloc.top_pad": str(256 << 20),
}


def tuned_environment(environ: Mapping[str, str], libc: str | None = None) -> dict[str, str] | None:
    """The environment to re-execute with, or None when there is nothing to add.

    None when the user opted out, when the C library is not glibc (musl, macOS, Windows ignore
    GLIBC_TUNABLES), or when every tunable is already set (by the user, or by the re-execution).
    """
    if environ.get(OPT_OUT, "1").strip() == "0":
        return None
    libc = platform.libc_ver()[0] if libc is None else libc
    if platform.system() != "Linux" or libc != "glibc":
        return None
    current = environ.get("GLIBC_TUNABLES", "")
    present = {item.split("=", 1)[0] for item in current.split(":") if item}
    missing = [f"{key}={value}" for key, value in TUNABLES.items() if key not in present]
    if not missing:
        return None
    env = dict(environ)
    env["GLIBC_TUNABLES"] = ":".join([current, *missing] if current else missing)
    return env


def reexec_with_tunables() -> None:
    """Replace this process by itself with :data:`TUNABLES` set (same interpreter, flags, argv)."""
    env = tuned_environment(os.environ)
    if env is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    # orig_argv keeps the interpreter's own flags (-u, -X ...) as well as the script and overrides.
    os.execve(sys.executable, sys.orig_argv, env)
