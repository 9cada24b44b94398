"""Bounds, timeouts and validated inputs (SECURITY.md "Bounds and timeouts"): each test plays the
attacker with the input the review reproduced on main, and names the mutation that turns it red."""

from __future__ import annotations

import json
import math
import stat
import threading
import time
from pathlib import Path

import pytest
from tests.conftest import compose_config, conf_checker
from tests.unit.test_safe_yaml import alias_bomb

from rlvr.config.validation import check_targets
from rlvr.data import FileData
from rlvr.data.processors import GSM8K, FinQA, QuestionAnswer
from rlvr.issues import ConfigValidationError
from rlvr.pipeline.wiring import runtime_args
from rlvr.prompts import PromptTemplate

PROMPT = PromptTemplate("{question}\nAnswer in <answer></answer>.")


def file_data(path: Path, processor=None) -> FileData:
    return FileData(
        name="mine",
        path=str(path),
        processor=processor or QuestionAnswer(question_field="question", answer_field="answer"),
        checker=conf_checker("math_verify"),
        train_size=None,
        eval_size=None,
        seed=0,
        split=None,
        subset=None,
        eval_sets=None,
    )


def good_rows(n: int = 20) -> list[dict]:
    return [{"question": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(n)]


# -- 9. gold answers ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "rule"),
    # A bare NaN in JSON lines reaches the processor as null (pyarrow's reader); the text "inf" as a number.
    [
        (None, "is null"),
        ("", "is empty"),
        ("   ", "is empty"),
        (float("nan"), "is null"),
        ("inf", "non-finite"),
    ],
)
def test_a_row_without_a_usable_gold_answer_is_refused_with_file_row_and_field(tmp_path, bad, rule):
    """An empty gold once scored 1.0 for an empty answer. Mutation: ``gold()`` returning
    ``str(value).strip()`` unchecked -> red (None read as 'None', NaN as 'nan', '' accepted)."""
    rows = good_rows()
    rows[7]["answer"] = bad
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))  # json writes NaN as a bare NaN
    [issue] = file_data(path).validate()
    assert issue.key == "data.processor"
    assert f"row 7 of {path}" in issue.problem and "field 'answer'" in issue.problem and rule in issue.problem
    assert "every row needs a gold answer" in issue.problem and issue.fix


def test_an_empty_csv_cell_and_the_gsm8k_and_finqa_golds_are_checked_too(tmp_path):
    """Mutation: ``gold()`` unchecked -> red for each reader."""
    csv = tmp_path / "qa.csv"
    csv.write_text("question,answer\n" + "".join(f"What is {i}?,{i}\n" for i in range(9)) + "Empty?,\n")
    [issue] = file_data(csv).validate()
    assert "row 9" in issue.problem and "is null" in issue.problem  # datasets reads an empty cell as null
    gsm = GSM8K(question_field="question", answer_field="answer")
    for tail in ("", "nan", "-inf"):
        with pytest.raises(ValueError, match="gold answer"):
            gsm({"question": "Q?", "answer": f"2 + 2 = 4\n#### {tail}"})
    assert gsm({"question": "Q?", "answer": "#### 1,000"}).answer == "1,000"
    with pytest.raises(ValueError, match="non-finite"):
        FinQA()({"qa": {"question": "Q?", "exe_ans": float("nan")}})
    assert FinQA()({"qa": {"question": "Q?", "exe_ans": 0.14136}}).answer == "0.14136"


# -- 10. curriculum state from a checkpoint ---------------------------------------------------------


def _curriculum(max_level=2):
    from rlvr.data.curriculum import Curriculum

    return Curriculum("basic_arithmetic", {}, None, 0, max_level, raise_at=0.5, lower_at=0.2, window=2)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda s: s["levels"].update(num_terms=9), "levels.num_terms=9 is outside [0, 2]"),
        (lambda s: s["levels"].update(num_terms=-1), "levels.num_terms=-1 is outside [0, 2]"),
        (lambda s: s["levels"].update(num_terms="3; rm"), "not an integer level"),
        (lambda s: s["levels"].update(planted=1), "names 'planted'"),
        (
            lambda s: s.update(last={"levels": {"num_terms": 1, "num_digits": 1}, "level": "high"}),
            "last.level",
        ),
        (lambda s: s.update(last={"levels": {"num_terms": 1}, "level": 1, "success": 7.0}), "last.success"),
        (lambda s: s.update(batches=[[5, 2]]), "batches"),
        (lambda s: s.update(visited=[{"num_terms": 99}]), "visited[0].num_terms=99"),
    ],
)
def test_a_checkpoints_curriculum_state_outside_the_configured_levels_is_refused(tmp_path, change, said):
    """A level above data.max_level trained past the config, a non-numeric one became a metric.
    Mutation: restore() without the ``state_problems`` check -> red (every case restores)."""
    from rlvr.data.curriculum import STATE_FILE

    saved = _curriculum()
    saved.observe(2, 2), saved.observe(2, 2)  # one level up: a state with batches and levels
    saved.note_batch()
    saved.save(tmp_path)
    state = json.loads((tmp_path / STATE_FILE).read_text())
    change(state)
    (tmp_path / STATE_FILE).write_text(json.dumps(state))
    fresh = _curriculum()
    with pytest.raises(ValueError) as refused:
        fresh.restore(tmp_path)
    assert str(tmp_path / STATE_FILE) in str(refused.value) and said in str(refused.value)
    assert "data.max_level" in str(refused.value)  # the fix
    assert fresh.levels == fresh.start  # nothing of the refused state was applied


def test_a_curriculum_state_the_run_wrote_restores(tmp_path):
    """The check lets every state the product writes through (else the refusal test proves nothing)."""
    saved = _curriculum()
    for _ in range(4):
        saved.note_batch()
        saved.observe(2, 2)
    saved.save(tmp_path)
    fresh = _curriculum()
    fresh.restore(tmp_path)
    assert fresh.levels == saved.levels == {"num_terms": 2, "num_digits": 2}


# -- 11. nesting ----------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_a_data_file_replaced_after_its_check_is_not_what_gets_read(tmp_path, monkeypatch, suffix):
    """One open of a data file for check and read: a file swapped in at the path between the check and
    the parser (there, one nested two million levels crashed the process) is never read. The swap
    happens inside the check step here. Mutation: ``load_source`` handing ``datasets`` the path
    (``data_files=str(local)``) instead of the checked copy -> red (the swapped questions are read)."""
    import rlvr.data.files as files

    def write(path: Path, prefix: str) -> None:
        rows = [{"question": f"{prefix} {i}?", "answer": str(i)} for i in range(6)]
        if suffix == ".csv":
            path.write_text("question,answer\n" + "".join(f"{r['question']},{r['answer']}\n" for r in rows))
        else:
            path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    path = tmp_path / f"data{suffix}"
    write(path, "checked")
    real_read = files.read_once

    def read_then_swap(local):
        read = real_read(local)
        swapped = tmp_path / f"swapped{suffix}"
        write(swapped, "swapped")
        swapped.replace(path)  # a new file at the path, as an attacker's rename would leave it
        return read

    monkeypatch.setattr(files, "read_once", read_then_swap)
    questions = [item.question for item in file_data(path).items()]
    assert path.read_text().startswith(
        "question,answer\nswapped" if suffix == ".csv" else '{"question": "swapped'
    )
    assert questions and all(q.startswith("checked") for q in questions), questions


def test_brackets_inside_json_strings_are_text_not_nesting(tmp_path):
    """A question that quotes brackets is not refused. Mutation: no string stripping -> red."""
    from rlvr.data.files import check_nesting

    path = tmp_path / "quoted.jsonl"
    path.write_text(json.dumps({"question": "[" * 500 + ' \\" {{', "answer": "1"}) + "\n")
    check_nesting(path)
    path.write_text(json.dumps({"question": "q", "answer": "1", "t": [[[[1]]]]}) + "\n")
    check_nesting(path, limit=5)
    with pytest.raises(ValueError, match="line 1: brackets nested deeper than 4"):
        check_nesting(path, limit=4)


# -- 16. a credential file given as data ------------------------------------------------------------


def test_a_private_credential_file_linked_as_csv_is_not_quoted_nor_cached_readable_by_others(
    tmp_path, monkeypatch
):
    """Its first line appeared in the "has no field" error and the datasets cache kept a
    world-readable copy. Mutations: ``field_names`` returning the names -> red (the key in the
    message); ``private_cache`` returning None -> red (a copy readable by others)."""
    import datasets

    secret = "sk_live_0123456789abcdefXYZ"
    cache = tmp_path / "hf-cache"
    cache.mkdir(mode=0o755)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    credentials = tmp_path / "home" / ".credentials"
    credentials.parent.mkdir()
    credentials.write_text(f"STRIPE_KEY={secret}\nOTHER=v\nMORE=w\n")
    credentials.chmod(0o600)
    link = tmp_path / "data.csv"
    link.symlink_to(credentials)
    with pytest.raises(ConfigValidationError) as refused:
        file_data(link).items()
    message = str(refused.value)
    assert "has no field 'question'" in message and "names not shown" in message
    assert secret not in message and "STRIPE_KEY" not in message
    readable = []
    for path in cache.rglob("*"):
        if path.is_file() and secret.encode() in path.read_bytes():
            folders = [p for p in path.relative_to(cache).parents if str(p) != "."]
            private = any(stat.S_IMODE((cache / p).stat().st_mode) & 0o077 == 0 for p in folders)
            if not private and stat.S_IMODE(path.stat().st_mode) & 0o004:
                readable.append(path)
    assert any(cache.rglob("*.arrow")) and not readable, readable


def test_a_data_files_header_is_still_named_when_it_looks_like_one(tmp_path):
    """The fix keeps the useful part: a real header is listed. Mutation: never listing -> red."""
    path = tmp_path / "qa.csv"
    path.write_text("q,a\n" + "".join(f"What is {i}?,{i}\n" for i in range(5)))
    [issue] = file_data(path).validate()
    assert "fields: ['a', 'q']" in issue.problem


# -- 13. dynamic sampling rounds ------------------------------------------------------------------


def test_max_rounds_has_a_ceiling():
    """One step could run forever. Mutation: the ``le=MAX_ROUNDS`` bound of SignalNode removed -> red."""
    from rlvr.issues import value_issues
    from rlvr.training_loop.grpo_signal import MAX_ROUNDS, SignalNode

    node = {"skip_zero_advantage": True, "dynamic_sampling": True, "max_rounds": MAX_ROUNDS}
    assert value_issues("training_loop.signal", node, SignalNode, "T") == []
    [issue] = value_issues("training_loop.signal", {**node, "max_rounds": 10**9}, SignalNode, "T")
    assert issue.key == "training_loop.signal.max_rounds" and issue.problem == f"must be <= {MAX_ROUNDS}"


def test_rft_sizes_have_ceilings_checked_before_any_work(tmp_path):
    """RFT's rounds, prompts per round and samples per prompt at 1e9 passed validate_only and the run
    grew to GBs (issue 45): the gate (what validate_only runs) names each. Mutations: the per-field
    ``most`` check removed -> red; the per-round product check removed -> red."""
    from rlvr.config.gate import checked_config, component_issues
    from rlvr.training_loop.rft import MAX_ROUND_SAMPLES

    def rft_issues(*overrides: str) -> dict:
        cfg = checked_config(compose_config(["experiment=smoke", "training_loop=rft", *overrides]))
        found = component_issues(cfg, tmp_path / "run")
        return {i.key: i for i in found if i.key.startswith("training_loop.rft")}

    assert rft_issues() == {}
    sizes = ("rounds", "prompts_per_round", "samples_per_prompt")
    issues = rft_issues(*[f"training_loop.rft.{k}=1000000000" for k in sizes])
    assert {k: (i.value, i.problem) for k, i in issues.items()} == {
        "training_loop.rft.rounds": (10**9, "must be <= 1000"),
        "training_loop.rft.prompts_per_round": (10**9, "must be <= 100000"),
        "training_loop.rft.samples_per_prompt": (10**9, "must be <= 1024"),
    }
    assert issues["training_loop.rft.rounds"].fix.startswith(
        "set training_loop.rft.rounds to a value <= 1000"
    )
    # each within its own ceiling, together past what one round may sample
    [issue] = rft_issues(
        "training_loop.rft.prompts_per_round=100000", "training_loop.rft.samples_per_prompt=1024"
    ).values()
    assert issue.key == "training_loop.rft.samples_per_prompt" and issue.value == 1024
    assert "= 102,400,000 completions a round" in issue.problem and f"{MAX_ROUND_SAMPLES:,}" in issue.problem
    assert issue.fix == "lower training_loop.rft.samples_per_prompt or training_loop.rft.prompts_per_round"


# -- 14. plugin reward terms ----------------------------------------------------------------------

RELEASE = threading.Event()


def hanging_reward(completions, **kwargs):
    """A plugin reward that waits on something that never comes (until the test releases it)."""
    RELEASE.wait(30)
    return [1.0] * len(completions)


@pytest.fixture
def released():
    RELEASE.clear()
    yield
    RELEASE.set()


def test_a_hanging_plugin_reward_times_out_scores_zero_and_is_counted(released, caplog):
    """The run stalled silently at the rewards stage. Mutation: ``plugin_module`` returning None
    (no deadline for plugin code) -> red (the call blocks until the release, 30 s)."""
    from functools import partial

    from rlvr.reward import FormatReward, FunctionReward, RewardSet

    terms = {
        "mine": FunctionReward(partial(hanging_reward), 1.0, prompt=PROMPT),
        "format": FormatReward(0.5, prompt=PROMPT),
    }
    rewards = RewardSet(
        terms, plugin_timeout_s=0.3, completions_per_step=0, seed=0, prompt=PROMPT, verifier=None
    )
    mine, fmt = rewards.functions
    assert fmt.deadline is None  # rlvr's own term runs as it is
    started = time.monotonic()
    assert mine(["<answer>1</answer>", "x"], task=["t", "t"]) == [0.0, 0.0]
    assert time.monotonic() - started < 5
    assert mine(["a"], task=["t"]) == [0.0]  # still running: not called a second time, scored at once
    assert time.monotonic() - started < 5
    assert rewards.counters()["reward/plugin_timeouts"] == 2.0
    assert "reward.terms.mine" in caplog.text and "reward.plugin_timeout_s" in caplog.text
    data = __import__("datasets").Dataset.from_dict({"answer": ["1"], "task": ["t"]})
    with pytest.raises(RuntimeError, match="reward.terms.mine did not return within reward.plugin_timeout_s"):
        RewardSet(
            {"mine": terms["mine"]}, plugin_timeout_s=0.3, completions_per_step=0, seed=0, prompt=PROMPT
        ).check_on_gold(data)


def test_a_plugin_reward_that_returns_in_time_is_scored_as_it_says(released):
    """Mutation: the Deadline returning zeros always -> red."""
    from rlvr.reward import FunctionReward, RewardSet

    RELEASE.set()
    rewards = RewardSet(
        {"mine": FunctionReward(hanging_reward, 1.0, prompt=PROMPT)},
        plugin_timeout_s=5,
        completions_per_step=0,
        seed=0,
        prompt=PROMPT,
    )
    assert rewards.functions[0](["a", "b"]) == [1.0, 1.0]
    assert rewards.counters()["reward/plugin_timeouts"] == 0.0
    cfg = compose_config(
        ["reward.plugin_timeout_s=0"]
    )  # its range is RewardSet's signature, bound by the gate
    assert [(i.key, i.problem) for i in check_targets(cfg, runtime_args(cfg))] == [
        ("reward.plugin_timeout_s", "must be > 0")
    ]


# -- 15. plot -------------------------------------------------------------------------------------


def _task_report(n: int, accuracy=lambda i: 0.5) -> dict:
    models = {f"org/model-{i}": {"accuracy": accuracy(i), "n": 10} for i in range(n)}
    return {"kind": "task", "task": "gsm8k", "models": models}


def test_a_results_file_with_thousands_of_models_is_refused_fast_and_only_picks(tmp_path):
    """Tens of thousands took minutes and GBs (2,000 here keep the mutation cheap: the same check).
    Mutation: no ``_too_many`` check -> red (draws 2,000 bars instead of refusing)."""
    from rlvr.benchmark import plot

    path = tmp_path / "results_gsm8k.json"
    path.write_text(json.dumps(_task_report(2_000)))
    started = time.monotonic()
    with pytest.raises(SystemExit):
        plot.main([str(path), "--output", str(tmp_path / "out.png")])
    assert time.monotonic() - started < 10 and not (tmp_path / "out.png").exists()
    assert (
        plot.main(
            [str(path), "--only", "org/model-3", "--only", "org/model-7", "-o", str(tmp_path / "o.png")]
        )
        == 0
    )
    with pytest.raises(
        plot.ReportError, match="2000 models to draw, at most 40 in one chart; pick them with --only"
    ):
        plot.task_chart(_task_report(2_000))


@pytest.mark.parametrize("bad", [1.5, -0.1, math.inf])
def test_accuracies_outside_zero_to_one_are_refused(bad):
    """Mutation: ``_share`` -> ``_number`` (any number) -> red."""
    from rlvr.benchmark import plot

    with pytest.raises(plot.ReportError, match=r"needs an 'accuracy' in \[0, 1\]"):
        plot.task_chart(_task_report(3, lambda i: bad if i == 1 else 0.5))
    report = {"kind": "all_tasks", "tasks": {"t": _task_report(2)}, "average": {"org/model-0": bad}}
    with pytest.raises(plot.ReportError, match=r"number in \[0, 1\]"):
        plot.all_tasks_chart(report)
    inverted = _task_report(1)
    inverted["models"]["org/model-0"].update(ci_low=0.9, ci_high=0.95)
    with pytest.raises(plot.ReportError, match="ci_low <= accuracy"):
        plot.task_chart(inverted)


# -- cpu_kv_cache_gb, gpu_check's YAML --------------------------------------------------------------


def test_the_vllm_cpu_kv_cache_is_bounded_by_the_machines_ram():
    """Mutation: the ``<= ceiling`` half removed -> red."""
    from rlvr.evaluation.generation import VLLMBackend

    def issues(gb):
        found = VLLMBackend(
            gpu_memory_utilization=0.3, max_model_len=512, cpu_kv_cache_gb=gb, cpu_enforce_eager=True
        ).validate()
        return [i for i in found if i.key.endswith("cpu_kv_cache_gb")]

    assert issues(1.0) == []
    [issue] = issues(10_000.0)
    assert "half this machine's RAM" in issue.problem


def test_gpu_checks_evidence_reader_refuses_an_alias_bomb_in_config_resolved(tmp_path):
    """Mutation: the load line back to OmegaConf.load -> red (no refusal; 9 levels runs for hours,
    so the test uses 4: OmegaConf reads it in seconds without refusing)."""
    from tests.unit.test_gpu_check import gc

    from rlvr.runtime.safe_yaml import YamlRefused

    (tmp_path / "config_resolved.yaml").write_text(alias_bomb(4))
    with pytest.raises(YamlRefused, match="alias"):
        gc.Evidence.read(tmp_path, 0, 1.0)


# -- 18. prompts longer than the model's context ----------------------------------------------------


def test_prompts_longer_than_the_models_context_are_refused_with_the_numbers(tmp_path):
    """An extra evaluation level built 8,425-character prompts for a 2,048-token model: each
    evaluation ran 50-100x slower, with a warning in the log file only. Mutation:
    ``prompt_length_issues`` returning [] -> red."""
    from tests.conftest import tiny_model

    from rlvr.data.base import prompt_length_issues

    loaded = tiny_model().load()
    long_rows = [
        {"question": f"Q{i}: " + "seven apples and " * 900 + "how many?", "answer": "7"} for i in range(40)
    ]
    (tmp_path / "long.jsonl").write_text("".join(json.dumps(r) + "\n" for r in long_rows))
    (tmp_path / "short.jsonl").write_text("".join(json.dumps(r) + "\n" for r in good_rows(40)))
    short = file_data(tmp_path / "short.jsonl")
    short.eval_sets = {"long": file_data(tmp_path / "long.jsonl")}
    data = short.load(PROMPT)
    [issue] = prompt_length_issues(data, PROMPT, loaded.tokenizer, loaded.model)
    assert issue.key == "data.eval_sets.long" and issue.value == "long"
    assert "the context 2048" in issue.problem and "longest has" in issue.problem
    assert "longer context" in issue.fix
    short.eval_sets = {}
    assert prompt_length_issues(short.load(PROMPT), PROMPT, loaded.tokenizer, loaded.model) == []
