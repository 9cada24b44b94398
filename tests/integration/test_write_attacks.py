"""Writes outside the run directory and runs that take over another run's directory, played through the
real entry point with a colleague's experiment file (SECURITY.md "Where a run writes" and "Resume").

Each attack has a victim that would show it: a shell startup file that would gain JSON lines (one of
them carrying a ``$(...)``), a folder a shell sources, a sweep point overwritten, another run's
fingerprint rewritten. Each test asserts the refusal (exit 2, the key named) and the untouched victim.
Unit-level spellings are in tests/unit/test_write_paths.py and tests/unit/test_checkpoints.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests import in_process
from tests.conftest import compose_config

pytestmark = pytest.mark.integration

# Fast enough that on a build without the checks the attack really runs to its end.
FAST = (
    "experiment=smoke",
    "training_loop.sft.max_steps=1",
    "training_loop.grpo.max_steps=1",
    "training_loop.grpo.save_steps=1",
    "evaluation.baseline=false",
    "evaluation.every_n_steps=0",
    "observers=default",
)


def run(*args: str) -> in_process.Run:
    return in_process.run(args)


def experiment(tmp_path: Path, body: str) -> list[str]:
    folder = tmp_path / "theirs" / "experiment"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "shared.yaml").write_text("# @package _global_\n" + body)
    return ["--config-dir", str(tmp_path / "theirs"), "experiment=shared"]


@pytest.mark.parametrize("spelling", ["absolute", "relative", "dotdot-middle"])
def test_a_colleagues_experiment_cannot_append_metrics_to_a_shell_startup_file(tmp_path, spelling):
    bashrc = tmp_path / "home" / ".bashrc"
    bashrc.parent.mkdir()
    bashrc.write_text("# my shell\n")
    marker = tmp_path / "ran"
    path = {
        "absolute": str(bashrc),
        "relative": "../home/.bashrc",  # the run directory is tmp_path/run
        "dotdot-middle": "logs/../../home/.bashrc",
    }[spelling]
    argv = experiment(
        tmp_path,
        f"observers:\n  jsonl:\n    path: {path}\nwandb_note: '$(touch {marker})'\n",
    )
    proc = run(*argv, *FAST[1:], f"hydra.run.dir={tmp_path / 'run'}")
    assert proc.returncode == 2 and "observers.jsonl.path" in proc.stderr, proc.stderr[-3000:]
    assert bashrc.read_text() == "# my shell\n"
    assert not marker.exists()


def test_a_colleagues_experiment_cannot_choose_the_run_directory(tmp_path):
    """A folder every file of which a shell sources (``~/.bashrc.d``): config_resolved.yaml and
    metrics.jsonl there would run at the next login."""
    sourced = tmp_path / "home" / ".bashrc.d"
    argv = experiment(tmp_path, f"hydra:\n  run:\n    dir: {sourced}\n")
    proc = run(*argv, *FAST[1:], "validate_only=true")  # Hydra alone would create it (its log file)
    assert proc.returncode == 2 and "hydra.run.dir" in proc.stderr, proc.stderr[-3000:]
    assert "command line" in proc.stderr
    assert not (tmp_path / "home").exists()


def test_a_constant_sweep_subdir_is_refused_before_any_point_runs(tmp_path):
    """Two points into one folder: the second overwrote the first, and the sweep report showed one."""
    sweep = tmp_path / "sweep"
    argv = experiment(tmp_path, "hydra:\n  sweep:\n    subdir: same\n")
    proc = run("-m", *argv, "seed=1,2", f"hydra.sweep.dir={sweep}", "validate_only=true")
    assert proc.returncode == 2 and "hydra.sweep.subdir" in proc.stderr, proc.stderr[-3000:]
    assert not sweep.exists()


def test_a_fresh_run_cannot_take_over_another_runs_checkpoints(tmp_path):
    """A fresh run with other settings used to rewrite the fingerprint of the run whose directory it
    was started in; resume=auto with those settings then continued that run's checkpoint."""
    from rlvr.training_loop.checkpoints import FINGERPRINT, mark_complete, write_fingerprint
    from rlvr.training_loop.resume import fingerprint

    run_dir = tmp_path / "run"
    write_fingerprint(run_dir, fingerprint(compose_config(list(FAST))))
    ckpt = run_dir / "checkpoints" / "grpo" / "checkpoint-1"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text('{"global_step": 1}')  # as transformers saves it
    mark_complete(ckpt)
    before = (run_dir / FINGERPRINT).read_text()

    fresh = run(*FAST, "seed=7", f"hydra.run.dir={run_dir}")
    assert fresh.returncode == 2 and "hydra.run.dir" in fresh.stderr, fresh.stderr[-3000:]
    assert "resume=auto" in fresh.stderr
    assert (run_dir / FINGERPRINT).read_text() == before
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoints", FINGERPRINT]

    # Even with the run's own record rewritten (by a version without this check), the checkpoint's
    # own copy of the fingerprint names the settings it was trained with.
    fingerprint = json.loads(before)
    (run_dir / FINGERPRINT).write_text(json.dumps({**fingerprint, "seed": 7}))
    resumed = run(*FAST, "seed=7", "resume=auto", "validate_only=true", f"hydra.run.dir={run_dir}")
    assert resumed.returncode == 2 and "seed: 42 -> 7" in resumed.stderr, resumed.stderr[-3000:]
