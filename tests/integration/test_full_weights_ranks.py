"""Two real ranks (gloo, torch.multiprocessing.spawn): a failure on rank 0 ends every rank with one
error; the full-weights rules are unit tests in tests/unit/test_full_weights.py."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
import torch
from tests.unit.test_full_weights import FSDP

from rlvr.runtime.distributed import Distributed, peer_lost

pytestmark = pytest.mark.integration


def _rank(rank: int, store_dir: str, out_dir: str) -> None:
    import torch.distributed as dist

    os.environ.update(RANK=str(rank), WORLD_SIZE="2")
    store = dist.FileStore(os.path.join(store_dir, "store"), 2)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    setup = Distributed(FSDP)
    outcome = {}
    for case in ("ok", "fails"):

        def work(full, case=case):
            if case == "fails":
                raise ValueError("the evaluator broke")
            return "done"

        try:
            outcome[case] = ["returned", setup.on_rank0(torch.nn.Linear(2, 2), work, "evaluating final")]
        except Exception as exc:
            outcome[case] = [type(exc).__name__, str(exc), peer_lost(exc)]
    dist.destroy_process_group()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(outcome))


def test_a_failure_on_rank0_ends_every_rank_with_one_error(tmp_path):
    """Two real processes (gloo): the other rank waits for rank 0's verdict, and when rank 0's work
    fails it stops with RankZeroFailed naming the cause (not printed again: rank 0 prints it)."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as store:
        mp.spawn(_rank, args=(store, str(tmp_path)), nprocs=2, join=True)
    rank0 = json.loads((tmp_path / "rank0.json").read_text())
    rank1 = json.loads((tmp_path / "rank1.json").read_text())
    assert rank0["ok"] == ["returned", "done"] and rank1["ok"] == ["returned", None]
    assert rank0["fails"] == ["ValueError", "the evaluator broke", False]
    assert rank1["fails"] == [
        "RankZeroFailed",
        "rank 0 failed while evaluating final: ValueError: the evaluator broke",
        True,
    ]
