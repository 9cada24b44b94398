"""Rejection-sampling fine-tuning: what a round keeps, and what each stage needs from the data."""

from __future__ import annotations

import json
import os
import signal

import pytest
import reasoning_gym
from tests.conftest import make_loop, verifier_pool
from tests.stand_in_run import StandInRun
from transformers import TrainerCallback

from rlvr.data import ReasoningGymData, references
from rlvr.evaluation.generation import Generation
from rlvr.prompts import PromptTemplate
from rlvr.reward import CorrectnessReward, RewardSet
from rlvr.training_loop.rft import RFTPhase

PROMPT = PromptTemplate(instruction="{question}\nAnswer inside <answer></answer>.")
RFT = {
    "enabled": True,
    "rounds": 1,
    "prompts_per_round": 2,
    "samples_per_prompt": 5,
    "max_per_prompt": 2,
    "steps_per_round": 1,
    "temperature": 1.0,
    "max_new_tokens": 32,
    "batch_size": 8,
}


class Replay:
    """A generation backend that returns given completions (the model is not what is tested here:
    the prompts, the verifier, the keeping rule are the real ones)."""

    def __init__(self, texts: list[list[str]]):
        self.texts, self.prompts = texts, []

    def __call__(self, model, tokenizer, sampling):
        assert sampling.num_samples == RFT["samples_per_prompt"] and sampling.stop_strings == ("</answer>",)
        return self

    def generate(self, prompts, progress=None):
        self.prompts = list(prompts)
        return [[Generation(t, 1, True) for t in own] for own in self.texts]


class ChatTokenizer:
    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
        return "\n".join(m["content"] for m in messages) + "\nassistant:"


def _countdown(n: int) -> list[dict]:
    data = reasoning_gym.create_dataset("countdown", size=n, seed=3)
    return [json.loads(json.dumps(data[i], default=list)) for i in range(n)]


def test_a_round_keeps_only_verified_distinct_completions_capped_per_prompt():
    """countdown accepts any valid expression: the reference and another valid one are kept; a
    repeat (whitespace aside), a wrong and an unformatted answer are not, and the cap holds."""
    from datasets import Dataset

    entries = _countdown(2)
    a, b = (e["answer"] for e in entries)
    wrong = f"{a} + 1"  # uses a number the question does not give
    texts = [
        [f"<answer>{a}</answer>", f"<answer>{wrong}</answer>", f"<answer>{a.replace(' ', '  ')}</answer> ", a,
         f"<answer>({a})</answer>"],
        [f"<answer>{wrong}</answer>", f"<answer>({b})</answer>", f"<answer>{b}</answer>", f"<answer>(({b}))</answer>",
         "x"],
    ]  # fmt: skip
    expected = {
        entries[0]["question"]: [f"<answer>{a}</answer>", f"<answer>({a})</answer>"],
        entries[1]["question"]: [f"<answer>({b})</answer>", f"<answer>{b}</answer>"],  # cap 2: ((b)) left out
    }
    dataset = Dataset.from_dict(
        {
            "prompt": [PROMPT.messages(e["question"]) for e in entries],
            "task": ["countdown"] * 2,
            "entry": [json.dumps(e) for e in entries],
        }
    )
    with verifier_pool(num_workers=0) as pool:
        correctness = CorrectnessReward(1.0, partial_credit=False, prompt=PROMPT, verifier=pool)
        rewards = RewardSet(
            {"correctness": correctness},
            prompt=PROMPT,
            verifier=pool,
            plugin_timeout_s=60.0,
            completions_per_step=0,
            seed=0,
        )
        phase = RFTPhase(RFT, 0, lambda: None, PROMPT, rewards)
        order = phase._round_prompts(dataset, 0)["prompt"]  # the round's seeded order of prompts
        replay = Replay([texts[dataset["prompt"].index(m)] for m in order])
        session = StandInRun(ChatTokenizer(), dataset, print, lambda *a, **k: None, 0, None, generator=replay)
        sampled = phase.sample(None, session, 0)
    # the prompts were rendered by the run's prompt object
    assert replay.prompts == [PROMPT.render(ChatTokenizer(), m) for m in order]
    kept: dict[str, list[str]] = {}
    for row in sampled.rows:
        question = row["prompt"][0]["content"].split("\nAnswer inside")[0]
        kept.setdefault(question, []).append(row["completion"][0]["content"])
    assert kept == expected
    assert sampled.stats["samples"] == 10.0
    assert sampled.stats["sample_accuracy"] == pytest.approx(6 / 10)  # 3 + 3 verified
    assert sampled.stats["kept"] == 4.0 and sampled.stats["solved_prompts_frac"] == 1.0


def test_round_block_cycles_the_kept_rows_to_exactly_the_steps_batches():
    from rlvr.training_loop.rft import Round

    r = Round(0, [{"i": 0}, {"i": 1}, {"i": 2}], {})
    block = r.block(8, seed=5)
    assert len(block) == 8 and block == r.block(8, seed=5)
    assert block[:3] == block[3:6] and sorted(b["i"] for b in block[:3]) == [0, 1, 2]  # whole passes
    assert len(r.block(2, seed=5)) == 2


def test_rft_settings_are_checked_with_key_value_and_fix():
    """The rounds' bounds are the RFT node's type, bound by the config gate; the keys the phase sets
    itself are refused by the phase."""
    from tests.conftest import compose_config

    from rlvr.config.validation import check_targets
    from rlvr.pipeline.wiring import runtime_args

    cfg = compose_config(["training_loop=rft", "training_loop.rft.rounds=0"])
    [bound] = [i for i in check_targets(cfg, runtime_args(cfg)) if i.key.startswith("training_loop")]
    assert (bound.key, bound.value, bound.problem) == ("training_loop.rft.rounds", 0, "must be >= 1")
    loop = make_loop(sft={}, rft={**RFT, "max_steps": 5}, grpo={}, device="cpu")
    issues = {i.key: i for i in loop.validate()}
    assert "rounds x steps_per_round" in issues["training_loop.rft.max_steps"].problem
    assert "training_loop.rft.steps_per_round" not in issues


def test_verifier_only_task_refuses_sft_and_leaves_rft_and_grpo_alone():
    """graph_color has no reference answer (reasoning-gym gives None): SFT is refused, naming the fix."""
    colour = ReasoningGymData("graph_color", 8, 4, 42, None, None)
    arithmetic = ReasoningGymData("basic_arithmetic", 8, 4, 42, None, None)
    assert colour.tasks_without_references() == ["graph_color"]
    assert arithmetic.tasks_without_references() == []
    with_sft = make_loop(sft={}, grpo={}, device="cpu")
    (issue,) = references.stage_issues(colour, with_sft)
    assert issue.key == "training_loop.sft.enabled" and "graph_color" in issue.problem
    assert "training_loop=rft_grpo" in issue.fix and "training_loop.sft.enabled=false" in issue.fix
    assert references.stage_issues(arithmetic, with_sft) == []
    no_sft = make_loop(sft={"enabled": False}, rft=RFT, grpo={}, device="cpu")
    assert references.stage_issues(colour, no_sft) == []


def test_rows_without_a_reference_keep_none_not_the_string_none():
    colour = ReasoningGymData("graph_color", 8, 4, 42, None, None).load(PROMPT)
    assert set(colour.train["answer"]) == {None} and set(colour.eval["answer"]) == {None}


# -- the rounds run through the one phase runner (issue 57, item 3) -------------------------------------
# A real RFT phase of the tiny model: real prompts rendered with its tokenizer, the real countdown
# verifier (in process), TRL's SFTTrainer; only the sampling backend answers each prompt with its own
# reference (a random tiny model would keep nothing).
ROUNDS = {**RFT, "rounds": 2, "steps_per_round": 2, "per_device_train_batch_size": 2,
          "learning_rate": 1e-3, "logging_steps": 1, "save_steps": 1}  # fmt: skip


class AtStepThree(TrainerCallback):
    def __init__(self, act):
        self.act = act

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == 2:  # steps done: this is step 3
            self.act(control)


class Answers:
    """A generation backend whose every sample is the prompt's reference answer, inside the markers."""

    def __init__(self, tokenizer, entries):
        self.answers = {
            PROMPT.render(tokenizer, PROMPT.messages(e["question"])): e["answer"] for e in entries
        }

    def __call__(self, model, tokenizer, sampling):
        self.k = sampling.num_samples
        return self

    def generate(self, prompts, progress=None):
        return [[Generation(f"<answer>{self.answers[p]}</answer>", 8, True)] * self.k for p in prompts]


@pytest.fixture
def phases(tmp_path):
    """run(rft_or_sft, run_dir, checkpoint=None): the phase run by rlvr's TrainingLoop under the
    pipeline's guard; returns (the event list, the rlvr callbacks of each trainer built, by class name)."""
    import datasets
    from tests.conftest import SIGNAL, tiny_model

    from rlvr.training_loop import TrainingLoop
    from rlvr.training_loop.checkpoints import PreemptionGuard

    tokenizer = tiny_model().load().tokenizer
    entries = _countdown(4)
    rows = {
        "prompt": [PROMPT.messages(e["question"]) for e in entries],
        "answer": [e["answer"] for e in entries],
        "task": ["countdown"] * len(entries),
        "entry": [json.dumps(e) for e in entries],
    }
    with verifier_pool(num_workers=0) as pool:
        correctness = CorrectnessReward(1.0, partial_credit=False, prompt=PROMPT, verifier=pool)
        rewards = RewardSet({"correctness": correctness}, prompt=PROMPT, verifier=pool, plugin_timeout_s=60.0,
                            completions_per_step=0, seed=0)  # fmt: skip

        def run(which, run_dir, checkpoint=None, act=None, **fields):
            """``act(control)``: done by a callback at the start of the phase's step 3 (RFT: the first
            step of round 1), added to each trainer after the pipeline's (as a library's would be)."""
            nodes = {"sft": {"enabled": False}, "rft": {"enabled": False}, "grpo": {"enabled": False}}
            nodes[which] = {**(ROUNDS if which == "rft" else SFT_STEPS), **fields}
            loop = TrainingLoop(**nodes, signal=SIGNAL, seed=0, device="auto", precision="auto",
                                prompt=PROMPT, rewards=rewards)  # fmt: skip
            events, trainers = [], []
            loaded = tiny_model().load()  # fresh weights each run (a resumed run loads its checkpoint's)

            def attach(trainer):
                trainers.append([type(c).__name__ for c in trainer.callback_handler.callbacks
                                 if type(c).__module__.startswith("rlvr.")])  # fmt: skip
                if act is not None:
                    trainer.add_callback(AtStepThree(act))

            session = StandInRun(
                tokenizer=loaded.tokenizer,
                train_dataset=datasets.Dataset.from_dict(rows),
                emit=events.append,
                on_weights=lambda *a, **k: None,
                eval_every=0,
                run_dir=run_dir,
                guard=PreemptionGuard(),
                attach=attach,
                generator=Answers(tokenizer, entries),
            )
            before = signal.getsignal(signal.SIGTERM)
            try:
                with session.guard:
                    outcome = loop.run(
                        loaded.model, session, resume=(which, checkpoint) if checkpoint else None
                    )
            finally:
                signal.signal(signal.SIGTERM, before)
            return events, trainers, outcome

        yield run


SFT_STEPS = {"max_steps": 2, "per_device_train_batch_size": 2, "learning_rate": 1e-3, "logging_steps": 1,
             "save_steps": 1}  # fmt: skip


def test_each_rounds_trainer_gets_the_callbacks_of_a_plain_phase_in_the_same_order(phases, tmp_path):
    """Every round's SFTTrainer is built by the one phase runner (Phase.fit): the pipeline's callbacks
    in a plain phase's order, the round's end among the phase's own, before the guard, and the guard
    before CompletionMarker (a save the guard asks for at a step saved before drops that step's old
    marker first). A round that ends at its own steps_per_round is not stopped early: the phase
    completes with one PhaseEnd. Mutation: rft.py's old order (marker, then guard) -> red."""
    from rlvr import events as ev

    _, [sft], _ = phases("sft", tmp_path / "sft")
    assert sft == ["EventBridge", "PreemptionGuard", "CompletionMarker"]
    events, rounds, _ = phases("rft", tmp_path / "rft")
    assert len(rounds) == ROUNDS["rounds"]
    for callbacks in rounds:
        assert callbacks == ["EventBridge", "_RoundEnd", "PreemptionGuard", "CompletionMarker"]
        assert [c for c in callbacks if c != "_RoundEnd"] == sft
    ends = [e for e in events if isinstance(e, ev.PhaseEnd)]
    assert [(e.phase, e.steps, e.max_steps) for e in ends] == [("rft", 4, 4)]
    assert (tmp_path / "rft" / "checkpoints" / "rft" / "checkpoint-4" / "COMPLETE").is_file()


def _damage_optimizer(checkpoint):
    """The same number of bytes, none of them a torch file: the marker's file list still holds."""
    optimizer = checkpoint / "optimizer.pt"
    optimizer.write_bytes(b"\0" * optimizer.stat().st_size)


def test_a_checkpoint_that_fails_to_load_in_an_rft_round_is_checkpoint_damaged_as_in_a_phase(
    phases, tmp_path
):
    """A checkpoint whose files pass the completeness check but whose optimizer state cannot be loaded:
    resuming RFT from it raises CheckpointDamaged with the message a plain phase gives (which
    checkpoint, continue from an older one), not the loader's own exception. Mutation: RFT's old round
    runner (trainer.train called directly, no _Started/CheckpointDamaged) -> red."""
    from rlvr.runtime.faults import CheckpointDamaged

    found = {}
    for which in ("sft", "rft"):
        run_dir = tmp_path / which
        phases(which, run_dir)
        checkpoint = run_dir / "checkpoints" / which / "checkpoint-1"  # inside the phase (RFT: round 0)
        _damage_optimizer(checkpoint)
        with pytest.raises(CheckpointDamaged) as damaged:
            phases(which, run_dir, checkpoint)
        found[which] = str(damaged.value).replace(str(run_dir / "checkpoints" / which), "<folder>")
        assert found[which].startswith("checkpoint <folder>/checkpoint-1 could not be loaded (")
        assert "Continue from an older one with resume=<its path>" in found[which]
    assert found["rft"].split(" (")[0] == found["sft"].split(" (")[0]


def test_a_round_stopped_by_sigterm_is_preempted_and_one_stopped_by_another_callback_is_stopped_early(
    phases, tmp_path
):
    """The stop rules of every phase hold in a round: SIGTERM in round 1 (step 3 of its steps 3-4)
    saves and marks step 3 and ends the run PREEMPTED; a callback that stops the trainer there (as a
    library's would) gives a marked checkpoint-3 and StoppedEarly (INTERRUPTED, resumable), not a
    phase that looks finished. Mutation: RFT's old round runner (no settle) -> the second run returns
    as if RFT were done -> red."""
    from rlvr.runtime.faults import StoppedEarly
    from rlvr.training_loop.checkpoints import MARKER, Preempted

    with pytest.raises(Preempted, match="stopped by SIGTERM during rft at step 3; checkpoint saved"):
        phases("rft", tmp_path / "term", act=lambda control: os.kill(os.getpid(), signal.SIGTERM))
    assert (tmp_path / "term" / "checkpoints" / "rft" / "checkpoint-3" / MARKER).is_file()

    def stop(control):
        control.should_training_stop = True

    with pytest.raises(StoppedEarly) as early:
        phases("rft", tmp_path / "early", act=stop)
    assert "training_loop.rft stopped at step 3 of 4" in str(early.value)
    assert "resume=auto continues from" in str(early.value) and "checkpoint-3" in str(early.value)
    assert (tmp_path / "early" / "checkpoints" / "rft" / "checkpoint-3" / MARKER).is_file()


def test_rft_resumed_from_its_last_steps_checkpoint_loads_its_weights_and_trains_nothing(phases, tmp_path):
    """The phase runner restores a checkpoint of the phase's last step (rft_grpo resumed after RFT
    ended hands GRPO RFT's weights). Mutation: RFT's old round runner (no round left: nothing run, the
    fresh weights handed on) -> red."""
    from safetensors.torch import load_file

    from rlvr import events as ev

    phases("rft", tmp_path)
    last = tmp_path / "checkpoints" / "rft" / "checkpoint-4"
    events, trainers, outcome = phases("rft", tmp_path, last)
    saved = load_file(last / "model.safetensors")
    weights = outcome.model.state_dict()
    assert max((weights[k] - saved[k]).abs().max().item() for k in saved) == 0.0
    assert not [e for e in events if isinstance(e, ev.TrainStep)]
    ends = [(e.phase, e.steps, e.max_steps) for e in events if isinstance(e, ev.PhaseEnd)]
    assert ends == [("rft", 4, 4)] and outcome.steps == {"rft": 4}
