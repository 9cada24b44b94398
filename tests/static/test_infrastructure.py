"""Static checks of infrastructure/ (no cloud, container engine or cluster is reachable here).

The checkers come from the hashed requirements/tools.txt in their own venv (`make tools`, run by
`make test`). What these tests cover, and what they cannot, is listed in infrastructure/README.md.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from tests.conftest import ROOT

INFRA = ROOT / "infrastructure"
TERRAFORM = INFRA / "terraform"
TEMPLATE = TERRAFORM / "startup.sh.tftpl"
TOOLS = ROOT / ".venv-tools" / "bin"


def tool(name: str) -> str:
    path = TOOLS / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make tools` (make test does) to install the static checkers")
    return str(path)


def hcl(path: Path) -> dict:
    """The parsed .tf file (python-hcl2, run in the tools venv)."""
    code = "import hcl2, json, sys; print(json.dumps(hcl2.load(open(sys.argv[1]))))"
    proc = subprocess.run([tool("python"), "-c", code, str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, f"{path.name} does not parse: {proc.stderr[-2000:]}"
    return json.loads(proc.stdout)


def render(template: str) -> str:
    """The startup script as Terraform's templatefile would render it, with example values."""
    values = {
        "repository_url": "https://example.com/rlvr.git",
        "repository_commit": "0" * 40,
        "overrides": "'experiment=smoke' 'seed=1'",
        "run_prefix": "gs://bucket/rlvr-run",
        "sync_minutes": "10",
        "wandb_secret_id": "wandb-api-key",
        "project_id": "project",
        "nvidia_driver": "580-server",
    }
    rendered = re.sub(r"(?<!\$)\$\{(\w+)\}", lambda m: values[m.group(1)], template)
    return rendered.replace("$${", "${")  # templatefile's escape for a literal ${


def test_every_tf_parses_and_declares_what_it_uses():
    files = sorted(TERRAFORM.glob("*.tf"))
    assert {f.name for f in files} >= {"main.tf", "variables.tf", "outputs.tf", "versions.tf"}
    parsed = {f.name: hcl(f) for f in files}
    declared = {
        name: body for f in parsed.values() for v in f.get("variable", []) for name, body in v.items()
    }
    outputs = {name: body for f in parsed.values() for o in f.get("output", []) for name, body in o.items()}
    used = {m for f in files for m in re.findall(r"\bvar\.(\w+)", f.read_text())}
    assert used - declared.keys() == set(), "used but not declared"
    assert declared.keys() - used == set(), "declared but never used"
    assert all(body.get("description") for body in declared.values()), "every variable needs a description"
    assert outputs and all(body.get("description") for body in outputs.values())


def test_startup_template_gets_exactly_the_variables_it_uses():
    used = set(re.findall(r"\$\{(\w+)\}", TEMPLATE.read_text()))
    main = (TERRAFORM / "main.tf").read_text()
    call = main[main.index("templatefile(") : main.index("})", main.index("templatefile("))]
    passed = set(re.findall(r"^\s*(\w+)\s*=", call, re.MULTILINE))
    assert used == passed


def test_checkov_finds_no_failed_check():
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE"}  # no download of check guidelines (offline)
    proc = subprocess.run(
        [tool("checkov"), "-d", str(INFRA), "--framework", "terraform", "dockerfile", "kubernetes",
         "--output", "json", "--skip-download"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=600,
    )  # fmt: skip
    reports = json.loads(proc.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    by_framework = {r["check_type"]: r for r in reports}
    assert set(by_framework) == {"terraform", "dockerfile", "kubernetes"}, proc.stderr[-2000:]
    for name, report in by_framework.items():
        failed = report["results"]["failed_checks"]
        assert failed == [], f"{name}: " + "; ".join(f"{c['check_id']} {c['resource']}" for c in failed)
        assert report["summary"]["passed"] > 0
        for skipped in report["results"]["skipped_checks"]:  # a skip says why
            assert len(skipped["check_result"].get("suppress_comment") or "") > 20, skipped["check_id"]
    skips = {c["check_id"] for c in by_framework["terraform"]["results"]["skipped_checks"]}
    assert skips == {"CKV_GCP_38", "CKV_GCP_40", "CKV_GCP_62"}  # the ones infrastructure/README.md names
    assert proc.returncode == 0


def test_shellcheck_passes_on_every_shell_script(tmp_path):
    rendered = tmp_path / "startup.sh"
    rendered.write_text(render(TEMPLATE.read_text()))
    tracked = subprocess.run(["git", "ls-files", "*.sh"], capture_output=True, text=True, cwd=ROOT).stdout
    scripts = [rendered, ROOT / ".ci" / "run", *(ROOT / p for p in tracked.split())]
    proc = subprocess.run([tool("shellcheck"), *map(str, scripts)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:]


def test_hadolint_passes_on_the_dockerfile():
    proc = subprocess.run(
        [tool("hadolint"), str(INFRA / "docker" / "Dockerfile")], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_yamllint_passes_on_the_kubernetes_manifests():
    rules = "{extends: default, rules: {line-length: {max: 140}}}"
    manifests = [str(p) for p in (INFRA / "k8s").glob("*.yaml")]
    proc = subprocess.run([tool("yamllint"), "-s", "-d", rules, *manifests], capture_output=True, text=True)
    assert manifests and proc.returncode == 0, proc.stdout


def test_startup_runs_the_command_the_readme_documents():
    """The VM's setup and run lines are README "Cloud GPUs" lines, so the two cannot drift."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Cloud GPUs") :]
    block = section[section.index("```bash") + 7 : section.index("```", section.index("```bash") + 7)]
    documented = [line.strip() for line in block.strip().splitlines()]
    script = [line.strip() for line in TEMPLATE.read_text().splitlines()]
    as_rendered = [line.replace("${overrides}", "$OVERRIDES") for line in script]
    start = as_rendered.index(documented[0])
    assert as_rendered[start : start + len(documented)] == documented


def test_the_vm_identity_has_only_what_the_run_needs():
    """No key for the service account, no project-wide storage role, no credential variable."""
    main = (TERRAFORM / "main.tf").read_text()
    assert "google_service_account_key" not in main
    roles = re.findall(r'role\s*=\s*"([^"]+)"', main)
    assert sorted(roles) == [
        "roles/logging.logWriter",
        "roles/secretmanager.secretAccessor",
        "roles/storage.objectUser",
    ]
    assert re.search(r'google_storage_bucket_iam_member"[^{]*\{\s*bucket\s*=', main)  # bucket-scoped
    variables = (TERRAFORM / "variables.tf").read_text()
    assert not re.search(
        r'variable "[^"]*(key|token|password|secret)"', variables.replace("wandb_secret_id", "")
    )


def test_images_meet_the_gpu_lock():
    """The container base and the VM's driver floor follow README's GPU lock requirements.

    README "Install details" states the driver the GPU lock's CUDA torch needs; the startup script's
    floor, the nvidia_driver validation and the Dockerfile's CUDA major must agree with it.
    """
    readme = (ROOT / "README.md").read_text()
    needed = int(re.search(r"NVIDIA driver (\d+) or newer", readme).group(1))
    script = TEMPLATE.read_text()
    assert int(re.search(r"^MIN_DRIVER_MAJOR=(\d+)$", script, re.MULTILINE).group(1)) == needed
    variables = (TERRAFORM / "variables.tf").read_text()
    assert f"tonumber(substr(var.nvidia_driver, 0, 3)) >= {needed}" in variables
    dockerfile = (INFRA / "docker" / "Dockerfile").read_text()
    base = re.search(
        r"^FROM nvidia/cuda:(\d+)\.(\d+)\.\d+-cudnn-runtime-ubuntu(\d+\.\d+)", dockerfile, re.MULTILINE
    )
    assert base, "the Dockerfile's base must be an nvidia/cuda cudnn-runtime image"
    # torch 2.13.0 of requirements/gpu.txt is a CUDA 13.0 build; Ubuntu 24.04's python3 is 3.12.
    assert (base.group(1), base.group(2), base.group(3)) == ("13", "0", "24.04")
