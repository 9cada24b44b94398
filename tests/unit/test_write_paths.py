"""Where a run writes (SECURITY.md "Where a run writes"): only into the run, sweep or output directory
the command line or the shipped defaults chose, never to a path a config file chose outside it.

Each test tries the spellings an attacker would: absolute, relative with ``..`` in the middle, a link
planted in the run directory, a linked parent folder. End-to-end versions (a colleague's experiment
file through the real entry point) are in tests/integration/test_write_attacks.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.conftest import ROOT

from rlvr import events as ev
from rlvr.config.hydra_check import screen_command_line
from rlvr.issues import ConfigValidationError
from rlvr.observers import JsonlObserver, TensorBoardObserver
from rlvr.runtime.io import PathEscape, SymlinkRefused, config_path_problem, inside, open_append

SCRIPT = ROOT / "run_pipeline.py"
# Spellings of "outside the run directory" for a config-chosen file or folder name.
ESCAPES = [
    "/tmp/victim.jsonl",
    "//tmp/victim.jsonl",
    "~/.bashrc",
    "../victim.jsonl",
    "../../home/user/.bashrc",
    "logs/../../x",
    "logs/../../../etc/x",
    "a/./../../b",
    "logs/..",
    "..",
    "",
]


@pytest.mark.parametrize("value", ESCAPES)
def test_config_chosen_paths_outside_the_run_dir_are_refused_as_written(value):
    assert config_path_problem(value) is not None
    with pytest.raises(PathEscape):
        inside(Path("/nonexistent/run"), value)


@pytest.mark.parametrize("value", ["metrics.jsonl", "logs/metrics.jsonl", "tensorboard", "a/b/c.jsonl"])
def test_plain_names_inside_the_run_dir_pass(value, tmp_path):
    assert config_path_problem(value) is None
    assert inside(tmp_path, value) == tmp_path / value


@pytest.mark.parametrize("value", ESCAPES)
def test_observer_paths_are_refused_at_validation_with_key_value_and_fix(value):
    [jsonl] = JsonlObserver(path=value, completions_path="completions.jsonl").validate()
    assert (jsonl.key, jsonl.value) == ("observers.jsonl.path", value) and "run directory" in jsonl.fix
    tb = [i for i in TensorBoardObserver(log_dir=value).validate() if i.key.endswith("log_dir")]
    assert len(tb) == 1 and tb[0].value == value
    assert (
        JsonlObserver(path="metrics.jsonl", completions_path="completions.jsonl").validate() == []
        and JsonlObserver(path="logs/m.jsonl", completions_path="completions.jsonl").validate() == []
    )


def _start(observer, run_dir: Path) -> None:
    observer.on_pipeline_start(ev.PipelineStart(run_dir, {}))


def test_jsonl_never_appends_through_a_link_planted_at_its_name(tmp_path):
    """The old observer opened with plain ``open(path, "a")``, which follows the link."""
    victim = tmp_path / "bashrc"
    victim.write_text("# shell startup\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").symlink_to(victim)
    with pytest.raises(SymlinkRefused):
        _start(JsonlObserver(path="metrics.jsonl", completions_path="completions.jsonl"), run)
    assert victim.read_text() == "# shell startup\n"


def test_jsonl_never_appends_through_a_linked_parent_folder(tmp_path):
    elsewhere = tmp_path / "bashrc.d"
    elsewhere.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "logs").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises((SymlinkRefused, PathEscape)):
        _start(JsonlObserver(path="logs/metrics.jsonl", completions_path="completions.jsonl"), run)
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("value", ["/abs/metrics.jsonl", "logs/../../metrics.jsonl"])
def test_jsonl_refuses_an_escaping_path_even_if_validation_was_skipped(tmp_path, value):
    run = tmp_path / "a" / "run"
    run.mkdir(parents=True)
    with pytest.raises(PathEscape):
        _start(JsonlObserver(path=value, completions_path="completions.jsonl"), run)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "run"]


def test_tensorboard_refuses_a_linked_log_dir(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run = tmp_path / "run"
    run.mkdir()
    (run / "tensorboard").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises((SymlinkRefused, PathEscape)):
        _start(TensorBoardObserver(log_dir="tensorboard"), run)
    assert list(elsewhere.iterdir()) == []


def test_open_append_refuses_a_link_planted_after_the_checks(tmp_path, monkeypatch):
    """O_NOFOLLOW closes the window between checking the path and opening it."""
    import rlvr.runtime.io as rio

    victim = tmp_path / "victim"
    victim.write_text("keep")
    run = tmp_path / "run"
    run.mkdir()
    target = run / "metrics.jsonl"

    def plant_then_check(path, root=None):
        if not target.is_symlink():
            target.symlink_to(victim)

    monkeypatch.setattr(rio, "check_no_symlinks", plant_then_check)
    with pytest.raises(SymlinkRefused):
        open_append(target, run)
    assert victim.read_text() == "keep"


def test_open_append_appends_to_a_plain_file(tmp_path):
    with open_append(tmp_path / "m.jsonl", tmp_path) as fh:
        fh.write("a\n")
    with open_append(tmp_path / "m.jsonl", tmp_path) as fh:
        fh.write("b\n")
    assert (tmp_path / "m.jsonl").read_text() == "a\nb\n"


# -- the run and sweep directories: chosen by the command line or the defaults ------------------------
def _experiment(tmp_path: Path, name: str, body: str) -> list[str]:
    folder = tmp_path / "confdir" / "experiment"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text("# @package _global_\n" + body)
    return ["--config-dir", str(tmp_path / "confdir"), f"experiment={name}"]


def _refused(argv: list[str]) -> dict[str, object]:
    with pytest.raises(ConfigValidationError) as exc:
        screen_command_line(argv, SCRIPT, "conf", "config")
    return {i.key: i for i in exc.value.issues}


@pytest.mark.parametrize(
    ("body", "key"),
    [
        ("hydra:\n  run:\n    dir: {home}/.bashrc.d\n", "hydra.run.dir"),
        ("hydra:\n  run:\n    dir: outputs/../../{rel}/.bashrc.d\n", "hydra.run.dir"),
        ("hydra:\n  run:\n    dir: ../.bashrc.d\n", "hydra.run.dir"),
        ("paths:\n  root_dir: {home}\n", "hydra.run.dir"),
        ("paths:\n  output_dir: {home}/.bashrc.d\n", "hydra.run.dir"),
        ("hydra:\n  run:\n    dir: ${{paths.output_dir}}/../x\n", "hydra.run.dir"),
    ],
    ids=["absolute", "dotdot-middle", "relative-up", "root_dir", "output_dir", "interpolated-up"],
)
def test_a_config_file_cannot_choose_the_run_directory(tmp_path, body, key, monkeypatch):
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    rel = os.path.relpath(home, tmp_path)
    argv = _experiment(tmp_path, "evil", body.format(home=home, rel=rel))
    issues = _refused([*argv, "validate_only=true"])
    assert key in issues and "command line" in issues[key].fix
    assert not home.exists()


def test_a_config_file_cannot_reach_out_through_a_linked_folder_in_outputs(tmp_path, monkeypatch):
    """A results directory copied into outputs/ may carry a link: inside by name, outside on disk."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "home" / ".bashrc.d").mkdir(parents=True)
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "theirs").symlink_to(tmp_path / "home" / ".bashrc.d", target_is_directory=True)
    argv = _experiment(tmp_path, "evil", "hydra:\n  run:\n    dir: outputs/theirs/run\n")
    assert "hydra.run.dir" in _refused([*argv, "validate_only=true"])


def test_the_command_line_and_folders_inside_outputs_may_choose(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    screen_command_line(["validate_only=true"], SCRIPT, "conf", "config")  # the default
    screen_command_line(
        [f"hydra.run.dir={tmp_path}/anywhere", "validate_only=true"], SCRIPT, "conf", "config"
    )
    screen_command_line(
        [f"paths.root_dir={tmp_path}/elsewhere", "validate_only=true"], SCRIPT, "conf", "config"
    )
    argv = _experiment(
        tmp_path, "tidy", "hydra:\n  run:\n    dir: ${paths.output_dir}/tidy/${now:%H-%M-%S}\n"
    )
    screen_command_line([*argv, "validate_only=true"], SCRIPT, "conf", "config")
    screen_command_line(["-m", "seed=1,2", f"hydra.sweep.dir={tmp_path}/sweep"], SCRIPT, "conf", "config")


def test_a_typed_location_that_names_a_config_key_is_judged_by_where_it_lands(tmp_path, monkeypatch):
    """`hydra.run.dir=.../${name}` reads a key a config file can set: no crash, inside outputs/ only."""
    monkeypatch.chdir(tmp_path)
    screen_command_line(
        ["hydra.run.dir=outputs/${name}", "+name=mine", "validate_only=true"], SCRIPT, "conf", "config"
    )
    issues = _refused([f"hydra.run.dir={tmp_path}/home/${{name}}", "+name=mine", "validate_only=true"])
    assert "config keys that a config file can set" in issues["hydra.run.dir"].problem


def test_a_config_file_cannot_choose_the_benchmark_output_or_sweep_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = _experiment(tmp_path, "evil", f"benchmark:\n  output_dir: {tmp_path}/home\n")
    argv[-1] = "+" + argv[-1]  # the benchmark's primary config has no experiment slot
    with pytest.raises(ConfigValidationError) as exc:
        screen_command_line([*argv, "--config-name", "benchmark"], SCRIPT, "conf", "config")
    assert "benchmark.output_dir" in {i.key for i in exc.value.issues}
    screen_command_line(
        ["--config-name", "benchmark", f"benchmark.output_dir={tmp_path}/b"], SCRIPT, "conf", "config"
    )
    argv = _experiment(tmp_path, "sweep", f"hydra:\n  sweep:\n    dir: {tmp_path}/home\n")
    assert "hydra.sweep.dir" in _refused(["-m", *argv, "seed=1,2"])


@pytest.mark.parametrize(
    "subdir",
    [
        "x",
        "'${now:%H}'",
        "'${hydra.job.name}'",
        "'${hydra.job.num}/..'",
        "'/tmp/${hydra.job.num}'",
        "'../${hydra.job.num}'",
        "'${oc.select:seed,${hydra.job.num}}'",
    ],
)
def test_a_sweep_subdir_must_differ_per_point_and_stay_inside(tmp_path, subdir):
    """A constant subdir (from the command line or an experiment file) makes the points of a sweep
    overwrite one another: a two-point sweep left one point."""
    sweep = ["seed=1,2", f"hydra.sweep.dir={tmp_path}/sweep"]
    issues = _refused(["-m", *sweep, f"hydra.sweep.subdir={subdir}"])
    assert "hydra.sweep.subdir" in issues and "hydra.job.num" in issues["hydra.sweep.subdir"].fix
    argv = _experiment(tmp_path, "sub", f"hydra:\n  sweep:\n    subdir: {subdir}\n")
    assert "hydra.sweep.subdir" in _refused(["-m", *argv, *sweep])


def test_a_sweep_subdir_of_overrides_must_not_exclude_keys_or_hold_paths(tmp_path):
    sweep = ["-m", f"hydra.sweep.dir={tmp_path}/sweep", "hydra.sweep.subdir=${hydra.job.override_dirname}"]
    screen_command_line([*sweep, "seed=1,2"], SCRIPT, "conf", "config")
    assert "hydra.sweep.subdir" in _refused(
        [*sweep, "seed=1,2", "hydra.job.config.override_dirname.exclude_keys=[seed]"]
    )
    assert "hydra.sweep.subdir" in _refused([*sweep, "seed=1,2", "+note=../../home/x"])
    both = [
        "-m",
        f"hydra.sweep.dir={tmp_path}/s3",
        "hydra.sweep.subdir=${hydra.job.override_dirname}/${hydra.job.num}",
    ]
    assert "hydra.sweep.subdir" in _refused([*both, "seed=1,2", "+note=../../home/x"])
    screen_command_line(
        ["-m", f"hydra.sweep.dir={tmp_path}/s2", "hydra.sweep.subdir=p${hydra.job.num}", "seed=1,2"],
        SCRIPT,
        "conf",
        "config",
    )


def _old_run(run: Path) -> None:
    run.mkdir(parents=True)
    (run / "config_resolved.yaml").write_text("seed: 1\n")
    (run / "run_fingerprint.json").write_text("{}\n")


def test_a_fresh_run_in_another_runs_directory_is_refused_before_hydra_starts(tmp_path):
    run = tmp_path / "run"
    _old_run(run)
    issues = _refused([f"hydra.run.dir={run}"])
    assert (
        "resume=auto" in issues["hydra.run.dir"].fix
        and "config_resolved.yaml" in issues["hydra.run.dir"].problem
    )
    screen_command_line(
        [f"hydra.run.dir={run}", "resume=auto"], SCRIPT, "conf", "config"
    )  # the app compares settings
    screen_command_line([f"hydra.run.dir={tmp_path}/new"], SCRIPT, "conf", "config")
    (tmp_path / "empty").mkdir()
    screen_command_line([f"hydra.run.dir={tmp_path}/empty"], SCRIPT, "conf", "config")


def test_a_sweep_into_an_earlier_sweeps_directory_is_refused(tmp_path):
    _old_run(tmp_path / "sweep" / "0")
    assert "hydra.sweep.dir" in _refused(["-m", "seed=1,2", f"hydra.sweep.dir={tmp_path}/sweep"])
    screen_command_line(
        ["-m", "seed=1,2", f"hydra.sweep.dir={tmp_path}/sweep", "resume=auto"], SCRIPT, "conf", "config"
    )


@pytest.mark.parametrize(
    "folder", ["/tmp/elsewhere/%j", "'${hydra.sweep.dir}/../../x/%j'", "'${paths.root_dir}/x'", "rel/%j"]
)
def test_submitits_job_folder_stays_in_the_sweep_directory(tmp_path, folder):
    sweep = ["seed=1,2", f"hydra.sweep.dir={tmp_path}/sweep", "hydra/launcher=submitit_local_run"]
    issues = _refused(["-m", *sweep, f"hydra.launcher.submitit_folder={folder}"])
    assert "hydra.launcher.submitit_folder" in issues
    argv = _experiment(tmp_path, "job", f"hydra:\n  launcher:\n    submitit_folder: {folder}\n")
    assert "hydra.launcher.submitit_folder" in _refused(["-m", *argv, *sweep])
    screen_command_line(["-m", *sweep], SCRIPT, "conf", "config")


# -- a run directory that cannot be written (SECURITY.md "Faults end in one message") --------------
def test_a_run_directory_name_part_over_255_bytes_is_one_message(tmp_path):
    """Hydra's makedirs raised `OSError: File name too long` with a traceback. Mutation: writable_issue
    returns None -> red (the traceback comes back at run time; here nothing is refused)."""
    part = "é" * 130  # 260 bytes in 130 characters: the limit is in bytes
    issue = _refused([f"hydra.run.dir='{tmp_path}/{part}/run'"])["hydra.run.dir"]
    assert "260 bytes, more than the 255 bytes a file name may have" in issue.problem
    assert "choose another hydra.run.dir on the command line" in issue.fix
    sweep = _refused(["-m", "seed=1,2", f"hydra.sweep.dir={tmp_path}/{'x' * 256}"])
    assert "256 bytes" in sweep["hydra.sweep.dir"].problem


@pytest.mark.parametrize("exists", [True, False])
def test_a_read_only_run_directory_is_one_message(tmp_path, monkeypatch, exists):
    """The run directory (or, not made yet, the folder it goes in) read-only. root writes through a
    mode of 0o555, but not on a read-only file system, which access(2) reports as it does the mode to
    anyone else: as root the test has access(2) answer as for a read-only mount."""
    folder = tmp_path / "ro"
    folder.mkdir()
    run_dir = folder if exists else folder / "new-run"
    folder.chmod(0o555)
    if os.geteuid() == 0:
        real = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, **kw: Path(p) != folder and real(p, mode, **kw))
    try:
        issue = _refused([f"hydra.run.dir={run_dir}"])["hydra.run.dir"]
    finally:
        folder.chmod(0o755)
    assert "cannot be written by this process" in issue.problem
    assert (str(folder) in issue.problem) is not exists  # the folder it would be made in, named
    assert "make it writable" in issue.fix


def test_a_disk_without_free_inodes_is_one_message(tmp_path, monkeypatch):
    """No inode left is a full disk too (every file the run makes needs one). Mutation: the inode
    half of ``full_disk_issue`` removed -> red."""
    real = os.statvfs

    def no_inodes(path):
        got = real(path)
        return os.statvfs_result((*got[:6], 0, 0, *got[8:]))  # f_ffree, f_favail: 0

    monkeypatch.setattr(os, "statvfs", no_inodes)
    issue = _refused([f"hydra.run.dir={tmp_path / 'run'}"])["hydra.run.dir"]
    assert "is full (no free inode" in issue.problem and issue.fix.startswith("free space")
