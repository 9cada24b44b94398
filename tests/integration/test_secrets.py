"""A planted fake API key never appears in any file a run writes (config, metrics, W&B files, checkpoints)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from tests.conftest import ROOT

pytestmark = pytest.mark.integration

SECRETS = {
    "WANDB_API_KEY": "fake-wandb-key-4b1d9e0c7a",
    "HF_TOKEN": "hf_fakeTokenZ81q0x",
    "MY_SERVICE_TOKEN": "svc-fake-token-55aa",
}


def test_planted_keys_never_written(tmp_path):
    env = {**os.environ, **SECRETS}
    cmd = [
        sys.executable,
        str(ROOT / "run_pipeline.py"),
        f"hydra.run.dir={tmp_path}",
        "experiment=smoke",
        "training_loop.sft.max_steps=1",
        "training_loop.grpo.max_steps=2",
        "training_loop.grpo.save_steps=1",
        "keep_checkpoints=all",  # every checkpoint stays, so every one is searched
        "observers=all",
        "observers.wandb.mode=offline",
        # a user interpolating a secret into the config: it must be masked in what is saved
        "+seed_note=${oc.env:MY_SERVICE_TOKEN}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert any(tmp_path.rglob("*.wandb")) or any((tmp_path / "wandb").iterdir())
    leaks = []
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) > 10
    for path in files:
        data = path.read_bytes()
        leaks += [(str(path.relative_to(tmp_path)), k) for k, v in SECRETS.items() if v.encode() in data]
    for stream in (proc.stdout, proc.stderr):
        leaks += [("console", k) for k, v in SECRETS.items() if v in stream]
    assert leaks == []
