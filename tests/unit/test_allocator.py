"""glibc malloc settings (rlvr.runtime.allocator): which environment the entry point re-executes with, and
that a re-executed process really allocates large buffers from its heap instead of fresh mmaps."""

from __future__ import annotations

import pytest

from rlvr.runtime.allocator import OPT_OUT, TUNABLES, tuned_environment

ALL = ":".join(f"{k}={v}" for k, v in TUNABLES.items())


def test_adds_every_tunable_to_a_plain_environment():
    env = tuned_environment({"PATH": "/bin"}, libc="glibc")
    assert env["GLIBC_TUNABLES"] == ALL and env["PATH"] == "/bin"


def test_the_users_own_setting_wins_and_is_kept():
    mine = "glibc.malloc.mmap_max=7:glibc.malloc.arena_max=2"
    env = tuned_environment({"GLIBC_TUNABLES": mine}, libc="glibc")
    items = env["GLIBC_TUNABLES"].split(":")
    assert items[:2] == mine.split(":")
    assert [i for i in items if i.startswith("glibc.malloc.mmap_max=")] == ["glibc.malloc.mmap_max=7"]
    assert "glibc.malloc.trim_threshold=4294967296" in items


def test_nothing_to_do_once_applied_so_the_reexecution_cannot_loop():
    env = tuned_environment({}, libc="glibc")
    assert tuned_environment(env, libc="glibc") is None


@pytest.mark.parametrize("value", ["0", " 0 "])
def test_opt_out(value):
    assert tuned_environment({OPT_OUT: value}, libc="glibc") is None


def test_other_c_libraries_ignore_glibc_tunables():
    assert tuned_environment({}, libc="") is None
