"""Attacks through config, run through the real entry point: each must be refused before it acts.

Every attack has a side effect that would show (a marker file written, a file copied); the
test asserts the refusal (exit 2, the offending key named) AND that the side effect is absent.
Unit-level coverage of each rule is in tests/unit/test_trust.py.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from tests import in_process
from tests.conftest import ROOT

pytestmark = pytest.mark.integration


def run(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> in_process.Run:
    cmd = [*args, f"hydra.run.dir={tmp_path / 'run'}"]
    return in_process.run(cmd, env={**os.environ, **(env or {})})


def test_hydra_nodes_are_refused_before_hydra_acts(tmp_path):
    marker = tmp_path / "marker"
    proc = run(
        tmp_path,
        # git runs in the provenance step: a config-set fsmonitor hook would execute a command
        "+hydra.job.env_set.GIT_CONFIG_COUNT=1",
        "+hydra.job.env_set.GIT_CONFIG_KEY_0=core.fsmonitor",
        f"+hydra.job.env_set.GIT_CONFIG_VALUE_0=touch {marker}",
        f"hydra.job_logging.handlers.file.filename={marker}.log",
        "+hydra.callbacks.x._target_=rlvr.runtime.io.atomic_write_text",
        f"+hydra.callbacks.x.path={marker}.cb",
        "+hydra.callbacks.x.text=pwned",
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    for key in ("hydra.job.env_set", "hydra.job_logging.handlers.file.filename", "hydra.callbacks"):
        assert key in proc.stderr
    assert list(tmp_path.iterdir()) == []  # no marker, no log file, not even a run directory


def test_app_and_dotted_path_bypasses_are_refused(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    proc = run(
        tmp_path, "app._target_=builtins.open", "app._partial_=false", f"+app.file={victim}", "+app.mode=w"
    )
    assert proc.returncode == 2 and "app._target_" in proc.stderr, proc.stderr[-2000:]
    assert victim.read_text() == "keep me"

    copy = tmp_path / "copied"
    evil = tmp_path / "confdir" / "experiment"
    evil.mkdir(parents=True)
    # a colleague's experiment file: a resolver that builds a node after a string check
    (evil / "shared.yaml").write_text(
        "# @package _global_\n"
        "evaluation:\n"
        f'  note: "${{oc.create:{{_target_: rlvr.runtime.disk.shutil.copyfile, src: {victim}, dst: {copy}}}}}"\n'
    )
    proc = run(tmp_path, "--config-dir", str(tmp_path / "confdir"), "experiment=shared", "validate_only=true")
    assert proc.returncode == 2 and "oc.create" in proc.stderr, proc.stderr[-2000:]
    proc = run(
        tmp_path,
        "validate_only=true",
        "+observers.x._target_=rlvr.runtime.disk.shutil.copyfile",
        f"+observers.x.src={victim}",
        f"+observers.x.dst={copy}",
    )
    assert proc.returncode == 2 and "shutil.copyfile" in proc.stderr, proc.stderr[-2000:]
    assert not copy.exists()


def test_plugin_package_only_when_named_on_the_command_line(tmp_path):
    plugin = [
        "+reward.terms.even._target_=rlvr_example_plugin.rewards.EvenAnswerReward",
        "+reward.terms.even.weight=1.0",  # a term's weight lives in its config (no Python default)
        "validate_only=true",
    ]
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "plugins"), os.environ.get("PYTHONPATH", "")])}
    refused = run(tmp_path, *plugin, env=env)
    assert refused.returncode == 2 and "RLVR_PLUGINS" in refused.stderr, refused.stderr[-2000:]
    allowed = run(tmp_path, *plugin, env={**env, "RLVR_PLUGINS": "rlvr_example_plugin"})
    assert allowed.returncode == 0, allowed.stderr[-2000:]
    assert "configuration OK" in allowed.stdout


def test_a_colleagues_config_dir_and_pickle_leave_no_trace(tmp_path):
    """Config files that reach past the checks: a value that resolves into a new interpolation,
    logging settings interpolated from an unchecked node, Hydra's output folder and job name as
    paths, the same settings in one point of a sweep, and Hydra's pickle rerun."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    opened, copied, subdir, log = (tmp_path / n for n in ("opened", "copied", "subdir", "named"))
    conf = tmp_path / "confdir" / "experiment"
    conf.mkdir(parents=True)
    (conf / "rebuilt.yaml").write_text(
        "# @package _global_\ndollar: $\nobservers:\n"
        f'  x: "${{dollar}}{{oc.create:{{_target_: builtins.open, file: {opened}, mode: w}}}}"\n'
    )
    (conf / "hydra_nodes.yaml").write_text(
        "# @package _global_\n"
        "evil_log:\n  version: 1\n  handlers:\n    f:\n      (): shutil.copyfile\n"
        f"      src: {victim}\n      dst: {copied}\n  root:\n    handlers: [f]\n"
        f"hydra:\n  job_logging: ${{evil_log}}\n  output_subdir: {subdir}\n"
        f"  job:\n    name: ../../../../../../../../..{log}\n"
    )
    confdir = ["--config-dir", str(tmp_path / "confdir")]

    proc = run(tmp_path, *confdir, "experiment=rebuilt", "validate_only=true")
    assert proc.returncode == 2 and "observers.x" in proc.stderr, proc.stderr[-2000:]
    for sweep in ([], ["-m", f"hydra.sweep.dir={tmp_path / 'sweep'}"]):
        proc = run(
            tmp_path, *confdir, *sweep, "experiment=smoke,hydra_nodes" if sweep else "experiment=hydra_nodes"
        )
        assert proc.returncode == 2, proc.stderr[-2000:]
        for key in ("hydra.job_logging=", "hydra.output_subdir", "hydra.job.name"):
            assert key in proc.stderr
    pickled = tmp_path / "config.pickle"
    pickled.write_bytes(pickle.dumps(_Touch(str(tmp_path / "unpickled"))))
    proc = run(tmp_path, "--experimental-rerun", str(pickled))
    assert proc.returncode == 2 and "--experimental-rerun" in proc.stderr, proc.stderr[-2000:]

    assert victim.read_text() == "keep me"
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["confdir", "config.pickle", "run", "victim.txt"], (
        left
    )  # nothing opened, copied or written


class _Touch:
    """A pickle that creates a file when loaded."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))
