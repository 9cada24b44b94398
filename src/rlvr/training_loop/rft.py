"""Rejection-sampling fine-tuning (RFT, STaR, expert iteration) as a training phase beside SFT and GRPO.

Each round samples ``samples_per_prompt`` completions for ``prompts_per_round`` training prompts
from the current weights (the run's generation backend and prompt, as evaluation generates), scores
them with the verifier that GRPO's correctness term runs, keeps the verified ones (distinct texts,
at most ``max_per_prompt`` per prompt), and fine-tunes on them for ``steps_per_round`` optimizer
steps with TRL's ``SFTTrainer``. It needs no reference answer, only the checker: the baseline for
data that has none, and a warm start of its own.

Exact resume. One optimizer and one learning-rate schedule span the phase (``rounds x
steps_per_round`` steps); each round is one epoch of its own data (its kept completions, shuffled by
the round's seed and cycled to exactly ``steps_per_round`` batches, read in order). Every round
starts by resuming from the checkpoint saved at the previous round's end, in an uninterrupted run
too, so a run killed at any checkpoint and resumed walks the same path. A checkpoint holds the
rounds it trained on (``rft_rounds.json``); one saved at a round's end also holds the next round's
samples, drawn from its weights before the checkpoint is marked complete.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from rlvr import events as ev
from rlvr.evaluation.metrics import SUCCESS_THRESHOLD
from rlvr.issues import ConfigIssue, value_issues
from rlvr.runtime.distributed import world_size
from rlvr.runtime.io import atomic_write_json
from rlvr.training_loop.checkpoints import resumed_step
from rlvr.training_loop.phase import Phase, TrainingRun, TrainOutcome, displaced_count
from rlvr.training_loop.settings import RFTNode

ROUNDS_FILE = "rft_rounds.json"
MAX_ROUND_SAMPLES = 1_000_000  # completions one round samples (prompts_per_round x samples_per_prompt)


@dataclass(frozen=True)
class RFTSettings:
    """The rounds of rejection sampling (``training_loop.rft.*`` beside the ``trl.SFTConfig`` fields);
    each key's type and bounds are the node's (rlvr.training_loop.settings.RFTNode)."""

    rounds: int  # sample-then-fine-tune rounds
    prompts_per_round: int  # training prompts sampled per round
    samples_per_prompt: int  # completions sampled per prompt (k)
    max_per_prompt: int  # verified distinct completions kept per prompt
    steps_per_round: int  # optimizer steps per round
    temperature: float  # sampling temperature (GRPO's by default)
    max_new_tokens: int  # completion budget (GRPO's by default)
    batch_size: int  # rows generated together (evaluation's by default)

    @classmethod
    def build(cls, raw: dict[str, Any], key: str) -> tuple[RFTSettings | None, list[ConfigIssue]]:
        """The settings in ``raw``, or None with the keys missing, with no issue where the node's type
        does not hold (the config gate names each key), or with the rule between them."""
        missing = [f.name for f in dataclasses.fields(cls) if raw.get(f.name) is None]
        if missing:
            return None, [
                ConfigIssue(f"{key}.{n}", None, "missing", f"set {key}.{n}=<number>") for n in missing
            ]
        if value_issues(key, raw, RFTNode, key):
            return None, []
        samples = raw["prompts_per_round"], raw["samples_per_prompt"]
        if samples[0] * samples[1] > MAX_ROUND_SAMPLES:
            return None, [
                ConfigIssue(
                    f"{key}.samples_per_prompt", samples[1],
                    f"x prompts_per_round ({samples[0]}) = {samples[0] * samples[1]:,} completions a round "
                    f"(all generated, scored and held at once); must be at most {MAX_ROUND_SAMPLES:,}",
                    f"lower {key}.samples_per_prompt or {key}.prompts_per_round",
                )
            ]  # fmt: skip
        return cls(**{f.name: raw[f.name] for f in dataclasses.fields(cls)}), []


@dataclass
class Round:
    """One round's samples: what was kept (SFT rows) and how the samples scored."""

    index: int
    rows: list[dict[str, Any]]  # {"prompt": messages, "completion": [assistant message]}
    stats: dict[str, float]

    def block(self, size: int, seed: int) -> list[dict[str, Any]]:
        """Exactly ``size`` training rows: the kept rows shuffled by ``seed``, cycled (or cut)."""
        order = list(self.rows)
        random.Random(seed).shuffle(order)
        return [order[i % len(order)] for i in range(size)]


def _normalised(text: str) -> str:
    return " ".join(text.split())


def keep_verified(
    prompts: list[Any], texts: list[list[str]], scores: list[list[float]], cap: int
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The verified completions (score >= SUCCESS_THRESHOLD), distinct per prompt (whitespace
    folded), at most ``cap`` per prompt in sample order, as SFT rows; and the round's statistics.

    >>> rows, stats = keep_verified(["p"], [["<a>1</a>", "<a>1</a> ", "<a>2</a>", "x"]], [[1.0, 1.0, 0.0, 1.0]], 5)
    >>> [r["completion"][0]["content"] for r in rows], stats["kept"], stats["sample_accuracy"]
    (['<a>1</a>', 'x'], 2.0, 0.75)
    """
    rows, verified, solved = [], 0, 0
    for prompt, own_texts, own_scores in zip(prompts, texts, scores, strict=True):
        seen: set[str] = set()
        for text, score in zip(own_texts, own_scores, strict=True):
            if score is None or score < SUCCESS_THRESHOLD:
                continue
            verified += 1
            if _normalised(text) in seen or len(seen) >= cap:
                continue
            seen.add(_normalised(text))
            rows.append({"prompt": prompt, "completion": [{"role": "assistant", "content": text}]})
        solved += bool(seen)
    total = sum(len(t) for t in texts)
    return rows, {
        "samples": float(total),
        "sample_accuracy": verified / total if total else 0.0,
        "solved_prompts_frac": solved / len(prompts) if prompts else 0.0,
        "kept": float(len(rows)),
    }


class _RoundEnd(TrainerCallback):
    """Stops a round's trainer at the round's last step with a checkpoint, samples the next round
    before that checkpoint is marked complete, and writes the rounds into every checkpoint."""

    def __init__(self, phase: RFTPhase, end_step: int, sample_next: Callable[[], None]):
        self.phase, self.end_step, self.sample_next = phase, end_step, sample_next

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.global_step >= self.end_step:
            control.should_save = True
            control.should_training_stop = True
        return control

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if not path.is_dir():
            return
        if state.global_step == self.end_step and len(self.phase.done) < self.phase.valid.rounds:
            self.sample_next()
        payload = {"rounds": [dataclasses.asdict(r) for r in self.phase.done]}
        atomic_write_json(path / ROUNDS_FILE, payload, root=path)


class RFTPhase(Phase):
    """Rounds of sampling, keeping the verified completions and fine-tuning on them (TRL ``SFTTrainer``)."""

    name, key, node_type = "rft", "training_loop.rft", RFTNode

    def __init__(
        self, fields: dict[str, Any], seed: int, hardware: Callable[[], Any], prompt: Any, rewards: Any
    ):
        own = {f.name for f in dataclasses.fields(RFTSettings)}
        super().__init__({k: v for k, v in fields.items() if k not in own}, seed, hardware)
        self.configured = dict(fields)  # the whole node, its rounds too
        self.settings, self._settings_issues = RFTSettings.build(
            {k: v for k, v in fields.items() if k in own}, self.key
        )
        self.prompt, self.rewards = prompt, rewards
        self.done: list[Round] = []  # rounds sampled so far (the last may not be trained yet)
        self._training = 0  # the round being trained

    @property
    def valid(self) -> RFTSettings:
        """The settings of a phase that runs (issues() refuses one whose settings did not build)."""
        if self.settings is None:
            raise RuntimeError(f"{self.key}: settings with issues: {self._settings_issues}")
        return self.settings

    @property
    def config_cls(self) -> type:
        from trl import SFTConfig

        return SFTConfig

    def _managed(self) -> dict[str, Any]:
        # The round blocks are shuffled by their own seed and read in order (exact resume).
        steps = self.settings.rounds * self.settings.steps_per_round if self.settings else 1
        return {"max_steps": steps, "train_sampling_strategy": "sequential"}

    def validate(self, build: bool = True) -> list[ConfigIssue]:
        owned = [
            ConfigIssue(
                f"{self.key}.{name}",
                self.trl_fields[name],
                "is set by the phase (rounds x steps_per_round steps, each round's data read in order)",
                f"remove it; set {self.key}.rounds / {self.key}.steps_per_round",
            )
            for name in ("max_steps", "train_sampling_strategy", "num_train_epochs")
            if name in self.trl_fields
        ]
        if self.trl_fields.get("save_only_model"):
            owned.append(
                ConfigIssue(
                    f"{self.key}.save_only_model", True,
                    "each round resumes the optimizer from the previous round's checkpoint",
                    f"remove {self.key}.save_only_model",
                )
            )  # fmt: skip
        if world_size() > 1:
            owned.append(
                ConfigIssue(
                    f"{self.key}.enabled", True, "the RFT phase samples and trains in one process",
                    "run it without accelerate launch (distributed=single)",
                )
            )  # fmt: skip
        if owned or self._settings_issues:
            return owned + self._settings_issues + super().validate(build=False)
        from rlvr.training_loop import packing

        issues = super().validate(build)
        if build and not issues and self.settings is not None:
            issues += packing.config_issues(self.key, self.args, rounds=True)
        if self.rewards is not None and self.rewards.success_term() is None:
            issues.append(
                ConfigIssue(
                    "reward.terms",
                    sorted(self.rewards.terms),
                    "RFT keeps the completions the task's verifier accepts, and no term runs it",
                    "add one: +reward/terms@reward.terms.correctness=correctness",
                )
            )
        return issues

    def metrics(self) -> dict[str, float]:
        """The latest trained round's sampling statistics, beside SFTTrainer's logs."""
        if not self.done:
            return {}
        current = self.done[min(self._training, len(self.done) - 1)]
        return {"round": float(current.index), **{f"round/{k}": v for k, v in current.stats.items()}}

    # -- sampling ----------------------------------------------------------------------------------
    def _round_prompts(self, dataset: Any, index: int) -> Any:
        """The training rows of round ``index``: consecutive slices of one seeded order, wrapping."""
        order = list(range(len(dataset)))
        random.Random(self.seed).shuffle(order)
        n = self.valid.prompts_per_round
        return dataset.select([order[(index * n + i) % len(order)] for i in range(n)])

    def sample(self, model: Any, run: TrainingRun, index: int) -> Round:
        """Round ``index``: sample from ``model``'s current weights, keep the verified completions."""
        from rlvr.evaluation.sampling import SamplingConfig

        s = self.valid
        if run.generator is None:
            raise ValueError(
                "training_loop.rft samples with the run's evaluation.generator, and this run has none"
            )
        rows = self._round_prompts(run.train_dataset, index)
        sampling = SamplingConfig(
            max_new_tokens=s.max_new_tokens,
            temperature=s.temperature,
            num_samples=s.samples_per_prompt,
            batch_size=s.batch_size,
            stop_strings=(self.prompt.close_tag,),
            seed=self.seed * 1_000 + index,
        )
        start = time.perf_counter()
        generator = run.generator(model, run.tokenizer, sampling)
        texts = [
            [g.text for g in gens]
            for gens in generator.generate([self.prompt.render(run.tokenizer, m) for m in rows["prompt"]])
        ]
        term = self.rewards.terms[self.rewards.success_term()]
        k = s.samples_per_prompt
        verdicts = term.verdicts(
            [t for own in texts for t in own],
            [t for t in rows["task"] for _ in range(k)],
            [e for e in rows["entry"] for _ in range(k)],
        )
        scores = [[score for _, score in verdicts[i * k : (i + 1) * k]] for i in range(len(texts))]
        kept, stats = keep_verified(list(rows["prompt"]), texts, scores, s.max_per_prompt)
        stats["sample_seconds"] = time.perf_counter() - start
        return Round(index, kept, stats)

    # -- training ----------------------------------------------------------------------------------
    def _resume_rounds(self, checkpoint: Path) -> None:
        path = checkpoint / ROUNDS_FILE
        if not path.is_file():
            raise ValueError(f"resume={checkpoint}: an RFT checkpoint without {ROUNDS_FILE}; pick another")
        self.done = [Round(**r) for r in json.loads(path.read_text())["rounds"]]

    def run(self, model: Any, run: TrainingRun, outcome: TrainOutcome, checkpoint: Path | None) -> Any:
        """Train ``model`` round by round (resuming from ``checkpoint`` if given); returns it trained.

        Each round is one :meth:`Phase.fit` (the phase runner every phase uses: its callbacks in the
        same order, the guard's reclaim, a damaged checkpoint, a checkpoint of the last step restored)
        over the round's block, ended by :class:`_RoundEnd` at the round's last step; the phase ends
        with :meth:`Phase.settle` (its PhaseEnd and the stop rules) against the end of the last round
        it trained: a round that reached its end is not stopped early, one the guard stopped is
        preempted, one something else stopped is StoppedEarly."""
        s = self.valid
        total = s.rounds * s.steps_per_round
        said = displaced_count(run)
        self.done, self._training = [], 0
        step = 0
        if checkpoint is not None:
            self._resume_rounds(checkpoint)
            step = resumed_step(checkpoint, self.name, total)  # its trainer state's, not its folder name
        else:
            self._add_round(self.sample(model, run, 0))
        outcome.steps[self.name], outcome.seconds[self.name] = step, 0.0
        end = step  # the last step of the round trained last
        while True:
            # A checkpoint of the phase's last step: its last round, restored by fit, not trained.
            index = min(step // s.steps_per_round, s.rounds - 1)
            if not self.done[index].rows:
                self._kept_nothing(run, outcome, step, total, self.done[index])
                break
            self._training, end = index, (index + 1) * s.steps_per_round
            round_end = _RoundEnd(self, end, partial(self._sample_next, model, run, index + 1))
            model, _ = self.fit(model, run, outcome, checkpoint, own=[round_end])
            step = outcome.steps[self.name]
            # Every round resumes from the previous round's last checkpoint, in an uninterrupted run too.
            checkpoint = run.run_dir / "checkpoints" / self.name / f"checkpoint-{step}"
            if step < end or step >= total or (run.guard is not None and run.guard.stopping):
                break  # the phase's end, or a stop (settle tells the pipeline's from another)
        self.settle(run, outcome, end, total, said)
        return model

    def _kept_nothing(
        self, run: TrainingRun, outcome: TrainOutcome, step: int, total: int, current: Round
    ) -> None:
        """A round with no verified sample: the phase stops there, with a warning (not a fault)."""
        fix = "warm start with SFT (or RFT from a model that answers in the format), or use an easier task"
        samples = int(current.stats["samples"])
        run.emit(
            ev.RunWarning(
                f"rft round {current.index}: none of {samples} samples was verified, so the phase "
                f"stops here; {fix}",
                step=step,
            )
        )
        outcome.stopped[self.name] = (
            f"RFT stopped at step {step} of {total}: round {current.index} kept none of its {samples} "
            f"samples (none was verified). Fix: {fix}"
        )

    def _sample_next(self, model: Any, run: TrainingRun, index: int) -> None:
        self._add_round(self.sample(model, run, index))

    def _add_round(self, sampled: Round) -> None:
        self.done.append(sampled)
        print(_round_line(sampled), flush=True)  # the console's line per round; metrics carry the numbers

    def trainer(self, model: Any, args: Any, run: TrainingRun, callbacks: list[Any]) -> Any:
        """An SFTTrainer over the block of the round being trained (``self._training``): its kept rows,
        shuffled by the round's seed and cycled to exactly ``steps_per_round`` batches."""
        from datasets import Dataset

        from rlvr.training_loop.sft_loss import RLVRSFTTrainer

        s, index = self.valid, self._training
        batch = args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
        data = Dataset.from_list(self.done[index].block(s.steps_per_round * batch, self.seed * 1_000 + index))
        return RLVRSFTTrainer(
            model=model,
            args=args,
            train_dataset=data,
            processing_class=run.tokenizer,
            callbacks=callbacks,
        )


def _round_line(r: Round) -> str:
    s = r.stats
    return (
        f"rft round {r.index}: {int(s['samples'])} samples, {s['sample_accuracy']:.1%} verified, "
        f"{s['solved_prompts_frac']:.0%} of prompts solved, {int(s['kept'])} kept"
    )
