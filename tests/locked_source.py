"""Read the GPU lock's exact release of a library as source, without importing any of it.

tests/unit/test_gpu_libraries.py checks the product's calls into GPU-only libraries against the
release requirements/gpu.txt locks:

- a package the CPU venv installs at the GPU lock's version (trl, transformers, accelerate, peft,
  bitsandbytes) is read from its installed files: :func:`installed` first asserts the version;
- a package only the GPU lock has (unsloth, unsloth-zoo, deepspeed) is read from the lock's own file,
  which `make gpu-sources` (part of `make test`) downloads by hash into .cache/gpu-sources/:
  :func:`archive` checks the file's hash against the lock and reads its members with zipfile /
  tarfile. Only the members a test asks for are parsed.

:class:`Source` resolves a dotted name the way Python would bind it (``unsloth.FastLanguageModel``
through ``from ._gpu_init import *`` and ``from .models import *`` to ``unsloth/models/loader.py``),
skipping the branches of ``if NAME:`` blocks named in ``skip`` (e.g. unsloth's Apple-MLX branch).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib.metadata
import importlib.util
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GPU_LOCK = ROOT / "requirements" / "gpu.txt"
CACHE = ROOT / ".cache" / "gpu-sources"


@functools.cache
def _check_locks():
    spec = importlib.util.spec_from_file_location("check_locks", ROOT / "scripts" / "check_locks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gpu_lock_entry(name: str) -> dict:
    """requirements/gpu.txt's entry of ``name`` (version, hashes); fails the test if it has none."""
    check_locks = _check_locks()
    entries = {e["name"]: e for e in check_locks.parse_requirements(GPU_LOCK.read_text())}
    entry = entries.get(check_locks.canon(name))
    if entry is None:
        pytest.fail(
            f"{name} is not in requirements/gpu.txt, so there is no locked release to check the product's "
            f"calls against: add it to pyproject's `gpu` extra and run `make lock`"
        )
    return entry


@dataclass(frozen=True)
class Found:
    module: str  # dotted module the binding lives in
    node: ast.AST  # ClassDef / FunctionDef / Assign, or ast.Module for a module


class Source:
    """The Python files of one release, read on demand and parsed with ast (never imported)."""

    def __init__(self, label: str, read, skip: frozenset[str] = frozenset()):
        self.label = label
        self._read = read  # relative path -> bytes, or None when absent
        self.skip = skip

    @functools.cache  # noqa: B019 (a handful of Source objects live for the test session)
    def _file(self, module: str) -> tuple[str, ast.Module] | None:
        base = module.replace(".", "/")
        for path in (f"{base}.py", f"{base}/__init__.py"):
            data = self._read(path)
            if data is not None:
                return path, ast.parse(data)
        return None

    def has_module(self, module: str) -> bool:
        return self._file(module) is not None

    def module(self, module: str) -> ast.Module:
        found = self._file(module)
        if found is None:
            raise LookupError(f"{self.label} has no module {module}")
        return found[1]

    def path(self, module: str) -> str:
        return self._file(module)[0]

    # -- binding lookup --------------------------------------------------------------------------
    def _statements(self, body: list[ast.stmt]):
        """Top-level statements as the non-skipped path executes them (into if / try / with)."""
        for stmt in body:
            if isinstance(stmt, ast.If):
                if isinstance(stmt.test, ast.Name) and stmt.test.id in self.skip:
                    yield from self._statements(stmt.orelse)
                else:
                    yield from self._statements(stmt.body)
                    yield from self._statements(stmt.orelse)
            elif isinstance(stmt, ast.Try):
                yield from self._statements(stmt.body + stmt.orelse + stmt.finalbody)
            elif isinstance(stmt, ast.With):
                yield from self._statements(stmt.body)
            else:
                yield stmt

    def _target(self, module: str, stmt: ast.ImportFrom) -> str:
        if not stmt.level:
            return stmt.module or ""
        package = module if self.path(module).endswith("__init__.py") else module.rpartition(".")[0]
        for _ in range(stmt.level - 1):
            package = package.rpartition(".")[0]
        return f"{package}.{stmt.module}" if stmt.module else package

    def lookup(self, module: str, name: str, _seen: frozenset = frozenset()) -> Found:
        """Where ``name`` is bound in ``module`` (the last binding on the path, as Python would)."""
        if (module, name) in _seen:
            raise LookupError(f"import cycle at {module}.{name}")
        seen = _seen | {(module, name)}
        found = None
        for stmt in self._statements(self.module(module).body):
            if isinstance(stmt, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == name:
                found = Found(module, stmt)
            elif isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in stmt.targets
            ):
                alias = isinstance(stmt.value, ast.Name) and stmt.value.id != name
                found = self.lookup(module, stmt.value.id, seen) if alias else Found(module, stmt)
            elif isinstance(stmt, ast.ImportFrom):
                target = self._target(module, stmt)
                for alias in stmt.names:
                    if alias.name == "*" and self.has_module(target):
                        with contextlib.suppress(LookupError):
                            found = self.lookup(target, name, seen)
                    elif (alias.asname or alias.name) == name:
                        if self.has_module(f"{target}.{alias.name}"):
                            sub = f"{target}.{alias.name}"
                            found = Found(sub, self.module(sub))
                        elif self.has_module(target):
                            found = self.lookup(target, alias.name, seen)
                        else:
                            raise LookupError(f"{module}.{name} comes from {target}, outside {self.label}")
        if found is None:
            raise LookupError(f"{name} is not defined in {self.label}'s {module}")
        return found

    def member(self, owner: Found, name: str) -> Found:
        """``owner.name``: a module's binding, or a class's attribute (through its bases)."""
        if isinstance(owner.node, ast.Module):
            # A submodule first: a package's __init__ can star-import half the package (transformers)
            sub = f"{owner.module}.{name}"
            return Found(sub, self.module(sub)) if self.has_module(sub) else self.lookup(owner.module, name)
        if isinstance(owner.node, ast.ClassDef):
            for stmt in self._statements(owner.node.body):
                if (
                    isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                    and stmt.name == name
                ):
                    return Found(owner.module, stmt)
                if isinstance(stmt, ast.Assign | ast.AnnAssign):
                    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                    if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                        return Found(owner.module, stmt)
            for base in owner.node.bases:
                try:
                    return self.member(self.resolve_expr(owner.module, base), name)
                except LookupError:
                    continue
            raise LookupError(f"{owner.node.name} (in {owner.module}) has no attribute {name}")
        raise LookupError(f"cannot take .{name} of {ast.dump(owner.node)[:80]}")

    def resolve_expr(self, module: str, expr: ast.expr) -> Found:
        """A Name / Attribute chain as written in ``module``."""
        if isinstance(expr, ast.Name):
            return self.lookup(module, expr.id)
        if isinstance(expr, ast.Attribute):
            return self.member(self.resolve_expr(module, expr.value), expr.attr)
        raise LookupError(f"not a name: {ast.unparse(expr)}")

    def resolve(self, dotted: str) -> Found:
        """``package.module.Class.method`` -> where it is defined."""
        parts = dotted.split(".")
        found = Found(parts[0], self.module(parts[0]))
        for part in parts[1:]:
            found = self.member(found, part)
        return found


def parameters(found: Found) -> tuple[list[str], bool, bool]:
    """(named parameters, takes *args, takes **kwargs) of a function or a class's __init__, without
    the bound first argument of a method (self / cls)."""
    node = found.node
    if isinstance(node, ast.ClassDef):
        raise TypeError("resolve the class's __init__ instead")
    assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef), ast.dump(node)[:80]
    args = node.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    decorators = {ast.unparse(d) for d in node.decorator_list}
    if "staticmethod" not in decorators and names and names[0] in ("self", "cls"):
        names = names[1:]
    return names, args.vararg is not None, args.kwarg is not None


def installed(dist: str) -> Source:
    """The installed release of ``dist``, which must be the GPU lock's version."""
    locked = gpu_lock_entry(dist)["version"]
    try:
        version = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(f"{dist} is not installed in this venv (the CPU lock): run `make setup`")
    if version.split("+")[0] != locked:
        pytest.fail(
            f"the venv has {dist} {version}, the GPU lock {locked}: the product would be tested against "
            f"another release than the one GPU machines install; the locks must agree (make check-locks)"
        )
    base = Path(importlib.metadata.distribution(dist).locate_file(""))

    def read(path: str) -> bytes | None:
        file = base / path
        return file.read_bytes() if file.is_file() else None

    return Source(f"{dist} {version} (installed)", read)


def locked_release(dist: str) -> Source:
    """The GPU lock's release of ``dist``: the installed files where the CPU lock holds the same
    version, else (a difference requirements/gpu-differences.toml lists) the lock's own file."""
    try:
        same = importlib.metadata.version(dist).split("+")[0] == gpu_lock_entry(dist)["version"]
    except importlib.metadata.PackageNotFoundError:
        same = False
    return installed(dist) if same else archive(dist)


@functools.cache
def _gpu_sources():
    """scripts/gpu_sources.py: it put the files in the cache, and finds them there by the lock's hashes."""
    spec = importlib.util.spec_from_file_location("gpu_sources", ROOT / "scripts" / "gpu_sources.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.cache
def archive(dist: str, skip: frozenset[str] = frozenset()) -> Source:
    """The GPU lock's own file of ``dist`` (a wheel or an sdist) from .cache/gpu-sources/."""
    entry = gpu_lock_entry(dist)
    path = _gpu_sources().cached(CACHE, entry)
    if path is None:
        found = sorted(p.name for p in CACHE.glob(f"*{entry['version']}*")) if CACHE.is_dir() else []
        pytest.fail(
            f"no file of {dist}=={entry['version']} with a hash of requirements/gpu.txt in .cache/gpu-sources/ "
            f"(found {found}): run `make gpu-sources` (make test runs it)"
        )
    if path.suffix == ".whl":
        zf = zipfile.ZipFile(path)
        members = set(zf.namelist())

        def read(name: str) -> bytes | None:
            return zf.read(name) if name in members else None
    else:
        tf = tarfile.open(path)  # noqa: SIM115 (read from for the whole test session)
        prefix = f"{tf.getnames()[0].split('/')[0]}/"
        members = {m.name for m in tf.getmembers() if m.isfile()}

        def read(name: str) -> bytes | None:
            return tf.extractfile(prefix + name).read() if prefix + name in members else None

    return Source(f"{path.name} (the GPU lock's file)", read, skip)
