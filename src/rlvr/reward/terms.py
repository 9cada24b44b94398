"""Reward terms: plain callables ``(completions, **dataset_columns) -> list[float]`` as TRL expects.

Each term has a ``weight``; the RewardSet hands TRL the functions and the weights
(``GRPOConfig.reward_weights``). Every term is constructed with the run's shared
PromptTemplate (``prompt``) and verifier sandbox (``verifier``), which the orchestrator
passes at instantiation beside the YAML values, so extraction and scoring are the
same objects that evaluation uses and a term is usable as soon as it exists.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field

from rlvr import events as ev
from rlvr.evaluation.metrics import SUCCESS_THRESHOLD
from rlvr.issues import ConfigIssue
from rlvr.prompts import PromptTemplate
from rlvr.reward.timeout import Deadline, plugin_module
from rlvr.verifier.sandbox import Scorer

if TYPE_CHECKING:
    import torch

# The ceiling of reward.plugin_timeout_s: a call is one generation batch of one term.
MAX_TIMEOUT_S = 3600.0


def completion_text(completion: Any) -> str:
    """TRL passes a string (standard format) or a list of messages (conversational format)."""
    if isinstance(completion, str):
        return completion
    return completion[-1]["content"] if completion else ""


class _Term:
    """Base of the reward terms: a weight, the run's prompt and its verifier (the sandbox).

    Subclasses with options of their own pass the collaborators (prompt, verifier) on to it.

    Args:
        weight: weight of this term in the summed reward (``reward.terms.<name>.weight``).
        prompt: the run's PromptTemplate (answer markers, extraction); passed at instantiation.
        verifier: the run's verifier sandbox, for terms that run the task's verifier.
    """

    name = "term"
    # Each subclass is a TRL reward function: (completions, **dataset columns) -> a value per completion.
    __call__: Callable[..., Any]

    def __init__(self, weight: float, *, prompt: PromptTemplate, verifier: Scorer | None = None):
        self.weight = float(weight)
        self.prompt = prompt
        self.verifier = verifier
        # TRL logs each reward under the function's __name__.
        self.__name__ = self.name

    def validate(self, key: str) -> list[ConfigIssue]:
        return []


class CorrectnessReward(_Term):
    """Score of the task's own verifier (reasoning-gym ``score_answer``) on the extracted answer.

    Args:
        weight: weight of this term in the summed reward.
        partial_credit: pass the verifier's score through as is. Off by default: the reward is
            1.0 when the score reaches the evaluation's success threshold, else 0.0, so GRPO
            optimises the metric the evaluation reports. reasoning-gym's generic verifier gives
            ``len(gold) / len(answer)`` when the gold answer is a substring of the answer, so
            with partial credit ``-3`` for a gold ``3`` earns 0.5 and sign errors are rewarded.

    A missing answer, a verifier error or a timeout gives the sandbox's failure reward
    (counted in the sandbox counters), never a crash.
    """

    name = "correctness"

    def __init__(
        self, weight: float, partial_credit: bool, *, prompt: PromptTemplate, verifier: Scorer | None = None
    ):
        super().__init__(weight, prompt=prompt, verifier=verifier)
        if self.verifier is None:
            raise ValueError("CorrectnessReward needs a verifier (the sandbox that runs the task's check)")
        self.partial_credit = partial_credit

    def verdicts(
        self, completions: list[Any], task: list[str], entry: list[str]
    ) -> list[tuple[str | None, float]]:
        """(extracted answer, verifier score) per completion, scored in the verifier sandbox."""
        from rlvr.verifier import ScoreRequest

        answers = [self.prompt.extract(completion_text(c)) for c in completions]
        requests = [
            ScoreRequest(task=t, answer=a, entry=json.loads(e))
            for a, t, e in zip(answers, task, entry, strict=True)
        ]
        assert self.verifier is not None  # __init__ refuses a CorrectnessReward without one
        scores = [s.value for s in self.verifier.score(requests)]
        # The verifier's verdicts of the latest batch: a curriculum reads its success rate here
        # (RewardSet.accepted) instead of scoring every completion a second time.
        self.last_scores = scores
        return list(zip(answers, scores, strict=True))

    def __call__(self, completions: list[Any], task: list[str], entry: list[str], **_: Any) -> list[float]:
        values = [v for _, v in self.verdicts(completions, task, entry)]
        if self.partial_credit:
            return values
        return [1.0 if v >= SUCCESS_THRESHOLD else 0.0 for v in values]


class FormatReward(_Term):
    """Strict format: 1.0 when the completion is exactly the template's shape, else 0.0.

    The shape: for a family with reasoning markers, the reasoning block first (nothing before
    it), then the answer block; without them, any text, then the answer block. Each marker
    exactly once, a non-empty answer, nothing but whitespace after the answer's end marker.

    >>> r = FormatReward(1.0, prompt=PromptTemplate("{question}"))
    >>> r(["<answer>4</answer>", "4", "<answer>4</answer> trailing", "<answer></answer>"])
    [1.0, 0.0, 0.0, 0.0]
    >>> t = PromptTemplate("{question}", reasoning_start="<think>", reasoning_end="</think>")
    >>> FormatReward(1.0, prompt=t)(["<think>2+2</think><answer>4</answer>", "<answer>4</answer>"])
    [1.0, 0.0]
    """

    name = "format"

    @staticmethod
    def pattern(prompt: PromptTemplate) -> re.Pattern[str]:
        a, b = re.escape(prompt.answer_start), re.escape(prompt.answer_end)
        if prompt.reasoning_start is None:
            lead = rf"(?:(?!{a}).)*"  # free text before the answer
        else:
            r, s = re.escape(prompt.reasoning_start), re.escape(prompt.reasoning_end or "")
            lead = rf"\s*{r}(?:(?!{r}|{s}).)*{s}\s*"
        return re.compile(rf"{lead}{a}(?!\s*{b})(?:(?!{a}|{b}).)+{b}\s*", re.DOTALL)

    def __call__(self, completions: list[Any], **_: Any) -> list[float]:
        pattern = self.pattern(self.prompt)
        out = []
        for c in completions:
            text = completion_text(c)
            once = all(text.count(m) == 1 for m in self.prompt.markers)
            out.append(1.0 if once and pattern.fullmatch(text) else 0.0)
        return out


class LengthPenalty(_Term):
    """Brevity: ``-min(1, max(0, chars - free_chars) / scale_chars)``; 0 for short completions.

    Args:
        weight: weight of this term in the summed reward.
        free_chars: completion length in characters that costs nothing.
        scale_chars: characters beyond ``free_chars`` at which the penalty reaches -1.

    >>> r = LengthPenalty(1.0, free_chars=10, scale_chars=10, prompt=PromptTemplate("{question}"))
    >>> r(["short", "x" * 15, "x" * 100])
    [0.0, -0.5, -1.0]
    """

    name = "length"

    def __init__(
        self,
        weight: float,
        free_chars: int,
        scale_chars: Annotated[int, Field(gt=0, examples=[400])],
        *,
        prompt: PromptTemplate,
        verifier: Scorer | None = None,
    ):
        super().__init__(weight, prompt=prompt, verifier=verifier)
        self.free_chars = free_chars
        self.scale_chars = scale_chars

    def __call__(self, completions: list[Any], **_: Any) -> list[float]:
        # "+ 0.0" turns -0.0 (short completions) into 0.0.
        return [
            -min(1.0, max(0, len(completion_text(c)) - self.free_chars) / self.scale_chars) + 0.0
            for c in completions
        ]


class _Recorded:
    """A term as handed to TRL: same name and output, and the output is passed on to the RewardSet.
    A term running plugin code is called under its Deadline (rlvr.reward.timeout)."""

    def __init__(self, term: _Term, record: Any, deadline: Deadline | None):
        self.term, self.record, self.deadline = term, record, deadline
        self.__name__ = term.__name__

    def __call__(self, completions: list[Any], **kwargs: Any) -> list[float]:
        out = (
            self.deadline(self.term, completions, **kwargs)
            if self.deadline
            else self.term(completions, **kwargs)
        )
        self.record(self.__name__, out, completions, kwargs)
        return out


def weighted_totals(per_term: torch.Tensor, weights: torch.Tensor | list[float]) -> torch.Tensor:
    """Each completion's reward: its terms' rewards (one column a term, NaN where a term abstains)
    times their weights, NaN skipped, as TRL's ``sum_then_normalize`` sums them (``nansum``).

    >>> import torch
    >>> weighted_totals(torch.tensor([[1.0, float("nan")], [0.0, 1.0]]), [1.0, 0.5]).tolist()
    [1.0, 0.5]
    """
    import torch

    weights = torch.as_tensor(weights, dtype=per_term.dtype, device=per_term.device)
    return (per_term * weights).nansum(dim=1)


def flat_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """One flag per group: whether its scorable rewards are all equal (no reward variance).

    TRL divides (reward - group mean) by (group std + 1e-4); for a group whose rewards are all 1.2
    (correct and well formatted), the float32 mean differs from 1.2 in the last bit, and every
    completion gets an advantage of about 1e-3 instead of 0 (and TRL's ``frac_reward_zero_std``
    reports 0). Such a group carries no signal: its advantages are set to the 0 GRPO defines.

    >>> import torch
    >>> flat_groups(torch.tensor([1.2, 1.2, 0.0, 1.0, float("nan"), 0.2]), 2).tolist()
    [True, False, True]
    """
    grouped = rewards.reshape(-1, group_size)
    nan = grouped.isnan()
    low = grouped.masked_fill(nan, float("inf")).min(dim=1).values
    high = grouped.masked_fill(nan, float("-inf")).max(dim=1).values
    return high <= low


class RewardSet:
    """Named, weighted reward terms (``reward.terms.format.weight=0.2`` from the CLI).

    It also measures the fraction of GRPO groups whose weighted rewards are all equal
    (``reward/zero_std_groups_frac``, set ``group_size`` to num_generations). TRL 1.16's own
    ``frac_reward_zero_std`` misses such groups when the shared value is not exact in float32
    (an all-correct group at 1.0 + 0.2 gets a std of 1.3e-7, which ``isclose(std, 0)`` rejects).

    Args:
        terms: name -> reward term (``reward.terms``), each built with the run's prompt and verifier.
        plugin_timeout_s: seconds one call of a term from a plugin package may take; past it the
            batch scores 0.0 for that term, with a warning and the metric ``reward/plugin_timeouts``
            (rlvr.reward.timeout). rlvr's own terms need none (the verifier sandbox has its own).
        completions_per_step: rows of each GRPO step's rollouts (prompt, completion, every term's
            value, total, verdict) sampled for the completions tables (W&B ``completions/grpo``,
            ``completions.jsonl``); 0 = none. Drained with :meth:`completions`.
        seed: seeds that sampling (the run's seed), so a rerun shows the same rows.
        prompt: the run's PromptTemplate; passed at instantiation.
        verifier: the run's verifier sandbox; passed at instantiation.
    """

    def __init__(
        self,
        terms: dict[str, _Term],
        plugin_timeout_s: Annotated[
            float,
            Field(
                gt=0,
                le=MAX_TIMEOUT_S,
                examples=[60],
                description="seconds; a plugin reward that needs longer per batch should batch its own work",
            ),
        ],
        completions_per_step: Annotated[int, Field(ge=0, examples=[8])],
        seed: int,
        *,
        prompt: PromptTemplate,
        verifier: Scorer | None = None,
    ):
        self.terms = dict(terms)
        self.completions_per_step, self.seed = completions_per_step, seed
        self._rows: list[ev.Completions] = []  # sampled, not yet drained
        self.plugin_timeout_s = plugin_timeout_s
        self._deadlines = {
            name: Deadline(name, plugin_timeout_s) for name, term in self.terms.items() if plugin_module(term)
        }
        self.prompt = prompt
        self.verifier = verifier
        for name, term in self.terms.items():
            term.__name__ = name
        self.group_size = 0
        self._batch: dict[str, list[float | None]] = {}
        self._zero_std: list[float] = []
        self._by_task: dict[str, list[float]] = {}
        self._tasks_seen: set[str] = set()

    def _record(
        self, name: str, values: list[float | None], completions: list[Any], columns: dict[str, Any]
    ) -> None:
        """TRL calls every term once per generation batch (``columns``: what it passes beside the
        completions); when all have answered, check each group, keep each completion's weighted
        reward under its task (mixtures report them apart) and sample the batch's table rows."""
        tasks = columns.get("task")
        self._batch[name] = values
        if len(self._batch) < len(self.terms):
            return
        batch, self._batch = self._batch, {}
        # None = the term abstains on that completion; TRL sums the others (nansum), so do we.
        import torch

        nan = float("nan")
        rows = [[nan if v is None else v for v in batch[n]] for n in self.terms]
        per_term = torch.tensor(rows, dtype=torch.float64).T  # the scores reports print, unrounded
        totals = weighted_totals(per_term, [t.weight for t in self.terms.values()])
        for task, total in zip(tasks or [], totals.tolist(), strict=False):
            self._by_task.setdefault(task, []).append(total)
        g = self.group_size
        if g > 1 and len(totals) and len(totals) % g == 0:
            self._zero_std.append(flat_groups(totals, g).float().mean().item())
        self._sample(batch, totals.tolist(), completions, columns)

    def _sample(
        self, batch: dict[str, list[float | None]], totals: list[float], completions: list[Any], columns: dict
    ) -> None:
        """``completions_per_step`` rows of this generation batch, chosen by seed and step."""
        state = columns.get("trainer_state")
        # TRL scores a batch before the step it trains: global_step counts the steps done so far.
        step = state.global_step + 1 if state is not None else 0
        picked = ev.Completions.pick(len(totals), self.completions_per_step, self.seed, f"grpo/{step}")
        if not picked:
            return
        success = self.success_term()
        prompts, refs, task = columns.get("prompts"), columns.get("answer"), columns.get("task")
        rows = [
            ev.CompletionRow(
                prompt=ev.as_text(prompts[i]) if prompts else "",
                completion=completion_text(completions[i]),
                task=task[i] if task else None,
                reference=refs[i] if refs else None,
                answer=self.prompt.extract(completion_text(completions[i])),
                rewards={n: batch[n][i] for n in self.terms},
                score=totals[i],
                correct=None if success is None else (batch[success][i] or 0.0) >= SUCCESS_THRESHOLD,
            )
            for i in picked
        ]
        self._rows.append(ev.Completions("grpo", step, rows))

    def completions(self) -> list[ev.Completions]:
        """The rows sampled since the last call, one event per step: a step that scored several
        batches (dynamic sampling's refills) keeps ``completions_per_step`` of their rows."""
        by_step: dict[int, list[ev.CompletionRow]] = {}
        for event in self._rows:
            by_step.setdefault(event.step, []).extend(event.rows)
        self._rows = []
        n, seed = self.completions_per_step, self.seed
        return [
            ev.Completions(
                "grpo", step, [rows[i] for i in ev.Completions.pick(len(rows), n, seed, f"grpo/{step}")]
            )
            for step, rows in by_step.items()
        ]

    def validate(self) -> list[ConfigIssue]:
        issues = []
        if not self.terms:
            issues.append(ConfigIssue("reward.terms", {}, "no reward terms", "add reward.terms.correctness"))
        for name, term in self.terms.items():
            if not callable(term):
                issues.append(
                    ConfigIssue(
                        f"reward.terms.{name}", type(term).__name__, "not callable", "use a reward class"
                    )
                )
                continue
            issues.extend(term.validate(f"reward.terms.{name}"))
        if self.terms and all(t.weight == 0 for t in self.terms.values()):
            issues.append(
                ConfigIssue("reward.terms", "all weights 0", "no learning signal", "set a weight > 0")
            )
        return issues

    def check_on_gold(self, dataset: Any, n: int = 4) -> None:
        """Call every term on the gold answers of the first ``n`` rows of ``dataset`` (a
        ``datasets.Dataset``), with the rows' columns as keyword arguments, as TRL passes them.

        A term that breaks TRL's contract (one float or None per completion) or cannot read the
        dataset's columns fails here, before any training, instead of at GRPO's first step after
        the whole SFT phase has run.
        """
        rows = dataset.select(range(min(n, len(dataset)))).to_dict()
        # A row without a reference answer (rlvr.data.references) checks the contract on an empty one.
        completions = [
            [{"role": "assistant", "content": self.prompt.format_answer(a or "")}] for a in rows["answer"]
        ]
        for name, term in self.terms.items():
            deadline = self._deadlines.get(name)
            try:
                values = deadline(term, completions, **rows) if deadline else term(completions, **rows)
            except Exception as exc:
                raise RuntimeError(
                    f"reward.terms.{name} failed on the gold answers of the training data: {exc!r}"
                ) from exc
            if deadline and deadline.timeouts:
                raise RuntimeError(
                    f"reward.terms.{name} did not return within reward.plugin_timeout_s={self.plugin_timeout_s:g} "
                    f"s on {len(completions)} gold answers of the training data; make it return in time, or raise "
                    "reward.plugin_timeout_s"
                )
            if not isinstance(values, list) or len(values) != len(completions):
                raise RuntimeError(
                    f"reward.terms.{name} returned {type(values).__name__} of length "
                    f"{len(values) if hasattr(values, '__len__') else '?'} for {len(completions)} "
                    "completions; a reward function returns one float (or None) per completion"
                )
            bad = [v for v in values if v is not None and not isinstance(v, (int, float))]
            if bad:
                raise RuntimeError(
                    f"reward.terms.{name} returned {bad[0]!r} ({type(bad[0]).__name__}); "
                    "a reward function returns floats (or None to abstain)"
                )

    def counters(self) -> dict[str, float]:
        """Cumulative verifier counters (errors, timeouts, rejected answers, crashes) as metrics,
        and, over the batches scored since the last call, the zero-variance group fraction and
        (when the batches held several tasks) the mean weighted reward per task."""
        counters = getattr(self.verifier, "counters", None) or {}
        out = {f"reward/{k}": float(v) for k, v in counters.items()}
        if self._deadlines:
            out["reward/plugin_timeouts"] = float(sum(d.timeouts for d in self._deadlines.values()))
        if self._zero_std:
            out["reward/zero_std_groups_frac"] = sum(self._zero_std) / len(self._zero_std)
            self._zero_std = []
        self._tasks_seen.update(self._by_task)
        # A single-task run's per-task mean is TRL's reward/mean again; a step of a mixture can hold
        # one task only (small batches), so the choice follows the tasks seen so far.
        if len(self._tasks_seen) > 1:
            for task, values in sorted(self._by_task.items()):
                out[f"reward/task/{task}/mean"] = sum(values) / len(values)
        self._by_task = {}
        return out

    def success_term(self) -> str | None:
        """The name of the first term that runs the task's verifier (correctness, answer_match)."""
        return next((n for n, t in self.terms.items() if isinstance(t, CorrectnessReward)), None)

    def accepted(self) -> tuple[int, int]:
        """(completions the verifier accepted, completions scored) in the latest generation batch."""
        name = self.success_term()
        scores = getattr(self.terms[name], "last_scores", None) if name else None
        scores = scores or []
        return sum(s >= SUCCESS_THRESHOLD for s in scores), len(scores)

    @property
    def functions(self) -> list[_Recorded]:
        return [_Recorded(term, self._record, self._deadlines.get(name)) for name, term in self.terms.items()]

    @property
    def weights(self) -> list[float]:
        return [t.weight for t in self.terms.values()]


def success_term_issues(data: Any, reward: RewardSet | None) -> list[ConfigIssue]:
    """A curriculum moves on the verifier's verdicts, which only a correctness-type term computes."""
    if not getattr(data, "needs_success_term", False) or reward is None or reward.success_term():
        return []
    return [
        ConfigIssue(
            "reward.terms",
            sorted(reward.terms),
            "a curriculum (data=curriculum) measures success with the task's verifier, and no term runs it",
            "add one: +reward/terms@reward.terms.correctness=correctness (or answer_match)",
        )
    ]
