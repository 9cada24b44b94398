"""GPU cards the memory check can plan for (``runtime.memory.target``), before renting one.

A card's memory is what PyTorch reports on it (``torch.cuda.get_device_properties(0).total_memory``,
the "total capacity" of an out-of-memory message), in GB of 2**30 bytes: the figure the memory check
compares with when it runs on that card, so planning for a card and running on it give the same
verdict. Where each figure comes from: docs/scaling.md "Will it fit the card I rent?".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rlvr.issues import ConfigIssue, suggest

KEY = "runtime.memory.target"


@dataclass(frozen=True)
class Card:
    """A training device the estimate is compared with."""

    name: str
    memory_gb: float
    bf16: bool = True  # whether training_loop.precision=auto trains in bf16 there (else fp16)

    def precision(self, requested: str) -> str:
        """What ``training_loop.precision`` resolves to on this card (rlvr.runtime.hardware.resolve's
        rule for a GPU)."""
        if requested != "auto":
            return requested
        return "bf16" if self.bf16 else "fp16"

    @property
    def where(self) -> str:
        """The card in a sentence ("on {where}")."""
        if self.name in CARDS:
            return f"the {self.name} ({self.memory_gb:.2f} GB as PyTorch reports it)"
        return f"a card of {self.memory_gb:g} GB"


CARDS = {
    card.name: card
    for card in (
        Card("H100-80GB", 79.18),
        Card("H200-141GB", 139.80),
        Card("A100-80GB", 79.15),
        Card("A100-40GB", 39.50),
        Card("L40S-48GB", 44.53),
        Card("L4-24GB", 22.03),
        Card("A10G-24GB", 21.99),
        Card("RTX4090-24GB", 23.64),
        Card("RTX5090-32GB", 31.37),
        Card("T4-16GB", 14.75, bf16=False),
    )
}

_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(?:GB)?\s*", re.IGNORECASE)


def card_of(value: Any) -> tuple[Card | None, list[ConfigIssue]]:
    """The card ``runtime.memory.target`` names: a known card (any case), a size in GB (a number, or
    ``"48GB"``; a card with bf16), or None for this machine's own device."""
    if value is None:
        return None, []
    names = ", ".join(CARDS)
    if isinstance(value, str):
        by_name = {name.lower(): card for name, card in CARDS.items()}
        if value.strip().lower() in by_name:
            return by_name[value.strip().lower()], []
        size = _SIZE.fullmatch(value)
        value = float(size[1]) if size else value
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return Card(f"{value:g} GB", float(value)), []
    rule = "not a known card nor a size in GB"
    if isinstance(value, int | float) and not isinstance(value, bool):
        rule = "a size in GB must be > 0"
    fix = f"name a known card ({names}) or give the card's memory in GB (e.g. {KEY}=48)"
    close = suggest(value.upper(), CARDS) if isinstance(value, str) else ""
    if close.startswith("did you mean"):
        fix = f"{close} Else {fix}"
    return None, [ConfigIssue(KEY, value, rule, fix)]
