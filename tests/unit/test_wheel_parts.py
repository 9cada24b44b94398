"""scripts/wheel_parts.py: a wheel folder packed into parts of at most N bytes, joined and hash-checked.

Small fake files and part sizes of a few kB stand in for the GPU lock's wheels and 60 MB parts.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("wheel_parts", ROOT / "scripts" / "wheel_parts.py")
wheel_parts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wheel_parts)

PART = 4096


@pytest.fixture
def wheels(tmp_path: Path) -> Path:
    folder = tmp_path / "wheels"
    folder.mkdir()
    sizes = {"a-1.0-py3-none-any.whl": 10_000, "b-2.0-cp312-cp312-linux_x86_64.whl": 3, "c-0.1.tar.gz": 5_000}
    for i, (name, size) in enumerate(sizes.items()):
        # bytes that differ from file to file and from block to block
        (folder / name).write_bytes(bytes((i * 7 + j * 13) % 251 for j in range(size)))
    return folder


def _pack(wheels: Path, tmp_path: Path) -> tuple[Path, dict]:
    parts = tmp_path / "parts"
    manifest = wheel_parts.pack(wheels, parts, PART)
    return parts, manifest


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_pack_then_join_gives_back_every_file_byte_for_byte(wheels: Path, tmp_path: Path):
    parts, manifest = _pack(wheels, tmp_path)
    assert len(manifest["parts"]) > 3
    assert all(p.stat().st_size <= PART for p in parts.glob("wheels.tar.part-*"))
    assert [w["name"] for w in manifest["wheels"]] == sorted(p.name for p in wheels.iterdir())
    out = tmp_path / "out"
    done = wheel_parts.join(parts, out)
    assert sorted(p.name for p in done) == sorted(p.name for p in wheels.iterdir())
    for src in wheels.iterdir():
        assert (out / src.name).read_bytes() == src.read_bytes()
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in wheels.iterdir())  # no temp left


def test_parts_are_split_output_that_cat_and_tar_read(wheels: Path, tmp_path: Path):
    """Without Python: `sha256sum -c` the parts, `cat` them in name order, and the result is a tar."""
    parts, manifest = _pack(wheels, tmp_path)
    names = sorted(p.name for p in parts.glob("wheels.tar.part-*"))
    assert names == [p["name"] for p in manifest["parts"]]
    assert names[:2] == ["wheels.tar.part-aa", "wheels.tar.part-ab"]  # split(1)'s suffixes
    joined = b"".join((parts / n).read_bytes() for n in names)
    assert all(
        len((parts / n).read_bytes()) == PART for n in names[:-1]
    )  # split -b: full parts, then the rest
    sums = (parts / wheel_parts.SUMS).read_text().splitlines()
    assert sums == [f"{hashlib.sha256((parts / n).read_bytes()).hexdigest()}  {n}" for n in names]
    (tmp_path / "whole.tar").write_bytes(joined)
    with tarfile.open(tmp_path / "whole.tar") as tar:
        assert sorted(tar.getnames()) == sorted(p.name for p in wheels.iterdir())
    if shutil.which("sha256sum"):
        subprocess.run(["sha256sum", "--quiet", "-c", wheel_parts.SUMS], cwd=parts, check=True)


def test_packing_is_deterministic(wheels: Path, tmp_path: Path):
    a = wheel_parts.pack(wheels, tmp_path / "a", PART)
    b = wheel_parts.pack(wheels, tmp_path / "b", PART)
    assert a == b


def test_join_refuses_a_missing_part_and_names_it(wheels: Path, tmp_path: Path):
    parts, manifest = _pack(wheels, tmp_path)
    gone = manifest["parts"][1]["name"]
    (parts / gone).unlink()
    out = tmp_path / "out"
    with pytest.raises(wheel_parts.PartsError) as err:
        wheel_parts.join(parts, out)
    assert f"{gone}: missing" in err.value.message
    assert "nothing was unpacked" in err.value.message
    assert not out.exists() or not any(out.iterdir())


def test_join_refuses_a_damaged_part_of_the_right_size_and_names_it(wheels: Path, tmp_path: Path):
    """The part hash check: one flipped byte, size unchanged, is caught before anything is unpacked."""
    parts, manifest = _pack(wheels, tmp_path)
    bad = manifest["parts"][2]["name"]
    data = bytearray((parts / bad).read_bytes())
    data[100] ^= 0xFF
    (parts / bad).write_bytes(bytes(data))
    out = tmp_path / "out"
    with pytest.raises(wheel_parts.PartsError) as err:
        wheel_parts.join(parts, out)
    assert f"{bad}: sha256 differs" in err.value.message
    assert [line.split(":")[0].strip() for line in err.value.message.splitlines()[1:]] == [bad]
    assert not out.exists() or not any(out.iterdir())


def test_join_refuses_a_wheel_whose_hash_is_not_the_manifests(wheels: Path, tmp_path: Path):
    """The wheel hash check: a part damaged before its hash was taken (the parts check passes) still
    leaves the wheel it carried unmatched; that wheel is removed and named."""
    parts, manifest = _pack(wheels, tmp_path)
    first = parts / manifest["parts"][0]["name"]
    data = bytearray(first.read_bytes())
    data[1024] ^= 0xFF  # inside a-1.0's bytes (after its 512-byte header and the pax header)
    first.write_bytes(bytes(data))
    manifest["parts"][0]["sha256"] = _sha(first)
    (parts / wheel_parts.MANIFEST).write_text(json.dumps(manifest))
    out = tmp_path / "out"
    with pytest.raises(wheel_parts.PartsError) as err:
        wheel_parts.join(parts, out)
    assert "a-1.0-py3-none-any.whl: sha256 differs" in err.value.message
    assert not (out / "a-1.0-py3-none-any.whl").exists()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_join_refuses_a_file_the_manifest_does_not_list(wheels: Path, tmp_path: Path):
    parts, manifest = _pack(wheels, tmp_path)
    manifest["wheels"] = [w for w in manifest["wheels"] if not w["name"].startswith("b-")]
    (parts / wheel_parts.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(wheel_parts.PartsError, match="not a wheel its manifest lists"):
        wheel_parts.join(parts, tmp_path / "out")


def test_join_without_a_manifest_says_what_to_copy(tmp_path: Path):
    (tmp_path / "parts").mkdir()
    with pytest.raises(wheel_parts.PartsError, match="no wheels-manifest.json"):
        wheel_parts.join(tmp_path / "parts", tmp_path / "out")


def test_pack_refuses_a_folder_with_subfolders_or_old_parts(wheels: Path, tmp_path: Path):
    (wheels / "sub").mkdir()
    with pytest.raises(wheel_parts.PartsError, match="more than plain files"):
        wheel_parts.pack(wheels, tmp_path / "p1", PART)
    (wheels / "sub").rmdir()
    wheel_parts.pack(wheels, tmp_path / "p2", PART)
    with pytest.raises(wheel_parts.PartsError, match="already holds parts"):
        wheel_parts.pack(wheels, tmp_path / "p2", PART)


def test_suffixes_grow_like_a_fixed_width_split(tmp_path: Path):
    assert wheel_parts.suffixes(3) == ["aa", "ab", "ac"]
    many = wheel_parts.suffixes(26**2 + 1)
    assert len(set(many)) == len(many) and all(len(s) == 3 for s in many) and many == sorted(many)


def test_sizes_and_the_default_part_size():
    assert wheel_parts.parse_size("60MB") == wheel_parts.PART_SIZE == 60_000_000
    assert wheel_parts.parse_size("57MiB") == 57 * 2**20
    assert wheel_parts.parse_size("4096") == 4096
