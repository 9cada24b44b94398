"""Each phase's TRL arguments are built once (issue 57 item 1): the config gate's check, the memory
pre-flight and the trainer's run all read the one ``trl.SFTConfig`` / ``trl.GRPOConfig`` the phase
built, and a run gets a copy writing to its own folder."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest
import trl
from tests.conftest import make_loop

from rlvr.model import memory
from rlvr.training_loop.phase import TrainOutcome


@pytest.fixture
def built(monkeypatch) -> Counter:
    """trl.SFTConfig and trl.GRPOConfig replaced by subclasses of the real classes that count each
    construction (TRL's own __post_init__ still runs), by class name."""
    counts: Counter = Counter()

    def counting(cls: type) -> type:
        def __post_init__(self) -> None:
            counts[cls.__name__] += 1
            cls.__post_init__(self)

        return type(cls.__name__, (cls,), {"__post_init__": __post_init__})

    monkeypatch.setattr(trl, "SFTConfig", counting(trl.SFTConfig))
    monkeypatch.setattr(trl, "GRPOConfig", counting(trl.GRPOConfig))
    return counts


def test_each_phase_builds_its_trl_config_once_per_run(built, tmp_path):
    """The gate (validate), the pre-flight (every phase's arguments and the estimated one) and two
    trainer runs of each phase (an RFT phase runs one a round) build SFTConfig once and GRPOConfig
    once. Red on the code before: issues(), the packing check, the pre-flight and each run built
    their own (5 of each)."""
    loop = make_loop(sft={"max_steps": 1}, grpo={"max_steps": 1}, device="cpu")
    assert loop.validate() == []
    configs, estimated = memory.phase_configs(loop), memory.training_args(loop)
    session = SimpleNamespace(
        run_dir=tmp_path, emit=lambda event: None, eval_every=0, on_weights=lambda *a, **k: None, fits=None
    )
    model = SimpleNamespace(is_activation_checkpointing=False)
    runs = {
        phase.name: [phase.args_and_bridge(model, session, TrainOutcome(model=model))[0] for _ in range(2)]
        for phase in (loop.sft_phase, loop.grpo_phase)
    }
    assert built == {"SFTConfig": 1, "GRPOConfig": 1}
    assert estimated is configs["grpo"] is loop.grpo_phase.args and configs["sft"] is loop.sft_phase.args
    for phase in (loop.sft_phase, loop.grpo_phase):
        for args in runs[phase.name]:
            assert args.output_dir == str(tmp_path / "checkpoints" / phase.name)
            assert args is not phase.args and args.gradient_checkpointing is False
        assert phase.args.gradient_checkpointing is True  # TRL's default: each run changed its copy
        with pytest.raises(TypeError):  # a field changed now would not reach the built arguments
            phase.trl_fields["learning_rate"] = 1.0


def test_a_combination_trl_refuses_is_one_issue_on_the_phase_node_with_values_that_pass(built):
    """TRL's ValueError is the rule, the node's path the key; the fix's values are ones TRL accepts."""
    from rlvr.issues import ConfigValidationError

    loop = make_loop(sft={"enabled": False}, grpo={"per_device_train_batch_size": 5, "num_generations": 3})
    [issue] = loop.validate()
    assert (issue.key, issue.value) == ("training_loop.grpo", "(combination)")
    assert issue.problem.startswith("rejected by GRPOConfig: ") and "num_generations" in issue.problem
    assert "training_loop.grpo.per_device_train_batch_size=6" in issue.fix
    assert "training_loop.grpo.num_generations=5" in issue.fix
    with pytest.raises(ConfigValidationError) as exc:
        _ = loop.grpo_phase.args
    assert exc.value.issues == [issue]


def test_the_config_gate_checks_a_phase_field_in_one_place(monkeypatch, tmp_path):
    """training_loop.grpo.learning_rate (and every field of a phase node) is judged against its type
    and bound once, when the gate binds the training loop's node; the phase does not judge it again,
    and TRL's config is built once. Red on the code before (Phase.typed() judged the node a second
    time before building TRL's config: 2 judgements)."""
    from tests.conftest import compose_config

    from rlvr import issues as issues_module
    from rlvr.config import gate

    judged: Counter = Counter()
    real = issues_module._node_issues
    monkeypatch.setattr(
        issues_module, "_node_issues", lambda key, value, node: judged.update([key]) or real(key, value, node)
    )
    passed = gate.check(compose_config(["experiment=smoke"]), tmp_path / "run")
    passed.close()
    assert judged["training_loop.grpo"] == 1 and judged["training_loop.sft"] == 1


@pytest.mark.parametrize("value", [1, 0])
def test_a_value_off_its_bound_is_one_issue_not_also_trls(tmp_path, value):
    """num_generations below its bound (>= 2) is refused once, by the bound, with its fix; TRL's own
    refusal of the same value (1: not a divisor of the batch; 0: a division by zero inside GRPOConfig)
    is left out. Mutations: the gate keeping every validate() issue -> a second issue on
    training_loop.grpo -> red; the phase catching only ValueError/TypeError -> ZeroDivisionError -> red."""
    from tests.conftest import compose_config

    from rlvr.config import gate
    from rlvr.issues import ConfigValidationError

    with pytest.raises(ConfigValidationError) as err:
        gate.check(
            compose_config(["experiment=smoke", f"training_loop.grpo.num_generations={value}"]), tmp_path
        )
    found = [i for i in err.value.issues if i.key.startswith("training_loop.grpo")]
    assert [(i.key, i.value) for i in found] == [("training_loop.grpo.num_generations", value)]
    assert "must be >= 2" in found[0].problem
