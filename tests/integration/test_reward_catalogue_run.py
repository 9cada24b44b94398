"""A non-default reward set and prompt family through run_pipeline.py with the tiny model.

The seed system's reward set (answer matching +3/-1, strict and approximate format, numeric
tolerance, overlong) plus a reward function from the example plugin package, with the
``working_out`` family's markers: every term must show up per step in metrics.jsonl, and the
prompt recorded by the run must be the family's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from tests import in_process
from tests.conftest import ROOT

pytestmark = pytest.mark.integration

PLUGIN_TERM = (
    "+reward.terms.variety={_target_: rlvr.reward.FunctionReward, weight: 0.1, "
    "function: {_target_: rlvr_example_plugin.rewards.distinct_words, _partial_: true}}"
)
TERMS = ["answer_match", "format", "format_approx", "numeric", "overlong", "variety"]


def run(run_dir: Path, *overrides: str) -> in_process.Run:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "plugins"), os.environ.get("PYTHONPATH", "")]),
        "RLVR_PLUGINS": "rlvr_example_plugin",
    }
    cmd = [f"hydra.run.dir={run_dir}", *overrides]
    return in_process.run(cmd, env=env)


@pytest.fixture(scope="module")
def catalogue_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("catalogue")
    proc = run(
        run_dir,
        "experiment=smoke",
        "reward=seed",
        "prompts=working_out",
        PLUGIN_TERM,
        "training_loop.grpo.max_steps=2",
        "training_loop.sft.max_steps=2",
        "evaluation.every_n_steps=0",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return run_dir


def test_every_reward_term_has_per_step_metrics(catalogue_run):
    records = [json.loads(line) for line in (catalogue_run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["event"] == "train_step" and r["phase"] == "grpo"]
    assert [r["step"] for r in steps] == [1, 2]
    for step in steps:
        metrics = step["metrics"]
        for name in TERMS:
            for stat in ("mean", "std"):
                assert f"grpo/reward/{name}/{stat}" in metrics, (name, sorted(metrics))
        assert set(metrics) >= {"grpo/reward/mean", "grpo/reward/zero_std_groups_frac"}
        # The plugin term ran under its deadline (reward.plugin_timeout_s) and returned in time.
        assert metrics["grpo/reward/plugin_timeouts"] == 0.0
        # Known ranges: answer matching is one of its three values' mixture, overlong within [-1, 0].
        assert -1.0 <= metrics["grpo/reward/answer_match/mean"] <= 3.0
        assert -1.0 <= metrics["grpo/reward/overlong/mean"] <= 0.0
        assert -4.0 <= metrics["grpo/reward/format_approx/mean"] <= 2.0


def test_the_run_used_the_families_markers_everywhere(catalogue_run):
    cfg = OmegaConf.load(catalogue_run / "config_resolved.yaml")
    assert (cfg.prompts.family, cfg.prompts.answer_start, cfg.prompts.reasoning_end) == (
        "working_out",
        "<SOLUTION>",
        "<end_working_out>",
    )
    assert "<start_working_out>" in cfg.prompts.system
    assert list(cfg.reward.terms) == TERMS
    assert cfg.reward.terms.overlong.max_tokens == cfg.training_loop.grpo.max_completion_length

    from transformers import AutoTokenizer

    from rlvr.model.embedded import ensure_default_model
    from rlvr.prompts import PromptTemplate

    expected = PromptTemplate(
        **{k: v for k, v in OmegaConf.to_container(cfg.prompts).items() if k != "_target_"}
    )
    # the run binds its prompt to the chat template of the tokenizer it renders with (the tiny
    # model's is the embedded model's)
    expected.bind(AutoTokenizer.from_pretrained(ensure_default_model(weights=False)))
    provenance = json.loads((catalogue_run / "provenance.json").read_text())
    assert provenance["prompt_hash"] == expected.hash
    final = json.loads((catalogue_run / "eval" / "final_step4.json").read_text())
    assert final["prompt_hash"] == expected.hash


def test_a_smuggled_family_is_refused_before_anything_runs(tmp_path):
    proc = run(tmp_path / "run", "experiment=smoke", "prompts.family=../../etc/passwd", "validate_only=true")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "prompts.reasoning_start" in proc.stderr and "not a prompt family" in proc.stderr
    assert not (tmp_path / "run" / "config_resolved.yaml").exists()
