"""A key written in the wrong place, or an option that is a task, is answered with the override that
works (issue 48): the full path where the key lives, ``data.task=<name>``, a node set whole. Each hint
below pointed nowhere before ("no close match", a '+key' that then failed, "did you mean 'lora'?")."""

from __future__ import annotations

import pytest
from tests.conftest import ROOT

from rlvr.config.hydra_check import screen_command_line
from rlvr.issues import ConfigValidationError

SCRIPT = ROOT / "run_pipeline.py"


def fix_of(*overrides: str) -> str:
    try:
        unknown = screen_command_line(["model=tiny", *overrides], SCRIPT, "conf", "config")
    except ConfigValidationError as exc:
        (issue,) = exc.issues
        return issue.fix
    ((_, issue),) = unknown
    return issue.fix


@pytest.mark.parametrize(
    ("override", "fix"),
    [
        # at the top level: every phase's key, the GRPO one first (shortest path, then by name)
        (
            "learning_rate=1e-5",
            "it lives at training_loop.grpo.learning_rate (also training_loop.rft.learning_rate, "
            "training_loop.sft.learning_rate): write training_loop.grpo.learning_rate=1e-5",
        ),
        # one level short: no '+training_loop.max_steps=5', which composes and then fails
        (
            "training_loop.max_steps=5",
            "it lives at training_loop.grpo.max_steps (also training_loop.sft.max_steps): "
            "write training_loop.grpo.max_steps=5",
        ),
        # under the wrong component: not 'did you mean batch_size'
        ("evaluation.eval_size=5", "it lives at data.eval_size: write data.eval_size=5"),
        # a node that is null: set it whole
        ("model.lora.r=16", "set it whole, quoted for the shell: 'model.lora={r: 16}'"),
        # a misspelling keeps its close match and the '+' for a new key on purpose
        (
            "training_loop.grpo.lerning_rate=1",
            "did you mean 'learning_rate', 'logging_steps'? (to add a new key on purpose, write "
            "+training_loop.grpo.lerning_rate=1)",
        ),
    ],
)
def test_a_key_in_the_wrong_place_is_answered_with_the_override_that_works(override, fix):
    assert fix_of(override) == fix


def test_an_option_that_is_a_task_is_answered_with_data_task():
    assert fix_of("data=countdown").startswith(
        "countdown is a reasoning-gym task, not a data option: write data.task=countdown (options: "
    )
    assert fix_of("data=leg_countin").startswith("did you mean data=leg_counting or data=letter_counting?")
