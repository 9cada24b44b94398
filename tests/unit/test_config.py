"""Every config group option and every experiment composes, and every _target_ binds to its signature."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf
from tests.conftest import CONF, compose_config

from rlvr.config.validation import check_targets
from rlvr.pipeline.wiring import runtime_args

GROUPS = sorted(p.name for p in CONF.iterdir() if p.is_dir() and p.name not in ("hydra", "experiment"))
# Nested groups too (evaluation/generator, data/checker, data/processor): each option composes.
SUBGROUPS = sorted(str(p.relative_to(CONF)) for g in GROUPS for p in (CONF / g).iterdir() if p.is_dir())
OPTIONS = [(g, f.stem) for g in GROUPS + SUBGROUPS for f in sorted((CONF / g).glob("*.yaml"))]
EXPERIMENTS = sorted(f.stem for f in (CONF / "experiment").glob("*.yaml"))


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_group_option_composes_and_binds(group, option):
    overrides = [f"{group}={option}"]
    if (group, option) in (("model", "hf"), ("model", "unsloth")):
        overrides.append("model.name_or_path=some/model")
    if group == "data/source":  # no default: each option is placed under a name in data.eval_sets
        overrides = [f"+data/source@data.eval_sets.extra={option}"]
    elif group.startswith("data/"):  # a file source's checker and processor
        overrides.insert(0, "data=qa_file")
    if group == "reward/terms":  # terms are keyed by name: reward.terms.<name>
        overrides = [f"+reward/terms@reward.terms.extra={option}"]
    cfg = compose_config(overrides)
    assert check_targets(cfg, runtime_args(cfg)) == []
    where = {"data/source": "data.eval_sets.extra", "reward/terms": "reward.terms.extra"}
    node = OmegaConf.select(cfg, where.get(group, group.replace("/", ".")))
    if node is None:  # a group that writes into another node (`# @package`): rollout -> training_loop.grpo
        assert group == "rollout" and "use_vllm" in cfg.training_loop.grpo
        return
    if "_target_" in node:
        assert OmegaConf.select(node, "_target_").startswith("rlvr.")


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_composes_and_only_overrides(name):
    cfg = compose_config([f"experiment={name}"])
    assert check_targets(cfg, runtime_args(cfg)) == []
    text = (CONF / "experiment" / f"{name}.yaml").read_text()
    assert text.startswith("# @package _global_"), "experiment files must be global override-only files"
    assert "_target_" not in text, (
        "experiments override keys; components are chosen with 'override /group: x'"
    )


def test_cli_overrides_take_effect():
    cfg = compose_config(["data.task=letter_counting", "training_loop.grpo.max_steps=5", "model=tiny"])
    assert cfg.data.task == "letter_counting"
    assert cfg.training_loop.grpo.max_steps == 5
    assert cfg.model._target_ == "rlvr.model.loader.TinyRandomModel"


def test_smoke_experiment_shrinks_the_run():
    cfg = compose_config(["experiment=smoke"])
    assert cfg.model._target_ == "rlvr.model.loader.TinyRandomModel"
    assert cfg.training_loop.grpo.max_steps <= 5
    assert cfg.data.train_size <= 100


def test_seed_is_shared_by_interpolation():
    cfg = compose_config(["seed=7"])
    assert cfg.data.seed == cfg.training_loop.seed == cfg.evaluation.seed == 7


def test_sampled_evaluation_follows_the_grpo_temperature_and_composes_without_a_training_loop():
    def sampled(overrides, name="config"):
        return OmegaConf.to_container(compose_config(overrides, name).evaluation.sampled, resolve=True)

    assert sampled([])["temperature"] == 1.0
    assert sampled(["training_loop.grpo.temperature=0.7"])["temperature"] == 0.7
    assert sampled([], "benchmark")["temperature"] == 1.0  # no training_loop there: the default


def test_the_generation_budget_is_one_value_for_rollouts_and_evaluation_unless_split():
    def budgets(overrides, name="config"):
        cfg = compose_config(overrides, name)
        return cfg.evaluation.max_new_tokens, OmegaConf.select(
            cfg, "training_loop.grpo.max_completion_length"
        )

    assert budgets([]) == (80, 80)  # room for the worked solutions SFT teaches
    assert budgets(["training_loop=grpo"]) == (16, 16)  # no worked SFT there
    assert budgets(["training_loop=rft_grpo"]) == (16, 16)
    assert budgets(["training_loop=rft"]) == (16, 16)
    assert budgets(["experiment=smoke"]) == (12, 12)
    assert budgets(["experiment=gsm_symbolic_gpu"]) == (512, 512)
    assert budgets(["training_loop.grpo.max_completion_length=64"]) == (64, 64)
    assert budgets(["evaluation.max_new_tokens=32"]) == (32, 80)  # split on purpose
    assert budgets([], "benchmark") == (16, None)  # no rollouts there: its own budget


def test_the_evaluation_generator_is_chosen_by_its_config_file():
    assert compose_config([]).evaluation.generator._target_ == "rlvr.evaluation.generation.HFBackend"
    vllm = compose_config(["evaluation/generator=vllm", "evaluation.generator.cpu_kv_cache_gb=0.25"])
    assert vllm.evaluation.generator._target_ == "rlvr.evaluation.generation.VLLMBackend"
    assert vllm.evaluation.generator.cpu_kv_cache_gb == 0.25


def test_every_target_in_conf_names_the_module_that_defines_it():
    """One hop from config to code: ``rlvr.model.loader.HFModel``, not the package's re-export
    ``rlvr.model.HFModel``, so a reader of conf/ opens the right file."""
    import importlib
    import re

    detours = []
    for path in sorted(CONF.rglob("*.yaml")):
        for target in re.findall(r"_target_:\s*([\w.]+)", path.read_text()):
            module, _, name = target.rpartition(".")
            defined_in = getattr(importlib.import_module(module), name).__module__
            if defined_in != module:
                detours.append(f"{path.relative_to(CONF)}: {target} (defined in {defined_in})")
    assert not detours, "; ".join(detours)
