"""Through the real entry point: a colleague's experiment file turning ``trust_remote_code`` on is
refused before anything loads (``validate_only`` included); the same on the command line validates
(SECURITY.md "Code shipped with a model")."""

from __future__ import annotations

import pytest
from tests import in_process

pytestmark = pytest.mark.integration


def _validate(tmp_path, *args):
    cmd = [*args, "validate_only=true", "model=tiny"]
    cmd.append(f"hydra.run.dir={tmp_path / 'run'}")
    return in_process.run(cmd)


def test_validate_only_refuses_a_files_trust_remote_code_and_accepts_the_command_lines(tmp_path):
    conf = tmp_path / "theirs" / "experiment"
    conf.mkdir(parents=True)
    (conf / "theirs.yaml").write_text("# @package _global_\nmodel:\n  trust_remote_code: true\n")
    refused = _validate(tmp_path, "--config-dir", str(conf.parent), "experiment=theirs")
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert "model.trust_remote_code" in refused.stderr and "theirs.yaml" in refused.stderr
    assert "pass model.trust_remote_code=true on the command line" in refused.stderr
    assert "configuration OK" not in refused.stdout

    typed = _validate(tmp_path, "+model.trust_remote_code=true")
    assert typed.returncode == 0 and "configuration OK" in typed.stdout, typed.stderr[-2000:]
