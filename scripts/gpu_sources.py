#!/usr/bin/env python3
"""Download the GPU lock's own files of the GPU-only packages, by hash, for the source tests.

tests/unit/test_gpu_libraries.py checks every unsloth / unsloth-zoo / deepspeed function, keyword
and attribute the product uses against the exact release requirements/gpu.txt locks. None of them
installs on this CPU machine, so `make test` runs this first (`make gpu-sources`): it hands the
lock's own lines of those packages (version and every --hash) to `pip download --no-deps
--require-hashes`, into .cache/gpu-sources/ (git-ignored). The tests then read the archives offline
with zipfile/tarfile + ast and import nothing from them.

Where a package is a platform wheel, pip is told the GPU lock's platform and Python (Linux x86_64,
CPython 3.11), so the same file comes down on any machine; the current ones are pure-Python wheels
(unsloth, unsloth-zoo) and an sdist (deepspeed, which publishes no wheel).

Usage: python scripts/gpu_sources.py [--lock requirements/gpu.txt] [--dest .cache/gpu-sources]
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_locks import parse_requirements  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# What the product calls on a GPU and this CPU machine's lock does not install, and the packages
# the CPU lock holds at another version (requirements/gpu-differences.toml) whose source the tests
# read (tests/locked_source.py locked_release: trl now; deepspeed should it ever differ). The other
# differences (torch, vllm, protobuf, apache-tvm-ffi) are platform wheels, torch's about 1 GB, that
# no test reads: they are not downloaded.
GPU_ONLY = ("unsloth", "unsloth-zoo")
READ_AS_SOURCE = ("trl", "deepspeed")
DIFFERENCES = ROOT / "requirements" / "gpu-differences.toml"


def packages() -> tuple[str, ...]:
    from check_locks import canon, gpu_differences

    differ = {canon(d["package"]) for d in gpu_differences(DIFFERENCES)}
    return (*GPU_ONLY, *sorted(differ & set(READ_AS_SOURCE)))


PLATFORM = ["--platform", "manylinux_2_28_x86_64", "--python-version", "3.11", "--implementation", "cp"]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def locked(lock: Path) -> dict[str, dict]:
    """The lock's entries of packages() (name -> version, hashes); absent packages are left out."""
    wanted = packages()
    return {e["name"]: e for e in parse_requirements(lock.read_text()) if e["name"] in wanted}


def cached(dest: Path, entry: dict) -> Path | None:
    """The file in ``dest`` that is one of the lock's files of ``entry`` (checked by hash), or None."""
    stem = entry["name"].replace("-", "_")
    for path in sorted(dest.glob(f"{stem}-{entry['version']}*")) + sorted(
        dest.glob(f"{entry['name']}-{entry['version']}*")
    ):
        if path.suffix in (".whl", ".gz", ".zip") and "sha256:" + sha256(path) in entry["hashes"]:
            return path
    return None


def download(entry: dict, dest: Path) -> None:
    # The marker is dropped (it names the GPU machine: Linux x86_64, Python >= 3.11); the hashes stay.
    line = f"{entry['name']}=={entry['version']} " + " ".join(f"--hash={h}" for h in sorted(entry["hashes"]))
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text(line + "\n")
        base = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "-d", str(dest)]
        wheel = subprocess.run([*base, "--only-binary=:all:", *PLATFORM, "-r", str(req)], check=False)
        if wheel.returncode != 0:  # no wheel for the GPU platform: the lock's file is the sdist
            subprocess.run([*base, "--no-binary=:all:", "-r", str(req)], check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lock", type=Path, default=ROOT / "requirements" / "gpu.txt")
    parser.add_argument("--dest", type=Path, default=ROOT / ".cache" / "gpu-sources")
    args = parser.parse_args()
    args.dest.mkdir(parents=True, exist_ok=True)
    entries = locked(args.lock)
    for name in packages():
        if name not in entries:
            print(f"gpu_sources: {name} is not in {args.lock}: nothing to download", file=sys.stderr)
            continue
        if cached(args.dest, entries[name]) is None:
            download(entries[name], args.dest)
        path = cached(args.dest, entries[name])
        if path is None:
            print(
                f"gpu_sources: no file of {name}=={entries[name]['version']} with a locked hash",
                file=sys.stderr,
            )
            return 1
        print(f"gpu_sources: {path.name} (locked hash)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
