"""Code shipped with a model (SECURITY.md "Code shipped with a model"): only the command line may
widen what code a library runs from a model folder or hub repository.

Each test plays a colleague whose config file (an experiment in ``--config-dir``, a benchmark model
node, a sweeper's params, TRL's ``model_init_kwargs``) turns ``trust_remote_code`` on, sets a
``code_revision`` or allows pickled weights: refused before Hydra starts, naming the key, the value,
the file and the fix; the same setting typed on the command line passes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf
from tests.conftest import CONF, ROOT

from rlvr.config.hydra_check import screen_command_line
from rlvr.issues import ConfigValidationError

SCRIPT = ROOT / "run_pipeline.py"


def _config_dir(tmp_path: Path, files: dict[str, str]) -> str:
    root = tmp_path / "theirs"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return str(root)


def _refused(argv: list[str], config_name: str = "config") -> dict[str, object]:
    with pytest.raises(ConfigValidationError) as exc:
        screen_command_line(argv, SCRIPT, "conf", config_name)
    return {issue.key: issue for issue in exc.value.issues}


EXPERIMENTS = {
    "trust_remote_code": ("model:\n  trust_remote_code: true\n", "model.trust_remote_code", "true"),
    "a string is as true": ("model:\n  trust_remote_code: 'yes'\n", "model.trust_remote_code", "yes"),
    "code_revision": ("model:\n  code_revision: abc123\n", "model.code_revision", "abc123"),
    "pickled weights": ("model:\n  use_safetensors: false\n", "model.use_safetensors", "false"),
    "TRL's own field (its vLLM engine)": (
        "training_loop:\n  grpo:\n    trust_remote_code: true\n",
        "training_loop.grpo.trust_remote_code",
        "true",
    ),
    "TRL's model_init_kwargs": (
        "training_loop:\n  grpo:\n    model_init_kwargs:\n      trust_remote_code: true\n",
        "training_loop.grpo.model_init_kwargs.trust_remote_code",
        "true",
    ),
}


@pytest.mark.parametrize("case", sorted(EXPERIMENTS))
def test_an_experiment_file_cannot_widen_what_code_a_model_runs(tmp_path, case):
    body, key, typed = EXPERIMENTS[case]
    conf = _config_dir(tmp_path, {"experiment/theirs.yaml": "# @package _global_\n" + body})
    issues = _refused(["--config-dir", conf, "experiment=theirs", "model=hf", "model.name_or_path=org/m"])
    issue = issues[key]
    assert f"{conf}/experiment/theirs.yaml" in issue.problem  # where it came from
    assert "only your own command line" in issue.problem
    assert f"pass {key}={typed} on the command line" in issue.fix


def test_the_same_setting_typed_on_the_command_line_passes(tmp_path):
    argv = ["model=hf", "model.name_or_path=org/m", "model.trust_remote_code=true"]
    assert screen_command_line(argv, SCRIPT, "conf", "config") == []
    # ... also when a file sets it too: the command line's value is the one that runs
    conf = _config_dir(
        tmp_path, {"experiment/theirs.yaml": "# @package _global_\nmodel:\n  trust_remote_code: true\n"}
    )
    assert (
        screen_command_line(["--config-dir", conf, "experiment=theirs", *argv], SCRIPT, "conf", "config")
        == []
    )


def test_a_group_option_file_in_config_dir_cannot_turn_it_on(tmp_path):
    # a model option of their own, chosen by name on the command line: the choice is the user's,
    # the value inside is the file's
    conf = _config_dir(
        tmp_path,
        {
            "model/theirs.yaml": "defaults:\n  - hf\n  - _self_\nname_or_path: org/m\ntrust_remote_code: true\n"
        },
    )
    issue = _refused(["--config-dir", conf, "model=theirs"])["model.trust_remote_code"]
    assert f"{conf}/model/theirs.yaml" in issue.problem


def test_a_benchmark_model_node_cannot_turn_it_on(tmp_path):
    conf = _config_dir(
        tmp_path,
        {
            "model/theirs.yaml": "defaults:\n  - hf\n  - _self_\nname_or_path: org/m\ntrust_remote_code: true\n"
        },
    )
    argv = ["--config-dir", conf, "+model@benchmark.models.theirs=theirs"]
    issue = _refused(argv, "benchmark")["benchmark.models.theirs.trust_remote_code"]
    assert "theirs.yaml" in issue.problem
    assert "pass benchmark.models.theirs.trust_remote_code=true on the command line" in issue.fix
    ok = [*argv, "benchmark.models.theirs.trust_remote_code=true"]
    assert screen_command_line(ok, SCRIPT, "conf", "benchmark") == []


def test_a_sweepers_params_in_a_file_cannot_sweep_it_on(tmp_path):
    conf = _config_dir(
        tmp_path,
        {
            "experiment/theirs.yaml": "# @package _global_\nhydra:\n  sweeper:\n    params:\n"
            "      model.trust_remote_code: true,false\n"
        },
    )
    argv = ["-m", "--config-dir", conf, "experiment=theirs", "model=hf", "model.name_or_path=org/m"]
    issue = _refused(argv)["model.trust_remote_code"]
    assert "hydra.sweeper.params" in issue.problem


def test_a_swept_experiment_that_turns_it_on_is_refused(tmp_path):
    conf = _config_dir(
        tmp_path,
        {
            "experiment/plain.yaml": "# @package _global_\nseed: 3\n",
            "experiment/theirs.yaml": "# @package _global_\nmodel:\n  trust_remote_code: true\n",
        },
    )
    argv = ["-m", "--config-dir", conf, "experiment=plain,theirs", "model=hf", "model.name_or_path=org/m"]
    assert "theirs.yaml" in _refused(argv)["model.trust_remote_code"].problem


def test_inside_a_job_the_gate_holds_the_rule_on_the_jobs_own_command_line():
    """A job a launcher starts (or requeues) is checked again from Hydra's record of its overrides."""
    from rlvr.security.hydra_policy import job_code_issues

    def issues_for(overrides: list[str], container: dict, params: dict | None = None) -> list[str]:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose("config", overrides=overrides, return_hydra_config=True)
        cfg.hydra.sweeper.params = params
        HydraConfig.instance().set_config(cfg)
        try:
            return [i.key for i in job_code_issues(container)]
        finally:
            HydraConfig.instance().cfg = None  # type: ignore[assignment]

    on = {"model": {"trust_remote_code": True}}
    assert issues_for(["model=hf", "model.name_or_path=org/m"], on) == ["model.trust_remote_code"]
    assert issues_for(["model=hf", "model.name_or_path=org/m", "model.trust_remote_code=true"], on) == []
    assert issues_for(["model=hf", "model.name_or_path=org/m"], {"model": {"trust_remote_code": False}}) == []
    # a sweeper's params reach the job's overrides too, but they are a file's
    job = ["model=hf", "model.name_or_path=org/m", "model.trust_remote_code=true"]
    assert issues_for(job, on, {"model.trust_remote_code": "true"}) == ["model.trust_remote_code"]


def test_shipped_configs_widen_nothing():
    from rlvr.security.trust import code_setting_issues

    for name in ("config", "benchmark"):
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose(name)
        assert code_setting_issues(OmegaConf.to_container(cfg, resolve=False), set()) == []


# -- settings a library decodes from a JSON string (SECURITY.md "Code shipped with a model") --------
_GRPO = "training_loop.grpo"
JSON_STRINGS = {
    "a JSON object": ("model_init_kwargs", '{"trust_remote_code": true}'),
    "a string 'true' (transformers makes it a boolean)": (
        "model_init_kwargs",
        '{"trust_remote_code": "true"}',
    ),
    "key in another case, with spaces": ("generation_kwargs", '{" Trust_Remote_Code ": true}'),
    "JSON inside JSON": ("model_init_kwargs", '{"x": "{\\"trust_remote_code\\": true}"}'),
    "deep under a list of mappings": ("chat_template_kwargs", '[{"a": [{"b": {"code_revision": "abc"}}]}]'),
    "leading space": ("lr_scheduler_kwargs", '  {"use_safetensors": false}'),
    "a field the library does not decode": ("some_other_field", '{"trust_remote_code": true}'),
}


@pytest.mark.parametrize("case", sorted(JSON_STRINGS))
def test_a_json_string_that_decodes_to_a_code_setting_is_refused(tmp_path, case):
    field, text = JSON_STRINGS[case]
    body = f"training_loop:\n  grpo:\n    {field}: '{text}'\n"
    conf = _config_dir(tmp_path, {"experiment/theirs.yaml": "# @package _global_\n" + body})
    argv = ["--config-dir", conf, "experiment=theirs", "model=hf", "model.name_or_path=org/m"]
    issue = _refused(argv)[f"{_GRPO}.{field}"]
    assert issue.value == text  # the key and the value as written
    assert "this JSON string decodes to" in issue.problem and "only your own command line" in issue.problem
    assert f"{conf}/experiment/theirs.yaml" in issue.problem  # where it came from
    assert f"type the whole value on the command line: {_GRPO}.{field}=" in issue.fix


def test_a_json_string_typed_on_the_command_line_passes():
    argv = [
        "model=hf",
        "model.name_or_path=org/m",
        f"+{_GRPO}.model_init_kwargs=" + "'{\"trust_remote_code\": true}'",
    ]
    assert screen_command_line(argv, SCRIPT, "conf", "config") == []


@pytest.mark.parametrize("text", ["{use_reentrant: false}", "not json", '"a string"', '{"a": ' * 3])
def test_a_library_dict_field_whose_string_does_not_decode_is_refused(tmp_path, text):
    body = f"training_loop:\n  grpo:\n    gradient_checkpointing_kwargs: '{text}'\n"
    conf = _config_dir(tmp_path, {"experiment/theirs.yaml": "# @package _global_\n" + body})
    issue = _refused(["--config-dir", conf, "experiment=theirs"])[f"{_GRPO}.gradient_checkpointing_kwargs"]
    assert issue.value == text
    assert "a library decodes a string here into settings" in issue.problem
    assert "as a YAML mapping" in issue.fix


def test_a_sweepers_params_cannot_sweep_a_json_string_on(tmp_path):
    conf = _config_dir(
        tmp_path,
        {
            "experiment/theirs.yaml": "# @package _global_\nhydra:\n  sweeper:\n    params:\n"
            f"      +{_GRPO}.model_init_kwargs: \"'{{}}','{{\\\"trust_remote_code\\\": true}}'\"\n"
        },
    )
    argv = ["-m", "--config-dir", conf, "experiment=theirs", "model=hf", "model.name_or_path=org/m"]
    issue = _refused(argv)[f"{_GRPO}.model_init_kwargs"]
    assert "hydra.sweeper.params" in issue.problem and "trust_remote_code=true" in issue.problem


def test_inside_a_job_an_interpolation_that_builds_the_json_string_is_refused():
    """The check before Hydra sees ``${a}``; the job's check sees the resolved string."""
    from rlvr.security.hydra_policy import job_code_issues

    raw = {"a": '{"trust_remote_code": true}', "training_loop": {"grpo": {"model_init_kwargs": "${a}"}}}
    container = OmegaConf.to_container(OmegaConf.create(raw), resolve=True)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose("config", overrides=["model=hf", "model.name_or_path=org/m"], return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    try:
        keys = [i.key for i in job_code_issues(container)]
    finally:
        HydraConfig.instance().cfg = None  # type: ignore[assignment]
    assert f"{_GRPO}.model_init_kwargs" in keys  # (and "a": any string that decodes is judged)


def test_the_decoded_fields_are_every_dict_field_the_installed_libraries_decode():
    import importlib
    import pkgutil

    import transformers
    import trl.trainer

    from rlvr.security.trust import LIBRARY_DICT_FIELDS

    fields = set(transformers.TrainingArguments._VALID_DICT_FIELDS)
    for module in pkgutil.iter_modules(trl.trainer.__path__):
        if module.name.endswith("_config"):
            for obj in vars(importlib.import_module(f"trl.trainer.{module.name}")).values():
                fields |= set(getattr(obj, "_VALID_DICT_FIELDS", []) if isinstance(obj, type) else [])
    assert fields <= LIBRARY_DICT_FIELDS


def test_a_credential_inside_a_json_string_is_refused_unechoed():
    """The gate judges credential keys on the decoded config too (SECURITY.md "Secrets")."""
    from rlvr.config.gate import checked_config

    secret = "hf_" + "q" * 34
    cfg = OmegaConf.create({"training_loop": {"grpo": {"model_init_kwargs": f'{{"Hub_Token": "{secret}"}}'}}})
    with pytest.raises(ConfigValidationError) as exc:
        checked_config(cfg)
    assert [i.key for i in exc.value.issues] == [f"{_GRPO}.model_init_kwargs.Hub_Token"]
    assert secret not in str(exc.value)
