"""Held out means held out everywhere: no evaluation or benchmark question is ever a training question."""

from __future__ import annotations

import pytest
from hydra.utils import instantiate
from reasoning_gym.factory import DATASETS
from tests.conftest import CONF, compose_config
from tests.data_fixtures import finqa_rows, gsm8k_rows, write_json

from rlvr.data import identity
from rlvr.data.reasoning_gym import split_entries
from rlvr.prompts import PromptTemplate

PROMPT = PromptTemplate(instruction="{question}")
DATA_OPTIONS = sorted(p.stem for p in (CONF / "data").glob("*.yaml"))
FILE_OPTIONS = {"gsm8k": gsm8k_rows, "finqa": finqa_rows, "qa_file": gsm8k_rows}


def questions(dataset) -> set[str]:
    return set(dataset["question"])


def file_overrides(option: str, tmp_path) -> list[str]:
    """A file option reads a fixture in its real format: all its rows on each side."""
    if option == "mixture":
        return [
            "data.tasks={basic_arithmetic: 0.7, leg_counting: 0.3}",
            "data.train_size=2000",
            "data.eval_size=200",
        ]
    if option not in FILE_OPTIONS:
        return ["data.train_size=2000", "data.eval_size=200"]
    path = write_json(tmp_path / f"{option}.json", FILE_OPTIONS[option](300))
    return [f"data.path={path}", "data.train_size=null", "data.eval_size=null"]


@pytest.mark.parametrize("option", DATA_OPTIONS)
@pytest.mark.parametrize(("seed", "bench_seed"), [(42, 1234), (1233, 1234)])
def test_eval_and_benchmark_never_hold_training_questions(option, seed, bench_seed, tmp_path):
    """The default run (seed 42: eval 42, train 43) used to contain all 100 benchmark questions of
    basic_arithmetic (seed 1234) and 200/200 eval items before de-duplication."""
    cfg = compose_config([f"data={option}", f"seed={seed}", *file_overrides(option, tmp_path)])
    data = instantiate(cfg.data, _convert_="all").load(PROMPT)
    train = questions(data.train)
    assert train and not train & questions(data.eval)
    assert {
        identity.split_of(t, q) for t, q in zip(data.eval["task"], data.eval["question"], strict=True)
    } == {"test"}
    bench = compose_config(config_name="benchmark").benchmark
    for task in data.tasks:
        if task not in DATASETS:  # a file dataset: the benchmark measures reasoning-gym tasks only
            continue
        params = dict(bench.task_params.get(task) or cfg.data.task_params.get(task) or {})
        test = split_entries(task, params, "test", 100, bench_seed, "benchmark.num_examples")
        assert not train & {e["question"] for e in test}
        # and the manifest a trained model carries says so in terms the benchmark can check
        trained = set(data.manifest["train_question_ids"])
        assert not trained & set(identity.ids_of((task, e["question"]) for e in test))


@pytest.mark.parametrize("option", DATA_OPTIONS)
def test_eval_split_holds_distinct_questions(option, tmp_path):
    overrides = [f"data={option}"]
    if option == "mixture":
        overrides.append("data.tasks={basic_arithmetic: 0.7, leg_counting: 0.3}")
    if option in FILE_OPTIONS:
        overrides += [
            f"data.path={write_json(tmp_path / 'rows.json', FILE_OPTIONS[option](300))}",
            "data.eval_size=20",
        ]
    cfg = compose_config(overrides)
    data = instantiate(cfg.data, _convert_="all").load(PROMPT)
    if option == "curriculum":
        # Fixed-level sets (eval_levels) are levels of their own: with range_mode inclusive, level 2
        # holds level-0 questions too, so each set is distinct in itself, not against the headline.
        sets = {}
        for row in data.eval:
            sets.setdefault(row["eval_set"], []).append(row["question"])
        assert sorted(sets, key=str) == sorted([""] + [f"level_{lv}" for lv in cfg.data.eval_levels], key=str)
        assert all(len(set(qs)) == len(qs) == cfg.data.eval_size for qs in sets.values())
        return
    assert len(questions(data.eval)) == len(data.eval) == cfg.data.eval_size * len(data.tasks)


def test_split_is_a_property_of_the_question():
    q = "What is 3 + 4?"
    assert identity.split_of("basic_arithmetic", q) == identity.split_of("basic_arithmetic", " " + q + "\n")
    # The identity itself (what manifests and benchmark overlap checks compare), not only the one-bit
    # split that agrees by chance 4 times in 5: surrounding whitespace does not make a new question...
    same = {identity.question_id("basic_arithmetic", v) for v in (q, f" {q}\n", f"\t{q}  ", f"\n\n{q}\r\n")}
    assert len(same) == 1
    # ...while the text inside, and the task, do.
    other = {identity.question_id("basic_arithmetic", "What is 3 +  4?"), identity.question_id("t", q)}
    assert len(other | same) == 3
    sides = {
        identity.split_of("basic_arithmetic", f"What is {a} + {b}?") for a in range(10) for b in range(10)
    }
    assert sides == {"train", "test"}
    share = sum(identity.split_of("t", str(i)) == "test" for i in range(20_000)) / 20_000
    assert abs(share - identity.TEST_FRACTION) < 0.01


def test_a_task_too_small_for_the_request_names_the_key_and_the_fix():
    with pytest.raises(
        ValueError, match=r"data.eval_size=5000: task 'basic_arithmetic' gave only \d+ distinct"
    ):
        split_entries(
            "basic_arithmetic",
            {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
            "test",
            5000,
            0,
            "data.eval_size",
        )


def test_a_request_larger_than_the_task_fails_after_the_tasks_size_not_the_requests():
    """A task with 50 distinct questions asked for 10**9: the draw stops once no new question comes
    (STALL_DRAWS in a row), instead of drawing 12 x 10**9 items first; it keeps only what it picks."""
    drawn = []

    def generate(count, seed):
        for i in range(count):
            drawn.append(i)
            assert len(drawn) <= 200_000, "still drawing: the refusal waits for the request's size"
            yield {"question": f"q{(i * 7919 + seed) % 50}"}

    with pytest.raises(
        ValueError, match=r"data.eval_size=1000000000: task 't' gave only \d+ distinct test-side"
    ):
        identity.draw(generate, "t", "test", 10**9, 0, distinct=True, key="data.eval_size")
    assert len(drawn) < 50 + 2 * identity.STALL_DRAWS


def test_entries_are_generated_one_at_a_time(monkeypatch):
    """The draw holds only what it picks; a generator that built its whole list first would hold
    every draw (about 12x the request) before a too-large request could be refused."""
    import reasoning_gym

    from rlvr.data import reasoning_gym as rg

    made = []

    class Dataset:
        def __getitem__(self, i):
            made.append(i)
            return {"question": f"q{i}", "answer": "1", "metadata": {}}

    monkeypatch.setattr(reasoning_gym, "create_dataset", lambda task, size, seed, **params: Dataset())
    entries = rg.generate_entries("leg_counting", {}, 1_000, 0)
    assert next(iter(entries)) == {"question": "q0", "answer": "1", "metadata": {}}
    assert made == [0]
