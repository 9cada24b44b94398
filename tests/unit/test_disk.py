"""Checkpoint retention after a completed run and the run-dir size line."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.runtime.disk import dir_size, human
from rlvr.training_loop.checkpoints import MARKER, latest_checkpoint
from rlvr.training_loop.run_dir import finish_run_dir, prune_checkpoints


def make_run(root: Path) -> Path:
    for phase, steps in (("sft", (2, 4)), ("grpo", (2, 4, 6))):
        for step in steps:
            ckpt = root / "checkpoints" / phase / f"checkpoint-{step}"
            ckpt.mkdir(parents=True)
            (ckpt / "optimizer.pt").write_bytes(b"x" * 1000)
            (ckpt / "trainer_state.json").write_text(f'{{"global_step": {step}}}')
            if (phase, step) != ("grpo", 6):  # the newest GRPO save was cut off: no marker
                (ckpt / MARKER).write_text("ok\n")
    (root / "final").mkdir()
    (root / "final" / "model.safetensors").write_bytes(b"m" * 500)
    return root


def test_last_keeps_exactly_what_resume_auto_uses(tmp_path):
    run = make_run(tmp_path)
    wanted = latest_checkpoint(run)
    removed = prune_checkpoints(run, "last")
    left = sorted(p.relative_to(run).as_posix() for p in (run / "checkpoints").glob("*/*"))
    assert left == ["checkpoints/grpo/checkpoint-4"]
    assert latest_checkpoint(run) == wanted
    assert len(removed) == 4  # two SFT, the older GRPO and the incomplete one
    assert (run / "final" / "model.safetensors").is_file()


def test_none_and_all(tmp_path):
    a, b = make_run(tmp_path / "a"), make_run(tmp_path / "b")
    removed = prune_checkpoints(a, "none")
    assert not (a / "checkpoints").exists() and (a / "final").is_dir()
    assert len(removed) == 5  # counted as checkpoints, not as one folder
    assert prune_checkpoints(b, "all") == [] and len(list((b / "checkpoints").glob("*/*"))) == 5


def test_size_line_and_symlinks_not_followed(tmp_path):
    run = make_run(tmp_path / "run")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big").write_bytes(b"b" * 10_000)
    (run / "link").symlink_to(outside, target_is_directory=True)
    (run / "checkpoints" / "grpo" / "ext").symlink_to(outside, target_is_directory=True)
    line = finish_run_dir(run, "last")
    assert (outside / "big").is_file()  # pruning never deletes through a link
    assert dir_size(run) == 1000 + len('{"global_step": 4}') + 3 + 500
    assert line == f"{run} (1.5 KB; 4 checkpoint dir(s) deleted (keep_checkpoints=last))"


@pytest.mark.parametrize("bad", ["latest", None, 1])
def test_bad_value_is_a_config_issue(bad, tmp_path):
    """keep_checkpoints is a run-level key of RunSettings' type: the gate names it with the choices;
    pruning never guesses. Mutation: keep_checkpoints left out of RunSettings -> red."""
    from tests.conftest import compose_config

    from rlvr.config.validation import run_key_issues

    cfg = compose_config()
    cfg.keep_checkpoints = bad
    (issue,) = run_key_issues(cfg)
    assert issue.key == "keep_checkpoints" and "'none', 'last'" in str(issue) and "'all'" in str(issue)
    with pytest.raises(ValueError, match="keep_checkpoints"):
        prune_checkpoints(tmp_path, bad)


def test_human():
    assert human(512) == "512 B" and human(3 * 1024**3) == "3.0 GB"
