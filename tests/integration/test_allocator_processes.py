"""The entry point re-executes itself with glibc's malloc settings: a process of its own; the
settings' rules are unit tests in tests/unit/test_allocator.py."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap

import pytest
from tests.unit.test_allocator import ALL

from rlvr.runtime.allocator import OPT_OUT

pytestmark = pytest.mark.integration


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_reexecuted_process_keeps_argv_and_flags_and_serves_large_buffers_from_the_heap(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(
        textwrap.dedent(
            """
            import ctypes, json, os, sys
            from rlvr.runtime.allocator import reexec_with_tunables
            print("start", flush=True)  # printed twice: before and after the re-execution
            reexec_with_tunables()
            libc = ctypes.CDLL("libc.so.6")
            libc.malloc.restype = ctypes.c_void_p
            address = libc.malloc(1 << 30)  # above top_pad, so the heap must grow for it
            heap = [line.split()[0] for line in open("/proc/self/maps") if line.rstrip().endswith("[heap]")]
            lo, hi = (int(x, 16) for x in heap[0].split("-")) if heap else (0, 0)
            print(json.dumps({"argv": sys.argv, "orig_argv": sys.orig_argv,
                              "tunables": os.environ.get("GLIBC_TUNABLES"),
                              "in_heap": lo <= address < hi}))
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", OPT_OUT)}
    out = subprocess.run(
        [sys.executable, "-u", str(script), "a=1", "b=2"], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[:2] == ["start", "start"]
    probe = json.loads(out[2])
    assert probe["argv"][1:] == ["a=1", "b=2"] and probe["orig_argv"][1] == "-u"
    assert probe["tunables"] == ALL
    # glibc would mmap a 1 GiB block (threshold <= 32 MiB); with mmap_max=0 it comes from the heap
    assert probe["in_heap"] is True

    opted_out = subprocess.run(
        [sys.executable, str(script)], env={**env, OPT_OUT: "0"}, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert opted_out[0] == "start" and json.loads(opted_out[1])["in_heap"] is False
