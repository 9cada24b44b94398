"""The one way this package writes a file: atomically, and never through a symlink or out of its root.

A run directory may come from somewhere else (a colleague's run resumed, a
directory synced back from a bucket), so a link planted in it must not turn a
write into an overwrite of the link's target. Every write goes to a temp file
in the same directory and is renamed over the destination: ``os.replace``
replaces a symlink itself, never what it points to. Parent directories are
checked too, so ``run_dir/eval -> /elsewhere`` is refused rather than followed. A file written in
place (appended, or the lock) must not be a hard link either (:func:`hard_link_problem`).

A file name a config chooses (the JSONL metrics file, the TensorBoard folder) is a path
*inside* the run directory: :func:`config_path_problem` refuses one that is absolute or
climbs out with ``..`` before anything runs, and :func:`inside` and :func:`open_append`
hold the same rule when the file is opened (SECURITY.md "Where a run writes").

Text and JSON pass the one redaction of ``rlvr.runtime.secrets`` on the way (values read from the
environment, credential variables, credential-shaped text): no file the product writes holds a
secret, whichever component put it in the record. Bytes (a rendered figure) are written as given.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any


class SymlinkRefused(OSError):
    """A write would have gone through a symbolic link inside the directory being written."""


class HardLinkRefused(SymlinkRefused):
    """A file the run would write in place has another name (a hard link): writing it would change
    the file wherever else it is, e.g. outside the run directory."""


def hard_link_problem(path: str | os.PathLike[str], st: os.stat_result) -> HardLinkRefused | None:
    """:class:`HardLinkRefused` when ``st`` (of ``path``, from ``lstat`` or ``fstat``) is a regular
    file with more than one name, else None. Its content is never read or shown."""
    if not stat.S_ISREG(st.st_mode) or st.st_nlink <= 1:
        return None
    return HardLinkRefused(
        f"{path} is a hard link ({st.st_nlink} names for one file, the others possibly outside the run "
        "directory); a run writes some files in place (run.lock, metrics.jsonl, its log; libraries "
        "their checkpoint files) and would change the file everywhere. Give it its own copy "
        f"(cp {path} {path}.copy && mv {path}.copy {path}), or copy the run directory without hard "
        "links (cp -r, not cp -al) and use the copy"
    )


class PathEscape(ValueError):
    """A path a config chose would leave the directory it must stay in."""


def config_path_problem(value: object) -> str | None:
    """Why ``value`` cannot name a file or folder inside a run directory, or None when it can.

    Judged on the text alone (before any directory exists): not empty, not absolute (``/x``,
    ``~/x``), and no ``..`` part at all, even one that would come back (``logs/../metrics.jsonl``
    names the same file as ``metrics.jsonl``, so nothing is lost by writing it plainly).
    """
    if not isinstance(value, str) or not value.strip():
        return "must be a non-empty relative path"
    if value.startswith("~") or Path(value).is_absolute() or os.path.isabs(value):
        return "is absolute; a run writes only inside its run directory"
    if ".." in Path(value).parts or ".." in value.replace("\\", "/").split("/"):
        return "contains '..'; a run writes only inside its run directory"
    if "\0" in value:
        return "contains a NUL byte"
    return None


# What a run leaves in its directory (rlvr.training_loop.checkpoints.FINGERPRINT among them): a fresh run
# refuses a directory holding any of them, it would overwrite or append to another run's records.
RUN_RECORDS = (
    "config_resolved.yaml",
    "run_fingerprint.json",
    "metrics.jsonl",
    "attempts.json",
    "provenance.json",
    "report.json",
    "checkpoints",
    "final",
)


def run_records_in(folder: str | os.PathLike[str]) -> list[str]:
    """The names of :data:`RUN_RECORDS` present in ``folder`` (a link counts: it is there)."""
    return [name for name in RUN_RECORDS if os.path.lexists(Path(folder) / name)]


def inside(root: str | os.PathLike[str], relative: str | os.PathLike[str]) -> Path:
    """``root / relative``, refused (:class:`PathEscape`) unless it stays inside ``root`` both as
    written and on disk (no link below ``root`` leads out: those are refused, :class:`SymlinkRefused`)."""
    root = Path(root)
    problem = config_path_problem(str(relative))
    if problem:
        raise PathEscape(f"{relative!r} {problem} ({root})")
    path = root / relative
    check_no_symlinks(path, root)
    real_root = os.path.realpath(root)
    if os.path.commonpath([real_root, os.path.realpath(path)]) != real_root:
        raise PathEscape(f"{path} leads out of {root}")
    return path


def open_append(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> Any:
    """``path`` opened for appending text, never through a link: the last component is opened with
    ``O_NOFOLLOW`` (a link planted there fails the open instead of being followed, even one planted
    after the checks), and the folders between ``root`` and it must not be links either; a file with
    another name (a hard link) is refused on the open descriptor, before anything is written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    check_no_symlinks(path, root)
    flags = (
        os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    )
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if path.is_symlink():
            raise SymlinkRefused(
                f"refusing to append to {path}: it is a symbolic link (to {os.readlink(path)}); "
                "a run never writes through links planted in its directory"
            ) from exc
        raise
    linked = hard_link_problem(path, os.fstat(fd))  # checked on what was opened, before any write
    if linked:
        os.close(fd)
        raise linked
    return os.fdopen(fd, "a", encoding="utf-8")


def check_no_symlinks(path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> None:
    """Raise :class:`SymlinkRefused` if ``path`` or a parent below ``root`` is a symlink.

    ``root`` defaults to ``path``'s parent: links above it (e.g. a home directory on
    another disk) are the user's own choice, links below it are what an attacker plants.
    """
    path = Path(path)
    root = Path(root) if root is not None else path.parent
    current = path
    while True:
        if current.is_symlink():
            raise SymlinkRefused(
                f"refusing to write {path}: {current} is a symbolic link (to {os.readlink(current)}). "
                "A run never writes through links planted in its directory; remove the link or "
                "choose another hydra.run.dir"
            )
        if current == root or current == current.parent or root not in current.parents:
            return
        current = current.parent


def refuse_symlinks_in(root: str | os.PathLike[str]) -> None:
    """Raise :class:`SymlinkRefused` if any file or folder under ``root`` is a symlink, and
    :class:`HardLinkRefused` if a file has another name (a hard link).

    Libraries (transformers' checkpoint and save_pretrained, TensorBoard, W&B) write into the
    run directory without this module, and they follow links; so a run checks the whole tree
    before it writes anything (a fresh run dir is empty; a resumed one may come from elsewhere).
    """
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            path = Path(folder) / name
            if path.is_symlink():
                raise SymlinkRefused(
                    f"{path} is a symbolic link (to {os.readlink(path)}) inside the run directory {root}; "
                    "a run never writes through links (they could point anywhere). Remove the link, or "
                    "copy the run directory with links resolved (cp -rL) and resume from the copy"
                )
            linked = hard_link_problem(path, path.lstat()) if name in files else None
            if linked:
                raise linked


def atomic_write_bytes(
    path: str | os.PathLike[str], data: bytes, root: str | os.PathLike[str] | None = None
) -> Path:
    """Write ``data`` so that ``path`` holds either its old content or all of the new one.

    The temp file lives in the destination's directory because ``os.replace`` is only atomic
    within one file system; it is fsynced before the rename so a power cut cannot leave a
    renamed but empty file. ``root``: see :func:`check_no_symlinks`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    check_no_symlinks(path, root)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    # Persist the rename itself; not every platform lets you open a directory, hence best effort.
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return path


def atomic_write_text(
    path: str | os.PathLike[str], text: str, root: str | os.PathLike[str] | None = None
) -> Path:
    from rlvr.runtime.secrets import redact_text

    return atomic_write_bytes(path, redact_text(text).encode("utf-8"), root)


def atomic_write_json(
    path: str | os.PathLike[str], obj: Any, root: str | os.PathLike[str] | None = None, **dump_kwargs: Any
) -> Path:
    """``obj`` as indented JSON (``dump_kwargs`` go to ``json.dumps``, e.g. ``default=str``).

    Redacted as data before it is encoded (JSON escapes a quote or backslash in a secret, so the
    text would no longer contain it), then as text."""
    from rlvr.runtime.secrets import redact

    dump_kwargs.setdefault("indent", 2)
    dump_kwargs.setdefault("ensure_ascii", False)
    return atomic_write_text(path, json.dumps(redact(obj), **dump_kwargs) + "\n", root)
