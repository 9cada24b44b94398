"""``budget_minutes`` (rlvr.training_loop.budget): the plan's arithmetic on timings given here, the
config gate's refusals, the plan applied through the phases' typed nodes, and the calibration's
promise to leave the weights and random streams as it found them. No model is loaded."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from tests.conftest import compose_config, make_evaluator, make_loop

from rlvr.config.gate import check
from rlvr.config.validation import run_key_issues
from rlvr.issues import ConfigValidationError
from rlvr.training_loop import budget
from rlvr.training_loop.budget import EvalTiming, PhaseShape, PhaseTiming

# The default's shape (conf/training_loop/sft_grpo.yaml, conf/evaluation/default.yaml) with timings of
# the size measured on the 2-core EPYC (not asserted as measurements: the arithmetic is).
SHAPES = [
    PhaseShape("sft", "training_loop.sft", 640, 160, 10.0),
    PhaseShape("grpo", "training_loop.grpo", 16, 8, 0.0),
]
TIMINGS = {
    "sft": PhaseTiming(setup=3.0, first_step=4.0, step=1.9, save=2.5, steps_timed=3),
    "grpo": PhaseTiming(setup=2.0, first_step=9.0, step=7.0, save=2.5, steps_timed=2),
}
EVALS = EvalTiming(greedy_batch=1.5, greedy_batches=7, sampled_batch=1.6, sampled_batches=25)


def default_plan(minutes: float, spent: float = 60.0) -> budget.Plan:
    return budget.plan(minutes, spent, SHAPES, 160, TIMINGS, EVALS, sampled=True)


def test_a_plan_fits_the_budget_and_uses_it():
    """Predicted within the budget less its margin, and no more than one SFT evaluation interval's
    steps short of it (the steps are the largest that fit). Mutation: the margin left out of the
    target (target = minutes * 60) -> red."""
    plan = default_plan(8)
    target = 8 * 60 * (1 - budget.MARGIN)
    assert plan.predicted <= target
    # the next larger run: 4 more SFT steps (each evaluation interval one longer), a GRPO step, a checkpoint each
    one_more = 4 * TIMINGS["sft"].step + TIMINGS["grpo"].step + 2 * 2.5
    assert target - plan.predicted < one_more, (plan.predicted, target)
    assert plan.stages["before_training"] == 60.0  # measured, counted once


def test_the_phases_keep_their_time_ratio_and_evaluations():
    """One scale for every phase: planned/configured steps agree to a step; SFT keeps its 4 in-training
    evaluations and still ends on one (reused after SFT), GRPO keeps none. Mutation: GRPO's steps not
    scaled (steps = shape.max_steps for grpo) -> red."""
    plan = default_plan(8)
    sft, grpo = plan.phases["sft"], plan.phases["grpo"]
    assert 0 < plan.scale < 1
    assert abs(sft.steps / 640 - grpo.steps / 16) <= 1 / 16
    every = plan.every_n_steps[1]
    assert plan.every_n_steps[0] == 160 and every < 160
    assert sft.evaluations == 4 and sft.steps == 4 * every
    assert grpo.evaluations == 0
    assert plan.changes == {
        "training_loop.sft.max_steps": (640, sft.steps),
        "training_loop.grpo.max_steps": (16, grpo.steps),
        "evaluation.every_n_steps": (160, every),
    }


def test_the_evaluations_between_and_after_the_phases_are_counted():
    """SFT's last step is evaluated (reused after SFT): the train stage holds the after-SFT sampled
    evaluation only; GRPO's is not: the final evaluation is greedy plus sampled."""
    plan = default_plan(8)
    phases = plan.phases
    between = plan.stages["train"] - sum(p.seconds for p in phases.values()) - 5.0  # the two setups
    assert between == pytest.approx(EVALS.sampled)
    assert plan.stages["final_eval"] == pytest.approx(EVALS.greedy + EVALS.sampled)
    sft = phases["sft"]
    expected = 4.0 + (sft.steps - 1) * 1.9 + 4 * EVALS.greedy + sft.checkpoints * 2.5
    assert sft.seconds == pytest.approx(expected)


def test_a_budget_the_configured_run_fits_changes_nothing():
    """Never more steps than configured: the recipe's steps are its ceiling."""
    plan = default_plan(600)
    assert plan.scale == 1.0 and plan.changes == {}
    assert {n: p.steps for n, p in plan.phases.items()} == {"sft": 640, "grpo": 16}


def test_a_budget_the_fixed_costs_do_not_fit_is_refused_with_the_numbers_and_a_budget_that_fits():
    """Refused naming the key, the value, the predicted seconds and a budget that would do; that budget
    plans. Mutation: the refusal dropped (plan returned at the smallest scale) -> red."""
    with pytest.raises(ConfigValidationError) as refused:
        default_plan(1.5, spent=60.0)
    (issue,) = refused.value.issues
    assert issue.key == "budget_minutes" and issue.value == 1.5
    assert "does not fit" in issue.problem and "nothing was trained" in issue.problem
    least = float(issue.fix.split("budget_minutes=")[1].split()[0])
    smallest = default_plan(least)
    assert smallest.predicted <= least * 60 * (1 - budget.MARGIN)
    # GRPO, configured without an in-training evaluation, gets none at the smallest scale either
    # (mutation: the interval not kept longer than such a phase -> red)
    assert smallest.phases["grpo"].evaluations == 0 and smallest.phases["sft"].evaluations == 4


def test_a_warmup_longer_than_the_planned_phase_is_scaled_with_it():
    shapes = [PhaseShape("sft", "training_loop.sft", 640, 160, 100.0)]
    plan = budget.plan(2, 10.0, shapes, 0, {"sft": TIMINGS["sft"]}, EVALS, sampled=False)
    steps = plan.phases["sft"].steps
    warmup = plan.changes["training_loop.sft.warmup_steps"]
    assert steps <= 100 and warmup[0] == 100.0 and warmup[1] < steps
    # kept when the phase is still longer than it
    kept = budget.plan(
        2, 10.0, [dataclasses.replace(shapes[0], warmup_steps=2.0)], 0, {"sft": TIMINGS["sft"]}, EVALS, False
    )
    assert "training_loop.sft.warmup_steps" not in kept.changes


def test_the_plan_record_reads_back_as_the_plan():
    plan = dataclasses.replace(default_plan(8), created="2026-11-29T09:00:00+00:00")
    record = plan.record()
    assert record["predicted_seconds"] == round(plan.predicted, 1)
    assert budget.Plan.from_record(record) == plan


def test_planned_vs_actual_rows():
    plan = default_plan(8)
    actual = {"before_training": 61.0, "train": 300.0, "final_eval": 40.0, "save": 1.0, "total": 402.0}
    record = budget.planned_vs_actual(plan, actual, {"sft": 250.0, "grpo": 40.0})
    rows = {r["part"].split(" (")[0]: r for r in record["rows"]}
    assert rows["total, to the report"] == {
        "part": "total, to the report",
        "planned_s": round(plan.predicted, 1),
        "actual_s": 402.0,
    }
    assert rows["sft"]["actual_s"] == 250.0 and rows["grpo"]["planned_s"] == round(
        plan.phases["grpo"].seconds, 1
    )
    assert record["budget_minutes"] == 8


# -- the key and the gate -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -3, float("inf"), float("nan"), "eight", 50_000])
def test_budget_minutes_must_be_a_finite_positive_number(value):
    """Mutation (in memory, /tmp plugin): RunSettings.budget_minutes typed Any -> red."""
    (issue,) = run_key_issues(OmegaConf.create({"budget_minutes": value}))
    assert issue.key == "budget_minutes" and "Fix: " in str(issue) and "budget_minutes" in issue.fix


@pytest.mark.parametrize("value", [None, 8, 0.5])
def test_budget_minutes_accepts_null_and_positive_numbers(value):
    assert run_key_issues(OmegaConf.create({"budget_minutes": value})) == []


def refused(tmp_path, *overrides: str) -> dict[str, str]:
    cfg = compose_config(["validate_only=true", *overrides])
    with pytest.raises(ConfigValidationError) as caught:
        check(cfg, tmp_path / "run")
    return {issue.key: issue.problem for issue in caught.value.issues}


def test_rft_rounds_are_refused_before_anything_loads(tmp_path):
    """Mutation: the RFT refusal in budget.config_issues dropped -> red."""
    issues = refused(tmp_path, "training_loop=rft_grpo", "budget_minutes=5")
    assert "budget_minutes sizes phases by their max_steps" in issues["training_loop.rft.enabled"]


def test_several_processes_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    issues = refused(tmp_path, "budget_minutes=5")
    assert "calibration times one process" in issues["budget_minutes"]


def test_no_enabled_phase_is_refused(tmp_path):
    issues = refused(
        tmp_path, "budget_minutes=5", "training_loop.sft.enabled=false", "training_loop.grpo.enabled=false"
    )
    assert "no training phase is enabled" in issues["budget_minutes"]


def test_the_default_with_a_budget_passes_the_gate(tmp_path):
    passed = check(compose_config(["validate_only=true", "budget_minutes=8"]), tmp_path / "run")
    passed.close()


def test_a_resumed_checkpoint_whose_run_recorded_no_plan_is_refused(tmp_path):
    checkpoint = tmp_path / "run" / "checkpoints" / "sft" / "checkpoint-4"
    checkpoint.mkdir(parents=True)
    cfg = OmegaConf.create({"budget_minutes": 8})
    (issue,) = budget.resume_issues(cfg, ("sft", checkpoint))
    assert issue.key == "budget_minutes" and "budget_plan.json" in issue.problem
    budget.write_plan(tmp_path / "run", default_plan(8))
    assert budget.resume_issues(cfg, ("sft", checkpoint)) == []


# -- the plan applied ------------------------------------------------------------------------------------


def test_the_plan_goes_through_each_phase_node_and_trl_config():
    """The TRL config every reader takes (Phase.args) carries the planned steps; a planned value the
    node's bound refuses is an issue naming the key, and nothing changes. Mutations: replan sets
    self.trl_fields but keeps the cached TRL config (in memory) -> red; apply skips replan -> red."""
    loop = make_loop(sft={"max_steps": 640, "warmup_steps": 10}, grpo={"max_steps": 16, "num_generations": 2})
    evaluator = make_evaluator()
    plan = dataclasses.replace(
        default_plan(8),
        changes={
            "training_loop.sft.max_steps": (640, 172),
            "training_loop.grpo.max_steps": (16, 4),
            "evaluation.every_n_steps": (160, 43),
        },
    )
    assert loop.validate() == [] and loop.sft_phase.args.max_steps == 640  # built, as the gate does
    budget.apply(plan, loop, evaluator)
    assert loop.sft_phase.args.max_steps == 172 and loop.grpo_phase.args.max_steps == 4
    assert loop.sft_phase.args.warmup_steps == 10 and evaluator.every_n_steps == 43
    bad = dataclasses.replace(
        plan, changes={"training_loop.sft.max_steps": (172, 0), "evaluation.every_n_steps": (43, -1)}
    )
    with pytest.raises(ConfigValidationError) as refused_plan:
        budget.apply(bad, loop, evaluator)
    keys = {i.key for i in refused_plan.value.issues}
    assert keys == {"training_loop.sft.max_steps", "evaluation.every_n_steps"}
    assert loop.sft_phase.args.max_steps == 172 and evaluator.every_n_steps == 43


def test_the_shapes_are_read_from_the_built_phases():
    loop = make_loop(sft={"max_steps": 640, "warmup_steps": 10, "save_steps": 160}, grpo={"enabled": False})
    (shape,) = budget.shapes_of(loop)
    assert shape == PhaseShape("sft", "training_loop.sft", 640, 160, 10.0)


# -- calibration leaves no trace ---------------------------------------------------------------------


def test_weights_and_random_streams_are_as_before_calibration():
    """A training step inside weights_kept and draws inside rng_kept change nothing the run sees:
    the weights bit for bit, the next random draws of python, numpy and torch. Mutation: rng_kept
    restores torch's state only (python's random left) -> red."""
    import random

    import numpy as np

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    model[0].weight.requires_grad_(False)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state = (random.getstate(), np.random.get_state(), torch.random.get_rng_state())
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    random.setstate(state[0]), np.random.set_state(state[1]), torch.random.set_rng_state(state[2])
    model.eval()
    with budget.rng_kept(), budget.weights_kept(model):
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
        model(torch.rand(8, 4)).sum().backward()
        optimizer.step()
        random.random(), np.random.rand()
        assert not torch.equal(model[1].weight, before["1.weight"])
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not model.training and model[1].weight.grad is None
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected


def test_the_scale_is_one_number_for_every_phase():
    """Three phases' planned steps all follow one scale (the configured time ratio)."""
    shapes = [*SHAPES, PhaseShape("extra", "training_loop.extra", 300, None, 0.0)]
    timings = {**TIMINGS, "extra": TIMINGS["sft"]}
    plan = budget.plan(10, 30.0, shapes, 0, timings, EVALS, sampled=False)
    for name, shape in zip(["sft", "grpo", "extra"], shapes, strict=True):
        assert abs(plan.phases[name].steps - max(1, plan.scale * shape.max_steps)) <= 1


def test_a_changed_budget_on_resume_is_refused_as_a_changed_step_budget(tmp_path):
    """The checkpoint's steps follow its run's budget: another one is a schedule change (refused,
    both values named), and dropping it too. Mutation (in memory): budget_minutes left out of
    the fingerprint's schedule keys (resume.SCHEDULE_KEYS) -> red."""
    from tests.unit.test_checkpoints import make_ckpt

    from rlvr.training_loop.checkpoints import write_fingerprint
    from rlvr.training_loop.resume import fingerprint, resolve_resume

    run = tmp_path / "run"
    write_fingerprint(run, fingerprint(compose_config(["budget_minutes=8"])))
    make_ckpt(run, "sft", 10)
    for now, change in (
        ("budget_minutes=12", "budget_minutes: 8 -> 12"),
        ("budget_minutes=null", "budget_minutes: 8 -> None"),
    ):
        _, [issue] = resolve_resume(compose_config([now, "resume=auto"]), run)
        assert "step budgets or learning-rate schedule differ" in issue.problem and change in issue.problem
    assert resolve_resume(compose_config(["budget_minutes=8", "resume=auto"]), run)[1] == []


# -- what the calibration times ----------------------------------------------------------------------


class _CharTokenizer:
    """One token a character (the reference lengths below are then the strings' lengths)."""

    def __call__(self, texts, add_special_tokens=True):
        return {"input_ids": [list(t) for t in texts]}


def test_evaluations_and_rollouts_are_timed_at_the_reference_answers_length_where_sft_runs_first():
    """Where SFT runs first, the longest reference completion it trains on (plus one token) caps the
    timed completions: every later model answers in that form and stops at the closing tag. With SFT
    off (GRPO from the base model), no cap. Mutation: the enabled filter dropped (a disabled SFT phase
    taken as the first) -> red."""
    from datasets import Dataset

    rows = Dataset.from_dict({"answer": ["7", "-18", "3"]})
    loop = make_loop(sft={"max_steps": 640}, grpo={"max_steps": 16, "num_generations": 2})
    longest = len(loop.sft_phase.prompt.format_answer("-18"))
    assert budget.reference_tokens(loop, _CharTokenizer(), rows) == longest + 1
    grpo_only = make_loop(sft={"enabled": False}, grpo={"max_steps": 16, "num_generations": 2})
    assert budget.reference_tokens(grpo_only, _CharTokenizer(), rows) is None


class _TimedEvaluator:
    """An evaluator that records the completion length each timed batch was generated at."""

    batch_size, max_new_tokens, seen = 4, 16, []

    def rows(self, data):
        return data

    def evaluate_questions(self, model, tokenizer, rows):
        from types import SimpleNamespace

        self.seen.append(self.max_new_tokens)
        return SimpleNamespace(seconds=1.0)

    def sampled_view(self):
        return None


def test_the_timed_evaluation_batch_is_generated_at_the_cap_and_the_plan_says_so():
    """The batch is generated at the cap (the run's evaluator keeps its max_new_tokens); a cap at or
    above max_new_tokens is no cap. Mutation: the run's evaluator changed in place -> red."""
    from datasets import Dataset

    evaluator = _TimedEvaluator()
    evaluator.seen = []
    rows = Dataset.from_dict({"answer": ["1"] * 8})
    timing = budget._time_evaluations(evaluator, object(), None, rows, completion_tokens=9)
    assert evaluator.seen == [9] and evaluator.max_new_tokens == 16
    assert timing.completion_tokens == 9 and timing.greedy_batches == 2
    assert budget._time_evaluations(evaluator, object(), None, rows, 40).completion_tokens is None
    assert evaluator.seen == [9, 16]
    plan = dataclasses.replace(default_plan(8), evals=timing)
    assert "timed at 9 tokens a completion" in budget.plan_text(plan)
    assert budget.Plan.from_record(plan.record()) == plan


def test_sft_is_timed_by_the_median_of_its_steps_after_the_warm_up(monkeypatch):
    """The first steps of a CPU run build kernels for each new padded length (4-7 s against a steady 3 s,
    docs/budget.md): the step time is the median of the TIMED_STEPS after WARMUP_STEPS, the first
    step kept apart. Mutation: the mean of every step after the first -> red."""
    from types import SimpleNamespace

    gaps = [13.5, 7.2, 5.5, 6.7, 3.1, 2.9, 3.3, 3.0]  # a run's first eight SFT steps, bf16 CPU
    assert len(gaps) == budget.WARMUP_STEPS["sft"] + budget.TIMED_STEPS["sft"]
    now = [0.0]
    monkeypatch.setattr(budget.time, "perf_counter", lambda: now[0])

    class Trainer:
        def __init__(self, clock):
            self.clock = clock

        def train(self):
            self.clock.on_train_begin(None, None, None)
            for gap in gaps:
                now[0] += gap
                self.clock.on_step_end(None, None, None)
            self.clock.on_save(None, None, None)

    class Phase:
        name = "sft"

        def args_and_bridge(self, model, run, outcome):
            return SimpleNamespace(max_steps=0, save_steps=0, save_strategy=None, save_total_limit=1), None

        def trainer(self, model, args, run, callbacks):
            assert args.max_steps == len(gaps)
            return Trainer(callbacks[0])

    monkeypatch.setattr("rlvr.training_loop.phase.quiet", lambda trainer: trainer)
    run = SimpleNamespace(tokenizer=None, train_dataset=None, generator=None, fits=None)
    with tempfile.TemporaryDirectory() as folder:
        run.run_dir = Path(folder)
        timing = budget._time_phase(Phase(), object(), run)
    assert timing.first_step == 13.5 and timing.steps_timed == 4
    assert timing.step == pytest.approx(3.05)
