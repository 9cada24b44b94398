"""Curricula (rlvr.data.curriculum): the level-update rule, state save/restore, questions that follow
the level, fixed-level evaluation sets, config errors, and the difficulty in metrics and the report."""

from __future__ import annotations

import dataclasses
import json
import struct
from types import SimpleNamespace

import pytest
from hydra.utils import instantiate
from reasoning_gym.coaching.base_curriculum import DefaultCurriculumContext, RangeAttributeMode
from reasoning_gym.factory import create_curriculum
from tests.conftest import SIGNAL, compose_config

from rlvr.config.validation import check_targets
from rlvr.data import CurriculumData, identity
from rlvr.data.curriculum import SLOT, STATE_FILE, Curriculum
from rlvr.pipeline.wiring import runtime_args
from rlvr.prompts import PromptTemplate
from rlvr.records.report import difficulty_curve, write_report
from rlvr.reward import FormatReward, RewardSet
from rlvr.reward.terms import success_term_issues
from rlvr.training_loop.loop import GRPOPhase
from rlvr.verifier import entries

PROMPT = PromptTemplate("{question}\nAnswer in <answer></answer>.")


def make(**kw) -> Curriculum:
    args = dict(
        task="basic_arithmetic",
        start_levels={},
        attributes=None,
        min_level=0,
        max_level=None,
        raise_at=0.8,
        lower_at=0.3,
        window=2,
    )
    return Curriculum(**{**args, **kw})


def data(**kw) -> CurriculumData:
    args = dict(
        task="basic_arithmetic",
        train_size=24,
        eval_size=8,
        seed=3,
        raise_at=0.8,
        lower_at=0.3,
        window=1,
        task_params={"basic_arithmetic": {"operators": ["+", "-"]}},
        start_levels=None,
        attributes=None,
        min_level=0,
        max_level=None,
        range_mode="inclusive",
        eval_levels=None,
        eval_sets=None,
    )
    return CurriculumData(**{**args, **kw})


# -- the update rule --------------------------------------------------------------------------------


def test_no_decision_before_the_window_is_full_then_raise_at_the_threshold():
    c = make(window=3)
    assert not c.observe(8, 8) and not c.observe(8, 8)  # two batches of three: no decision yet
    assert c.levels == {"num_terms": 0, "num_digits": 0}
    assert not c.observe(4, 10)  # (8 + 8 + 4) / 26 = 0.77 < 0.8: holds
    assert c.last["window_success"] == pytest.approx(20 / 26)
    c = make(window=2)
    c.observe(8, 10)
    assert c.observe(8, 10)  # exactly raise_at (0.8) raises
    assert c.levels == {"num_terms": 1, "num_digits": 1}


def test_hold_between_thresholds_and_lower_below():
    c = make(start_levels={"num_terms": 2, "num_digits": 2}, window=1)
    assert not c.observe(5, 10)  # 0.5: inside [0.3, 0.8): holds
    assert not c.observe(3, 10)  # exactly lower_at: does not lower
    assert c.levels == {"num_terms": 2, "num_digits": 2}
    assert c.observe(2, 10)  # 0.2 < 0.3: one level down, every moving attribute
    assert c.levels == {"num_terms": 1, "num_digits": 1}


def test_levels_clamp_at_the_bounds():
    c = make(window=1, max_level=2)
    for _ in range(6):
        c.observe(1, 1)
    assert c.levels == {"num_terms": 2, "num_digits": 2}  # max_level caps both
    c = make(window=1)
    for _ in range(8):
        c.observe(1, 1)
    assert c.levels == {"num_terms": 4, "num_digits": 3}  # each at its own top (5 and 4 levels)
    assert not c.observe(1, 1)  # at the top: nothing moves
    c = make(window=1, min_level=1, start_levels={"num_terms": 3, "num_digits": 3})
    for _ in range(6):
        c.observe(0, 1)
    assert c.levels == {"num_terms": 1, "num_digits": 1}


def test_only_the_chosen_attributes_move_and_the_window_restarts_after_a_change():
    c = make(window=2, attributes=["num_terms"])
    c.observe(1, 1)
    assert c.observe(1, 1)
    assert c.levels == {"num_terms": 1, "num_digits": 0}
    assert not c.observe(1, 1)  # a fresh window: one batch is not enough after a change
    assert c.observe(1, 1) and c.levels == {"num_terms": 2, "num_digits": 0}


def test_sliding_window_holds_only_the_last_window_batches():
    c = make(window=2, start_levels={"num_terms": 2, "num_digits": 2})
    c.observe(0, 10)
    c.observe(5, 10)  # 0.25 < 0.3 over the window: lowers
    assert c.levels["num_terms"] == 1
    c.observe(5, 10)
    c.observe(5, 10)  # 0.5: holds, keeps the last two
    c.observe(10, 10)  # (5 + 10) / 20 = 0.75: still holds; the first batch (5/10) was dropped
    assert c.levels["num_terms"] == 1 and c.batches == [(5, 10), (10, 10)]
    assert c.observe(7, 10)  # (10 + 7) / 20 = 0.85 raises
    assert c.levels["num_terms"] == 2


def test_parameters_are_reasoning_gyms_own():
    c = make(params={"operators": ["+"]}, range_mode="upper_bound")
    rg = create_curriculum("basic_arithmetic")
    rg.set_attr_level("num_terms", 3)
    rg.set_attr_level("num_digits", 1)
    expected = dataclasses.asdict(
        rg.generate_configuration(
            defaults={"operators": ["+"]}, context=DefaultCurriculumContext(RangeAttributeMode.UPPER_BOUND)
        )
    )
    got = c.params_at({"num_terms": 3, "num_digits": 1})
    assert got == {k: expected[k] for k in got}
    assert got["min_terms"] == got["max_terms"] == 5 and got["operators"] == ["+"]
    assert c.levels == {"num_terms": 0, "num_digits": 0}  # asking about a level does not move it


# -- state ------------------------------------------------------------------------------------------


def test_state_round_trip_continues_identically(tmp_path):
    a = make(window=3, start_levels={"num_terms": 1, "num_digits": 1})
    for accepted in (9, 9, 9, 1, 1):
        a.observe(accepted, 10)
    a.note_batch()
    a.save(tmp_path)
    b = make(window=3, start_levels={"num_terms": 1, "num_digits": 1})
    b.restore(tmp_path)
    assert b.levels == a.levels == {"num_terms": 2, "num_digits": 2}
    assert b.batches == a.batches == [(1, 10), (1, 10)]  # the open window travels too
    assert b.metrics() == a.metrics()
    assert b.observe(0, 10) and a.observe(0, 10)  # the third batch closes the same window in both
    assert b.levels == a.levels == {"num_terms": 1, "num_digits": 1}


def test_checkpoint_holds_state_and_manifest_and_a_restored_source_rebuilds_both(tmp_path):
    d = data(start_levels={"basic_arithmetic": {"num_terms": 1, "num_digits": 1}})
    first = d.load(PROMPT)
    for accepted in (1, 0, 0):  # up to 2, then down to 1 and 0
        first.curriculum.curriculum.observe(accepted, 1)
        first.curriculum.fill([])
    first.curriculum.save(tmp_path)
    on_disk = json.loads((tmp_path / identity.MANIFEST).read_text())
    assert on_disk == first.manifest and identity.find_manifest(tmp_path) == tmp_path / identity.MANIFEST
    again = d.load(PROMPT)
    assert again.manifest["num_train_questions"] < first.manifest["num_train_questions"]
    again.curriculum.restore(tmp_path)
    assert again.curriculum.curriculum.levels == {"num_terms": 0, "num_digits": 0}
    assert again.manifest == first.manifest  # a resumed run's final manifest covers the levels before it


def test_restore_without_a_state_file_keeps_the_start_and_refuses_another_task(tmp_path):
    c = make(start_levels={"num_terms": 2})
    c.restore(tmp_path)  # an SFT checkpoint holds no curriculum state
    assert c.levels["num_terms"] == 2
    (tmp_path / STATE_FILE).write_text(json.dumps({"task": "leg_counting", "levels": {}, "batches": []}))
    with pytest.raises(ValueError, match="leg_counting"):
        c.restore(tmp_path)


# -- data -------------------------------------------------------------------------------------------


def test_rows_follow_the_level_and_stay_on_the_train_side():
    d = data(start_levels={"basic_arithmetic": {"num_terms": 0, "num_digits": 0}}, eval_levels=[3])
    loaded = d.load(PROMPT)
    source = loaded.curriculum
    assert loaded.train[SLOT] == list(range(24))
    rows = [dict(loaded.train[i]) for i in (4, 4, 9, 9)]  # two GRPO groups of two
    filled = source.fill(rows)
    assert (
        filled[0]["question"] == filled[1]["question"] == loaded.train[4]["question"]
    )  # level 0 = SFT's rows
    for _ in range(3):
        source.curriculum.observe(1, 1)
    harder = source.fill(rows)
    assert harder[0]["question"] == harder[1]["question"] != filled[0]["question"]
    assert harder[2]["question"] == harder[3]["question"]
    for row in harder:
        entry = entries.loads(row["entry"])
        assert entry["metadata"]["difficulty"] == {"num_terms": (2, 5), "num_digits": (1, 4)}  # level 3
        assert row["prompt"] == PROMPT.messages(row["question"])
        assert identity.split_of("basic_arithmetic", row["question"]) == "train"
    assert source.curriculum.metrics()["curriculum/level"] == 3.0
    # the manifest lists the pools of the levels trained at: level 0 (SFT's) and now 3, not 1 or 2
    ids = set(loaded.manifest["train_question_ids"])
    assert {identity.question_id("basic_arithmetic", r["question"]) for r in harder + filled} <= ids
    trained = loaded.manifest["task_params"]["basic_arithmetic"]["curriculum"]["levels_trained"]
    assert [t["levels"] for t in trained] == [
        {"num_terms": 0, "num_digits": 0},
        {"num_terms": 3, "num_digits": 3},
    ]
    assert trained[1]["params"]["max_terms"] == 5
    assert loaded.manifest["num_train_questions"] == len(ids) < 3 * 24
    # evaluation: the starting level as the headline, each eval level as its own set
    assert sorted(set(loaded.eval["eval_set"])) == ["", "level_3"]
    head = [
        entries.loads(e) for e, s in zip(loaded.eval["entry"], loaded.eval["eval_set"], strict=True) if not s
    ]
    assert {json.dumps(e["metadata"]["difficulty"]) for e in head} == {
        json.dumps({"num_terms": (2, 2), "num_digits": (1, 1)})
    }
    assert all(identity.split_of("basic_arithmetic", q) == "test" for q in loaded.eval["question"])


def test_the_conf_file_composes_and_validates():
    cfg = compose_config(["data=curriculum"])
    component = instantiate(cfg.data, _convert_="all")
    assert isinstance(component, CurriculumData)
    assert component.validate() == []
    other = instantiate(compose_config(["data=curriculum", "data.task=leg_counting"]).data, _convert_="all")
    assert other.validate() == []  # start levels are per task: another task starts at its defaults


@pytest.mark.parametrize(
    ("overrides", "key", "words"),
    [
        ({"lower_at": 0.8, "raise_at": 0.8}, "data.lower_at", "below data.raise_at"),
        ({"range_mode": "widest"}, "data.range_mode", "RangeAttributeMode"),
        (
            {"start_levels": {"basic_arithmetic": {"num_term": 1}}},
            "data.start_levels.basic_arithmetic.num_term",
            "did you mean 'num_terms'",
        ),
        ({"attributes": ["digits"]}, "data.attributes", "not an attribute"),
        (
            {"start_levels": {"basic_arithmetic": {"num_digits": 4}}},
            "data.start_levels.basic_arithmetic.num_digits",
            "0-3",
        ),
        (
            {"max_level": 1, "start_levels": {"basic_arithmetic": {"num_terms": 2}}},
            "data.start_levels.basic_arithmetic.num_terms",
            "0-1",
        ),
        ({"min_level": 2, "max_level": 1}, "data.max_level", "below data.min_level"),
        ({"eval_levels": [7]}, "data.eval_levels", "0-4"),
        (
            {"task_params": {"basic_arithmetic": {"max_terms": 3}}},
            "data.task_params.basic_arithmetic.max_terms",
            "set by the curriculum attribute num_terms",
        ),
        ({"task": "gsm_symbolic"}, "data.task", "no curriculum"),
    ],
)
def test_config_errors_name_key_value_and_fix(overrides, key, words):
    issues = data(**overrides).validate()
    assert [i.key for i in issues] == [key], issues
    assert words in issues[0].problem + issues[0].fix
    assert issues[0].fix


@pytest.mark.parametrize(
    ("override", "words"),
    [
        (
            "data.raise_at=1.5",
            "must be <= 1. Fix: set data.raise_at to a value <= 1, e.g. 0.8 (a success rate",
        ),
        ("data.lower_at=-0.1", "must be >= 0. Fix: set data.lower_at to a value >= 0, e.g. 0.3"),
        ("data.window=0", "must be >= 1. Fix: set data.window to a value >= 1, e.g. 4 (batches)"),
        ("data.train_size=0", "must be >= 1"),  # ReasoningGymData's range, declared by the subclass too
        ("data.max_level=-1", "must be >= 0"),
    ],
)
def test_values_outside_the_signature_are_named_by_the_gate(override, words):
    cfg = compose_config(["data=curriculum", override])
    [issue] = check_targets(cfg, runtime_args(cfg))
    assert issue.key == override.partition("=")[0] and words in str(issue), issue


def test_a_curriculum_needs_a_term_that_runs_the_verifier():
    format_only = RewardSet(
        {"format": FormatReward(1.0, prompt=PROMPT)},
        plugin_timeout_s=60.0,
        completions_per_step=0,
        seed=0,
        prompt=PROMPT,
        verifier=None,
    )
    issues = success_term_issues(data(), format_only)
    assert [i.key for i in issues] == ["reward.terms"] and "correctness" in issues[0].fix
    assert success_term_issues(SimpleNamespace(), format_only) == []  # other data: no such need


# -- metrics and report -----------------------------------------------------------------------------


def test_grpo_step_metrics_carry_the_difficulty():
    rewards = RewardSet(
        {"format": FormatReward(1.0, prompt=PROMPT)},
        plugin_timeout_s=60.0,
        completions_per_step=0,
        seed=0,
        prompt=PROMPT,
        verifier=None,
    )
    phase = GRPOPhase({}, 0, lambda: None, rewards, SIGNAL)
    source = (
        data(start_levels={"basic_arithmetic": {"num_terms": 2, "num_digits": 1}}).load(PROMPT).curriculum
    )
    session = SimpleNamespace(curriculum=source)
    assert len(phase.callbacks(session, None)) == 1  # the state writer
    source.fill([])
    source.curriculum.observe(3, 4)
    m = phase.metrics()
    assert m["curriculum/level"] == 2.0 and m["curriculum/level/num_digits"] == 1.0
    assert m["curriculum/success"] == 0.75


def _png_size(path) -> tuple[int, int]:
    return struct.unpack(">II", path.read_bytes()[16:24])


def test_report_has_the_difficulty_curve(tmp_path):
    history = [
        {
            "step": s,
            "grpo/reward/mean": 0.1,
            "grpo/curriculum/level": float(lv),
            "grpo/curriculum/level/num_terms": float(lv),
        }
        for s, lv in ((1, 3), (2, 2), (3, 2), (4, 1))
    ]
    outcome = SimpleNamespace(history=history, steps={"grpo": 4}, seconds={"grpo": 1.0}, hardware={})
    write_report(tmp_path, [], outcome, {"model": "m", "tasks": ["basic_arithmetic"]}, 2.0)
    report = json.loads((tmp_path / "report.json").read_text())
    assert [(c["step"], c["level"], c["num_terms"]) for c in report["curriculum"]] == [
        (1, 3.0, 3.0),
        (2, 2.0, 2.0),
        (3, 2.0, 2.0),
        (4, 1.0, 1.0),
    ]
    assert "Curriculum: level 3 at GRPO step 1, 1 at step 4" in (tmp_path / "report.md").read_text()
    assert _png_size(tmp_path / "training.png") == (1650, 400)  # GRPO, evaluations, and the third panel
    plain = tmp_path / "plain"
    plain.mkdir()
    outcome.history = [{k: v for k, v in h.items() if "curriculum" not in k} for h in history]
    write_report(plain, [], outcome, {"model": "m", "tasks": ["t"]}, 2.0)
    assert _png_size(plain / "training.png") == (1100, 400)
    assert "curriculum" not in json.loads((plain / "report.json").read_text())
    assert difficulty_curve(outcome.history) == []
