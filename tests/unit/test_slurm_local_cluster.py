"""The local SLURM cluster's folder, as another user on the host would prepare it (issue 55, finding
#3; SECURITY.md "The local SLURM cluster").

infrastructure/slurm/local_cluster.sh runs as root and writes slurm.conf, pid files, logs and a munge
key (whoever reads it can mint credentials for any uid) into a folder at a predictable path in /tmp.
Each test sets up what an attacker could have left there, runs the real script and shows it refuses
before writing anything, the planted targets untouched. The cases that need a file of another uid run
only as root (only root can give a file away); the script itself needs root to start a cluster.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from tests.conftest import ROOT

SCRIPT = ROOT / "infrastructure" / "slurm" / "local_cluster.sh"
OTHER_UID = 65534  # nobody
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")


def script(folder: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RLVR_SLURM_DIR": str(folder)}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=60)


def refused(folder: Path, reason: str, command: str = "folder") -> str:
    out = script(folder, command)
    assert out.returncode == 1, out
    assert f"refusing the cluster folder {folder}: " in out.stderr and reason in out.stderr, out.stderr
    assert "Fix: remove it (rm -rf --" in out.stderr
    return out.stderr


@pytest.fixture
def victim(tmp_path) -> Path:
    """A file of root's that a link in the folder points at: it must stay as it is."""
    path = tmp_path / "victim"
    path.write_text("root's file\n")
    return path


@pytest.fixture
def ours(tmp_path) -> Path:
    """A folder as this script makes it: this user's, mode 0700."""
    folder = tmp_path / "cluster"
    folder.mkdir(mode=0o700)
    return folder


def test_a_fresh_folder_is_made_private(tmp_path):
    folder = tmp_path / "cluster"
    out = script(folder, "folder")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(folder)
    st = folder.stat()
    assert stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
    assert script(folder, "folder").returncode == 0  # its own folder passes the next time


@as_root
def test_a_folder_of_another_user_is_refused(ours, victim):
    """Even empty: its owner may plant links in it after any check of its contents. Mutation: without
    the owner check the empty folder passed."""
    os.chown(ours, OTHER_UID, OTHER_UID)
    refused(ours, f"it belongs to uid {OTHER_UID}, not to root (uid 0)")
    (ours / "slurm.conf").symlink_to(victim)
    refused(ours, f"it belongs to uid {OTHER_UID}", command="start")
    assert victim.read_text() == "root's file\n"


def test_a_folder_others_may_write_in_is_refused(ours):
    ours.chmod(0o755)
    refused(ours, "its mode is 755, not 700")
    ours.chmod(0o1777)
    refused(ours, "its mode is 1777, not 700")


def test_the_folder_as_a_link_is_refused(tmp_path, ours):
    link = tmp_path / "link"
    link.symlink_to(ours)
    refused(link, f"it is a symbolic link (to {ours})")


@pytest.mark.parametrize(
    "name", ["slurm.conf", "slurmd.pid", "log/slurmctld.log", "log/munged.out", "munge.key"]
)
def test_a_link_planted_for_a_file_root_writes_is_refused(ours, victim, name):
    (ours / name).parent.mkdir(exist_ok=True, mode=0o700)
    (ours / name).symlink_to(victim)
    refused(ours, f"it holds a symbolic link ({ours / name} -> {victim})")
    if os.geteuid() == 0:
        refused(ours, "it holds a symbolic link", command="start")
    assert victim.read_text() == "root's file\n"


def test_a_hard_link_planted_for_a_file_root_writes_is_refused(ours, victim):
    os.link(victim, ours / "jobcomp.log")
    refused(ours, f"it holds a file with another hard link ({ours / 'jobcomp.log'})")


@as_root
def test_another_users_munge_key_is_never_kept(ours):
    key = ours / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    os.chown(key, OTHER_UID, OTHER_UID)
    refused(ours, f"it holds {key}, which belongs to uid {OTHER_UID}")
    refused(ours, f"which belongs to uid {OTHER_UID}", command="start")


@pytest.mark.parametrize("mode", [0o644, 0o440, 0o604, 0o420])
def test_a_munge_key_others_can_read_is_refused(ours, mode):
    key = ours / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(mode)
    refused(ours, f"its munge.key (mode {mode:o}) is readable or writable by others")


def test_a_parent_others_may_rename_the_folder_in_is_refused(tmp_path):
    parent = tmp_path / "shared"
    parent.mkdir()
    parent.chmod(0o777)  # no sticky bit: anyone may rename the folder away and plant another
    refused(parent / "cluster", f"its parent {parent} (mode 777) is writable by others and not sticky")
    parent.chmod(0o1777)  # /tmp's mode
    assert script(parent / "cluster", "folder").returncode == 0


def test_stop_and_status_read_nothing_from_a_folder_that_is_not_private(ours):
    ours.chmod(0o755)
    (ours / "slurmd.pid").write_text(f"{os.getpid()}\n")  # a pid the script must not signal
    for command in ("stop", "status"):
        refused(ours, "its mode is 755", command=command)
    assert script(ours.parent / "absent", "stop").returncode == 0  # nothing there: nothing to stop


def test_a_new_munge_key_is_never_readable_by_others_not_even_for_a_moment(tmp_path):
    """Every write into the key happens while its file's mode is 0600 (a mktemp file, umask 077),
    whatever the caller's umask: dd and chmod are wrapped to record the mode at each step. Mutation:
    the old `dd of=munge.key` under the caller's umask 022, then chmod 400, recorded 644."""
    folder = tmp_path / "cluster"
    modes = tmp_path / "modes"
    probe = f"""
umask 022
source {SCRIPT}
dd() {{ command dd "$@"; local a; for a in "$@"; do if [[ $a == of=* ]]; then stat -c "dd %a" -- "${{a#of=}}" >>{modes}; fi; done; }}
chmod() {{ stat -c 'chmod-before %a' -- "${{@: -1}}" >>{modes}; command chmod "$@"; }}
private_dir
new_key
"""
    out = subprocess.run(
        ["bash", "-c", probe],
        capture_output=True,
        text=True,
        env={**os.environ, "RLVR_SLURM_DIR": str(folder)},
    )
    assert out.returncode == 0, out.stderr
    assert modes.read_text().split("\n")[:2] == ["dd 600", "chmod-before 600"]
    key = folder / "munge.key"
    assert key.stat().st_size == 1024 and stat.S_IMODE(key.stat().st_mode) == 0o400
    assert sorted(p.name for p in folder.iterdir()) == ["munge.key"]  # no temporary left behind
