#!/usr/bin/env python3
"""The part of a hashed lock still to install from a local wheel folder, beside a preinstalled torch.

    python scripts/offline_lock.py requirements/gpu.txt > rest.txt
    PIP_NO_INDEX=1 PIP_FIND_LINKS=<wheels> pip install --require-hashes -r rest.txt

`make gpu-check WHEELS=<dir>` uses it on offline GPU machines whose image already has torch and
transformers (e.g. a vendor's CUDA container): those are used as they are, whatever their version,
together with what the lock installs only for them (by the lock's ``# via`` annotations: torch's
CUDA runtime wheels, transformers' tokenizers, ...). Every other entry stays, with its hashes, unless
exactly its locked version is installed already; `pip check` afterwards says whether the
preinstalled versions suit the rest (vllm, for one, pins its torch).
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

PREINSTALLED = ("torch", "transformers")
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


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    text = Path(argv[0]).read_text()
    installed = {name: installed_version(name) for name, *_ in entries(text)}
    body, notes = still_to_install(text, installed)
    for note in notes:
        print(note, file=sys.stderr)
    sys.stdout.write(body)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
