"""Task mixtures and extra evaluation sets: exact weighted counts, per-task held-out splits, one result type
broken down per task and set, per-task reward metrics, and the report's per-group table."""

from __future__ import annotations

import collections
import json
from types import SimpleNamespace

import pytest
from hydra.utils import instantiate
from tests.conftest import compose_config, conf_checker
from tests.data_fixtures import gsm8k_rows, write_jsonl

from rlvr import events as ev
from rlvr.config.validation import check_targets
from rlvr.data import FileData, MixtureData, ReasoningGymData, identity
from rlvr.data.mixture import shares
from rlvr.data.processors import GSM8K
from rlvr.evaluation.results import Evaluation, SampleRecord, paired
from rlvr.pipeline.wiring import runtime_args
from rlvr.prompts import PromptTemplate
from rlvr.records.report import write_report
from rlvr.reward import FormatReward, RewardSet

PROMPT = PromptTemplate("{question}\nAnswer in <answer></answer>.")
PARAMS = {"basic_arithmetic": {"min_digits": 1, "max_digits": 1}, "leg_counting": {"max_animals": 3}}


@pytest.mark.parametrize(
    ("weights", "total", "expected"),
    [
        ({"a": 0.7, "b": 0.3}, 10, {"a": 7, "b": 3}),
        ({"a": 1, "b": 1, "c": 1}, 100, {"a": 34, "b": 33, "c": 33}),
    ],
)
def test_shares_are_exact(weights, total, expected):
    assert shares(weights, total) == expected


def test_mixture_counts_splits_and_manifest():
    data = MixtureData({"basic_arithmetic": 0.7, "leg_counting": 0.3}, 40, 12, 3, PARAMS, None, None).load(
        PROMPT
    )
    assert collections.Counter(data.train["task"]) == {"basic_arithmetic": 28, "leg_counting": 12}
    assert collections.Counter(data.eval["task"]) == {"basic_arithmetic": 12, "leg_counting": 12}
    assert data.train["task"][:12] != sorted(data.train["task"][:12])  # tasks interleaved, not blocks
    for split, rows in (("train", data.train), ("test", data.eval)):
        assert {identity.split_of(t, q) for t, q in zip(rows["task"], rows["question"], strict=True)} == {
            split
        }
    assert data.tasks == ["basic_arithmetic", "leg_counting"]
    assert data.manifest["task_params"]["leg_counting"]["weight"] == 0.3
    # each task's held-out questions are the ones a single-task run of that task evaluates
    single = ReasoningGymData("leg_counting", 1, 12, 3, PARAMS, None).load(PROMPT)
    assert [
        q for q, t in zip(data.eval["question"], data.eval["task"], strict=True) if t == "leg_counting"
    ] == (single.eval["question"])


def test_file_dataset_joins_a_mixture(tmp_path):
    path = write_jsonl(tmp_path / "g.jsonl", gsm8k_rows(120))
    gsm8k = FileData(
        "gsm8k",
        str(path),
        GSM8K("question", "answer"),
        conf_checker("math_verify"),
        None,
        None,
        0,
        None,
        None,
        None,
    )
    data = MixtureData(
        {"basic_arithmetic": 1, "gsm8k": 1}, 20, 8, 0, PARAMS, sources={"gsm8k": gsm8k}, eval_sets=None
    ).load(PROMPT)
    assert collections.Counter(data.train["task"]) == {"basic_arithmetic": 10, "gsm8k": 10}
    entries = [
        json.loads(e) for e, t in zip(data.eval["entry"], data.eval["task"], strict=True) if t == "gsm8k"
    ]
    assert len(entries) == 8 and all("checker" in e for e in entries)


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"tasks": {"basic_arithmetc": 1}}, "data.tasks.basic_arithmetc"),
        ({"tasks": {}}, "data.tasks"),
        ({"sources": {"gsm8k": None}}, "data.sources.gsm8k"),
        ({"task_params": {"leg_counting": {"nope": 1}}}, "data.task_params.leg_counting"),
        (
            {"eval_sets": {"hard": ReasoningGymData("basic_arithmetc", 1, 5, 0, None, None)}},
            "data.eval_sets.hard.task",
        ),
    ],
)
def test_mixture_config_mistakes_name_the_key(kwargs, key):
    args = {
        "tasks": {"basic_arithmetic": 0.5, "leg_counting": 0.5},
        "train_size": 10,
        "eval_size": 5,
        "seed": 0,
        "task_params": None,
        "sources": None,
        "eval_sets": None,
    }
    issues = MixtureData(**{**args, **kwargs}).validate()
    assert key in [i.key for i in issues], issues


@pytest.mark.parametrize(
    ("overrides", "key", "problem"),
    [
        (["data.tasks={basic_arithmetic: 0, leg_counting: 1}"], "data.tasks.basic_arithmetic", "must be > 0"),
        (["data.tasks={leg_counting: 1}", "data.eval_size=0"], "data.eval_size", "must be >= 1"),
    ],
)
def test_mixture_values_outside_the_signature_are_named_by_the_gate(overrides, key, problem):
    cfg = compose_config(["data=mixture", *overrides])
    assert [(i.key, i.problem) for i in check_targets(cfg, runtime_args(cfg))] == [(key, problem)]


def test_experiment_composes_with_eval_sets():
    cfg = compose_config(["experiment=mixture_eval_sets", "data.eval_size=6", "data.train_size=10"])
    assert check_targets(cfg, runtime_args(cfg)) == []
    component = instantiate(cfg.data, _convert_="all")
    assert component.validate() == []
    data = component.load(PROMPT)
    sets = collections.Counter(zip(data.eval["task"], data.eval["eval_set"], strict=True))
    assert sets == {
        ("basic_arithmetic", ""): 6,
        ("leg_counting", ""): 6,
        ("basic_arithmetic", "basic_arithmetic_2digit"): 50,
        ("letter_counting", "letter_counting"): 50,
    }
    hard = [q for q, s in zip(data.eval["question"], data.eval["eval_set"], strict=True) if s]
    assert not set(hard) & set(data.train["question"])
    assert all(
        identity.split_of(t, q) == "test"
        for t, q in zip(data.eval["task"], data.eval["question"], strict=True)
    )


def test_single_task_data_takes_eval_sets_too():
    extra = {"legs": ReasoningGymData("leg_counting", 1, 4, 0, PARAMS, None)}
    data = ReasoningGymData("basic_arithmetic", 8, 5, 0, PARAMS, eval_sets=extra).load(PROMPT)
    assert data.eval["eval_set"] == [""] * 5 + ["legs"] * 4


def sample(i: int, task: str, right: bool, eval_set: str | None = None) -> SampleRecord:
    return SampleRecord(
        i, task, f"{task}-{eval_set}-q{i}", "1", ["c"], ["1"], [1.0 if right else 0.0], ["ok"], eval_set
    )


def evaluation(a_right: int, b_right: int, extra_right: int) -> Evaluation:
    samples = [sample(i, "a", i < a_right) for i in range(10)]
    samples += [sample(i, "b", i < b_right) for i in range(10)]
    samples += [sample(i, "a", i < extra_right, "a_hard") for i in range(20)]
    return Evaluation(samples, ks=[1], seconds=1.0, samples_per_second=1.0)


def test_headline_covers_training_tasks_and_groups_break_it_down():
    e = evaluation(8, 2, 5)
    assert (e.summary.n, e.summary.accuracy) == (20, 0.5)  # the extra set is not in the headline
    groups = e.groups()
    assert list(groups) == ["task/a", "task/b", "set/a_hard"]
    assert [(g.n, g.accuracy) for g in groups.values()] == [(10, 0.8), (10, 0.2), (20, 0.25)]
    assert all(g.ci_low < g.accuracy < g.ci_high for g in groups.values())
    again = Evaluation.from_dict(json.loads(json.dumps(e.to_dict())))
    assert again.groups() == groups and again.summary == e.summary
    assert paired(e, evaluation(9, 2, 0)).n == 20  # stage changes pair the headline questions
    record = ev.EvalResult("final", 4, e).record()
    assert record["groups"]["set/a_hard"]["accuracy"] == 0.25


def test_single_task_without_sets_has_no_groups():
    e = Evaluation([sample(i, "a", True) for i in range(4)], ks=[1], seconds=1.0, samples_per_second=1.0)
    assert e.groups() == {} and "groups" not in ev.EvalResult("final", 0, e).record()


def test_report_has_a_row_per_task_and_set(tmp_path):
    evals = [ev.EvalResult("baseline", 0, evaluation(1, 1, 1)), ev.EvalResult("grpo", 2, evaluation(5, 1, 2))]
    evals.append(ev.EvalResult("final", 4, evaluation(8, 2, 5)))
    history = [{"step": s, "grpo/reward/mean": 0.1, "grpo/reward/task/a/mean": 0.2} for s in (1, 3)]
    outcome = SimpleNamespace(steps={"grpo": 4}, seconds={}, history=history)
    write_report(tmp_path, evals, outcome, {"model": "m", "tasks": ["a", "b"]}, seconds=60.0)
    report = json.loads((tmp_path / "report.json").read_text())
    assert [g["group"] for g in report["groups"]] == ["task/a", "task/b", "set/a_hard"]
    assert (
        report["groups"][0]["final"]["accuracy"] == 0.8 and report["groups"][0]["baseline"]["accuracy"] == 0.1
    )
    md = (tmp_path / "report.md").read_text()
    assert "| task/a | 10.0% (" in md and "| 80.0% (" in md and "n=20" in md
    assert report["in_training"][0]["groups"]["task/a"]["accuracy"] == 0.5  # the curve's point


def test_reward_set_reports_the_mean_reward_per_task():
    rs = RewardSet(
        {"fmt": FormatReward(2.0, prompt=PROMPT)},
        plugin_timeout_s=60.0,
        completions_per_step=0,
        seed=0,
        prompt=PROMPT,
    )
    batch = ["<answer>1</answer>", "no", "<answer>2</answer>", "<answer>3</answer>"]
    for fn in rs.functions:
        fn(batch, task=["a", "a", "b", "b"])
    metrics = rs.counters()
    assert metrics["reward/task/a/mean"] == 1.0 and metrics["reward/task/b/mean"] == 2.0
    assert "reward/task/a/mean" not in rs.counters()  # per batch since the last call
    for fn in rs.functions:  # a later batch of one task still reports it: the run mixes tasks
        fn(batch[:2], task=["a", "a"])
    assert rs.counters()["reward/task/a/mean"] == 1.0
    single = RewardSet(
        {"fmt": FormatReward(1.0, prompt=PROMPT)},
        plugin_timeout_s=60.0,
        completions_per_step=0,
        seed=0,
        prompt=PROMPT,
    )
    for fn in single.functions:
        fn(batch, task=["a"] * 4)
    assert not [k for k in single.counters() if k.startswith("reward/task/")]


def mixture_of(path) -> list[str]:
    return [
        "experiment=smoke",
        "data=mixture",
        "data.tasks={basic_arithmetic: 1, gsm8k: 1}",
        "data.task_params.basic_arithmetic.max_terms=2",
        "+data/source@data.sources.gsm8k=gsm8k",
        f"data.sources.gsm8k.path={path}",
        "data.eval_size=4",
    ]


def test_validate_only_names_a_tasks_share_that_its_task_or_file_cannot_give(tmp_path):
    """A mixture's per-task shares passed ``validate_only`` whatever they asked of each task, and the
    run then failed in the data stage (issue 45). The gate now draws (or reads) each task's sides with
    its share. Mutation: ``MixtureData.drawn_size_issues`` removed (or returning []) -> red."""
    from rlvr.config.gate import checked_config, component_issues

    rows = gsm8k_rows(40)
    path = write_jsonl(tmp_path / "g.jsonl", rows)
    train_side = sum(identity.split_of("gsm8k", r["question"]) == "train" for r in rows)

    def issues(*overrides: str) -> dict:
        cfg = checked_config(compose_config([*mixture_of(path), *overrides]))
        return {i.key: i for i in component_issues(cfg, tmp_path / "run")}

    fits = f"data.train_size={2 * train_side}"  # gsm8k's share: exactly its file's train side
    assert issues(fits, "validate_only=true") == {}
    over = f"data.train_size={2 * train_side + 2}"  # one question more than the file's train side
    [issue] = issues(over, "validate_only=true").values()
    assert (issue.key, issue.value) == ("data.tasks.gsm8k (x data.train_size)", train_side + 1)
    assert f"has only {train_side} train-side questions for 'gsm8k'" in issue.problem
    assert issues(over) == {}  # a run's data stage finds it itself (drawing once)
    # a held-out size beyond a task's question space and its file's test side: each task named
    cfg = checked_config(
        compose_config([*mixture_of(path), fits, "data.eval_size=1000", "validate_only=true"])
    )
    found = component_issues(cfg, tmp_path / "run")
    assert [(i.key, i.value) for i in found] == [("data.eval_size", 1000)] * 2
    assert "task 'basic_arithmetic' gave only" in found[0].problem
    assert "test-side questions for 'gsm8k'" in found[1].problem
