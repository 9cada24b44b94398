#!/usr/bin/env python3
"""Move a wheel folder to an offline machine in parts of at most 60 MB, hash-checked on arrival.

    python scripts/wheel_parts.py pack WHEELS PARTS [--part-size 60MB]   # where the wheels are
    python scripts/wheel_parts.py join PARTS WHEELS                      # on the offline machine

`pack` writes the folder's files as one uncompressed tar (wheels are zip files already) cut into
parts named like split(1)'s output (``wheels.tar.part-aa``, ``-ab``, ...), each at most the part
size, plus two manifests: ``wheels-manifest.json`` (the sha256 and size of every part and of every
wheel) and ``wheels-parts.sha256`` (the parts' sha256 in `sha256sum -c` form). No full-size
archive is written on either side.

`join` checks every part the manifest names (present, its size, its sha256) and refuses, naming
each missing or bad part, before anything is unpacked; it then unpacks the tar stream into the
destination and checks each wheel's sha256 against the manifest (a wheel that does not match is
removed and named). Only plain files with plain names are unpacked: no links, folders or paths.

Without Python at the far end the parts are plain split(1) output:
    sha256sum -c wheels-parts.sha256 && cat wheels.tar.part-* | tar -x -C WHEELS
(that checks the parts only; `join` also checks every wheel). The wheels' own sha256 are the lock's
(scripts/gpu_wheels.py downloads by hash), and the offline install checks them again
(--require-hashes): see docs/gpu-libraries.md. Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import re
import string
import sys
import tarfile
from pathlib import Path

PART_SIZE = 60_000_000  # bytes: "60 MB" under either reading (60 MiB is 62,914,560)
ARCHIVE = "wheels.tar"
MANIFEST = "wheels-manifest.json"
SUMS = "wheels-parts.sha256"
FORMAT = 1
_SIZE = re.compile(r"^\s*(\d+)\s*([kmg]i?b?|b)?\s*$", re.I)
_UNITS = {"": 1, "b": 1, "k": 10**3, "m": 10**6, "g": 10**9, "ki": 2**10, "mi": 2**20, "gi": 2**30}


class PartsError(SystemExit):
    """A refusal with its reason (exit status 1 with the message on stderr when uncaught)."""

    def __init__(self, message: str):
        super().__init__(f"wheel_parts: {message}")
        self.message = message


def parse_size(text: str) -> int:
    """``60MB`` / ``60M`` / ``60000000`` / ``57MiB`` -> bytes (K, M, G decimal; Ki, Mi, Gi binary)."""
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 60MB, 50MiB, 1000000)")
    unit = (m[2] or "").lower().rstrip("b")
    size = int(m[1]) * _UNITS[unit]
    if size < 1:
        raise argparse.ArgumentTypeError("the part size must be at least one byte")
    return size


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def suffixes(count: int) -> list[str]:
    """split(1)'s alphabetic suffixes (aa, ab, ..., zz, then three letters) for ``count`` parts, all of
    one length, so that the parts' names sort in their order (``cat wheels.tar.part-*``)."""
    length = 2
    while 26**length < count:
        length += 1
    letters = itertools.product(string.ascii_lowercase, repeat=length)
    return ["".join(next(letters)) for _ in range(count)]


class _PartWriter:
    """A write-only stream that cuts what it is given into files of at most ``size`` bytes."""

    def __init__(self, folder: Path, size: int):
        self.folder, self.size = folder, size
        self.parts: list[dict] = []  # temporary name, size, sha256
        self._file = None
        self._digest = None
        self._written = 0

    def _open(self) -> None:
        name = f".{ARCHIVE}.tmp-{len(self.parts):06d}"
        self._file = (self.folder / name).open("wb")
        self._digest = hashlib.sha256()
        self._written = 0
        self.parts.append({"tmp": name})

    def _close(self) -> None:
        if self._file is not None:
            self._file.close()
            self.parts[-1].update(size=self._written, sha256=self._digest.hexdigest())
            self._file = None

    def write(self, data: bytes) -> int:
        view = memoryview(data)
        while view:
            if self._file is None or self._written == self.size:
                self._close()
                self._open()
            n = min(len(view), self.size - self._written)
            chunk = view[:n]
            self._file.write(chunk)
            self._digest.update(chunk)
            self._written += n
            view = view[n:]
        return len(data)

    def close(self) -> None:
        self._close()


def pack(wheels: Path, out: Path, part_size: int = PART_SIZE) -> dict:
    """Write ``wheels``' files into ``out`` as parts of at most ``part_size`` bytes and the manifests."""
    if not wheels.is_dir():
        raise PartsError(f"{wheels} is not a folder")
    entries = sorted(wheels.iterdir())
    others = [p.name for p in entries if not p.is_file() or p.is_symlink()]
    if others:
        raise PartsError(
            f"{wheels} holds more than plain files ({', '.join(others)}): pack a flat folder of wheels"
        )
    files = [p for p in entries if not p.name.startswith(".")]
    if not files:
        raise PartsError(f"{wheels} holds no files")
    out.mkdir(parents=True, exist_ok=True)
    stale = sorted(p.name for p in out.glob(f"{ARCHIVE}.part-*")) + [
        n for n in (MANIFEST, SUMS) if (out / n).exists()
    ]
    if stale:
        raise PartsError(
            f"{out} already holds parts or a manifest ({', '.join(stale[:3])}, ...): use an empty folder"
        )
    listed = []
    writer = _PartWriter(out, part_size)
    # A pax archive of plain files, owner and time fixed: the same folder packs to the same bytes.
    with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for path in files:
            info = tarfile.TarInfo(path.name)
            info.size = path.stat().st_size
            info.mode = 0o644
            digest = hashlib.sha256()
            with path.open("rb") as f:
                tar.addfile(info, _Hashing(f, digest))
            listed.append({"name": path.name, "size": info.size, "sha256": digest.hexdigest()})
    writer.close()
    names = suffixes(len(writer.parts))
    parts = []
    for part, suffix in zip(writer.parts, names, strict=True):
        name = f"{ARCHIVE}.part-{suffix}"
        (out / part["tmp"]).rename(out / name)
        parts.append({"name": name, "size": part["size"], "sha256": part["sha256"]})
    manifest = {
        "format": FORMAT,
        "archive": ARCHIVE,
        "part_size": part_size,
        "parts": parts,
        "wheels": listed,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    (out / SUMS).write_text("".join(f"{p['sha256']}  {p['name']}\n" for p in parts))
    return manifest


class _Hashing:
    """A read-only file that hashes what tarfile reads from it."""

    def __init__(self, f, digest):
        self._f, self._digest = f, digest

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self._digest.update(data)
        return data


def read_manifest(parts: Path) -> dict:
    path = parts / MANIFEST
    if not path.is_file():
        raise PartsError(f"no {MANIFEST} in {parts}: copy it with the parts (pack writes it beside them)")
    try:
        manifest = json.loads(path.read_text())
    except ValueError as e:
        raise PartsError(f"{path} is not valid JSON ({e}): copy it again") from None
    if manifest.get("format") != FORMAT:
        raise PartsError(f"{path} is format {manifest.get('format')!r}; this script reads format {FORMAT}")
    return manifest


def check_parts(parts: Path, manifest: dict) -> list[str]:
    """One line per part that is missing, of the wrong size, or whose sha256 is not the manifest's."""
    problems = []
    for part in manifest["parts"]:
        path = parts / part["name"]
        if not path.is_file():
            problems.append(f"{part['name']}: missing")
        elif path.stat().st_size != part["size"]:
            problems.append(f"{part['name']}: {path.stat().st_size} bytes, the manifest says {part['size']}")
        elif sha256_file(path) != part["sha256"]:
            problems.append(f"{part['name']}: sha256 differs from the manifest's (a damaged copy)")
    return problems


class _Joined:
    """The parts read back to back as one stream (what `cat` of them would give)."""

    def __init__(self, paths: list[Path]):
        self._paths = iter(paths)
        self._file = None

    def read(self, n: int = -1) -> bytes:
        out = bytearray()
        while n < 0 or len(out) < n:
            if self._file is None:
                path = next(self._paths, None)
                if path is None:
                    break
                self._file = path.open("rb")
            data = self._file.read(-1 if n < 0 else n - len(out))
            if not data:
                self._file.close()
                self._file = None
                continue
            out += data
        return bytes(out)


def join(parts: Path, dest: Path) -> list[Path]:
    """Check every part, then unpack the wheels into ``dest`` and check each one's sha256."""
    manifest = read_manifest(parts)
    problems = check_parts(parts, manifest)
    if problems:
        raise PartsError(
            f"{len(problems)} of {len(manifest['parts'])} parts in {parts} are missing or bad; nothing was "
            "unpacked. Copy these again from the packing machine (their sha256 are in "
            f"{MANIFEST} and {SUMS}):\n  " + "\n  ".join(problems)
        )
    wanted = {w["name"]: w for w in manifest["wheels"]}
    dest.mkdir(parents=True, exist_ok=True)
    done: list[Path] = []
    bad: list[str] = []
    stream = _Joined([parts / p["name"] for p in manifest["parts"]])
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for member in tar:
            name = member.name
            if (
                not member.isfile()
                or "/" in name
                or "\\" in name
                or name in ("", ".", "..")
                or name not in wanted
            ):
                raise PartsError(
                    f"the archive holds {name!r}, which is not a wheel its manifest lists: refusing"
                )
            if name in {p.name for p in done}:
                raise PartsError(f"the archive holds {name} twice: refusing")
            target = dest / name
            tmp = dest / f".{name}.part"
            digest = hashlib.sha256()
            with tar.extractfile(member) as src, tmp.open("wb") as f:
                for block in iter(lambda: src.read(1 << 20), b""):
                    digest.update(block)
                    f.write(block)
            if digest.hexdigest() != wanted[name]["sha256"] or member.size != wanted[name]["size"]:
                tmp.unlink()
                bad.append(name)
                continue
            tmp.replace(target)
            done.append(target)
    missing = sorted(set(wanted) - {p.name for p in done} - set(bad))
    if bad or missing:
        lines = [f"{n}: sha256 differs from the manifest's (removed)" for n in bad]
        lines += [f"{n}: not in the archive" for n in missing]
        raise PartsError("the parts are intact but these wheels are not:\n  " + "\n  ".join(lines))
    return done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="a wheel folder -> parts of at most --part-size + manifests")
    p.add_argument("wheels", type=Path)
    p.add_argument("parts", type=Path, help="an empty (or new) folder for the parts")
    p.add_argument("--part-size", type=parse_size, default=PART_SIZE, help="default 60MB (60,000,000 bytes)")
    j = sub.add_parser("join", help="parts + manifest -> the wheel folder, every part and wheel hash-checked")
    j.add_argument("parts", type=Path)
    j.add_argument("wheels", type=Path)
    c = sub.add_parser("check", help="check the parts against the manifest only (nothing is unpacked)")
    c.add_argument("parts", type=Path)
    args = ap.parse_args(argv)
    if args.command == "pack":
        m = pack(args.wheels, args.parts, args.part_size)
        total = sum(p["size"] for p in m["parts"])
        print(
            f"wheel_parts: {len(m['wheels'])} files, {total:,} bytes in {len(m['parts'])} parts of at most "
            f"{args.part_size:,} bytes in {args.parts} (+ {MANIFEST}, {SUMS}): copy the whole folder"
        )
    elif args.command == "join":
        done = join(args.parts, args.wheels)
        print(f"wheel_parts: {len(done)} wheels in {args.wheels}, every part and every wheel sha256-checked")
    else:
        manifest = read_manifest(args.parts)
        problems = check_parts(args.parts, manifest)
        for line in problems:
            print(f"wheel_parts: {line}", file=sys.stderr)
        if problems:
            return 1
        print(f"wheel_parts: all {len(manifest['parts'])} parts match {MANIFEST}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
