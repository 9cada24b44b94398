"""The one prompt object shared by training rewards, SFT targets and evaluation.

It owns the instruction text, the chat messages, answer extraction and a stable
hash. Every results file records ``PromptTemplate.hash`` so a train/eval prompt
mismatch shows up as two different hashes. Once bound to the tokenizer that renders
the prompts (:meth:`PromptTemplate.bind`), the hash covers that tokenizer's chat
template too: the model sees the template's output, not the instruction alone.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
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
    chat_template: str | None = field(default=None, init=False, repr=False, compare=False)
    """The chat template of the tokenizer the prompts are rendered with (:meth:`bind`), in the hash;
    not a config field: it comes from the model."""
    bound: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        from rlvr.issues import ConfigIssue, ConfigValidationError

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
        return (*reasoning, self.answer_start, self.answer_end)

    @property
    def close_tag(self) -> str:
        """The answer's end marker: evaluation stops generating there."""
        return self.answer_end

    def messages(self, question: str) -> list[dict[str, str]]:
        """Chat messages for one question (TRL's conversational prompt format)."""
        msgs = [] if self.system is None else [{"role": "system", "content": self.system}]
        msgs.append({"role": "user", "content": self.instruction.replace("{question}", question)})
        return msgs

    def bind(self, tokenizer: Any) -> None:
        """Take the chat template of the tokenizer that renders this run's prompts into :attr:`hash`
        (the pipeline calls it once the model is loaded). A changed template (a model folder's
        ``chat_template.jinja`` or ``tokenizer_config.json``) changes every prompt the model sees, so
        it must change the hash that results files record."""
        object.__setattr__(self, "chat_template", _template_of(tokenizer))
        object.__setattr__(self, "bound", True)

    def render(self, tokenizer: Any, messages: list[dict[str, str]]) -> str:
        """The exact prompt string the model sees (same call TRL makes for conversational prompts).

        Refused when the prompt is bound to another chat template: the hash would not describe it."""
        if self.bound and _template_of(tokenizer) != self.chat_template:
            raise ValueError(
                f"this tokenizer's chat template is not the one prompt hash {self.hash} covers; "
                "bind the prompt to the tokenizer that renders it (PromptTemplate.bind)"
            )
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

    def format_answer(self, answer: str, working: str | None = None) -> str:
        """A gold completion for SFT warm start: the reasoning block (empty without ``working``), then
        the marked answer; a family without reasoning markers puts the working before the answer (the
        format reward's "any text, then the answer block").

        >>> PromptTemplate("{question}", reasoning_start="<think>", reasoning_end="</think>").format_answer("4")
        '<think></think><answer>4</answer>'
        >>> PromptTemplate("{question}").format_answer("4", working="1 + 3 = 4")
        '1 + 3 = 4 <answer>4</answer>'
        """
        if self.reasoning_start is not None:
            reasoning = f"{self.reasoning_start}{working or ''}{self.reasoning_end}"
        else:
            reasoning = f"{working} " if working else ""
        return f"{reasoning}{self.answer_start}{answer}{self.answer_end}"

    @property
    def hash(self) -> str:
        """12 hex digits of the sha256 of the prompt's text, markers, family and, once bound, the chat
        template (unbound: the same hash as before templates were covered)."""
        return self.hash_for(self.chat_template) if self.bound else self._hash({})

    @property
    def text_hash(self) -> str:
        """The hash of what the user chose, the same whatever model renders it: text, markers and family,
        no chat template (the unbound :attr:`hash`). The benchmark's fairness check: every model of a
        task got this prompt, each in its own chat template (a model property, not a choice)."""
        return self._hash({})

    def hash_for(self, tokenizer_or_template: Any) -> str:
        """The hash this prompt has when rendered by ``tokenizer_or_template`` (a tokenizer, or its
        chat template string): the benchmark's per-model hash, one prompt object for every model."""
        template = (
            tokenizer_or_template
            if tokenizer_or_template is None or isinstance(tokenizer_or_template, str)
            else _template_of(tokenizer_or_template)
        )
        return self._hash({"chat_template": template})

    def _hash(self, extra: dict[str, Any]) -> str:
        payload = json.dumps(
            {
                "instruction": self.instruction,
                "system": self.system,
                "markers": [self.reasoning_start, self.reasoning_end, self.answer_start, self.answer_end],
                "family": self.family,
                **extra,
            },
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:12]


def _template_of(tokenizer: Any) -> str | None:
    """The chat template string ``apply_chat_template`` uses (a dict of named templates: its JSON)."""
    template = getattr(tokenizer, "chat_template", None)
    return template if template is None or isinstance(template, str) else json.dumps(template, sort_keys=True)
