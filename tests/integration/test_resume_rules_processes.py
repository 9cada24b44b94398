"""The resume command a run prints, run as printed; the resume rules are unit tests in
tests/unit/test_resume_rules.py."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_the_resume_command_carries_the_runs_overrides(tmp_path):
    from rlvr.training_loop.resume import recorded_overrides, resume_command

    overrides = ["model=tiny", "seed=7", "data.task_params.x={a: 1}", "resume=auto", "wandb.api_key=***"]
    (tmp_path / "provenance.json").write_text(json.dumps({"overrides": overrides}))
    line = resume_command(tmp_path, recorded_overrides(tmp_path))
    args = shlex.split(line.split("  (")[0])
    # the interpreter that ran the run (issue 45): a bare `python` outside the venv has no hydra
    assert subprocess.run([args[0], "-c", "import hydra"], capture_output=True).returncode == 0
    assert args == [
        sys.executable,
        "run_pipeline.py",
        "model=tiny",
        "seed=7",
        "data.task_params.x={a: 1}",
        "wandb.api_key=***",
        "resume=auto",
        f"hydra.run.dir={tmp_path}",
    ]
    assert line.endswith("(credentials were masked: give them again)")
    assert recorded_overrides(tmp_path / "none") is None
