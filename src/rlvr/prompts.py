"""The one prompt object shared by training rewards, SFT targets and evaluation.

It owns the instruction text, the chat messages, answer extraction and a stable
hash. Every results file records ``PromptTemplate.hash`` so a train/eval prompt
mismatch shows up as two different hashes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PromptTemplate:
    """Instruction + system prompt + a model family's reasoning and answer markers.

    Args:
        instruction: text placed with the question; ``{question}`` marks where the question goes.
        system: the template's system message; ``None`` keeps the tokenizer's chat-template default.
        answer_start, answer_end: the markers around the final answer (``<answer>``/``</answer>``,
            ``<SOLUTION>``/``</SOLUTION>``); conf/prompts selects them with ``${rlvr.marker:...}``.
        reasoning_start, reasoning_end: the markers around the reasoning (``<think>``/``</think>``),
            or ``None`` for a family that answers directly.
        family: the family name the markers came from (recorded, and part of the hash).

    Everything above is in :attr:`hash`. SFT targets (:meth:`format_answer`), rewards (the format
    terms read :attr:`markers`) and evaluation (:meth:`extract`, :attr:`close_tag` as the stop
    string) all read this one object.

    >>> p = PromptTemplate(instruction="{question}\\nAnswer inside <answer></answer>.")
    >>> p.extract("I think <answer> 7 </answer>")
    '7'
    >>> p.extract("no tags") is None
    True
    """

    instruction: str
    system: str | None = None
    answer_start: str = "<answer>"
    answer_end: str = "</answer>"
    reasoning_start: str | None = None
    reasoning_end: str | None = None
    family: str | None = None

    def __post_init__(self) -> None:
        from rlvr.config.errors import ConfigIssue, ConfigValidationError

        issues = []
        if "{question}" not in self.instruction:
            issues.append(
                ConfigIssue(
                    "prompts.instruction",
                    self.instruction,
                    "must contain the placeholder '{question}'",
                    "add {question} where the task's question should appear",
                )
            )
        for key in ("answer_start", "answer_end"):
            if not getattr(self, key):
                issues.append(
                    ConfigIssue(
                        f"prompts.{key}", getattr(self, key), "must be a non-empty marker", "e.g. <answer>"
                    )
                )
        if (self.reasoning_start is None) != (self.reasoning_end is None):
            issues.append(
                ConfigIssue(
                    "prompts.reasoning_start",
                    (self.reasoning_start, self.reasoning_end),
                    "reasoning_start and reasoning_end come as a pair",
                    "set both (e.g. <think> and </think>) or neither",
                )
            )
        if len(set(self.markers)) != len(self.markers):
            issues.append(
                ConfigIssue("prompts", self.markers, "the markers must differ", "use distinct markers")
            )
        if issues:
            raise ConfigValidationError(issues)

    @property
    def markers(self) -> tuple[str, ...]:
        """The markers a completion should hold once each, in order."""
        reasoning = () if self.reasoning_start is None else (self.reasoning_start, self.reasoning_end)
        return (*reasoning, self.answer_start, self.answer_end)  # type: ignore[return-value]

    @property
    def close_tag(self) -> str:
        """The answer's end marker: evaluation stops generating there."""
        return self.answer_end

    def messages(self, question: str) -> list[dict[str, str]]:
        """Chat messages for one question (TRL's conversational prompt format)."""
        msgs = [] if self.system is None else [{"role": "system", "content": self.system}]
        msgs.append({"role": "user", "content": self.instruction.replace("{question}", question)})
        return msgs

    def render(self, tokenizer: Any, messages: list[dict[str, str]]) -> str:
        """The exact prompt string the model sees (same call TRL makes for conversational prompts)."""
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def extract(self, completion: str) -> str | None:
        """The stripped text between the answer markers that close first, or ``None``.

        Evaluation stops generating right after the first end marker; GRPO rollouts run on to
        ``max_completion_length`` (TRL's HF generation path takes no stop strings). Cutting here
        at the first end marker makes a reward and an evaluation read the same answer from the
        same completion; text after it only costs the format reward.

        >>> PromptTemplate("{question}").extract("<answer>3</answer> no, <answer>5</answer>")
        '3'
        """
        end = completion.find(self.answer_end)
        if end == -1:
            return None
        start = completion.rfind(self.answer_start, 0, end)
        if start == -1:
            return None
        return completion[start + len(self.answer_start) : end].strip()

    def format_answer(self, answer: str) -> str:
        """A gold completion for SFT warm start: an (empty) reasoning block, then the marked answer.

        >>> PromptTemplate("{question}", reasoning_start="<think>", reasoning_end="</think>").format_answer("4")
        '<think></think><answer>4</answer>'
        """
        reasoning = "" if self.reasoning_start is None else f"{self.reasoning_start}{self.reasoning_end}"
        return f"{reasoning}{self.answer_start}{answer}{self.answer_end}"

    @property
    def hash(self) -> str:
        payload = json.dumps(
            {
                "instruction": self.instruction,
                "system": self.system,
                "markers": [self.reasoning_start, self.reasoning_end, self.answer_start, self.answer_end],
                "family": self.family,
            },
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:12]
