"""reasoning-gym entries survive the pipeline's JSON form: every value type comes back as the
generator made it, every converted entry scores every answer as the raw one does, every
registered task loads (benchmarks/reasoning_gym_tasks.py is the full sweep), and gsm_symbolic's
Fractions no longer crash data loading."""

from __future__ import annotations

import decimal
import fractions
import importlib.util
import json
import math
import sys
from datetime import date

import numpy as np
import pytest
import reasoning_gym
from tests.conftest import ROOT

from rlvr.data.reasoning_gym import ReasoningGymData, generate_entries, to_dataset
from rlvr.prompts import PromptTemplate
from rlvr.verifier import VerifierPool
from rlvr.verifier.entries import TAG, from_json_safe, to_json_safe

_spec = importlib.util.spec_from_file_location(
    "reasoning_gym_tasks", ROOT / "benchmarks" / "reasoning_gym_tasks.py"
)
sweep = importlib.util.module_from_spec(_spec)
sys.modules["reasoning_gym_tasks"] = sweep  # dataclasses resolve their module by name
_spec.loader.exec_module(sweep)

PROMPT = PromptTemplate("{question}\nAnswer in <answer></answer>.")


def _types(value):
    """``value``'s structure with every leaf's and container's type, to compare types, not just ==."""
    if isinstance(value, dict):
        return (type(value), [(_types(k), _types(v)) for k, v in value.items()])
    if isinstance(value, (list, tuple)):
        return (type(value), [_types(v) for v in value])
    if isinstance(value, (set, frozenset)):
        return (type(value), sorted(repr(_types(v)) for v in value))
    if isinstance(value, np.ndarray):
        return (type(value), value.dtype, value.shape)
    return type(value)


EXOTIC = {
    "fraction": fractions.Fraction(7, 2),
    "decimal": decimal.Decimal("0.10"),
    "tuple": (1, (2, 3), [4]),
    "set": {"b", "a", "c"},
    "frozenset": frozenset({1, 2}),
    "int_keys": {1: "one", (2, 3): "pair", None: 0},
    "tag_as_key": {TAG: "tuple", "value": [1]},  # a real dict that looks like our tag
    "floats": [math.inf, -math.inf, -0.0, 1e-300],
    "bytes": b"\x00\xff",
    "bytearray": bytearray(b"ab"),
    "complex": 1 - 2j,
    "np_int": np.int64(3),
    "np_float": np.float32(0.5),
    "np_bool": np.bool_(True),
    "np_array": np.arange(6, dtype=np.int16).reshape(2, 3),
    "nested": [{"deep": (fractions.Fraction(1, 3), {frozenset({(1, 2)})})}],
}


def test_every_supported_type_comes_back_as_itself():
    text = json.dumps(to_json_safe(EXOTIC), allow_nan=False)  # strict JSON: no NaN/Infinity tokens
    back = from_json_safe(json.loads(text))
    assert _types(back) == _types(EXOTIC)
    arrays = back.pop("np_array"), EXOTIC["np_array"]
    assert (arrays[0] == arrays[1]).all()
    assert back == {k: v for k, v in EXOTIC.items() if k != "np_array"}
    assert math.copysign(1, back["floats"][2]) == -1  # -0.0 stays negative


def test_nan_round_trips_as_nan():
    back = from_json_safe(json.loads(json.dumps(to_json_safe({"x": math.nan}), allow_nan=False)))
    assert math.isnan(back["x"])


def test_plain_json_is_left_as_it_is():
    plain = {"question": "q", "answer": "3", "metadata": {"a": [1, 2.5, None, True], "b": {"c": "d"}}}
    assert to_json_safe(plain) == plain
    assert from_json_safe(plain) == plain


def test_a_type_without_a_lossless_form_is_named_with_its_path():
    with pytest.raises(TypeError, match=r"entry\['metadata'\]\['when'\] is a datetime\.date") as info:
        to_json_safe({"metadata": {"when": date(2026, 11, 26)}})
    assert "rlvr.verifier.entries" in str(info.value)


# --- the pipeline's entries score as the generator's ----------------------------------------

# Tasks whose entries hold values plain JSON loses or refuses (the sweep's "non-JSON values"
# column), with how many items (seed 42) it takes to meet them.
EXOTIC_TASKS = {
    "gsm_symbolic": (120, "Fraction"),  # the crash: Fractions in metadata
    "arc_agi": (4, "tuple"),  # scores a board against a tuple of tuples: lists score 0.05
    "rearc": (4, "tuple"),
    "codeio": (8, "numpy"),  # its verifier's tree edit distance is slow on near misses: few items
    "knights_knaves": (4, "numpy"),
    "graph_color": (6, "dict"),  # int-keyed solution; its verifier reads the edge tuples in metadata
    "advanced_geometry": (12, "tuple"),
}


def answers(raw: dict) -> list[str | None]:
    """The gold answer and near misses a model would write; for a task without a gold answer, the
    solution its metadata holds (graph_color's ``possible_answer``), written as a model would."""
    gold = sweep.gold_text(raw)
    if gold is None:
        solution = raw["metadata"].get("possible_answer")
        gold = None if solution is None else json.dumps(solution)
    if gold is None:
        return [None, "", "0"]
    return [gold, f" {gold} ", gold[:-1], gold + "0", f"-{gold}", "", "0", gold.upper(), "[[0]]"]


def _seen(value, kinds: set[str]) -> set[str]:
    if isinstance(value, list):
        for item in value:
            _seen(item, kinds)
    elif isinstance(value, dict):
        kinds.add(value.get(TAG))
        for item in value.values():
            _seen(item, kinds)
    return kinds


@pytest.fixture(scope="module")
def pool():
    with sweep.verifier_pool() as p:
        yield p


def _compare(pool, task: str, size: int, seed: int = 42) -> set[str]:
    """Score the gold answer and near misses of ``size`` items on the raw entry (the task
    dataset's own ``score_answer``) and on the ``entry`` column the data component writes, read
    back as rewards and evaluation read it and scored through ``pool``; the non-JSON kinds seen."""
    dataset = reasoning_gym.create_dataset(task, size=size, seed=seed)
    column = to_dataset(list(generate_entries(task, {}, size, seed)), task, PROMPT)["entry"]
    kinds, compared = set(), 0
    for i, text in enumerate(column):
        raw, converted = dataset[i], json.loads(text)
        _seen(converted, kinds)
        tried = answers(raw)
        if tried[0] is not None:  # the comparisons include a full-marks one, not only zeros
            assert sweep.score_raw(dataset, tried[0], raw) == (1.0, "ok"), i
        for n, answer in enumerate(tried):
            converted_score = sweep.score_converted(pool, task, answer, converted)
            if converted_score[1] == "rejected":  # the screen refused it: no verifier ran
                assert n > 0, (i, converted_score)  # never the gold answer
                continue
            assert sweep.score_raw(dataset, answer, raw) == converted_score, (i, answer)
            compared += 1
    assert compared >= 3 * size
    return kinds


@pytest.mark.parametrize("task", sorted(EXOTIC_TASKS))
def test_converted_entries_score_every_answer_like_raw_ones(pool, task):
    size, kind = EXOTIC_TASKS[task]
    kinds = _compare(pool, task, size)
    assert kind in kinds, f"no {kind} in {size} {task} items: the test no longer covers what it is for"


def test_rebuilt_entries_reach_a_worker_process_intact():
    """The pool rebuilds the entry in the parent and pickles it to a worker: Fractions and tuples
    must arrive as they left (rearc scores a correct board 0.05 if they do not)."""
    with VerifierPool(
        num_workers=1, timeout_s=30.0, memory_limit_mb=1024, max_answer_chars=100_000, failure_reward=0.0
    ) as workers:
        _compare(workers, "rearc", 4)
        _compare(workers, "gsm_symbolic", 40, seed=43)


@pytest.mark.parametrize("seed", [42, 43])
def test_gsm_symbolic_loads_with_its_fractions(seed):
    """The crash this guards: ``json.dumps(entry, default=list)`` raised "'Fraction' object is not
    iterable" on gsm_symbolic items whose metadata holds a Fraction (18 of the first 600 at seeds 42
    and 43), so ``experiment=gsm_symbolic_gpu`` died loading data."""
    data = ReasoningGymData("gsm_symbolic", 600, 100, seed, None, None).load(PROMPT)
    assert (len(data.train), len(data.eval)) == (600, 100)
    entries = [json.loads(text) for split in (data.train, data.eval) for text in split["entry"]]
    fractions_held = [e for e in entries if "Fraction" in _seen(e, set())]
    assert fractions_held, "no Fraction in 700 gsm_symbolic items: the test no longer reproduces the crash"
    assert all(isinstance(from_json_safe(e), dict) for e in fractions_held)
    # The answer column is the gold answer as text, as before (the SFT target).
    assert data.train["answer"][:5] == [str(e["answer"]) for e in entries[:5]]


# --- the registry sweep (benchmarks/reasoning_gym_tasks.py) --------------------------------

# A handful: the crash (gsm_symbolic), tuple-comparing verifiers (rearc), numpy values (codeio),
# non-string dict keys (graph_color, which has no gold answer), and composite (needs params).
HANDFUL = {
    "gsm_symbolic": 60,
    "rearc": 3,
    "codeio": 10,
    "graph_color": 10,
    "composite": 10,
    "advanced_geometry": 10,
}


def _sweep_ok(check) -> None:
    assert check.error is None, check.error
    assert check.converted_ok == check.items > 0, check.examples
    assert check.mismatches == 0, check.examples
    if check.scored:
        assert check.gold_converted == check.gold_raw


def test_sweep_of_a_handful_of_tasks(pool):
    checks = {task: sweep.check_task(task, n, (42, 43), pool) for task, n in HANDFUL.items()}
    for check in checks.values():
        _sweep_ok(check)
    assert checks["gsm_symbolic"].tagged["Fraction"] >= 2  # items 51 (seed 42) and 31 (seed 43)
    assert checks["gsm_symbolic"].gold_raw == 1.0
    assert checks["codeio"].tagged["numpy"] > 0
    assert checks["graph_color"].tagged["dict"] > 0  # int-keyed adjacency
    assert checks["graph_color"].no_gold == checks["graph_color"].items
    assert "no gold answer" in checks["graph_color"].needs
    assert "DatasetSpec" in checks["composite"].needs
    table = sweep.table(list(checks.values()))
    assert (
        table.count("\n") == len(checks) + 1 and "| gsm_symbolic | 120 | 120 | 1.000 | 1.000 | 0 |" in table
    )
