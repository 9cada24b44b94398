"""The run's lifecycle (rlvr.pipeline.orchestrator.Run: setup, train, cleanup) with fake components: event
order, error path, observers always closed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from tests.conftest import make_eval_result

from rlvr import events as ev
from rlvr.observers import Observer
from rlvr.pipeline import Run
from rlvr.runtime.hardware import Hardware
from rlvr.training_loop import TrainOutcome


class Recorder(Observer):
    def __init__(self):
        self.events, self.closed = [], 0

    def __getattribute__(self, name):
        if name.startswith("on_"):
            return lambda event: object.__getattribute__(self, "events").append(event)
        return object.__getattribute__(self, name)

    def close(self):
        self.closed += 1


class Broken(Observer):
    def on_stage_start(self, event):
        raise RuntimeError("observer bug")


@dataclass
class FakeData:
    tasks = ["t"]
    seed = 0
    train = ["x"]
    eval = ["y"] * 4
    manifest = {"train_question_ids": ["id-x"]}


class FakeDataComponent:
    def load(self, prompt):
        return FakeData()


class FakeModel:
    def save_pretrained(self, path):
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "weights").write_text("w")


@dataclass
class Loaded:
    model: object
    tokenizer: object
    name: str = "fake"
    quantization: str | None = None


class FakeModelComponent:
    def load(self):
        return Loaded(FakeModel(), FakeModel())


class FakeRewards:
    def check_on_gold(self, dataset):
        self.checked = dataset


class FakeEvaluator:
    baseline = True
    every_n_steps = 0
    max_examples = None

    def __init__(self, sampled=False):
        self.calls = []
        self.sampled = sampled

    def evaluate(self, model, tokenizer, dataset, label, step, out_dir, meta, progress=None):
        self.calls.append(label)
        return make_eval_result(label, step, 1, 2)

    def completions(self, result, dataset):
        return None

    def sampled_view(self):
        return self if self.sampled else None


class FakeLoop:
    hardware = Hardware("cpu", "fp32", "a test")

    def hardware_record(self):
        return self.hardware.record()

    def __init__(self, fail=False):
        self.fail = fail

    def place(self, model):
        return model

    def see_data(self, train, tokenizer):  # SFT's target: nothing to decide here
        return []

    def run(self, model, session, resume=None):
        if self.fail:
            raise RuntimeError("training exploded")
        session.emit(ev.TrainStep("grpo", 1, 1, {"grpo/reward/mean": 0.5}))
        return TrainOutcome(model=model, steps={"grpo": 1})


class FakeSFTThenGRPO(FakeLoop):
    """SFT, whose weights it hands to GRPO (reported to the session, as TrainingLoop does), then GRPO."""

    def run(self, model, session, resume=None):
        session.on_weights(model, "sft", 1, next_phase="grpo")
        return TrainOutcome(model=model, steps={"sft": 1, "grpo": 1})


class FakePrompt:
    hash = "abc123"

    def bind(self, tokenizer):  # the run binds its prompt to the loaded tokenizer (chat template)
        self.tokenizer = tokenizer


class FakeVerifier:
    closed = 0

    def close(self):
        FakeVerifier.closed += 1


def make_run(tmp_path, loop, observers):
    cfg = OmegaConf.create({"seed": 1, "keep_checkpoints": "last"})
    components = {
        "data": FakeDataComponent(),
        "model": FakeModelComponent(),
        "prompts": FakePrompt(),
        "reward": FakeRewards(),
        "verifier": FakeVerifier(),
        "training_loop": loop,
        "evaluation": FakeEvaluator(),
        **{f"observers.{name}": observer for name, observer in observers.items()},  # keyed as the gate builds
    }
    return Run(cfg, tmp_path, components)


def test_lifecycle_event_order_and_files(tmp_path):
    rec = Recorder()
    result = make_run(tmp_path, FakeLoop(), {"rec": rec, "broken": Broken()}).run()
    assert result.status == "COMPLETED"
    kinds = [(type(e).__name__, getattr(e, "stage", getattr(e, "label", ""))) for e in rec.events]
    stages = [s for k, s in kinds if k == "StageStart"]
    assert stages == [
        "data",
        "model",
        "preflight",
        "place",
        "rewards",
        "baseline_eval",
        "train",
        "final_eval",
        "save",
        "report",
    ]
    assert kinds[0][0] == "PipelineStart" and kinds[-1][0] == "PipelineEnd"
    assert rec.events[-1].status == "COMPLETED"
    assert [e.label for e in rec.events if isinstance(e, ev.EvalResult)] == ["baseline", "final"]
    assert any(isinstance(e, ev.TrainStep) for e in rec.events)
    ends = [e for e in rec.events if isinstance(e, ev.StageEnd)]
    assert all(e.seconds >= 0 and e.status == "ok" for e in ends)
    assert rec.closed == 1
    assert (tmp_path / "config_resolved.yaml").exists()
    assert (tmp_path / "final" / "weights").exists()
    # the model carries what it was trained on, so a benchmark can count overlap with its test set
    assert json.loads((tmp_path / "final" / "data_manifest.json").read_text()) == FakeData.manifest
    assert (tmp_path / "report.md").exists() and (tmp_path / "training.png").exists()
    provenance = json.loads((tmp_path / "provenance.json").read_text())
    assert provenance["prompt_hash"] == "abc123" and provenance["packages"]["torch"]
    assert provenance["git"]["commit"] is None or len(provenance["git"]["commit"]) == 40


@pytest.mark.parametrize(
    ("loop", "expected"),
    [
        (FakeSFTThenGRPO(), ["baseline", "after_sft", "after_sft_sampled", "final", "final_sampled"]),
        # no after-SFT start to pair with: the final weights are not sampled either
        (FakeLoop(), ["baseline", "final"]),
    ],
)
def test_the_grpo_stage_start_and_end_are_also_sampled(tmp_path, loop, expected):
    orch = make_run(tmp_path, loop, {})
    orch.evaluation = FakeEvaluator(sampled=True)
    orch.run()
    assert orch.evaluation.calls == expected
    report = json.loads((tmp_path / "report.json").read_text())
    assert [e["label"] for e in report["sampled"]] == [c for c in expected if c.endswith("_sampled")]


def test_failure_emits_error_then_failed_end_and_closes_everything(tmp_path):
    rec = Recorder()
    before = FakeVerifier.closed
    with pytest.raises(RuntimeError, match="training exploded"):
        make_run(tmp_path, FakeLoop(fail=True), {"rec": rec}).run()
    errors = [e for e in rec.events if isinstance(e, ev.ErrorEvent)]
    assert [e.stage for e in errors] == ["train"]
    failed = [e for e in rec.events if isinstance(e, ev.StageEnd) and e.status == "failed"]
    assert [e.stage for e in failed] == ["train"]
    assert isinstance(rec.events[-1], ev.PipelineEnd) and rec.events[-1].status == "FAILED"
    assert rec.closed == 1
    assert FakeVerifier.closed == before + 1
    # the baseline evaluation computed before the failure is kept in the metrics record
    assert [e.label for e in rec.events if isinstance(e, ev.EvalResult)] == ["baseline"]


def test_low_disk_hint_names_the_free_space_and_the_fix(tmp_path):
    from rlvr.runtime.disk import low_disk_hint

    run_dir = tmp_path / "not" / "created" / "yet"  # the nearest existing parent is measured
    assert low_disk_hint(run_dir, min_free=0) is None
    hint = low_disk_hint(run_dir, min_free=2**62)
    assert hint is not None and str(run_dir) in hint
    assert "save_total_limit" in hint and "resume=auto" in hint


def test_the_sweep_objective_is_the_final_accuracy_of_a_completed_run(tmp_path):
    from tests.conftest import make_eval_result

    from rlvr.app import objective
    from rlvr.pipeline import RunResult

    evals = [make_eval_result("baseline", 0, 10), make_eval_result("final", 9, 130)]
    assert objective(RunResult("COMPLETED", tmp_path, evals)) == 0.65
    assert objective(RunResult("FAILED", tmp_path, evals)) is None  # a failed point is no score
    assert objective(RunResult("COMPLETED", tmp_path, evals[:1])) is None
    assert objective([tmp_path]) is None  # the benchmark app


def test_other_ranks_train_but_write_nothing_and_stay_quiet(tmp_path, monkeypatch):
    """Under `accelerate launch`, rank 1 runs the training stage but no observer, file or evaluation."""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    rec = Recorder()
    orch = make_run(tmp_path / "run", FakeLoop(), {"rec": rec})
    result = orch.run()
    assert result.status == "COMPLETED" and result.evaluations == []
    assert rec.events == [] and orch.evaluation.calls == []
    assert not (tmp_path / "run").exists()


def test_a_failing_other_rank_prints_its_error_once_named_by_rank(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RuntimeError, match="training exploded"):
        make_run(tmp_path / "run", FakeLoop(fail=True), {"rec": Recorder()}).run()
    assert capsys.readouterr().err.count("[rank 1] RuntimeError: training exploded") == 1


def test_a_refusal_that_needs_the_data_comes_in_the_preflight_stage_before_the_model_is_placed(
    tmp_path, monkeypatch
):
    """The prompt-length and data-memory refusals are one named stage between loading and placing
    (a 7B placed on the card before its memory refusal would cost the card). Mutation: the checks back
    inside the model stage, or after place -> red."""
    from rlvr.issues import ConfigIssue, ConfigValidationError
    from rlvr.pipeline import orchestrator as module

    issue = ConfigIssue("data.task", "t", "a prompt is 900 tokens, the context 512", "shorter prompts")
    monkeypatch.setattr(module, "prompt_length_issues", lambda *args: [issue])
    rec, loop, placed = Recorder(), FakeLoop(), []
    loop.place = lambda model: placed.append(model) or model
    with pytest.raises(ConfigValidationError):
        make_run(tmp_path, loop, {"rec": rec}).run()
    [error] = [e for e in rec.events if isinstance(e, ev.ErrorEvent)]
    assert error.stage == "preflight" and placed == []
    assert [e.stage for e in rec.events if isinstance(e, ev.StageStart)] == ["data", "model", "preflight"]
