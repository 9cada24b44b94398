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

from reasoning_gym.utils import extract_answer


@dataclass(frozen=True)
class PromptTemplate:
    """Instruction + chat formatting + ``<tag>...</tag>`` answer extraction.

    Args:
        instruction: text placed with the question; ``{question}`` marks where the question goes.
        system: optional system message; ``None`` keeps the tokenizer's chat-template default.
        answer_tag: the XML tag that wraps the final answer (``answer`` -> ``<answer>...</answer>``).

    >>> p = PromptTemplate(instruction="{question}\\nAnswer inside <answer></answer>.")
    >>> p.extract("I think <answer> 7 </answer>")
    '7'
    >>> p.extract("no tags") is None
    True
    """

    instruction: str
    system: str | None = None
    answer_tag: str = "answer"

    def __post_init__(self) -> None:
        if "{question}" not in self.instruction:
            from rlvr.config_errors import ConfigIssue, ConfigValidationError

            raise ConfigValidationError(
                [
                    ConfigIssue(
                        "prompts.instruction",
                        self.instruction,
                        "must contain the placeholder '{question}'",
                        "add {question} where the task's question should appear",
                    )
                ]
            )

    @property
    def close_tag(self) -> str:
        return f"</{self.answer_tag}>"

    def messages(self, question: str) -> list[dict[str, str]]:
        """Chat messages for one question (TRL's conversational prompt format)."""
        msgs = [] if self.system is None else [{"role": "system", "content": self.system}]
        msgs.append({"role": "user", "content": self.instruction.replace("{question}", question)})
        return msgs

    def render(self, tokenizer: Any, messages: list[dict[str, str]]) -> str:
        """The exact prompt string the model sees (same call TRL makes for conversational prompts)."""
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def extract(self, completion: str) -> str | None:
        """The answer of the first closed answer tag, stripped, or ``None`` (reasoning-gym's parser).

        Evaluation stops generating right after the first close tag; GRPO rollouts run on to
        ``max_completion_length`` (TRL's HF generation path takes no stop strings). Cutting here
        at the first close tag makes a reward and an evaluation read the same answer from the
        same completion; text after the tag only costs the format reward.

        >>> PromptTemplate("{question}").extract("<answer>3</answer> no, <answer>5</answer>")
        '3'
        """
        end = completion.find(self.close_tag)
        if end != -1:
            completion = completion[: end + len(self.close_tag)]
        return extract_answer(completion, tag_name=self.answer_tag, strip=True)

    def format_answer(self, answer: str) -> str:
        """A gold completion for SFT warm start: the answer in the expected tags."""
        return f"<{self.answer_tag}>{answer}</{self.answer_tag}>"

    @property
    def hash(self) -> str:
        payload = json.dumps(
            {"instruction": self.instruction, "system": self.system, "answer_tag": self.answer_tag},
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:12]
