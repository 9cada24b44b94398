"""What a config may set in a training phase (SECURITY.md "What a config may set"): the allowlist of
rlvr.training_loop.settings, its bounds, and docs/training_settings.md as its table.

Each finding of the probe of 49957fd is played as a colleague's experiment file would play it, through
the config gate with ``validate_only=true`` (nothing loads): refused, naming the key, the value, the
rule and the fix. Each test's docstring names the mutation that turns it red.
"""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from tests.conftest import CONF, ROOT, make_loop

from rlvr.config.gate import check
from rlvr.issues import ConfigIssue, ConfigValidationError, value_issues
from rlvr.training_loop import settings
from rlvr.training_loop.settings import PHASES, GRPONode

ALLOWLIST = "not on the allowlist of settings a config may set: docs/training_settings.md"


def _gate(tmp_path: Path, experiment: str | None, *overrides: str) -> dict[str, ConfigIssue]:
    """The gate's refusal of a run at validate_only, by key, with ``experiment`` as the body of a
    colleague's experiment file in a config directory of theirs (Hydra's search path)."""
    theirs = tmp_path / "theirs"
    argv = ["model=tiny", "validate_only=true", *overrides]
    if experiment is not None:
        (theirs / "experiment").mkdir(parents=True)
        (theirs / "experiment" / "theirs.yaml").write_text("# @package _global_\n" + experiment)
        argv = [f"hydra.searchpath=[file://{theirs}]", "experiment=theirs", *argv]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=argv)
    with pytest.raises(ConfigValidationError) as refused:
        check(cfg, tmp_path / "run")
    return {issue.key: issue for issue in refused.value.issues}


def test_jit_checkpointing_from_an_experiment_file_is_refused_at_validate_only(tmp_path):
    """Finding 1: transformers' JIT checkpointing installs its own SIGTERM handler; a stop then ended
    GRPO COMPLETED, exit 0, after a fraction of its steps. Refused from a file and from the command
    line alike, naming where the stop is handled instead. Mutation: the node's refusal of fields off
    the allowlist dropped (PhaseSettings.node gives them TRL's type alone, the old denylist) -> red."""
    found = _gate(tmp_path, "training_loop:\n  grpo:\n    enable_jit_checkpoint: true\n")
    issue = found["training_loop.grpo.enable_jit_checkpoint"]
    assert (issue.value, issue.problem) == (True, ALLOWLIST)
    assert "the pipeline owns SIGTERM" in issue.fix and "resume=auto" in issue.fix
    typed = _gate(tmp_path / "cli", None, "+training_loop.sft.enable_jit_checkpoint=true")
    assert typed["training_loop.sft.enable_jit_checkpoint"].problem == ALLOWLIST


DEEPSPEED = """training_loop:
  grpo:
    deepspeed:
      zero_optimization: {stage: 2}
      flops_profiler: {enabled: true, output_file: /tmp/elsewhere/flops.txt}
      csv_monitor: {enabled: true, output_path: /tmp/elsewhere/csv}
      tensorboard: {enabled: true, output_path: /tmp/elsewhere/tb}
"""


@pytest.mark.parametrize(
    ("body", "key"),
    [
        (DEEPSPEED, "training_loop.grpo.deepspeed"),
        ("training_loop:\n  sft:\n    fsdp_config: {activation_checkpointing: true}\n", "training_loop.sft.fsdp_config"),
        ("training_loop:\n  grpo:\n    fsdp: full_shard\n", "training_loop.grpo.fsdp"),
        ("training_loop:\n  grpo:\n    accelerator_config: {split_batches: true}\n", "training_loop.grpo.accelerator_config"),
    ],
    ids=["deepspeed-mapping", "fsdp_config", "fsdp", "accelerator_config"],
)  # fmt: skip
def test_a_distributed_engines_own_settings_from_a_file_are_refused(tmp_path, body, key):
    """Finding 2: a ``deepspeed`` mapping in an experiment file carried output paths of DeepSpeed's own
    (flops profiler, CSV and TensorBoard monitors); run under a launcher it wrote outside the run
    directory. The engines' settings come from an accelerate config file instead. (A path string for
    one of them is refused earlier, as a library dict field that does not decode: SECURITY.md "Code
    shipped with a model".) Mutation: the
    refusal dropped (as above), or deepspeed put on the allowlist -> red."""
    issue = _gate(tmp_path, body)[key]
    assert issue.problem == ALLOWLIST
    assert (
        "distributed=ddp|deepspeed_zero2|deepspeed_zero3|fsdp" in issue.fix and "docs/scaling.md" in issue.fix
    )
    if key == "training_loop.grpo.deepspeed":
        assert issue.value["flops_profiler"]["output_file"] == "/tmp/elsewhere/flops.txt"


@pytest.mark.parametrize("key", ["log_completions", "num_completions_to_print", "log_unique_prompts"])
def test_trls_own_completion_printing_is_refused(tmp_path, key):
    """Finding 5: ``log_completions`` let TRL print prompts and completions with rich: a data file's
    escape bytes reached the terminal, and a credential cut short by rich's ellipsis got past the
    masking. The pipeline's own completions table (masked and escaped) is named instead. Mutation:
    log_completions put on the allowlist -> red."""
    value = 4 if key == "num_completions_to_print" else True
    issue = _gate(tmp_path, f"training_loop:\n  grpo:\n    {key}: {str(value).lower()}\n")[
        f"training_loop.grpo.{key}"
    ]
    assert (issue.value, issue.problem) == (value, ALLOWLIST)
    assert "completions.per_grpo_step" in issue.fix and "masked and escaped" in issue.fix


@pytest.mark.parametrize(
    "key", ["training_loop.grpo.dataloader_num_workers", "training_loop.sft.dataloader_num_workers",
            "training_loop.sft.dataset_num_proc", "training_loop.rft.dataset_num_proc"],
)  # fmt: skip
def test_worker_processes_have_a_ceiling(tmp_path, key):
    """Finding 7: 100000 workers passed validate_only (12 really forked 12 processes). Mutation: the
    ceiling (settings.MOST_PROCESSES) taken off the two counts -> red."""
    phase, name = key.split(".")[1:]
    issue = _gate(tmp_path, f"training_loop:\n  {phase}:\n    {name}: 100000\n")[key]
    assert (issue.value, issue.problem) == (100000, f"must be <= {settings.MOST_PROCESSES}")
    assert f"set {key} to a value <= 32" in issue.fix


@pytest.mark.parametrize(
    ("key", "written"),
    [("training_loop.grpo.learning_rate", ".inf"), ("training_loop.grpo.temperature", ".inf"),
     ("training_loop.sft.learning_rate", "-.inf"), ("training_loop.rft.temperature", ".nan")],
)  # fmt: skip
def test_an_infinite_float_is_refused_with_a_clear_message(tmp_path, key, written):
    """Finding 8: ``learning_rate: .inf`` and ``temperature: .inf`` passed their gt=0 bounds, then the
    run died with a raw 60-line traceback. Mutation: allow_inf_nan=False dropped from the gate's
    adapters (rlvr.issues._cached_adapter) -> red (each row then says "must be <= ..." or "must be > 0",
    which names no finite rule; a float without bounds would pass)."""
    phase, name = key.split(".")[1:]
    issue = _gate(tmp_path, f"training_loop:\n  {phase}:\n    {name}: {written}\n")[key]
    assert issue.problem.startswith("must be a finite number"), issue  # then: the keys that copy it
    assert issue.fix.startswith(f"set {key} to a finite number, e.g. ")


def test_a_non_finite_float_of_any_other_component_is_refused_too(tmp_path):
    """The finite rule is the gate's, for every component's floats (a reward term's weight here).
    Mutation: allow_inf_nan=False dropped from rlvr.issues._cached_adapter -> red."""
    found = _gate(tmp_path, None, "reward.terms.format.weight=inf")
    assert found["reward.terms.format.weight"].problem == "must be a finite number"


def test_a_misspelt_refused_field_still_gets_did_you_mean_and_the_pipelines_own_keys_keep_their_messages():
    """Every TRL field stays known: a typo of a refused one is "not a GRPOConfig field" with the close
    names; the keys the pipeline sets itself say so, as before the allowlist. Mutation: refused fields
    left out of the node -> the typo loses its suggestion; a pipeline key's Refused replaced by the
    generic one -> red."""
    found = {
        i.key: i
        for i in value_issues(
            "training_loop.grpo",
            {"enable_jit_checkpont": True, "output_dir": "/x", "bf16": True, "push_to_hub": True},
            GRPONode,
            "TrainingLoop",
        )
    }
    assert found["training_loop.grpo.enable_jit_checkpont"].problem == "not a GRPOConfig field"
    assert "'enable_jit_checkpoint'" in found["training_loop.grpo.enable_jit_checkpont"].fix
    assert found["training_loop.grpo.output_dir"].problem == "is set by the pipeline"
    assert found["training_loop.grpo.bf16"].fix.startswith("remove it and set training_loop.precision=")
    assert found["training_loop.grpo.push_to_hub"].problem.startswith("a run never uploads from config")


def test_a_phase_built_outside_the_gate_refuses_the_field_too():
    """Phase.validate (a training loop built by a caller, not by the gate) reports the node's refusals
    and builds no TRL config with them. Mutation: Phase.validate stops calling refusals -> red."""
    loop = make_loop(
        sft={"enabled": False},
        grpo={"enabled": True, "max_steps": 2, "deepspeed": {"zero_optimization": {"stage": 3}}},
    )
    [issue] = [i for i in loop.validate() if i.key.startswith("training_loop.grpo")]
    assert (issue.key, issue.problem) == ("training_loop.grpo.deepspeed", ALLOWLIST)


def test_every_allowlisted_trl_field_is_a_field_of_the_installed_trl():
    """An allowlisted field TRL dropped or renamed would silently become a refused or unknown key."""
    for phase in PHASES.values():
        assert set(phase.allowed) <= set(phase.trl_fields()), sorted(
            set(phase.allowed) - set(phase.trl_fields())
        )


def test_every_count_a_config_may_set_has_a_finite_ceiling():
    """Every int a config may set in a phase (processes, workers, sizes, steps, generations, lengths)
    declares an upper bound. Mutation: a ceiling removed from any count (e.g. max_steps) -> red."""

    def ints(annotation: typing.Any) -> list[typing.Any]:
        if typing.get_origin(annotation) is typing.Annotated and typing.get_args(annotation)[0] is int:
            return [annotation]
        return [a for arg in typing.get_args(annotation) for a in ints(arg)]

    unbounded = [
        f"{phase.path}.{key}"
        for phase in PHASES.values()
        for key, annotation in {**phase.allowed, **phase.own}.items()
        for count in ints(annotation)
        if not any(getattr(m, "le", None) or getattr(m, "lt", None) for f in typing.get_args(count)[1:] for m in f.metadata)
    ]  # fmt: skip
    assert unbounded == []


def test_the_docs_table_is_the_allowlist():
    """docs/training_settings.md is generated from the node (``python -m rlvr.training_loop.settings``);
    a setting added, removed or re-bounded without regenerating it goes red here."""
    assert (ROOT / settings.DOC).read_text() == settings.markdown()
    written = (ROOT / settings.DOC).read_text()
    for phase in PHASES.values():
        for key in {**phase.allowed, **phase.own}:
            assert f"| `{key}` |" in written


def test_every_field_the_projects_own_configs_set_is_on_the_allowlist():
    """conf/training_loop/*.yaml, conf/rollout/*.yaml and the experiments only set keys a config may
    set (their composition and binding: tests/unit/test_config.py); here the same for each phase's keys
    as the shipped default composes them."""
    from omegaconf import OmegaConf
    from tests.conftest import compose_config

    for overrides in ([], ["rollout=vllm_colocate"], ["rollout=vllm_server"], ["rollout=hf_continuous"],
                      ["experiment=smoke"], ["experiment=gsm_symbolic_gpu"]):  # fmt: skip
        cfg = compose_config(overrides)
        for name, phase in PHASES.items():
            node = OmegaConf.to_container(cfg.training_loop[name], resolve=False)
            refused = sorted(k for k in node if k not in phase.allowed and k not in phase.own)
            assert refused == [], (overrides, name, refused)
