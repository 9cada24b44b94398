#!/usr/bin/env python3
"""Fill a folder with the GPU lock's wheels for another machine's Python, every file by its locked hash.

    make gpu-wheels DEST=<dir> GPU_PYTHON=3.12      # on a connected Linux x86_64 machine
    make gpu-check WHEELS=<dir>                     # then on the offline GPU machine

Each lock entry goes through `pip download --no-deps --require-hashes --only-binary=:all:` for
manylinux x86_64 and CPython ``--python``, so the folder holds only files whose sha256 the lock
records; the offline install then installs from it with the same hashes (scripts/offline_lock.py).
An entry with no wheel for that Python (the lock holds only its source) is listed at the end:
building it would run a build backend that no hash covers, so it is left to the user, named.

Usage: python scripts/gpu_wheels.py --dest DIR [--python 3.12] [--lock requirements/gpu.txt]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_locks import parse_requirements  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# pip matches manylinux tags exactly: the common ones a wheel of the GPU lock carries
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64", "manylinux_2_31_x86_64", "manylinux_2_34_x86_64", "manylinux_2_35_x86_64",
             "manylinux_2_24_x86_64", "linux_x86_64", "any")  # fmt: skip


def download(entry: dict, dest: Path, python: str) -> bool:
    line = f"{entry['name']}=={entry['version']} " + " ".join(f"--hash={h}" for h in sorted(entry["hashes"]))
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text(line + "\n")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--only-binary=:all:",
               "--python-version", python, "--implementation", "cp", *platforms, "-d", str(dest), "-r", str(req)]  # fmt: skip
        return subprocess.run(cmd, check=False, capture_output=True).returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lock", type=Path, default=ROOT / "requirements" / "gpu.txt")
    parser.add_argument("--dest", type=Path, required=True)
    parser.add_argument("--python", default="3.12", help="the GPU machine's Python, X.Y")
    args = parser.parse_args()
    args.dest.mkdir(parents=True, exist_ok=True)
    missing = []
    for entry in parse_requirements(args.lock.read_text()):
        ok = download(entry, args.dest, args.python)
        print(
            f"gpu_wheels: {entry['name']}=={entry['version']}: {'ok' if ok else 'no wheel for this Python'}"
        )
        if not ok:
            missing.append(f"{entry['name']}=={entry['version']}")
    if missing:
        print(
            f"gpu_wheels: {len(missing)} entries have no wheel for CPython {args.python} (source only, or not "
            f"for that Python): {', '.join(missing)}; build them there with `pip wheel --no-deps` if the "
            "machine lacks them (outside the hash-checked path), or use the Python the lock was made for",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
