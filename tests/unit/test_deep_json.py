"""Deeply nested JSON in a file from elsewhere (SECURITY.md "Records read back"): one message per bad
file naming the file and the problem, never a RecursionError traceback, in ``rlvr-plot``, the sweep
report and benchmark reuse; one bad sweep point is listed as unreadable and the others still shown."""

from __future__ import annotations

import json
import logging

import pytest
from tests.unit.test_benchmark_results import make_cell
from tests.unit.test_sweep_report import complete, make_sweep

from rlvr.benchmark import plot
from rlvr.benchmark.results import CellStore
from rlvr.records.sweep_report import collect, main, to_markdown

DEEP = "[" * 200_000 + "]" * 200_000  # json.loads: RecursionError (a C stack overflow once deeper)


def test_rlvr_plot_names_a_deeply_nested_results_file(tmp_path, capsys):
    bad = tmp_path / "results_all_tasks.json"
    bad.write_text(DEEP)
    with pytest.raises(SystemExit) as ended:
        plot.main([str(bad)])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and "Traceback" not in err and "RecursionError" not in err
    assert f"{bad}: JSON nested 200000 levels deep" in err
    rename = tmp_path / "rename.json"
    rename.write_text('{"a": ' + DEEP + "}")
    with pytest.raises(plot.ReportError, match=f"--rename-file {rename}: JSON nested"):
        plot.parse_renames([], rename)


@pytest.mark.parametrize("name", ["report.json", "attempts.json", "metrics.jsonl"])
def test_one_deeply_nested_sweep_point_is_listed_as_unreadable_and_the_others_shown(tmp_path, capsys, name):
    sweep = make_sweep(tmp_path)
    if name != "metrics.jsonl":
        complete(sweep / "1", final=0.5)  # else its metrics.jsonl decides its status
    (sweep / "1" / name).write_text(DEEP if name != "metrics.jsonl" else "[" * 20_000 + "]" * 20_000 + "\n")
    points = collect(sweep)
    assert [p.status for p in points] == ["COMPLETED", "UNKNOWN", "RUNNING"]
    assert points[1].note.startswith(f"unreadable: {sweep / '1' / name}") and "nested" in points[1].note
    assert "point 1: unreadable:" in to_markdown(points)
    main([str(sweep), "--out", str(tmp_path.parent / f"out-{name}")])
    assert "Traceback" not in capsys.readouterr().err


def test_benchmark_reuse_recomputes_a_deeply_nested_cell_with_one_message(tmp_path, caplog):
    store = CellStore(tmp_path)
    cell = make_cell()
    path = store.save(cell)
    path.write_text(json.dumps({**cell.to_dict(), "run_id": None})[:-1] + ', "x": ' + DEEP + "}")
    with caplog.at_level(logging.WARNING):
        assert not store.done(cell.model, cell.task, cell.fingerprint)
        assert list(store) == []
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2 and all(f"{path}: JSON nested" in m for m in messages), messages
