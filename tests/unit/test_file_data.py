"""FileData: GSM8K / FinQA / any question-answer file through `datasets`, held out by content hash."""

from __future__ import annotations

import json

import datasets
import pytest
from hydra.utils import instantiate
from tests.conftest import ROOT, compose_config, conf_checker, verifier_pool
from tests.data_fixtures import finqa_rows, gsm8k_rows, write_json, write_jsonl

from rlvr.config.validation import check_targets
from rlvr.data import FileData, identity
from rlvr.data.processors import GSM8K, FinQA, QuestionAnswer
from rlvr.pipeline.wiring import runtime_args
from rlvr.prompts import PromptTemplate
from rlvr.security.trust import PLUGINS_ENV
from rlvr.verifier import ScoreRequest
from rlvr.verifier.checkers import ExactMatch, MathVerify

PROMPT = PromptTemplate("{question}\nAnswer in <answer></answer>.")
ROWS = gsm8k_rows(120)


def gsm8k_data(source, **kw) -> FileData:
    args = dict(
        name="gsm8k",
        path=str(source),
        processor=GSM8K(question_field="question", answer_field="answer"),
        checker=conf_checker("math_verify"),
        train_size=None,
        eval_size=None,
        seed=0,
        split=None,
        subset=None,
        eval_sets=None,
    )
    return FileData(**{**args, **kw})


@pytest.fixture
def gsm8k_file(tmp_path):
    return write_jsonl(tmp_path / "gsm8k.jsonl", ROWS)


def test_gsm8k_answer_is_the_text_after_hashes(gsm8k_file):
    data = gsm8k_data(gsm8k_file).load(PROMPT)
    both = datasets.concatenate_datasets([data.train, data.eval])
    gold = {r["question"]: r["answer"].rsplit("####", 1)[1].strip() for r in ROWS}
    assert {q: a for q, a in zip(both["question"], both["answer"], strict=True)} == gold
    assert "1," in "".join(both["answer"])  # thousands separators are kept in the gold text
    entry = json.loads(data.eval["entry"][0])
    assert entry["checker"]["_target_"] == "rlvr.verifier.checkers.MathVerify"
    assert "####" in entry["metadata"]["solution"]


def test_split_follows_the_content_hash_rule_whatever_the_order_or_seed(gsm8k_file, tmp_path):
    data = gsm8k_data(gsm8k_file, seed=0).load(PROMPT)
    assert {identity.split_of("gsm8k", q) for q in data.eval["question"]} == {"test"}
    assert {identity.split_of("gsm8k", q) for q in data.train["question"]} == {"train"}
    assert not set(data.eval["question"]) & set(data.train["question"])
    assert len(data.train) + len(data.eval) == len(ROWS)
    shuffled = write_jsonl(tmp_path / "shuffled.jsonl", list(reversed(ROWS)))
    other = gsm8k_data(shuffled, seed=7).load(PROMPT)
    assert other.eval["question"] == data.eval["question"]  # same held-out set, same order
    assert sorted(other.train["question"]) == sorted(data.train["question"])
    assert other.train["question"] != data.train["question"]  # the seed orders training rows
    assert data.manifest["train_question_ids"] == sorted(
        identity.ids_of(("gsm8k", q) for q in data.train["question"])
    )


def test_every_source_format_gives_the_same_questions(gsm8k_file, tmp_path):
    table = datasets.Dataset.from_list(ROWS)
    table.to_parquet(str(tmp_path / "g.parquet"))
    table.to_csv(str(tmp_path / "g.csv"), index=False)
    datasets.DatasetDict(
        {"train": table.select(range(80)), "test": table.select(range(80, 120))}
    ).save_to_disk(str(tmp_path / "saved"))
    reference = gsm8k_data(gsm8k_file).load(PROMPT).eval["question"]
    for source in ("g.parquet", "g.csv", "saved"):
        assert gsm8k_data(tmp_path / source).load(PROMPT).eval["question"] == reference, source
    only_test = gsm8k_data(tmp_path / "saved", split="test").load(PROMPT)
    assert len(only_test.train) + len(only_test.eval) == 40


def test_sizes_cap_and_too_large_eval_names_the_key(gsm8k_file):
    data = gsm8k_data(gsm8k_file, train_size=10, eval_size=5).load(PROMPT)
    assert (len(data.train), len(data.eval)) == (10, 5)
    with pytest.raises(ValueError, match=r"data\.eval_size=500: .* has only \d+ test-side questions"):
        gsm8k_data(gsm8k_file, eval_size=500).load(PROMPT)


def test_finqa_reads_the_original_release_format(tmp_path):
    rows = finqa_rows(40)
    data = FileData(
        "finqa",
        str(write_json(tmp_path / "train.json", rows)),
        FinQA(),
        MathVerify(0, 0.01, True),
        None,
        None,
        0,
        split=None,
        subset=None,
        eval_sets=None,
    ).load(PROMPT)
    row = rows[0]
    both = datasets.concatenate_datasets([data.train, data.eval])
    index = next(i for i, q in enumerate(both["question"]) if q.endswith(row["qa"]["question"]))
    question = both["question"][index]
    assert question.startswith("company 0 reported") and "revenue | $ " in question
    assert question.index("see note 7") < question.index("Question: ")
    assert both["answer"][index] == str(row["qa"]["exe_ans"])
    entry = json.loads(both["entry"][index])
    assert entry["metadata"]["human_answer"] == row["qa"]["answer"]
    with verifier_pool(num_workers=0) as pool:
        scores = pool.score(
            [
                ScoreRequest("finqa", a, entry)
                for a in (row["qa"]["answer"], str(row["qa"]["exe_ans"]), "1234")
            ]
        )
    assert [s.value for s in scores] == [1.0, 1.0, 0.0]


def test_flat_finqa_export_is_read_too():
    item = FinQA()(
        {"question": "q?", "pre_text": "a.", "post_text": "", "table": [], "answer": "5%", "exe_ans": ""}
    )
    assert (item.question, item.answer) == ("a.\n\nQuestion: q?", "5%")


@pytest.mark.parametrize(
    ("kwargs", "key", "text"),
    [
        ({"path": None}, "data.path", "is required"),
        ({"path": "/nonexistent/gsm8k.jsonl"}, "data.path", "could not be read"),
        ({"processor": QuestionAnswer("prompt", "answer")}, "data.processor", "no field 'prompt'"),
        ({"checker": "exact"}, "data.checker", "is not a rlvr.verifier.checkers.Checker"),
    ],
)
def test_config_mistakes_name_the_key(gsm8k_file, kwargs, key, text):
    issues = gsm8k_data(gsm8k_file, **kwargs).validate()
    assert any(i.key == key and text in i.problem for i in issues), issues


def test_a_size_outside_the_signature_is_named_by_the_gate():
    cfg = compose_config(["data=gsm8k", "data.train_size=0"])
    [issue] = check_targets(cfg, runtime_args(cfg))
    assert (issue.key, issue.value, issue.problem) == ("data.train_size", 0, "must be >= 1")
    assert "e.g. 200" in issue.fix and "null = all" in issue.fix


def test_malformed_row_is_reported_with_its_number(tmp_path):
    rows = [*ROWS[:3], {"question": "q", "answer": "no final line"}]
    issues = gsm8k_data(write_jsonl(tmp_path / "bad.jsonl", rows)).validate()
    assert [i.key for i in issues] == ["data.processor"] and "row 3" in issues[0].problem


def test_conf_groups_compose_and_instantiate(gsm8k_file, tmp_path):
    for group, path in (("gsm8k", gsm8k_file), ("finqa", write_json(tmp_path / "f.json", finqa_rows(30)))):
        # eval_size=null: the groups' 200 held-out questions are more than these small files hold
        cfg = compose_config([f"data={group}", f"data.path={path}", "data.eval_size=null"])
        assert check_targets(cfg, runtime_args(cfg)) == []
        data = instantiate(cfg.data, _convert_="all")
        assert data.validate() == [] and data.name == group
    qa = compose_config(["data=qa_file", "data/checker=math_verify"]).data
    assert qa.checker._target_ == "rlvr.verifier.checkers.MathVerify"
    assert isinstance(instantiate(compose_config(["data=qa_file"]).data).checker, ExactMatch)


def test_own_processor_from_a_plugin_package(monkeypatch, tmp_path):
    """docs/data.md's worked example ("Your own data"): a plugin processor, allowed only when RLVR_PLUGINS names it."""
    rows = [{"prompt": f"Capital number {i}?", "target": f"city{i}", "topic": "geo"} for i in range(40)]
    rows.append({"prompt": "unanswered", "target": "", "topic": "geo"})
    path = write_jsonl(tmp_path / "trivia.jsonl", rows)
    overrides = [
        "data=qa_file",
        "data.name=trivia",
        f"data.path={path}",
        "data.eval_size=null",
        # Replace the whole processor node (a plain override would merge in QuestionAnswer's fields).
        "~data.processor",
        "+data.processor={_target_: rlvr_example_plugin.data.TriviaProcessor}",
    ]
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "plugins"))
    cfg = compose_config(overrides)
    refused = check_targets(cfg, runtime_args(cfg))
    assert [i.key for i in refused] == ["data.processor._target_"]
    monkeypatch.setenv(PLUGINS_ENV, "rlvr_example_plugin")
    cfg = compose_config(overrides)
    assert check_targets(cfg, runtime_args(cfg)) == []
    data = instantiate(cfg.data, _convert_="all").load(PROMPT)
    assert len(data.train) + len(data.eval) == 40
    assert json.loads(data.eval["entry"][0])["metadata"]["topic"] == "geo"


def test_validate_names_a_size_the_split_of_the_file_cannot_give(tmp_path):
    """``validate_only`` passed ``data.eval_size=6`` on a 20-row file and the run then failed in the
    data stage (issue 45, item 13). Mutation: ``validate`` returning [] instead of ``size_issues``
    -> red."""
    rows = gsm8k_rows(20)
    source = write_jsonl(tmp_path / "small.jsonl", rows)
    test_side = len({r["question"] for r in rows if identity.split_of("gsm8k", r["question"]) == "test"})
    train_side = len(rows) - test_side
    assert gsm8k_data(source, eval_size=test_side, train_size=train_side).validate() == []
    issues = {
        i.key: i for i in gsm8k_data(source, eval_size=test_side + 1, train_size=train_side + 5).validate()
    }
    assert sorted(issues) == ["data.eval_size", "data.train_size"]
    assert (
        issues["data.eval_size"].value == test_side + 1 and issues["data.train_size"].value == train_side + 5
    )
    assert f"has only {test_side} test-side questions for 'gsm8k'" in issues["data.eval_size"].problem
    assert "fixed share of the questions by content hash" in issues["data.train_size"].problem
    assert issues["data.eval_size"].fix == "lower data.eval_size, or set it to null for all of them"
    # an extra evaluation set's size, named under its own key
    extra = gsm8k_data(source, eval_sets={"small": gsm8k_data(source, eval_size=test_side + 1)})
    assert [i.key for i in extra.validate()] == ["data.eval_sets.small.eval_size"]


def test_validate_only_names_a_reasoning_gym_size_the_task_cannot_give(tmp_path):
    """A held-out size larger than the task's question space passed ``validate_only``; the gate now
    draws each side there (a run's data stage draws them itself). Mutation: the gate not calling
    ``drawn_size_issues`` -> red."""
    from rlvr.config.gate import checked_config, component_issues

    def issues(*overrides: str) -> dict:
        small = ["experiment=smoke", "data.task_params.basic_arithmetic.max_terms=2", *overrides]
        return {i.key: i for i in component_issues(checked_config(compose_config(small)), tmp_path / "run")}

    assert issues("validate_only=true") == {}
    [issue] = issues("validate_only=true", "data.eval_size=1000").values()
    assert (issue.key, issue.value) == ("data.eval_size", 1000)
    assert (
        "task 'basic_arithmetic' gave only" in issue.problem
        and "distinct test-side questions" in issue.problem
    )
    assert issue.fix.startswith("lower data.eval_size")
