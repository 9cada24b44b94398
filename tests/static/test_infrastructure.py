"""Static checks of infrastructure/ (no cloud, container engine or cluster is reachable here).

The checkers come from the hashed requirements/tools.txt in their own venv (`make tools`, run by
`make test`). What these tests cover, and what they cannot, is listed in infrastructure/README.md.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
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
    values = {  # single-quoted, as startup.tf passes them
        "repository_url": "'https://example.com/rlvr.git'",
        "repository_commit": "'" + "0" * 40 + "'",
        "overrides": "'experiment=smoke' 'seed=1'",
        "run_prefix": "'gs://bucket/rlvr-run'",
        "sync_minutes": "'10'",
        "wandb_secret_id": "'wandb-api-key'",
        "project_id": "'project'",
        "nvidia_driver": "'580-server'",
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
    startup = (TERRAFORM / "startup.tf").read_text()
    values = startup[
        startup.index("startup_values = {") : startup.index("\n  }", startup.index("startup_values"))
    ]
    passed = set(re.findall(r"^\s*(\w+)\s*=", values, re.MULTILINE)) - {"startup_values"}
    assert used == passed | {"overrides"}
    assert "startup-script         = local.startup_script" in (TERRAFORM / "main.tf").read_text()


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
    tracked = subprocess.run(
        ["git", "ls-files", "*.sh", "*.sbatch"], capture_output=True, text=True, cwd=ROOT
    ).stdout
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
    """The VM's setup and run lines are docs/scaling.md "Cloud GPUs" lines, so the two cannot drift."""
    scaling = (ROOT / "docs" / "scaling.md").read_text()
    section = scaling[scaling.index("## Cloud GPUs") :]
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
    """The container base and the VM's driver floor follow the GPU lock requirements of the docs.

    docs/install.md "Install details" states the driver the GPU lock's CUDA torch needs; the startup
    script's floor, the nvidia_driver validation and the Dockerfile's CUDA major must agree with it.
    """
    install = (ROOT / "docs" / "install.md").read_text()
    needed = int(re.search(r"NVIDIA driver (\d+) or newer", install).group(1))
    script = TEMPLATE.read_text()
    assert int(re.search(r"^MIN_DRIVER_MAJOR=(\d+)$", script, re.MULTILINE).group(1)) == needed
    variables = (TERRAFORM / "variables.tf").read_text()
    assert f"tonumber(substr(var.nvidia_driver, 0, 3)) >= {needed}" in variables
    dockerfile = (INFRA / "docker" / "Dockerfile").read_text()
    base = re.search(
        r"^FROM nvidia/cuda:(\d+)\.(\d+)\.\d+-cudnn-runtime-ubuntu(\d+\.\d+)", dockerfile, re.MULTILINE
    )
    assert base, "the Dockerfile's base must be an nvidia/cuda cudnn-runtime image"
    # torch 2.11.0 of requirements/gpu.txt is a CUDA 13.0 build; Ubuntu 24.04's python3 is 3.12.
    assert (base.group(1), base.group(2), base.group(3)) == ("13", "0", "24.04")


# -- values that reach the VM's root startup script (SECURITY.md "Launchers and infrastructure") ------
# Rendered by the real `terraform console` (templatefile and the variables' validation need no
# provider, so this works offline) from a copy of variables.tf, startup.tf and the template.
VALID = {
    "project_id": "my-gcp-project",
    "repository_url": "https://github.com/your-org/rlvr.git",
    "repository_commit": "0123456789abcdef0123456789abcdef01234567",
    "output_bucket": "my-gcp-project-rlvr-runs",
    "overrides": ["experiment=smoke", "seed=1"],
}


def terraform_console(folder: Path, expression: str, values: dict) -> subprocess.CompletedProcess:
    terraform = shutil.which("terraform")
    if terraform is None:
        pytest.skip("the terraform binary is not on PATH: the rendering and validation tests need it")
    (folder / "terraform.tfvars.json").write_text(json.dumps(values))
    env = {**os.environ, "TF_CLI_CONFIG_FILE": os.devnull, "TF_IN_AUTOMATION": "1"}
    return subprocess.run(
        [terraform, "console", "-no-color"],
        input=expression + "\n",
        capture_output=True,
        text=True,
        cwd=folder,
        env=env,
        timeout=60,
    )


def startup_module(folder: Path, validations: bool = True) -> Path:
    """The files that make the startup script, copied (without the Google resources of main.tf)."""
    variables = (TERRAFORM / "variables.tf").read_text()
    if not validations:
        variables = re.sub(r"\n  validation \{.*?\n  \}", "", variables, flags=re.DOTALL)
        assert "validation" not in variables
    (folder / "variables.tf").write_text(variables)
    for name in ("startup.tf", "startup.sh.tftpl"):
        (folder / name).write_text((TERRAFORM / name).read_text())
    return folder


def rendered_startup(folder: Path, values: dict) -> str:
    proc = terraform_console(folder, "base64encode(local.startup_script)", values)
    assert proc.returncode == 0 and "Error" not in proc.stderr + proc.stdout, proc.stderr + proc.stdout
    return base64.b64decode(proc.stdout.strip().strip('"')).decode()


HOSTILE_URLS = [
    'https://example.com/r.git"; touch /tmp/pwned; "',
    "https://example.com/r.git'; touch /tmp/pwned; '",
    "https://example.com/$(touch /tmp/pwned).git",
    "https://example.com/`touch /tmp/pwned`.git",
    "https://example.com/r.git\ntouch /tmp/pwned",
    "ext::sh -c touch% /tmp/pwned",  # git runs the command of an ext:: URL
    "--upload-pack=touch /tmp/pwned",  # an option to git clone
    "file:///etc",
    "http://example.com/r.git",
    "https://user:ghp_token@example.com/r.git",  # a credential would land in state and metadata
    "https://example.com/r.git?x=$HOME",
    "https://example.com/r.git#frag",
    "https://example.com",
]


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        *(("repository_url", url) for url in HOSTILE_URLS),
        ("wandb_secret_id", 'wandb"; touch /tmp/pwned; "'),
        ("wandb_secret_id", "$(touch /tmp/pwned)"),
        ("wandb_secret_id", "wandb key"),
        ("wandb_secret_id", "--project=other"),
        ("wandb_secret_id", "projects/other/secrets/key"),
        ("project_id", 'p"; touch /tmp/pwned; "'),
        ("project_id", "my-project$(id)"),
        ("output_bucket", "bucket/$(touch /tmp/pwned)"),
        ("output_bucket", "bucket'x"),
        ("output_bucket", "Bucket"),
        ("sync_minutes", 0),
        ("sync_minutes", 1.5),
        ("overrides", ["seed=1; touch /tmp/pwned"]),
        ("overrides", ["seed=$(id)"]),
        ("overrides", ["seed=1\nRUN\ntouch /tmp/pwned"]),  # would end the run's here-document
    ],
)
def test_a_value_that_would_reach_the_startup_script_as_code_is_refused(tmp_path, variable, value):
    proc = terraform_console(startup_module(tmp_path), "var.project_id", {**VALID, variable: value})
    out = proc.stdout + proc.stderr
    assert "Invalid value for variable" in out and f"var.{variable} is" in out, out


def test_the_example_values_pass_and_every_value_is_one_quoted_word(tmp_path):
    script = rendered_startup(startup_module(tmp_path), VALID)
    assignments = dict(re.findall(r"^([A-Z_]+)=(.*)$", script, re.MULTILINE))
    for name in ("REPO_URL", "REPO_COMMIT", "RUN_PREFIX", "SYNC_MINUTES", "WANDB_SECRET_ID", "PROJECT_ID"):
        assert re.fullmatch(r"'[^']*'", assignments[name]), (name, assignments[name])
    assert assignments["REPO_URL"] == "'https://github.com/your-org/rlvr.git'"
    assert "run_pipeline.py 'experiment=smoke' 'seed=1' hydra.run.dir=" in script


def test_even_a_value_past_the_validations_stays_data(tmp_path):
    """The second line of defence: with every validation block removed, hostile values rendered into
    the script and run by bash are assigned verbatim and run nothing."""
    hostile = "x'\"; touch pwned; `touch pwned` $(touch pwned) ${HOME} \\' \n touch pwned #"
    values = {
        **VALID,
        "repository_url": hostile,
        "wandb_secret_id": hostile,
        "project_id": hostile,
        "output_bucket": hostile,
        "nvidia_driver": hostile,
        # one line: the run command sits in a quoted here-document that a line "RUN" would end, so a
        # line break in an override is refused by its validation (tested above), not by quoting
        "overrides": [hostile.replace("\n", " "), "seed=1"],
    }
    (tmp_path / "tf").mkdir()
    script = rendered_startup(startup_module(tmp_path / "tf", validations=False), values)
    lines = script.splitlines()
    head = "\n".join(lines[lines.index("set -euo pipefail") + 1 : lines.index("APP_DIR=/opt/rlvr")])
    run_line = next(x for x in lines if x.startswith(".venv/bin/python run_pipeline.py "))
    overrides = run_line.removeprefix(".venv/bin/python run_pipeline.py ").split(" hydra.run.dir=")[0]
    probe = head + '\nprintf \'%s\\0\' "$REPO_URL" "$WANDB_SECRET_ID" "$PROJECT_ID" "$NVIDIA_DRIVER"\n'
    probe += f"printf '%s\\0' {overrides}\n"
    proc = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\0")[:-1] == [hostile] * 4 + [hostile.replace("\n", " "), "seed=1"]
    assert not (tmp_path / "pwned").exists()


def test_terraform_fmt_check_passes():
    terraform = shutil.which("terraform")
    if terraform is None:
        pytest.skip("the terraform binary is not on PATH")
    env = {**os.environ, "TF_CLI_CONFIG_FILE": os.devnull}
    proc = subprocess.run(
        [terraform, "fmt", "-check", "-diff", str(TERRAFORM)], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
