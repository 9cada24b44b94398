"""The stop belongs to the pipeline (issue 55, finding 1): no setting and no library may take SIGTERM
from rlvr's PreemptionGuard, and a phase that ended before its max_steps is never a clean COMPLETED.

transformers' ``enable_jit_checkpoint`` (a TrainingArguments field) puts its own SIGTERM handler in
place when the Trainer is built: a SIGTERM in the middle of training then ended the phase the
library's way (after its 3 s wait, with an unmarked checkpoint), the run ended COMPLETED with exit 0
after a fraction of its steps, and ``resume=auto`` found nothing to resume. These tests train a real
SFT phase of the tiny model (rlvr's own TrainingLoop, transformers' own Trainer) and deliver real
signals to this process with ``os.kill``."""

from __future__ import annotations

import json
import os
import signal

import pytest
from tests.conftest import make_loop, tiny_model
from tests.stand_in_run import StandInRun
from transformers import TrainerCallback

from rlvr import events as ev
from rlvr.prompts import PromptTemplate
from rlvr.runtime.faults import StoppedEarly
from rlvr.training_loop.checkpoints import MARKER, Preempted, PreemptionGuard, latest_checkpoint
from rlvr.training_loop.loop import SFTPhase

MAX_STEPS = 6
SFT = {"max_steps": MAX_STEPS, "per_device_train_batch_size": 2, "learning_rate": 1e-3, "logging_steps": 1,
       "save_strategy": "no"}  # fmt: skip


class AtStep(TrainerCallback):
    """Does ``act(control)`` at the end of step ``step``, and optionally puts a library's own handler on
    SIGTERM at the end of step ``install_at`` (after the guard's check before that step)."""

    def __init__(self, step, act, install_at=None):
        self.step, self.act, self.install_at = step, act, install_at
        self.swallowed: list[int] = []

    def _library_handler(self, signum, frame):  # a library's handler: notes the signal, stops nothing
        self.swallowed.append(signum)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.install_at:
            signal.signal(signal.SIGTERM, self._library_handler)
        if state.global_step == self.step:
            self.act(control)


def sigterm(control):
    os.kill(os.getpid(), signal.SIGTERM)  # delivered to this process; Python runs its handler at once


def stop_the_trainer(control):  # what a library's callback does (JIT checkpointing, early stopping)
    control.should_training_stop = True


@pytest.fixture
def train(tmp_path, monkeypatch):
    """Runs the SFT phase with ``extra`` fields and the callback ``cb``, under the pipeline's guard;
    returns (the exception it ended with, the events, the guard). SIGTERM's handling is restored after."""
    loaded = tiny_model().load()
    prompt = PromptTemplate("{question}")
    rows = [{"prompt": prompt.messages(f"{i}+1"), "answer": str(i + 1)} for i in range(16)]
    before = signal.getsignal(signal.SIGTERM)

    def run(cb, **extra):
        import datasets

        monkeypatch.setattr(SFTPhase, "callbacks", lambda self, session, checkpoint: [cb])
        events: list = []
        guard = PreemptionGuard()
        session = StandInRun(
            tokenizer=loaded.tokenizer,
            train_dataset=datasets.Dataset.from_list(rows),
            emit=events.append,
            on_weights=lambda *a, **k: None,
            eval_every=0,
            run_dir=tmp_path,
            guard=guard,
        )
        loop = make_loop(sft={**SFT, **extra}, grpo={"enabled": False})
        try:
            with guard, pytest.raises((Preempted, StoppedEarly)) as ended:
                loop.run(loaded.model, session)
        finally:
            signal.signal(signal.SIGTERM, before)
        return ended.value, events, guard

    return run


def _saved_and_found(run_dir, step):
    ckpt = run_dir / "checkpoints" / "sft" / f"checkpoint-{step}"
    assert (ckpt / MARKER).is_file()  # complete: resume considers it
    assert latest_checkpoint(run_dir) == ("sft", ckpt)  # what resume=auto continues from


def test_a_sigterm_stops_the_run_the_pipelines_way_with_transformers_jit_checkpointing_on(tmp_path, train):
    """The real library feature: ``enable_jit_checkpoint=true`` in the phase's fields (the gate refuses
    it from a file; a library that installs its own handler anyway is the claim). Mutation: no
    ``reclaim`` (guard and phase) -> the SIGTERM goes to transformers' handler, the phase trains on
    or stops the library's way -> not Preempted -> red."""
    import dataclasses

    from transformers import TrainingArguments

    assert "enable_jit_checkpoint" in {f.name for f in dataclasses.fields(TrainingArguments)}
    ended, events, guard = train(AtStep(2, sigterm), enable_jit_checkpoint=True)
    assert isinstance(ended, Preempted) and ended.signum == signal.SIGTERM, ended
    assert "stopped by SIGTERM during sft at step 2; checkpoint saved" in str(ended)
    _saved_and_found(tmp_path, 2)
    assert guard.displaced == [
        "SIGTERM: transformers.trainer_jit_checkpoint.CheckpointManager._sigterm_handler"
    ]
    warnings = [e.message for e in events if isinstance(e, ev.RunWarning)]
    assert any(
        "CheckpointManager._sigterm_handler replaced the pipeline's stop handler" in w for w in warnings
    )


def test_a_handler_a_library_installs_in_the_middle_of_a_phase_is_taken_back_before_the_next_step(
    tmp_path, train
):
    """A library's handler put on SIGTERM after step 1 (past the check at the phase's start) is taken
    back before step 2 begins; the SIGTERM of step 3 is the pipeline's. Mutation: no reclaim in
    ``PreemptionGuard.on_step_begin`` -> the library's handler swallows it -> red."""
    cb = AtStep(3, sigterm, install_at=1)
    ended, events, guard = train(cb)
    assert isinstance(ended, Preempted) and "at step 3" in str(ended), ended
    assert cb.swallowed == []
    _saved_and_found(tmp_path, 3)
    assert len(guard.displaced) == 1 and "AtStep._library_handler" in guard.displaced[0]


def test_a_phase_a_library_stops_before_its_max_steps_is_interrupted_not_completed(tmp_path, train):
    """No signal: a callback stops the trainer at step 2 of 6 (as JIT checkpointing's callback does).
    The phase is INTERRUPTED with a checkpoint of step 2 that resume=auto finds. Mutations: no
    ``stop_unless_finished`` in Phase.run -> the loop returns as if SFT were done -> red; no save in
    ``PreemptionGuard.on_step_end`` for a stop it did not ask for -> no checkpoint-2 -> red."""
    ended, _, guard = train(AtStep(2, stop_the_trainer))
    assert isinstance(ended, StoppedEarly) and ended.status == "INTERRUPTED", ended
    message = str(ended)
    assert "training_loop.sft stopped at step 2 of 6" in message and "not COMPLETED" in message
    assert "resume=auto" in message and "checkpoint-2" in message
    assert not guard.requested and guard.displaced == []
    _saved_and_found(tmp_path, 2)


def test_a_run_whose_phase_stopped_early_ends_interrupted_and_resume_auto_has_something_to_do(tmp_path):
    """The run's end status is the fault's: INTERRUPTED in attempts.json and the pipeline's end,
    so ``resume=auto`` does not say "nothing to resume". Mutation: the run ignoring
    ``fault.status`` (FAILED) -> red."""
    from omegaconf import OmegaConf
    from tests.unit.test_orchestrator import FakeLoop, Recorder, make_run

    from rlvr.training_loop.resume import finished_run

    class StoppedLoop(FakeLoop):
        def run(self, model, session, resume=None):
            raise StoppedEarly("training_loop.grpo stopped at step 2 of 6, and not by the pipeline's stop")

    rec = Recorder()
    with pytest.raises(StoppedEarly):
        make_run(tmp_path, StoppedLoop(), {"rec": rec}).run()
    assert isinstance(rec.events[-1], ev.PipelineEnd) and rec.events[-1].status == "INTERRUPTED"
    assert json.loads((tmp_path / "attempts.json").read_text())[-1]["status"] == "INTERRUPTED"
    assert finished_run(OmegaConf.create({"resume": "auto"}), tmp_path) is None
