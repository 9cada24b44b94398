"""Worked SFT targets (``training_loop.sft.target: worked``, rlvr.data.working): every step written is
arithmetic that holds, the last value is the task's own answer, and a row the writer cannot check keeps
its answer alone."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
import reasoning_gym as rg

from rlvr.data.working import arithmetic_working, working_of

STEP = re.compile(r"^(-?\d+) ([+\-*]) (-?\d+) = (-?\d+)$|^-\((-?\d+)\) = (-?\d+)$")


def _check_steps(working: str) -> int:
    """Each step's arithmetic recomputed from its text; returns the last value."""
    value = None
    for step in working.split(", "):
        m = STEP.match(step)
        assert m, f"not a step: {step!r}"
        if m.group(1) is not None:
            a, op, b, c = int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))
            assert {"+": a + b, "-": a - b, "*": a * b}[op] == c, step
        else:
            c = int(m.group(6))
            assert -int(m.group(5)) == c, step
        value = c
    assert value is not None
    return value


@pytest.mark.parametrize(
    "task,params",
    [
        # the default's task, with its parentheses and negation
        (
            "basic_arithmetic",
            {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 1, "operators": ["+", "-"]},
        ),
        (
            "basic_arithmetic",
            {"min_terms": 2, "max_terms": 5, "min_digits": 1, "max_digits": 2, "operators": ["+", "-", "*"]},
        ),
        ("chain_sum", {}),
    ],
)
def test_every_entry_of_an_integer_task_gets_a_working_whose_steps_hold_and_end_at_its_answer(task, params):
    """Mutations: a step's operands swapped (``b op a``) -> red on '-'; the last value not compared
    with the reference -> red on the wrong-answer case below."""
    entries = list(rg.create_dataset(task, size=300, seed=7, **params))
    for entry in entries:
        working = working_of(json.dumps(entry), entry["answer"])
        assert working is not None, entry["question"]
        assert str(_check_steps(working)) == entry["answer"], (entry["question"], working)


def test_what_cannot_be_checked_gets_no_working():
    assert arithmetic_working("2 + 3", "6") is None  # not the task's answer: a row keeps its answer alone
    assert arithmetic_working("8 / 3", "2") is None  # division: tasks differ on its meaning
    assert arithmetic_working("1.5 + 2", "3.5") is None
    assert arithmetic_working("x + 1", "2") is None
    assert arithmetic_working("__import__('os')", "0") is None  # parsed, never evaluated
    assert arithmetic_working("4", "4") is None  # nothing to work out
    assert arithmetic_working("+ ".join(["1"] * 400), "400") is None  # past the length it parses
    assert working_of(json.dumps({"question": "q", "answer": "1", "metadata": {}}), "1") is None
    assert working_of(None, "1") is None
    # decimals and expression-valued answers (countdown's answer is an expression) get none either
    for task in ("decimal_chain_sum", "countdown"):
        entry = next(iter(rg.create_dataset(task, size=1, seed=3)))
        assert working_of(json.dumps(entry), entry["answer"]) is None, task


def test_the_sft_phase_trains_on_the_working_only_where_asked_and_refuses_a_task_without_any(make_phase_rows):
    """target: answer (the default) is the marked answer alone; worked puts the working before it.
    A run asking for worked targets on a task with none is refused naming the key and the fix, before
    a trainer is built. Mutation: the count check removed -> the trainer is built on answers -> red."""
    from tests.conftest import make_loop

    entry = {"question": "Calculate 3 + -6 + -6.", "answer": "-9", "metadata": {"expression": "3 + -6 + -6"}}
    default = make_loop(sft={"max_steps": 4}, grpo={"enabled": False}).sft_phase
    assert default.completion("-9", json.dumps(entry)) == "<answer>-9</answer>"
    worked = make_loop(sft={"max_steps": 4, "target": "worked"}, grpo={"enabled": False}).sft_phase
    assert worked.completion("-9", json.dumps(entry)) == "3 + -6 = -3, -3 + -6 = -9 <answer>-9</answer>"

    from tests.unit.test_budget import _CharTokenizer

    rows = make_phase_rows([{"question": "q", "answer": "4", "metadata": {}}])
    run = SimpleNamespace(train_dataset=rows, tokenizer=_CharTokenizer())
    with pytest.raises(
        ValueError, match=r"training_loop\.sft\.target='worked': none of the 1 training rows.*target=answer"
    ):
        worked.trainer(model=None, args=None, run=run, callbacks=[])


def test_worked_completions_longer_than_the_rollouts_budget_are_refused_naming_the_length_to_set(
    make_phase_rows,
):
    """A worked completion cut off by generation has no answer, so every evaluation would score it 0:
    refused with the length that holds it. Mutation: the comparison dropped -> red."""
    from tests.conftest import make_loop
    from tests.unit.test_budget import _CharTokenizer

    entry = {"question": "Calculate 3 + -6 + -6.", "answer": "-9", "metadata": {"expression": "3 + -6 + -6"}}
    phase = make_loop(sft={"max_steps": 4, "target": "worked"}, grpo={"max_completion_length": 16}).sft_phase
    run = SimpleNamespace(train_dataset=make_phase_rows([entry]), tokenizer=_CharTokenizer())
    longest = len("3 + -6 = -3, -3 + -6 = -9 <answer>-9</answer>") + 1
    said = rf"is {longest} tokens .*, more than training_loop\.grpo\.max_completion_length=16 .*max_completion_length=48"
    with pytest.raises(ValueError, match=said):
        phase.trainer(model=None, args=None, run=run, callbacks=[])
    # the same refusal at the run's preflight, before the baseline evaluation (rlvr.pipeline.orchestrator)
    loop = make_loop(sft={"max_steps": 4, "target": "worked"}, grpo={"max_completion_length": 16})
    [issue] = loop.see_data(run.train_dataset, run.tokenizer)
    assert issue.key == "training_loop.sft.target" and re.search(said, str(issue)), issue


def test_auto_trains_on_the_working_where_it_fits_and_on_the_answer_where_not_and_says_which(make_phase_rows):
    """``target: auto``: the working where the rows have one and the longest fits GRPO's
    max_completion_length; else the answer, never a refusal, and the console and provenance.json say
    which and why (naming the length that would hold the working). Mutations: the room check dropped
    -> the short-room loop trains on a cut-off working -> red; the record left out -> red."""
    from tests.conftest import make_loop
    from tests.unit.test_budget import _CharTokenizer

    entry = {"question": "Calculate 3 + -6 + -6.", "answer": "-9", "metadata": {"expression": "3 + -6 + -6"}}
    plain = {"question": "q", "answer": "4", "metadata": {}}
    rows, tokenizer = make_phase_rows([entry, plain]), _CharTokenizer()
    longest = len("3 + -6 = -3, -3 + -6 = -9 <answer>-9</answer>") + 1

    roomy = make_loop(sft={"max_steps": 4, "target": "auto"}, grpo={"max_completion_length": 64})
    assert roomy.see_data(rows, tokenizer) == []
    assert (
        roomy.sft_phase.completion("-9", json.dumps(entry)) == "3 + -6 = -3, -3 + -6 = -9 <answer>-9</answer>"
    )
    said = roomy.hardware_record()["sft_target"]
    assert (
        said.startswith("SFT trains on worked solutions: 1 of 2 training rows")
        and f"longest {longest} " in said
    )

    tight = make_loop(sft={"max_steps": 4, "target": "auto"}, grpo={"max_completion_length": 16})
    assert tight.see_data(rows, tokenizer) == []
    assert tight.sft_phase.completion("-9", json.dumps(entry)) == "<answer>-9</answer>"
    said = tight.hardware_record()["sft_target"]
    assert said.startswith("SFT trains on the answer alone (training_loop.sft.target=auto:")
    assert "set training_loop.grpo.max_completion_length=48 to train on workings" in said

    none = make_loop(sft={"max_steps": 4, "target": "auto"}, grpo={"max_completion_length": 64})
    assert none.see_data(make_phase_rows([plain]), tokenizer) == []
    assert "none of the 1 training rows has a working" in none.hardware_record()["sft_target"]
    # the answer target says nothing: it is what SFT always trained on
    answer = make_loop(sft={"max_steps": 4}, grpo={"max_completion_length": 16})
    assert answer.see_data(rows, tokenizer) == [] and "sft_target" not in answer.hardware_record()


@pytest.fixture
def make_phase_rows():
    from datasets import Dataset

    def rows(entries):
        return Dataset.from_dict(
            {
                "prompt": [[{"role": "user", "content": e["question"]}] for e in entries],
                "answer": [e["answer"] for e in entries],
                "entry": [json.dumps(e) for e in entries],
            }
        )

    return rows


def test_a_target_other_than_answer_or_worked_is_refused_by_the_gate():
    from tests.conftest import compose_config

    from rlvr.config.validation import check_targets
    from rlvr.pipeline.wiring import runtime_args

    cfg = compose_config(["training_loop.sft.target=steps"])
    issues = check_targets(cfg, runtime_args(cfg))
    assert [i.key for i in issues] == ["training_loop.sft.target"], issues
    assert "worked" in str(issues[0].problem) + str(issues[0].fix), issues[0]


def test_the_memory_estimate_reads_the_worked_completion_not_the_answer(make_phase_rows):
    """The GPU memory check sizes SFT's sequences by the longest completion it trains on: with worked
    targets, the working's length. Mutation: data_checks passing the prompt's format_answer -> red."""
    from tests.conftest import make_loop

    from rlvr.model import memory

    class Chars:
        def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=True):
            return "".join(m["content"] for m in messages)

        def __call__(self, texts, add_special_tokens=True):
            if isinstance(texts, str):
                return {"input_ids": list(texts)}
            return {"input_ids": [list(t) for t in texts]}

    entry = {"question": "Calculate 3 + -6 + -6.", "answer": "-9", "metadata": {"expression": "3 + -6 + -6"}}
    rows = make_phase_rows([entry])
    loop = make_loop(sft={"max_steps": 4, "target": "worked"}, grpo={"max_completion_length": 64})
    captured = {}

    def run_checks(model, loop, setup, lengths):
        captured["lengths"] = lengths
        return [], []

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(memory, "run_checks", run_checks)
        memory.data_checks(None, loop, None, rows, Chars(), loop.sft_phase.prompt)
    assert captured["lengths"] == (
        len(entry["question"]),
        len("3 + -6 = -3, -3 + -6 = -9 <answer>-9</answer>"),
    )
