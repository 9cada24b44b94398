"""Config trust rules (SECURITY.md "Configuration"), tested as an attacker would try them.

Each test names the class of attack it covers; end-to-end versions with marker files are in
tests/integration/test_config_attacks.py.
"""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from tests.conftest import CONF, ROOT

from rlvr.config.gate import checked_config
from rlvr.config.hydra_check import screen_command_line
from rlvr.config.validation import check_targets
from rlvr.issues import ConfigValidationError
from rlvr.security.hydra_policy import check_hydra_node
from rlvr.security.trust import PLUGINS_ENV, check_resolvers, judge_target, plugin_packages

PLUGIN_DIR = ROOT / "tests" / "plugins"


@pytest.mark.parametrize(
    "target",
    [
        "builtins.open",
        "os.system",
        "subprocess.Popen",
        "importlib.import_module",
        # a path spelt inside rlvr that walks into another module's attribute
        "rlvr.runtime.disk.shutil.copyfile",
        "rlvr.security.trust.importlib.import_module",
        "rlvr.pipeline.wiring.instantiate",
        "rlvr.model.loader.Path",
        # modules, dunder escapes, and rlvr's own helper functions that write files
        "rlvr.runtime.secrets.os",
        "rlvr.reward.CorrectnessReward.__class__",
        "rlvr.runtime.io.SymlinkRefused.__subclasses__",
        "rlvr.runtime.io.atomic_write_text",
        "rlvr.reward.CorrectnessReward.__init__",
        # not a dotted path at all
        "rlvr.app.train; import os",
        "rlvr",
        42,
    ],
)
def test_targets_outside_the_trusted_code_are_refused(target):
    issue = judge_target("x._target_", target)
    assert issue is not None and issue.key == "x._target_" and issue.value == target
    assert "RLVR_PLUGINS" in issue.fix


@pytest.mark.parametrize(
    "target",
    [
        "rlvr.reward.CorrectnessReward",
        "rlvr.reward.terms.FormatReward",
        "rlvr.app.train",
        "rlvr.benchmark.runner.run",
    ],
)
def test_rlvr_classes_and_the_apps_are_allowed(target):
    assert judge_target("x._target_", target) is None


def test_every_node_is_judged_including_app_lists_and_args():
    cfg = OmegaConf.create(
        {
            "app": {"_target_": "builtins.open", "_partial_": True},
            "reward": {
                "_target_": "rlvr.reward.RewardSet",
                "terms": {
                    "a": {"_target_": "rlvr.reward.CorrectnessReward", "_args_": [{"_target_": "os.system"}]}
                },
            },
            "extra": [{"_target_": "rlvr.runtime.disk.shutil.rmtree"}],
        }
    )
    keys = {i.key for i in check_targets(cfg, targets_only=True)}
    assert keys == {"app._target_", "reward.terms.a._args_[0]._target_", "extra[0]._target_"}


def test_checked_config_refuses_a_bad_app_before_anything_is_instantiated():
    cfg = OmegaConf.create(
        {"app": {"_target_": "builtins.open", "_partial_": False, "file": "/x", "mode": "w"}}
    )
    with pytest.raises(ConfigValidationError, match="app._target_"):
        checked_config(cfg)


@pytest.mark.parametrize(
    "value",
    [
        "${oc.create:{_target_: os.system}}",
        "${oc.decode:'{_target_: os.system}'}",
        "${oc.select:a,${oc.create:{_target_: os.system}}}",
        "${my_custom_resolver:1}",
    ],
)
def test_resolvers_that_build_nodes_or_run_code_are_refused(value):
    cfg = OmegaConf.create({"observers": {"y": value}})
    issues = check_resolvers(cfg)
    assert issues and issues[0].key == "observers.y"
    with pytest.raises(ConfigValidationError, match="resolver"):
        checked_config(cfg)


def test_checked_config_is_resolved_so_nothing_appears_after_the_check(monkeypatch):
    monkeypatch.setenv("RLVR_TEST_VALUE", "from-env")
    cfg = OmegaConf.create(
        {"a": "${b}", "b": "${oc.env:RLVR_TEST_VALUE}", "app": {"_target_": "rlvr.app.train"}}
    )
    out = checked_config(cfg)
    assert OmegaConf.to_container(out, resolve=False)["a"] == "from-env"


def test_a_resolved_value_that_reads_as_an_interpolation_again_is_refused(tmp_path):
    # "$" and "{oc.create:...}" pass the resolver check as strings; joined by resolution they would
    # form a new interpolation in the resolved copy, resolved (and instantiated) after every check.
    marker = tmp_path / "marker"
    cfg = OmegaConf.create(
        {
            "d": "$",
            "app": {"_target_": "rlvr.app.train"},
            "observers": {
                "x": "${d}{oc.create:{_target_: builtins.open, file: " + str(marker) + ", mode: w}}"
            },
        }
    )
    assert check_resolvers(cfg) == []
    with pytest.raises(ConfigValidationError) as exc:
        checked_config(cfg)
    assert [i.key for i in exc.value.issues] == ["observers.x"]
    assert not marker.exists()


def _hydra_node(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=True).hydra


def test_the_shipped_hydra_settings_pass():
    assert check_hydra_node(_hydra_node()) == []


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("+hydra.job.env_set.GIT_CONFIG_GLOBAL=/tmp/evil", "hydra.job.env_set"),
        ("hydra.job.env_copy=[HOME]", "hydra.job.env_copy"),
        ("+hydra.callbacks.x._target_=rlvr.runtime.io.atomic_write_text", "hydra.callbacks"),
        (
            "hydra.job_logging.handlers.file.filename=/tmp/anywhere.log",
            "hydra.job_logging.handlers.file.filename",
        ),
        (
            "+hydra.job_logging.handlers.x.class=logging.handlers.SMTPHandler",
            "hydra.job_logging.handlers.x.class",
        ),
        (
            "hydra.job_logging.handlers.console.stream=ext://os.system",
            "hydra.job_logging.handlers.console.stream",
        ),
        ("hydra.launcher._target_=rlvr.runtime.io.SymlinkRefused", "hydra.launcher._target_"),
        ("hydra.sweeper._target_=os.system", "hydra.sweeper._target_"),
        ("+hydra.launcher.setup=[touch /tmp/x]", "hydra.launcher.setup"),
        # Hydra writes config.yaml/hydra.yaml/overrides.yaml (credentials verbatim) into it, anywhere
        ("hydra.output_subdir=/tmp/anywhere", "hydra.output_subdir"),
        # the log file is <run dir>/<job name>.log
        ("hydra.job.name=../../../tmp/anywhere", "hydra.job.name"),
    ],
)
def test_hydra_nodes_that_act_before_the_app_are_refused(override, key):
    issues = check_hydra_node(_hydra_node(override))
    assert key in {i.key for i in issues}, issues


def test_logging_factories_from_a_config_file_are_refused():
    # "()" cannot be typed as an override, but a hydra/job_logging file in a config dir can hold it
    node = OmegaConf.merge(
        OmegaConf.create(OmegaConf.to_container(_hydra_node())),
        {"hydra_logging": {"formatters": {"simple": {"()": "rlvr.runtime.io.atomic_write_text"}}}},
    )
    assert "hydra.hydra_logging.formatters.simple.()" in {i.key for i in check_hydra_node(node)}


@pytest.mark.parametrize(
    ("job_logging", "key"),
    [
        # the whole node, or one handler, interpolated from an unchecked part of the config
        ("${evil}", "hydra.job_logging"),
        ({"version": 1, "handlers": {"f": "${evil}"}}, "hydra.job_logging.handlers.f"),
        # a delayed file handler whose file is changed after the filename check
        (
            {
                "version": 1,
                "handlers": {
                    "file": {
                        "class": "logging.FileHandler",
                        "filename": "${hydra.runtime.output_dir}/${hydra.job.name}.log",
                        "delay": True,
                        ".": {"baseFilename": "/tmp/anywhere"},
                    }
                },
            },
            "hydra.job_logging.handlers.file..",
        ),
        # (held before: an interpolated class is not one of the allowed names)
        ({"version": 1, "handlers": {"c": {"class": "${evil.cls}"}}}, "hydra.job_logging.handlers.c.class"),
    ],
)
def test_logging_settings_are_judged_as_hydra_will_use_them(job_logging, key):
    node = OmegaConf.to_container(_hydra_node(), resolve=False)
    node["job_logging"] = job_logging
    assert key in {i.key for i in check_hydra_node(OmegaConf.create(node))}


def test_a_line_break_in_a_launcher_setting_is_refused():
    # submitit writes additional_parameters as "#SBATCH --key='value'" lines of a bash script: a
    # value with a line break puts a command on its own line, and "#" comments out the quote.
    from submitit.slurm.slurm import _make_sbatch_string

    value = "x\ntouch /tmp/pwned #"
    script = _make_sbatch_string(command="true", folder="/tmp/f", additional_parameters={"comment": value})
    assert "\ntouch /tmp/pwned #'" in script  # the premise: a shell line of its own
    node = _hydra_node("hydra/launcher=slurm", "hydra.launcher.partition=gpu")
    assert check_hydra_node(node) == []
    node = OmegaConf.to_container(node, resolve=False)
    node["launcher"]["additional_parameters"]["comment"] = value
    issues = check_hydra_node(OmegaConf.create(node))
    assert "hydra.launcher.additional_parameters.comment" in {i.key for i in issues}


def test_each_sweep_point_is_judged_with_its_own_hydra_settings(tmp_path):
    # -m experiment=smoke,shared: only the second point's composition carries the logging factory
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "shared.yaml").write_text(
        "# @package _global_\nhydra:\n  job_logging:\n    handlers:\n      f:\n"
        "        (): shutil.copyfile\n        src: a\n        dst: b\n"
    )
    script = ROOT / "run_pipeline.py"
    with pytest.raises(ConfigValidationError) as exc:
        screen_command_line(
            ["-m", "--config-dir", str(tmp_path), "experiment=smoke,shared"], script, "conf", "config"
        )
    assert "hydra.job_logging.handlers.f.()" in {i.key for i in exc.value.issues}
    screen_command_line(["-m", "experiment=smoke", "seed=1,2"], script, "conf", "config")  # value sweeps pass


def test_hydras_pickle_rerun_is_refused_before_the_file_is_read(tmp_path):
    with pytest.raises(ConfigValidationError, match="--experimental-rerun"):
        screen_command_line(
            ["--experimental-rerun", str(tmp_path / "config.pickle")],
            ROOT / "run_pipeline.py",
            "conf",
            "config",
        )


def test_screen_command_line_composes_like_hydra_and_refuses_before_it_acts():
    script = ROOT / "run_pipeline.py"
    screen_command_line(["validate_only=true"], script, "conf", "config")  # the default passes
    with pytest.raises(ConfigValidationError, match="env_set"):
        screen_command_line(["+hydra.job.env_set.X=1"], script, "conf", "config")
    with pytest.raises(ConfigValidationError, match="callbacks"):
        screen_command_line(
            ["-m", "seed=1,2", "+hydra.callbacks.x._target_=rlvr.runtime.io.atomic_write_text"],
            script,
            "conf",
            "config",
        )
    with pytest.raises(ConfigValidationError, match="oc.create"):
        screen_command_line(["+x=${oc.create:{a: 1}}"], script, "conf", "config")
    # --help, --hydra-help and shell completion never run the app
    screen_command_line(["--help"], script, "conf", "config")


def test_plugin_packages_come_only_from_the_environment(monkeypatch):
    monkeypatch.delenv(PLUGINS_ENV, raising=False)
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    target = "rlvr_example_plugin.rewards.EvenAnswerReward"
    assert judge_target("k", target) is not None
    monkeypatch.setenv(PLUGINS_ENV, "rlvr_example_plugin")
    assert judge_target("k", target) is None
    # inside a plugin, the same "defined where" rule applies
    assert judge_target("k", "rlvr_example_plugin.rewards.Any") is not None


@pytest.mark.parametrize("bad", ["os", "subprocess,rlvr_example_plugin", "rlvr", "hydra", "a.b"])
def test_plugin_list_refuses_standard_library_and_core_packages(monkeypatch, bad):
    monkeypatch.setenv(PLUGINS_ENV, bad)
    with pytest.raises(ConfigValidationError, match=PLUGINS_ENV):
        plugin_packages()


def test_a_missing_dependency_names_the_package_not_the_path(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    monkeypatch.setenv(PLUGINS_ENV, "rlvr_example_plugin")
    issue = judge_target("k", "rlvr_example_plugin.broken.NeedsMissingPackage")
    assert "rlvr_package_that_is_not_installed" in issue.problem and "not installed" in issue.problem
    assert issue.fix.startswith("pip install rlvr-package-that-is-not-installed")
    typo = judge_target("k", "rlvr.reward.CorectnessReward")
    assert "typo" in typo.fix


def test_a_bug_in_a_component_keeps_its_exception_while_config_mistakes_are_collected(monkeypatch, tmp_path):
    from tests.conftest import compose_config

    from rlvr.config.gate import check

    monkeypatch.syspath_prepend(str(PLUGIN_DIR))
    monkeypatch.setenv(PLUGINS_ENV, "rlvr_example_plugin")
    buggy = ["+reward.terms.bug._target_=rlvr_example_plugin.rewards.BuggyTerm", "validate_only=true"]
    with pytest.raises(ZeroDivisionError, match="a bug"):  # the original exception, traceback intact
        check(compose_config(buggy), tmp_path)
    mistakes = compose_config(
        ["verifier.timeout_s=0", "model.dtype=float99", "+training_loop.grpo.learning_rat=1"]
    )
    with pytest.raises(ConfigValidationError) as err:
        check(mistakes, tmp_path)
    assert {i.key for i in err.value.issues} == {
        "verifier.timeout_s",
        "model.dtype",
        "training_loop.grpo.learning_rat",
    }
