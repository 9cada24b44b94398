"""Credentials never reach a file a run writes, and the run record still reproduces the run.

Credentials are planted the three ways a user passes them: through the environment, through a
CLI override of a credential field, and through an ``${oc.env:...}`` interpolation; then every
byte under the run directory (binary files included: trainer argument files in checkpoints,
W&B run files) and the console are scanned.
"""

from __future__ import annotations

import json
import os

import pytest
from omegaconf import OmegaConf
from tests import in_process
from tests.conftest import compose_config

from rlvr.runtime.secrets import REDACTED

pytestmark = pytest.mark.integration

SECRETS = {
    "WANDB_API_KEY": "fake-wandb-key-4b1d9e0c7a",
    "HF_TOKEN": "hf_fakeTokenZ81q0x",
    "MY_SERVICE_TOKEN": "svc-fake-token-55aa",
    # not credential-named: masked because the config reads it with ${oc.env:...}
    "RLVR_TEST_DB_URL": "postgres://user:pw-9f8e7d@db",
}
OVERRIDES = [
    "experiment=smoke",
    "training_loop.sft.max_steps=1",
    "training_loop.grpo.max_steps=2",
    "training_loop.grpo.save_steps=1",
    "keep_checkpoints=all",  # every checkpoint stays, so every one is searched
    "observers=all",
    "observers.wandb.mode=offline",
    "+seed_note=${oc.env:MY_SERVICE_TOKEN}",
    "+db=${oc.env:RLVR_TEST_DB_URL}",
]


def run(*args: str) -> in_process.Run:
    return in_process.run(args, env={**os.environ, **SECRETS})


def leaks_in(tmp_path, *streams: str) -> list[tuple[str, str]]:
    leaks = []
    for path in (p for p in tmp_path.rglob("*") if p.is_file()):
        data = path.read_bytes()
        leaks += [(str(path.relative_to(tmp_path)), k) for k, v in SECRETS.items() if v.encode() in data]
    for stream in streams:
        leaks += [("console", k) for k, v in SECRETS.items() if v in stream]
    return leaks


@pytest.fixture(scope="module")
def secret_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("secret_run")
    proc = run(f"hydra.run.dir={run_dir}", *OVERRIDES)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return run_dir, proc


def test_planted_credentials_never_written(secret_run):
    run_dir, proc = secret_run
    assert any(run_dir.rglob("*.wandb")), "W&B files are part of the scan"
    assert any(run_dir.rglob("training_args.bin")), "trainer argument files are part of the scan"
    assert not (run_dir / ".hydra").exists()
    assert len([p for p in run_dir.rglob("*") if p.is_file()]) > 10
    assert leaks_in(run_dir, proc.stdout, proc.stderr) == []


def test_run_record_reproduces_the_config(secret_run, monkeypatch):
    """Only credentials are masked: the saved config equals the composed one everywhere else."""
    run_dir, _ = secret_run
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    saved = OmegaConf.to_container(OmegaConf.load(run_dir / "config_resolved.yaml"))
    original = OmegaConf.to_container(compose_config(OVERRIDES), resolve=True)
    assert saved["evaluation"]["max_new_tokens"] == 12
    assert saved["seed_note"] == REDACTED and saved["db"] == REDACTED
    assert saved.pop("hydra") == {"output_subdir": None}  # travels with the record for a rerun
    del saved["seed_note"], saved["db"], original["seed_note"], original["db"]
    assert saved == original
    # and the record is a config the entry point accepts as it is
    rerun = run(f"--config-dir={run_dir}", "--config-name=config_resolved", f"hydra.run.dir={run_dir}/rerun",
                "validate_only=true")  # fmt: skip
    assert rerun.returncode == 0, rerun.stderr[-3000:]


def test_credential_fields_are_refused_without_echoing_them(tmp_path):
    proc = run(
        f"hydra.run.dir={tmp_path}/run",
        "experiment=smoke",
        f"+training_loop.grpo.hub_token={SECRETS['HF_TOKEN']}",
    )
    assert proc.returncode == 2 and "training_loop.grpo.hub_token" in proc.stderr, proc.stderr[-3000:]
    assert leaks_in(tmp_path, proc.stdout, proc.stderr) == []


def test_planted_symlinks_in_a_run_directory_are_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "final").symlink_to(victim, target_is_directory=True)
    (run_dir / "report.md").symlink_to(victim / "precious.txt")
    # Hydra opens its job log in append mode before the app runs: checked before Hydra starts
    (run_dir / "run_pipeline.log").symlink_to(victim / "precious.txt")
    proc = run(f"hydra.run.dir={run_dir}", "experiment=smoke")
    assert proc.returncode == 2 and "symbolic link" in proc.stderr, proc.stderr[-3000:]
    assert [p.name for p in victim.iterdir()] == ["precious.txt"]
    assert (victim / "precious.txt").read_text() == "keep"


# Values a config file from elsewhere reads from the environment, in the spellings OmegaConf's grammar
# accepts (quoted, double-quoted, nested), placed where they reach every output: a data source's
# name (manifests, eval files), the W&B run name and tags (W&B files, the console).
ENV_READS = {
    "RLVR_TEST_SOURCE": "src-9c1e55aa",
    "RLVR_TEST_RUN_NAME": "rn-4d2f8b31",
    "RLVR_TEST_NESTED": "nest-77e0c1",
}
LEAKY_EXPERIMENT = """# @package _global_
defaults:
  - smoke
  - /data/source@data.eval_sets.extra: gsm8k
  - override /observers: all
var_name: RLVR_TEST_NESTED
data:
  eval_sets:
    extra:
      name: gsm-${oc.env:'RLVR_TEST_SOURCE'}
      path: PATH
      eval_size: 4
observers:
  wandb:
    mode: offline
    name: run-${oc.env:"RLVR_TEST_RUN_NAME"}
    tags:
      - x-${oc.env:${var_name}}
training_loop:
  sft: {max_steps: 1}
  grpo: {max_steps: 2, save_steps: 1}
"""


def test_env_reads_in_any_spelling_reach_no_output(tmp_path):
    from tests.data_fixtures import gsm8k_rows

    data = tmp_path / "gsm8k.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in gsm8k_rows(80)))
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / "leaky.yaml").write_text(LEAKY_EXPERIMENT.replace("PATH", str(data)))
    run_dir = tmp_path / "run"
    cmd = [f"--config-dir={tmp_path / 'conf'}",
           "experiment=leaky", f"hydra.run.dir={run_dir}",
           "keep_checkpoints=all"]  # fmt: skip  # the checkpoints' trainer argument files are scanned too
    proc = in_process.run(cmd, env={**os.environ, **ENV_READS})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert any(run_dir.rglob("*.wandb")) and any(run_dir.rglob("training_args.bin"))
    assert any((run_dir / "eval").iterdir()) and (run_dir / "report.md").is_file()
    leaks = [
        (str(p.relative_to(run_dir)), k)
        for p in run_dir.rglob("*")
        if p.is_file()
        for k, v in ENV_READS.items()
        if v.encode() in p.read_bytes()
    ]
    leaks += [("console", k) for k, v in ENV_READS.items() if v in proc.stdout + proc.stderr]
    assert leaks == []
    # masked, not dropped: the source still has a name in the records
    assert f"gsm-{REDACTED}" in (run_dir / "config_resolved.yaml").read_text()
