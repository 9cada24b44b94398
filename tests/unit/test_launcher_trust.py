"""Launcher settings from a config file (SECURITY.md "Launchers and infrastructure"), as an attacker
who sends an experiment file would write them.

submitit turns every SLURM launcher setting into an ``#SBATCH --<key>=<value>`` line of the job
script: the value is shell-quoted, but sbatch acts on the option itself (``--export`` sets the job's
environment, ``BASH_ENV`` included, which bash runs before the script; ``--output`` appends the job's
output to any file). Only an allowlist of options, each with a value of a strict shape, passes.
"""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from tests.conftest import CONF, ROOT

from rlvr.config.hydra_check import screen_command_line
from rlvr.issues import ConfigValidationError
from rlvr.security.hydra_policy import SBATCH_OPTIONS, check_hydra_node

SLURM = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"


def slurm_node(additional_parameters=None, **settings):
    """The composed hydra node with the shipped SLURM launcher, then changed as a config file would."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "config", ["hydra/launcher=slurm", "hydra.launcher.partition=gpu"], return_hydra_config=True
        )
    node = OmegaConf.to_container(cfg, resolve=False)
    node["hydra"]["launcher"].update(settings)
    if additional_parameters is not None:
        node["hydra"]["launcher"]["additional_parameters"] = additional_parameters
    return OmegaConf.create(node).hydra


def keys(node) -> set[str]:
    return {i.key for i in check_hydra_node(node)}


def test_the_premise_an_sbatch_option_from_a_config_sets_the_jobs_environment():
    from submitit.slurm.slurm import _make_sbatch_string

    script = _make_sbatch_string(
        command="true", folder="/f", additional_parameters={"export": "ALL,BASH_ENV=/tmp/evil.sh"}
    )
    assert "#SBATCH --export=ALL,BASH_ENV=/tmp/evil.sh" in script.splitlines()


def test_the_shipped_launchers_and_allowed_settings_pass():
    allowed = {
        "requeue": True,
        "open-mode": "append",
        "reservation": "maint_2026",
        "time_min": "1:30:00",
        "exclusive": True,
        "nodelist": "node[01-04],gpu7",
        "constraint": "a100&ib",
        "mem-per-gpu": "40G",
        "wckey": "rlvr",
    }
    assert check_hydra_node(slurm_node(allowed, account="proj-1", qos="high", gres="gpu:a100:2")) == []
    for launcher in ("submitit_local_run", "local_parallel"):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose("config", [f"hydra/launcher={launcher}"], return_hydra_config=True)
        assert check_hydra_node(cfg.hydra) == []


@pytest.mark.parametrize(
    "option",
    [
        "export",  # the job's environment: BASH_ENV, LD_PRELOAD, PATH
        "export-file",
        "export_file",  # submitit turns '_' into '-'
        "get-user-env",
        "output",  # appends the job's output to any file (a shell startup file)
        "error",
        "input",
        "chdir",
        "wrap",
        "container",
        "mail-user",  # job notifications to someone else
        "dependency",
        "array",
        "signal",
        "uid",
        # spellings: sbatch accepts unambiguous abbreviations and short options
        "out",
        "exp",
        "o",
        "e",
        "D",
        "Export",
        "EXPORT",
        " export",
        "output=/tmp/x --account",  # a key that carries its own value
    ],
)
def test_sbatch_options_outside_the_allowlist_are_refused(option):
    assert option.replace("_", "-") not in SBATCH_OPTIONS
    issues = check_hydra_node(slurm_node({"requeue": True, option: "ALL,BASH_ENV=/tmp/evil.sh"}))
    assert [i.key for i in issues] == [f"hydra.launcher.additional_parameters.{option}"]
    assert "allowed" in issues[0].fix and issues[0].value == "ALL,BASH_ENV=/tmp/evil.sh"


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("account", "proj --export=ALL,BASH_ENV=/tmp/x"),
        ("account", "proj'; touch /tmp/x; '"),
        ("qos", "$(touch /tmp/x)"),
        ("qos", "`id`"),
        ("reservation", "../../etc"),
        ("partition", "gpu,"),
        ("nodelist", "node1 --output=/tmp/x"),
        ("constraint", "a100;id"),
        ("time-min", "1;2"),
        ("time-min", "90 --export=ALL"),
        ("mem-per-cpu", "4G --chdir=/"),
        ("exclusive", "yes"),
        ("requeue", "false"),  # a string: written as --requeue=false, which sbatch reads otherwise
        ("requeue", False),
        ("open-mode", "w"),
        ("comment", "x\ny"),
        ("comment", "a$HOME"),
        ("account", ["a", "b"]),
        ("account", True),
    ],
)
def test_allowed_sbatch_options_with_values_of_another_shape_are_refused(option, value):
    issues = check_hydra_node(slurm_node({option: value}))
    assert f"hydra.launcher.additional_parameters.{option}" in {i.key for i in issues}


def test_an_interpolated_option_is_judged_by_what_it_resolves_to():
    node = OmegaConf.to_container(slurm_node({"account": "${hydra.job.env_set_value}"}), resolve=False)
    node["job"]["env_set_value"] = "x --export=ALL"
    issues = check_hydra_node(OmegaConf.create({"hydra": node}).hydra)
    assert ("hydra.launcher.additional_parameters.account", "x --export=ALL") in {
        (i.key, i.value) for i in issues
    }


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("srun_args", ["--export=ALL,LD_PRELOAD=/tmp/x.so"]),  # srun options of the job step
        ("teardown", ["touch /tmp/pwned"]),  # shell lines after the job
        ("use_srun", False),
        ("mail_user", "someone@example.com"),
        ("wckey", "x"),  # a real submitit parameter, but not on the list
        ("submitit_folder", "/tmp/anywhere/%j"),  # job scripts and logs outside the sweep dir
        ("submitit_folder", "${hydra.sweep.dir}/../../anywhere"),
        ("submitit_folder", "${hydra.sweep.dir}/.submitit/../../x"),
        ("submitit_folder", "${oc.env:HOME}/.submitit"),
        ("partition", "gpu --export=ALL"),
        ("account", "$(id)"),
        ("name", "run;id"),
        ("timeout_min", "60; id"),
        ("gpus_per_node", -1),
        ("stderr_to_stdout", "yes"),
    ],
)
def test_launcher_settings_outside_the_list_or_of_another_shape_are_refused(setting, value):
    assert f"hydra.launcher.{setting}" in keys(slurm_node(**{setting: value}))


def _config_dir(tmp_path, files: dict[str, str]):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return str(tmp_path)


@pytest.mark.parametrize(
    ("files", "override", "key"),
    [
        (
            {
                "experiment/theirs.yaml": "# @package _global_\ndefaults:\n  - override /hydra/launcher: slurm\n"
                "hydra:\n  launcher:\n    partition: gpu\n    additional_parameters:\n"
                "      export: ALL,BASH_ENV=/tmp/evil.sh\n"
            },
            "experiment=theirs",
            "hydra.launcher.additional_parameters.export",
        ),
        (
            {
                "experiment/theirs.yaml": "# @package _global_\ndefaults:\n  - override /hydra/launcher: slurm\n"
                "hydra:\n  launcher:\n    partition: gpu\n    additional_parameters:\n"
                "      output: /tmp/victim/.bashrc\n"
            },
            "experiment=theirs",
            "hydra.launcher.additional_parameters.output",
        ),
        (  # a launcher file of its own, without the schema: any key reaches submitit
            {
                "hydra/launcher/theirs.yaml": f"_target_: {SLURM}\n"
                "submitit_folder: ${hydra.sweep.dir}/.submitit/%j\npartition: gpu\n"
                "srun_args: ['--export=ALL,LD_PRELOAD=/tmp/x.so']\n"
            },
            "hydra/launcher=theirs",
            "hydra.launcher.srun_args",
        ),
    ],
)
def test_an_experiment_file_cannot_set_the_jobs_environment_or_output(tmp_path, files, override, key):
    argv = ["-m", "--config-dir", _config_dir(tmp_path, files), override, "seed=1,2"]
    with pytest.raises(ConfigValidationError) as exc:
        screen_command_line(argv, ROOT / "run_pipeline.py", "conf", "config")
    assert key in {i.key for i in exc.value.issues}


@pytest.mark.parametrize(
    "name",
    [
        "run/../../../tmp/anywhere",  # '/' in the middle: the check must hold for the whole name
        "a/b",
        "ok/..",
        "run\\..\\x",
        "run name",
        "run\n",
        "-run",
        ".hidden",
        "",
    ],
)
def test_a_job_name_must_be_a_plain_name_all_the_way_through(name):
    # hydra.job.name names the log file <run dir>/<job name>.log (and the SLURM job)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", return_hydra_config=True)
    node = OmegaConf.to_container(cfg.hydra, resolve=False)
    node["job"]["name"] = name
    assert "hydra.job.name" in keys(OmegaConf.create(node))
    node["job"]["name"] = "run_pipeline.v2-a"
    assert "hydra.job.name" not in keys(OmegaConf.create(node))
