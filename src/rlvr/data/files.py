"""Question/answer datasets from files or any ``datasets`` source (GSM8K, FinQA, your own), as train/eval splits.

``data.path`` is read with the ``datasets`` library:

- a ``.jsonl`` / ``.json`` / ``.parquet`` / ``.csv`` file (``load_dataset(<format>, data_files=...)``),
- a directory written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk`` (``load_from_disk``:
  the way to bring a hub dataset to an offline machine),
- any other directory or a hub id such as ``openai/gsm8k`` (``load_dataset(path, data.subset)``; needs
  the network for a hub id).

Rows become questions through ``data.processor`` (rlvr.data.processors) and are scored by
``data.checker`` (rlvr.verifier.checkers), which every entry names so the sandboxed verifier
worker applies it. Which rows may be trained on follows the one split rule of the product
(rlvr.data.identity): a row's side is decided by the hash of ``data.name`` and its question,
so the same question is held out in every run, every evaluation and every benchmark, whatever
the file's own train/test split, its order or the seed.
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from datasets import Dataset
from pydantic import Field

from rlvr.data import identity
from rlvr.data.base import TaskData, eval_set_drawn_size_issues, eval_set_issues, with_eval_sets
from rlvr.data.processors import Processor, QAItem, RowError
from rlvr.data.reasoning_gym import to_dataset
from rlvr.issues import ConfigIssue, ConfigValidationError
from rlvr.prompts import PromptTemplate
from rlvr.runtime.secrets import error_text
from rlvr.verifier.checkers import Checker
from rlvr.verifier.entries import to_json_safe

FILE_FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv"}
# Deepest bracket nesting a JSON data file may hold. A question/answer row is a few levels deep
# (FinQA's table: 4); two million levels crashed the process (a stack overflow in the parser, a
# segmentation fault without a message), so the depth is measured before any parser sees the file.
MAX_JSON_NESTING = 100
# JSON strings cannot span lines, and a bracket inside one is text, not nesting.
_JSON_STRING = re.compile(rb'"(?:[^"\\\n]|\\.)*"')
# +1 for an opening bracket, -1 for a closing one, 0 for any other byte.
_STEP = np.zeros(256, dtype=np.int64)
_STEP[list(b"[{")], _STEP[list(b"]}")] = 1, -1
_NOT_BRACKETS = bytes(b for b in range(256) if not _STEP[b])
# A header cell: a column name, not a line of text (a `KEY=value` credential line read as CSV is not one).
_HEADER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_ .-]{0,63}")


class DataFileError(ValueError):
    """A data file that rlvr refuses to hand to a parser; the message names file, line and rule."""

    def __init__(self, problem: str, fix: str):
        super().__init__(problem)
        self.fix = fix


def check_nesting(path: Path, limit: int = MAX_JSON_NESTING) -> None:
    """DataFileError when a JSON/JSONL file nests brackets deeper than ``limit`` (outside strings)."""
    with path.open("rb") as lines:
        check_nesting_of(lines, str(path), limit)


def check_nesting_of(lines: Iterable[bytes], name: str, limit: int = MAX_JSON_NESTING) -> None:
    """DataFileError naming ``name`` and the line when ``lines`` nest brackets deeper than ``limit``."""
    depth = 0
    for number, line in enumerate(lines, start=1):
        # Only brackets outside strings are left; the scan is linear and runs at C speed per line.
        brackets = _JSON_STRING.sub(b"", line).translate(None, _NOT_BRACKETS)
        if not brackets:
            continue
        levels = depth + np.cumsum(_STEP[np.frombuffer(brackets, dtype=np.uint8)])
        if int(levels.max()) > limit:
            raise DataFileError(
                f"{name}, line {number}: brackets nested deeper than {limit} levels (the limit for a "
                "data file: a question/answer row is a few levels deep)",
                "flatten the row's fields (a nested field can be a JSON string), or fix the file",
            )
        depth = int(levels[-1])


def read_once(local: Path) -> tuple[bytes, os.stat_result]:
    """The bytes of the file at ``local`` and its status, from one open: whatever replaces the path
    afterwards is not what the checks or the parser see. DataFileError for anything but a regular
    file (a FIFO would block the reader)."""
    fd = os.open(local, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise DataFileError(f"{local} is not a regular file", "give a .jsonl/.json/.parquet/.csv file")
        os.set_blocking(fd, True)
        with os.fdopen(os.dup(fd), "rb") as file:
            return file.read(), info
    finally:
        os.close(fd)


def snapshot(data: bytes, suffix: str) -> Path:
    """A copy of ``data`` in this user's private folder, named by its sha256 (written once, atomically):
    the file the parser reads is the one that was checked, and nobody else can replace it."""
    folder = private_folder() / "snapshots"
    folder.mkdir(mode=0o700, exist_ok=True)
    copy = folder / f"{hashlib.sha256(data).hexdigest()}{suffix}"
    if not copy.is_file():  # an existing copy keeps its mtime, so the Arrow cache of it is reused
        partial = folder / f".{copy.name}.{os.getpid()}.part"
        partial.write_bytes(data)
        os.replace(partial, copy)
    return copy


def private_folder() -> Path:
    """This user's 0700 folder under the datasets cache (``rlvr-private-<uid>``), refused when it is a
    link or someone else's."""
    import datasets

    folder = Path(datasets.config.HF_DATASETS_CACHE) / f"rlvr-private-{os.getuid()}"
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = folder.lstat()
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.getuid():
        raise DataFileError(
            f"the private data cache {folder} is a link or belongs to another user",
            "remove it (rlvr creates it again, 0700)",
        )
    folder.chmod(0o700)
    return folder


def private_cache(info: os.stat_result) -> str | None:
    """The cache folder for the Arrow copy of a file with status ``info``: None (the datasets cache)
    for a file anyone may read; the private folder for a private one, so the cache never shares what
    the file does not (``datasets`` writes its copy world-readable under the default umask)."""
    if info.st_mode & stat.S_IROTH:  # the status of the opened file: a link's target decides
        return None
    return str(private_folder())


def field_names(row: dict[str, Any]) -> str:
    """The row's field names when they look like a header, else only their count: a file that is not
    a data file (a credential file read as CSV) has its first line as "field names"."""
    names = [str(n) for n in row]
    if all(_HEADER_NAME.fullmatch(n) for n in names):
        return f"fields: {sorted(names)}"
    return f"{len(names)} fields, names not shown: they do not look like column names"


def load_source(path: str, split: str | None, subset: str | None) -> Dataset:
    """Every row of ``path`` (one split if ``split`` is set, else all splits concatenated)."""
    import datasets

    local = Path(path).expanduser()
    if local.is_file():
        fmt = FILE_FORMATS.get(local.suffix.lower())
        if fmt is None:
            raise ValueError(f"unknown file type {local.suffix!r}; use one of {sorted(FILE_FORMATS)}")
        # One open for check and read: the checks and the parser see the same bytes, never the path again.
        data, info = read_once(local)
        if fmt == "json":
            check_nesting_of(io.BytesIO(data), str(local))
        copy = snapshot(data, local.suffix.lower())
        loaded: Any = datasets.load_dataset(
            fmt, data_files=str(copy), split="train", cache_dir=private_cache(info)
        )
    elif local.is_dir() and any((local / f).is_file() for f in ("dataset_info.json", "dataset_dict.json")):
        loaded = datasets.load_from_disk(str(local))
    else:
        loaded = datasets.load_dataset(str(local) if local.is_dir() else path, subset)
    if isinstance(loaded, datasets.DatasetDict):
        if split is not None:
            if split not in loaded:
                raise ValueError(f"no split {split!r}; the source has {sorted(loaded)}")
            return loaded[split]
        return datasets.concatenate_datasets([loaded[s] for s in sorted(loaded)])
    return loaded


class FileData:
    """A question/answer dataset from a file, a saved directory or a hub id.

    Args:
        name: the task name of these questions (results, reports, and the held-out split rule).
        path: file, ``save_to_disk`` directory or hub id (see the module docstring).
        processor: turns a row into a QAItem (``rlvr.data.processors.GSM8K``, ``FinQA``,
            ``QuestionAnswer`` or your own from a plugin package).
        checker: scores an answer against the gold (``rlvr.verifier.checkers.MathVerify`` or
            ``ExactMatch``, or your own); runs in the verifier sandbox.
        train_size: training questions (None = every train-side row).
        eval_size: held-out questions (None = every test-side row).
        seed: order of the training rows; which rows are held out does not depend on it.
        split: read only this split of a multi-split source (None = all splits).
        subset: the configuration name of a hub dataset (``main`` for openai/gsm8k).
        eval_sets: extra evaluation sets, name -> data component (rlvr.data.base).
    """

    def __init__(
        self,
        name: str,
        path: str | None,
        processor: Processor,
        checker: Checker,
        train_size: Annotated[int, Field(ge=1, examples=[200], description="null = all")] | None,
        eval_size: Annotated[int, Field(ge=1, examples=[200], description="null = all")] | None,
        seed: int,
        split: str | None,
        subset: str | None,
        eval_sets: dict[str, Any] | None,
    ):
        self.name = name
        self.path = path
        self.processor = processor
        self.checker = checker
        self.train_size = train_size
        self.eval_size = eval_size
        self.seed = seed
        self.split = split
        self.subset = subset
        self.eval_sets = dict(eval_sets or {})
        self._items: list[QAItem] | None = None

    # -- reading ------------------------------------------------------------------------------------
    def items(self, key: str = "data") -> list[QAItem]:
        """Every usable row as a QAItem (read once); ConfigValidationError for a bad path or row."""
        if self._items is not None:
            return self._items
        try:
            rows = load_source(str(self.path), self.split, self.subset)
        except DataFileError as exc:
            raise ConfigValidationError([ConfigIssue(f"{key}.path", self.path, str(exc), exc.fix)]) from None
        except Exception as exc:  # datasets raises many types (FileNotFoundError, DatasetNotFoundError...)
            raise ConfigValidationError(
                [
                    ConfigIssue(
                        f"{key}.path",
                        self.path,
                        # The reader's message may quote the file (a credential file given as data):
                        # quoted text is shown by its length only, secrets masked (rlvr.runtime.secrets).
                        f"could not be read with `datasets` ({error_text(exc)})",
                        "give a .jsonl/.json/.parquet/.csv file, a save_to_disk directory, or a hub id "
                        "(online only); check data.split and data.subset",
                    )
                ]
            ) from None
        items = []
        for i, row in enumerate(rows):
            try:
                item = self.processor(row)
            except KeyError as exc:
                raise ConfigValidationError(
                    [
                        ConfigIssue(
                            f"{key}.processor",
                            type(self.processor).__name__,
                            f"row {i} of {self.path} has no field {exc.args[0]!r} ({field_names(row)})",
                            f"set the processor's field names to this file's columns, or pick another "
                            f"{key}.processor._target_",
                        )
                    ]
                ) from None
            except RowError as exc:
                raise ConfigValidationError(
                    [
                        ConfigIssue(
                            f"{key}.processor",
                            type(self.processor).__name__,
                            f"row {i} of {self.path}: {exc}",
                            "fix the row, or use a processor for this file's format",
                        )
                    ]
                ) from None
            if item is not None and item.question:
                items.append(item)
        if not items:
            raise ConfigValidationError(
                [
                    ConfigIssue(
                        f"{key}.path", self.path, "holds no usable rows", "point it at a non-empty dataset"
                    )
                ]
            )
        self._items = items
        return items

    def validate(self, key: str = "data", sizes: bool = True) -> list[ConfigIssue]:
        """The path, processor and checker; the rows read; ``train_size`` / ``eval_size`` against what
        the split gives (``sizes``: a mixture judges its own shares instead)."""
        issues = []
        if not self.path:
            issues.append(
                ConfigIssue(
                    f"{key}.path", self.path, "is required", f"set {key}.path=<file, directory or hub id>"
                )
            )
        if not callable(self.processor):
            issues.append(
                ConfigIssue(f"{key}.processor", self.processor, "is not callable", "name a processor class")
            )
        if not isinstance(self.checker, Checker):
            issues.append(
                ConfigIssue(
                    f"{key}.checker",
                    type(self.checker).__name__,
                    "is not a rlvr.verifier.checkers.Checker",
                    "use rlvr.verifier.checkers.MathVerify or ExactMatch, or subclass Checker",
                )
            )
        issues += eval_set_issues(self.eval_sets)
        if issues:
            return issues
        # Reading the source here finds a wrong path, field name or format before a model loads.
        try:
            self.items(key)
        except ConfigValidationError as exc:
            return exc.issues
        if self.tasks_without_references() and self.checker.needs_reference:
            return [
                ConfigIssue(
                    f"{key}.checker",
                    type(self.checker).__name__,
                    "compares answers with a reference answer, and these rows have none "
                    f"({key}.processor.answer_field=null, or rows without one)",
                    "use a checker that scores an answer from the question alone (a "
                    "rlvr.verifier.checkers.Checker subclass with needs_reference = False), or name the "
                    f"answer column in {key}.processor.answer_field",
                )
            ]
        return self.size_issues(key) if sizes else []

    def drawn_size_issues(self) -> list[ConfigIssue]:
        """Extra evaluation sets drawn from a generator (reasoning-gym) judged for their ``eval_size``
        (``validate_only``; this file's own sizes are judged by ``validate``)."""
        return eval_set_drawn_size_issues(self.eval_sets)

    def tasks_without_references(self) -> list[str]:
        """This dataset's name if any of its rows has no reference answer (rlvr.data.references)."""
        try:
            return [self.name] if any(it.answer is None for it in self.items()) else []
        except ConfigValidationError:  # an unreadable source: validate() reports it
            return []

    # -- splits -------------------------------------------------------------------------------------
    def _entry(self, item: QAItem) -> dict[str, Any]:
        entry = {
            "question": item.question,
            "answer": item.answer,
            "metadata": {**item.metadata, "source_dataset": self.name},
            "checker": self.checker.spec(),
        }
        # A parquet or save_to_disk row can hold values JSON cannot (timestamps, bytes, numpy).
        return to_json_safe(entry, f"{self.name} question {item.question[:40]!r}")

    def _side_items(self, split: str) -> list[QAItem]:
        """The usable rows on one side of the content-hash split: ``test`` distinct and in a fixed order
        (by question id), ``train`` shuffled by ``seed``."""
        picked = [it for it in self.items() if identity.split_of(self.name, it.question) == split]
        if split == "test":
            unique = {identity.question_id(self.name, it.question): it for it in picked}
            return [unique[k] for k in sorted(unique)]
        random.Random(self.seed).shuffle(picked)
        return picked

    def _size_issue(self, split: str, size: int | None, key: str, found: int) -> ConfigIssue | None:
        if size is None or found >= size:
            return None
        return ConfigIssue(
            key,
            size,
            f"{self.path} has only {found} {split}-side questions for {self.name!r} "
            f"(the {split} side is a fixed share of the questions by content hash)",
            f"lower {key}, or set it to null for all of them",
        )

    def size_issues(self, key: str = "data") -> list[ConfigIssue]:
        """``train_size`` and ``eval_size`` judged against what the split gives (validate_only sees
        them before the data stage would fail)."""
        sides = (
            ("train", self.train_size, f"{key}.train_size"),
            ("test", self.eval_size, f"{key}.eval_size"),
        )
        issues = [self._size_issue(split, size, k, len(self._side_items(split))) for split, size, k in sides]
        return [issue for issue in issues if issue is not None]

    def side(self, split: str, size: int | None, key: str) -> list[dict[str, Any]]:
        """Entries of one side of the content-hash split (``_side_items``); ConfigValidationError naming
        ``key`` if too few."""
        picked = self._side_items(split)
        issue = self._size_issue(split, size, key, len(picked))
        if issue is not None:
            raise ConfigValidationError([issue])
        return [self._entry(it) for it in picked[:size]]

    def eval_split(self, prompt: PromptTemplate, key: str = "data.eval_size") -> Dataset:
        return to_dataset(self.side("test", self.eval_size, key), self.name, prompt)

    def load(self, prompt: PromptTemplate) -> TaskData:
        train = self.side("train", self.train_size, "data.train_size")
        data = TaskData(
            train=to_dataset(train, self.name, prompt),
            eval=self.eval_split(prompt),
            tasks=[self.name],
            seed=self.seed,
            manifest=identity.manifest(
                [self.name],
                {self.name: {"path": str(self.path), "split": self.split, "subset": self.subset}},
                identity.ids_of((self.name, e["question"]) for e in train),
            ),
        )
        return with_eval_sets(data, self.eval_sets, prompt)
