"""Launcher strings are judged by shape, and no shape has an '=' (SECURITY.md "SLURM preemption").

SLURM prints a job's free text (its comment above all) inside the job's ``Key=value`` record
(``scontrol show job``). Issue 55's finding #6: a launcher ``comment`` of ``x JobState=RUNNING
PreemptTime=... Requeue=1``, allowed then, read as fields of the job in a parse where a later key wins
and turned a plain cancel into a requeue. The requeue decision now reads SLURM's JSON
(tests/unit/test_slurm_requeue.py); this rule keeps such text out of the job in the first place.
"""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from tests.conftest import CONF, ROOT

from rlvr.config.hydra_check import screen_command_line
from rlvr.issues import ConfigValidationError
from rlvr.security import hydra_policy
from rlvr.security.hydra_policy import SBATCH_OPTIONS, check_hydra_node

FORGED = "x JobState=RUNNING PreemptTime=2026-11-28T04:09:20 Requeue=1"
# A value of each string shape that passes: the test appends an '=' field to it.
PASSING = {
    "name": "proj",
    "names": "gpu,debug",
    "hosts": "node[01-04]",
    "features": "a100&ib",
    "gres": "gpu:a100:2",
    "memory": "40G",
    "text": "my sweep 3",
    "duration": "1:30:00",
    "open_mode": "append",
    "exclusive": "user",
}
LAUNCHER_STRINGS = sorted(k for k, rule in hydra_policy._LAUNCHER_KEYS.items() if rule in PASSING)
SBATCH_STRINGS = sorted(k for k, rule in SBATCH_OPTIONS.items() if rule in PASSING)


def slurm_hydra(additional_parameters=None, **settings):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            "config", ["hydra/launcher=slurm", "hydra.launcher.partition=gpu"], return_hydra_config=True
        )
    node = OmegaConf.to_container(cfg, resolve=False)
    node["hydra"]["launcher"].update(settings)
    if additional_parameters is not None:
        node["hydra"]["launcher"]["additional_parameters"].update(additional_parameters)
    return OmegaConf.create(node).hydra


def test_every_string_rule_is_covered():
    assert set(hydra_policy._VALUE_RULES) == set(PASSING)
    assert "comment" in LAUNCHER_STRINGS and "comment" in SBATCH_STRINGS


@pytest.mark.parametrize("key", LAUNCHER_STRINGS)
def test_no_launcher_string_may_carry_a_field(key):
    rule = hydra_policy._LAUNCHER_KEYS[key]
    assert check_hydra_node(slurm_hydra(**{key: PASSING[rule]})) == []
    for value in (f"{PASSING[rule]} JobState=RUNNING Requeue=1", f"{PASSING[rule]}=1"):
        issues = check_hydra_node(slurm_hydra(**{key: value}))
        assert [(i.key, i.value) for i in issues] == [(f"hydra.launcher.{key}", value)], value


@pytest.mark.parametrize("option", SBATCH_STRINGS)
def test_no_sbatch_option_string_may_carry_a_field(option):
    rule = SBATCH_OPTIONS[option]
    assert check_hydra_node(slurm_hydra({option: PASSING[rule]})) == []
    for value in (f"{PASSING[rule]} JobState=RUNNING Requeue=1", f"{PASSING[rule]}=1"):
        issues = check_hydra_node(slurm_hydra({option: value}))
        assert [i.key for i in issues] == [f"hydra.launcher.additional_parameters.{option}"], value


def test_a_forged_comment_is_refused_naming_key_value_rule_and_fix():
    """Mutation: '=' back in the text rule's characters made this (and the two above) pass the comment."""
    (issue,) = check_hydra_node(slurm_hydra(comment=FORGED))
    assert issue.key == "hydra.launcher.comment" and issue.value == FORGED
    assert "no '='" in issue.problem and "Key=value record" in issue.problem
    assert (
        issue.fix
        == "write comment without '=', e.g. 'x JobState:RUNNING PreemptTime:2026-11-28T04:09:20 Requeue:1'"
    )
    (issue,) = check_hydra_node(slurm_hydra({"comment": FORGED}))
    assert issue.key == "hydra.launcher.additional_parameters.comment" and "no '='" in issue.problem


def test_a_fix_is_offered_only_where_dropping_the_equals_sign_is_enough():
    (issue,) = check_hydra_node(slurm_hydra(partition="gpu --export=ALL"))
    assert issue.fix.startswith("write partition as plain names")


def test_an_experiment_file_with_a_forged_comment_is_refused_before_hydra_starts(tmp_path):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "theirs.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /hydra/launcher: slurm\n"
        f"hydra:\n  launcher:\n    partition: gpu\n    comment: '{FORGED}'\n"
    )
    argv = ["-m", "--config-dir", str(tmp_path), "experiment=theirs", "seed=1,2"]
    with pytest.raises(ConfigValidationError) as exc:
        screen_command_line(argv, ROOT / "run_pipeline.py", "conf", "config")
    assert ("hydra.launcher.comment", FORGED) in {(i.key, i.value) for i in exc.value.issues}
    assert "hydra.launcher.comment='x JobState=RUNNING" in str(exc.value)
