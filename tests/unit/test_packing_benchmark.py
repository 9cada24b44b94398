"""benchmarks/packing.py: its arms are valid configs of the real conf/ (the padding-free arm is the
override a user types), and the packed bin follows the padded arm's measured tokens a step."""

from __future__ import annotations

import sys

import pytest
from hydra.utils import instantiate
from tests.conftest import ROOT, compose_config, loop_collaborators

sys.path.insert(0, str(ROOT / "benchmarks"))  # the scripts import each other as siblings
import packing as bench  # noqa: E402


@pytest.mark.parametrize("arm", bench.ARMS)
def test_every_arm_is_a_valid_training_loop_of_the_default_config(arm):
    cfg = compose_config(bench.arm_overrides(arm, ["seed=42", *bench.SFT_ONLY], bin_tokens=1024))
    loop = instantiate(cfg.training_loop, _partial_=True)(**loop_collaborators())
    assert loop.validate() == []
    assert not loop.grpo_phase.enabled and cfg.evaluation.every_n_steps == 0
    args = loop.sft_phase.args
    assert (args.padding_free, args.packing) == {"padded": (False, False), "padding_free": (True, False),
                                                 "packed": (False, True)}[arm]  # fmt: skip


def test_the_packed_bin_is_the_padded_runs_real_tokens_a_step_rounded_up_to_64():
    report = {"throughput": {"sft": {"tokens": 639 * 1000, "steps": 639}}}
    assert bench.bin_size(report) == 1024
    assert bench.bin_size({"throughput": {"sft": {"tokens": 639 * 1024, "steps": 639}}}) == 1024
