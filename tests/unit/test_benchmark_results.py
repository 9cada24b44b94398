"""Unit tests for rlvr.benchmark.results: atomic writes, cell store resumability and report files."""

from __future__ import annotations

import json
import os
import re
from datetime import datetime
from pathlib import Path

import pytest

import rlvr.runtime.io as rlvr_io
from rlvr.benchmark.results import (
    CellFingerprint,
    CellResult,
    CellStore,
    build_reports,
    slug,
    write_reports,
)
from rlvr.evaluation.results import Evaluation, SampleRecord
from rlvr.prompts import PromptTemplate
from rlvr.runtime.io import atomic_write_json

STAMP = "20250102_030405"
GENERATION = {"max_new_tokens": 64, "temperature": 1.0, "stop": ["</answer>"]}


def fingerprint(prompt_hash: str = "p1", k: int = 2, **changes) -> CellFingerprint:
    base = dict(
        prompt_hash=prompt_hash, seed=0, num_examples=4, k=k, generation=dict(GENERATION),
        task_params={"max_terms": 3}, test_set="ids-1", model_weights="w-1", verifier={"timeout_s": 5.0},
        split_rule=1,
    )  # fmt: skip
    return CellFingerprint(**{**base, **changes})


def make_cell(
    model: str = "org/model-a",
    task: str = "basic_arithmetic",
    scores: list[list[float]] | None = None,
    prompt_hash: str = "p1",
    generation: dict | None = None,
    prompt_text_hash: str = "",
) -> CellResult:
    scores = scores if scores is not None else [[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.0, 1.0]]
    answers = [[str(int(s)) for s in q] for q in scores]
    samples = [
        SampleRecord(
            index=i,
            task=task,
            question=f"What is {i} + 1?",
            reference=str(i + 1),
            completions=[f"<answer>{a}</answer>" for a in answers[i]],
            answers=answers[i],
            scores=scores[i],
            status=["ok"] * len(scores[i]),
        )
        for i in range(len(scores))
    ]
    k = len(scores[0]) if scores else 1
    fp = fingerprint(
        prompt_hash,
        k,
        generation=dict(GENERATION if generation is None else generation),
        prompt_text_hash=prompt_text_hash,
    )
    return CellResult(
        model=model,
        task=task,
        fingerprint=fp,
        evaluation=Evaluation(samples, ks=list(range(1, k + 1)), seconds=1.0, samples_per_second=8.0),
        wall_seconds=1.0,
        started="2025-01-02T03:04:00",
        finished="2025-01-02T03:04:05",
    )


def test_atomic_write_json_writes_and_leaves_no_temp_files(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "r.json"
    assert atomic_write_json(path, {"a": [1, 2], "é": "ü"}) == path
    assert json.loads(path.read_text(encoding="utf-8")) == {"a": [1, 2], "é": "ü"}
    assert os.listdir(path.parent) == ["r.json"]


def test_atomic_write_json_keeps_old_content_on_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "r.json"
    atomic_write_json(path, {"v": 1})
    with pytest.raises(TypeError):
        atomic_write_json(path, {"v": {1, 2}})  # sets are not JSON: fails halfway through dumping
    assert json.loads(path.read_text()) == {"v": 1}

    def crash(*args: object) -> None:
        raise OSError("disk gone")

    monkeypatch.setattr(rlvr_io.os, "replace", crash)
    with pytest.raises(OSError, match="disk gone"):
        atomic_write_json(path, {"v": 2})
    assert json.loads(path.read_text()) == {"v": 1}
    assert os.listdir(tmp_path) == ["r.json"]


def test_slug_is_safe_and_collision_free() -> None:
    names = [
        "a/b",
        "a_b",
        "a b",
        "a:b",
        "/abs/path/to/ckpt",
        "../../etc",
        "Qwen/Qwen2.5-0.5B-Instruct",
        "",
        "é",
    ]
    slugs = [slug(n) for n in names]
    assert len(set(slugs)) == len(names)
    for s in slugs:
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", s), s
    assert slug("a/b") == slug("a/b")
    assert slug("Qwen/Qwen2.5-0.5B-Instruct").startswith("Qwen_Qwen2.5-0.5B-Instruct-")
    assert len(slug("x" * 500)) < 80


def test_cell_round_trips_through_the_store(tmp_path: Path) -> None:
    store = CellStore(tmp_path)
    cell = make_cell()
    path = store.save(cell)
    assert path.parent == tmp_path / "cells"
    assert path.name.endswith("__basic_arithmetic.json")
    data = json.loads(path.read_text())
    assert (data["kind"], data["format_version"], data["model"]) == ("cell", 2, "org/model-a")
    assert data["evaluation"]["summary"]["pass_at_k"] == {"1": 0.5, "2": 0.75}
    assert data["evaluation"]["samples"][0]["reference"] == "1"
    assert store.load("org/model-a", "basic_arithmetic") == cell
    assert CellResult.from_dict(cell.to_dict()) == cell


def test_unsafe_task_names_get_a_slug(tmp_path: Path) -> None:
    store = CellStore(tmp_path)
    p1, p2 = store.path("m", "mix/a"), store.path("m", "mix_a")
    assert p1 != p2 and p1.parent == p2.parent == tmp_path / "cells"
    assert p2.name.endswith("__mix_a.json")


def test_done_requires_file_parse_and_matching_fingerprint(tmp_path: Path) -> None:
    store = CellStore(tmp_path)
    cell = make_cell()
    fp = cell.fingerprint
    assert not store.done(cell.model, cell.task, fp)
    store.save(cell)
    assert store.done(cell.model, cell.task, fp)
    # Same settings after a JSON/YAML round trip: tuples vs lists, 1 vs 1.0.
    same = fingerprint(generation={"stop": ("</answer>",), "temperature": 1, "max_new_tokens": 64})
    assert store.done(cell.model, cell.task, same)
    # Everything that changes the number invalidates the cell (issue: task params and weights were missing).
    for changed in (
        fingerprint("p2"),
        fingerprint(seed=1),
        fingerprint(num_examples=5),
        fingerprint(k=3),
        fingerprint(generation={**GENERATION, "temperature": 0.7}),
        fingerprint(task_params={"max_terms": 4}),
        fingerprint(test_set="ids-2"),
        fingerprint(model_weights="w-2"),
        fingerprint(verifier={"timeout_s": 1.0}),
        fingerprint(split_rule=2),
    ):
        assert not store.done(cell.model, cell.task, changed), changed
    assert not store.done("org/model-b", cell.task, fp)
    assert not store.done(cell.model, "other_task", fp)


def test_an_edited_stored_number_is_never_reused_or_reported(tmp_path: Path) -> None:
    store = CellStore(tmp_path)
    cell = make_cell()
    path = store.save(cell)
    data = json.loads(path.read_text())
    data["evaluation"]["summary"]["accuracy"] = 0.99
    path.write_text(json.dumps(data))
    assert not store.done(cell.model, cell.task, cell.fingerprint)
    assert store.requested([cell.model], [cell.task]) == []
    # editing the per-sample scores AND the summary consistently is a different cell, not a forged one:
    # it is still only reported when its fingerprint matches a requested model x task


def test_only_requested_models_and_tasks_are_reported(tmp_path: Path) -> None:
    store = CellStore(tmp_path)
    for cell in (make_cell("org/a"), make_cell("org/planted"), make_cell("org/a", task="leg_counting")):
        store.save(cell)
    assert [(c.model, c.task) for c in store.requested(["org/a"], ["basic_arithmetic"])] == [
        ("org/a", "basic_arithmetic")
    ]


def test_done_is_false_for_corrupt_or_foreign_files(tmp_path: Path) -> None:
    store = CellStore(tmp_path)
    cell = make_cell()
    path = store.save(cell)
    text = path.read_text()
    path.write_text(text[: len(text) // 2])  # truncated, as after a crash without atomic writes
    assert not store.done(cell.model, cell.task, cell.fingerprint)
    with pytest.raises(ValueError, match="not a readable JSON file"):
        store.load(cell.model, cell.task)
    path.write_text(json.dumps({"kind": "cell", "model": cell.model}))
    assert not store.done(cell.model, cell.task, cell.fingerprint)
    # A valid cell of another model under this name (e.g. copied by hand) is not this cell.
    path.write_text(json.dumps(make_cell(model="other").to_dict()))
    assert not store.done(cell.model, cell.task, cell.fingerprint)
    with pytest.raises(ValueError, match="holds model 'other'"):
        store.load(cell.model, cell.task)


def test_from_dict_rejects_wrong_kind_version_and_fields() -> None:
    data = make_cell().to_dict()
    with pytest.raises(ValueError, match="expected kind 'cell'"):
        CellResult.from_dict({**data, "kind": "task"})
    with pytest.raises(ValueError, match="format_version 99"):
        CellResult.from_dict({**data, "format_version": 99})
    with pytest.raises(ValueError, match=r"missing \['evaluation'\]"):
        CellResult.from_dict({k: v for k, v in data.items() if k != "evaluation"})
    bad_sample = {**data, "evaluation": {**data["evaluation"], "samples": [{"index": 0}]}}
    with pytest.raises(ValueError, match="malformed sample record"):
        CellResult.from_dict(bad_sample)


def test_store_iterates_finished_cells_and_skips_broken_ones(tmp_path: Path) -> None:
    store = CellStore(tmp_path)
    assert store.cells() == []
    a, b = make_cell("m/a"), make_cell("m/b", task="leg_counting")
    store.save(a)
    store.save(b)
    (store.cells_dir / "broken.json").write_text("{")
    (store.cells_dir / ".x.json.123.tmp").write_text("{")  # a temp file left by a killed writer
    assert sorted(c.model for c in store) == ["m/a", "m/b"]


def test_write_reports_files_and_contents(tmp_path: Path) -> None:
    store = CellStore(tmp_path / "bench")
    cells = [
        make_cell("org/a", "basic_arithmetic", [[1.0, 1.0], [1.0, 0.0], [0.0, 0.0], [1.0, 1.0]]),
        make_cell("org/b", "basic_arithmetic", [[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 1.0]]),
        make_cell("org/a", "leg_counting", [[0.0, 1.0], [0.0, 0.0]], prompt_hash="p1"),
    ]
    for cell in cells:
        store.save(cell)
    out = tmp_path / "reports"
    paths = write_reports(store, out, STAMP)
    assert [p.name for p in paths] == [
        "results_basic_arithmetic.json",
        "results_leg_counting.json",
        "paired_comparison.md",
        "results_all_tasks.json",
    ]
    assert all(p.is_file() and p.stat().st_size > 0 for p in paths)
    assert sorted(os.listdir(out)) == sorted(p.name for p in paths)  # no temp files left

    task = json.loads((out / "results_basic_arithmetic.json").read_text())
    assert (task["kind"], task["task"], task["timestamp"], task["prompt_hash"]) == (
        "task",
        "basic_arithmetic",
        STAMP,
        "p1",
    )
    assert list(task["models"]) == ["org/a", "org/b"]
    a = task["models"]["org/a"]
    # accuracy = pass@1, the mean over both samples of each question (1, 0.5, 0, 1)
    assert (a["n"], a["accuracy"], a["samples_per_second"], a["k"]) == (4, 0.625, 8.0, 2)
    assert a["pass_at_k"]["2"] == pytest.approx(0.75)
    assert a["ci_low"] < 0.625 < a["ci_high"]

    both = json.loads((out / "results_all_tasks.json").read_text())
    assert both["kind"] == "all_tasks" and both["timestamp"] == STAMP
    assert list(both["tasks"]) == ["basic_arithmetic", "leg_counting"]
    assert both["tasks"]["basic_arithmetic"]["models"] == task["models"]
    assert both["average"] == pytest.approx({"org/a": (0.625 + 0.25) / 2, "org/b": 0.25})
    assert both["average_tasks"] == {
        "org/a": ["basic_arithmetic", "leg_counting"],
        "org/b": ["basic_arithmetic"],
    }


def test_write_reports_accepts_cells_and_datetime(tmp_path: Path) -> None:
    paths = write_reports([make_cell()], tmp_path, datetime(2025, 1, 2, 3, 4, 5))
    assert json.loads(paths[-1].read_text())["timestamp"] == STAMP


def test_a_second_report_into_the_same_directory_replaces_the_first(tmp_path: Path) -> None:
    """One report per directory, so `rlvr.benchmark.plot <dir>/results_all_tasks.json` is unambiguous."""
    write_reports([make_cell()], tmp_path, STAMP)
    write_reports([make_cell("m/b")], tmp_path, "20250102_030406")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "results_all_tasks.json",
        "results_basic_arithmetic.json",
    ]
    assert list(json.loads((tmp_path / "results_all_tasks.json").read_text())["average"]) == ["m/b"]


def test_results_does_not_import_the_charts() -> None:
    """plot.py reads results' report kinds; results must not import plot back (no import circle)."""
    import ast

    import rlvr.benchmark.results as results

    tree = ast.parse(Path(results.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {
        f"{n.module}.{a.name}" if n.module else a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom)
        for a in n.names
    }
    assert not {m for m in imported if m.startswith("rlvr.benchmark")}


def test_write_reports_without_cells_writes_nothing(tmp_path: Path) -> None:
    assert write_reports(CellStore(tmp_path / "empty"), tmp_path / "out", STAMP) == []
    assert not (tmp_path / "out").exists()


def test_reports_refuse_unfair_or_ambiguous_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"mixes prompt hashes \(org/a: p1, org/b: p2\)"):
        build_reports([make_cell("org/a"), make_cell("org/b", prompt_hash="p2")], STAMP)
    with pytest.raises(ValueError, match="appears twice"):
        build_reports([make_cell("org/a"), make_cell("org/a")], STAMP)
    with pytest.raises(ValueError, match="YYYYmmdd_HHMMSS"):
        write_reports([make_cell()], tmp_path, "2025-01-02")


def test_two_model_families_given_one_prompt_compare_though_their_chat_templates_differ() -> None:
    """Measured 2026-11-29: SmolLM2-135M and Gemma 3 270M benchmarked with prompts=working_out on three
    tasks; all 12 cells were measured, then the report refused them ("task 'basic_arithmetic' mixes
    prompt hashes"), because each cell's hash covers its model's chat template. The fairness check
    compares the prompt the user chose; each model's own hash stays in its entry."""
    prompt = PromptTemplate("{question}", system="Think, then answer.")
    smollm, gemma = prompt.hash_for("<|im_start|>{{ m }}"), prompt.hash_for("<start_of_turn>{{ m }}")
    assert smollm != gemma  # one prompt, two templates
    cells = [
        make_cell("smollm", prompt_hash=smollm, prompt_text_hash=prompt.text_hash),
        make_cell("gemma", prompt_hash=gemma, prompt_text_hash=prompt.text_hash),
    ]
    tasks, all_tasks = build_reports(cells, STAMP)
    assert tasks["basic_arithmetic"]["prompt_hash"] == prompt.text_hash
    assert {m: e["prompt_hash"] for m, e in tasks["basic_arithmetic"]["models"].items()} == {
        "smollm": smollm,
        "gemma": gemma,
    }
    assert set(all_tasks["average"]) == {"smollm", "gemma"}
    other = PromptTemplate("{question}", system="Answer at once.")
    with pytest.raises(
        ValueError, match=rf"mixes prompt hashes \(smollm: {prompt.text_hash}, gemma: {other.text_hash}\)"
    ):
        build_reports(
            [cells[0], make_cell("gemma", prompt_hash=gemma, prompt_text_hash=other.text_hash)], STAMP
        )


def test_the_benchmark_console_table_gives_each_cell_its_accuracy_interval_and_n() -> None:
    import io

    from rich.console import Console

    from rlvr.benchmark.runner import results_table

    cells = [
        make_cell("a", "t1"),  # pass@1: the mean over 2 samples of 4 questions, 50%
        make_cell("a", "t2", scores=[[0.0], [0.0]]),
        make_cell("b", "t1", scores=[[1.0], [1.0]]),
    ]
    cells[1].reused, cells[2].train_overlap = True, 2
    console = Console(file=io.StringIO(), width=200)
    console.print(results_table(cells))
    out = console.file.getvalue()
    row_a = next(line for line in out.splitlines() if "│ a " in line)
    assert (
        "50.0% [" in row_a and "n=4" in row_a and "0.0% [0%-66%] n=2*" in row_a and row_a.endswith("25.0% │")
    )
    row_b = next(line for line in out.splitlines() if "│ b " in line)
    assert "100.0% [34%-100%] n=2!" in row_b and row_b.count(" - ") == 2  # no t2 cell, so no mean


def binary_cell(model: str, task: str, right: list[int]) -> CellResult:
    return make_cell(model, task, [[float(r)] for r in right])


def test_the_average_gets_a_bootstrap_interval_from_the_per_question_records(tmp_path: Path) -> None:
    """The interval is recomputed from each cell's questions: wide for 10 questions, narrow for 400,
    and around the average, so a lying summary cannot narrow it."""
    few = [binary_cell("m/few", t, [1] * 5 + [0] * 5) for t in ("a", "b")]
    many = [binary_cell("m/many", t, [1] * 200 + [0] * 200) for t in ("a", "b")]
    _, report = build_reports([*few, *many], STAMP)
    ci = report["average_ci"]
    assert report["average"] == {"m/few": 0.5, "m/many": 0.5}
    few_lo, few_hi = ci["m/few"]["ci_low"], ci["m/few"]["ci_high"]
    many_lo, many_hi = ci["m/many"]["ci_low"], ci["m/many"]["ci_high"]
    assert few_lo < many_lo < 0.5 < many_hi < few_hi
    # 20 questions of p=0.5: sd of the mean 0.112, so a 95% interval about +-0.22
    assert few_hi - few_lo == pytest.approx(0.44, abs=0.06)
    assert many_hi - many_lo == pytest.approx(0.069, abs=0.01)  # 800 questions: sd 0.0177


def test_each_pair_of_models_is_compared_on_the_same_questions_with_mcnemar(tmp_path: Path) -> None:
    """b - a in points, its paired CI and the exact McNemar p: the training report's paired change
    (rlvr.evaluation.metrics.paired_change), not a second implementation."""
    from rlvr.evaluation.metrics import paired_change

    a = [1] * 14 + [0] * 4 + [1] * 100 + [0] * 82
    b = [0] * 14 + [1] * 4 + [1] * 100 + [0] * 82
    cells = [binary_cell("m/a", "t", a), binary_cell("m/b", "t", b), binary_cell("m/c", "t", a)]
    paths = write_reports(cells, tmp_path, STAMP)
    report = json.loads((tmp_path / "results_t.json").read_text())
    pairs = {(r["a"], r["b"]): r for r in report["paired"]}
    assert list(pairs) == [("m/a", "m/b"), ("m/a", "m/c"), ("m/b", "m/c")]
    ab = pairs[("m/a", "m/b")]
    assert ab == {"a": "m/a", "b": "m/b", **paired_change(a, b).to_dict()}
    assert (ab["right_to_wrong"], ab["wrong_to_right"], round(ab["p_value"], 4)) == (14, 4, 0.0309)
    assert pairs[("m/a", "m/c")]["delta"] == 0.0 and pairs[("m/a", "m/c")]["p_value"] == 1.0
    md = (tmp_path / "paired_comparison.md").read_text()
    assert tmp_path / "paired_comparison.md" in paths
    assert "| t | m/a | m/b | 57.0% | 52.0% | -5.0 | [-9.1, -0.9] | 14 | 4 | 0.0309 | 200 |" in md
    assert md.count("\n| t |") == 3


def test_models_on_different_questions_are_not_paired(tmp_path: Path) -> None:
    cells = [binary_cell("m/a", "t", [1, 0, 1]), binary_cell("m/b", "t", [1, 0])]
    task, _ = build_reports(cells, STAMP)
    (row,) = task["t"]["paired"]
    assert row["note"].startswith("not paired: a paired change needs the same questions")
    assert "delta" not in row


def test_one_model_writes_no_paired_table_and_removes_a_stale_one(tmp_path: Path) -> None:
    write_reports([binary_cell("m/a", "t", [1, 0]), binary_cell("m/b", "t", [0, 0])], tmp_path, STAMP)
    assert (tmp_path / "paired_comparison.md").is_file()
    write_reports([binary_cell("m/a", "t", [1, 0])], tmp_path, STAMP)
    assert not (tmp_path / "paired_comparison.md").exists()
