"""How to sample completions (:class:`SamplingConfig`), and the rules of its settings declared once:
the evaluation's constructor (rlvr.evaluation.evaluator) annotates its config keys with the same types,
so the config gate names a bad value by its key before anything loads, and a SamplingConfig built in
code (RFT's sampling, the benchmarks) is held to the same rules. Light: no torch, so the gate can read
the rules without loading a model library."""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import Field

from rlvr.issues import value_issues

MaxNewTokens = Annotated[int, Field(ge=1, examples=[16])]
Samples = Annotated[int, Field(ge=1, examples=[1])]
BatchSize = Annotated[int, Field(ge=1, examples=[16])]
Temperature = Annotated[float, Field(ge=0, allow_inf_nan=False, description="0 = greedy")]
TopP = Annotated[float, Field(gt=0, le=1, description="1.0 disables nucleus sampling")]


@dataclass(frozen=True)
class SamplingConfig:
    """How to sample completions. Invalid values raise one ValueError listing every problem."""

    max_new_tokens: MaxNewTokens = field(
        default=128, metadata={"help": "Upper bound on generated tokens per sample."}
    )
    temperature: Temperature = field(default=0.0, metadata={"help": "0 means greedy decoding; > 0 samples."})
    top_p: TopP = field(default=1.0, metadata={"help": "Nucleus sampling mass in (0, 1]; 1 disables it."})
    num_samples: Samples = field(
        default=1, metadata={"help": "Completions per prompt (k). k > 1 needs temperature > 0."}
    )
    batch_size: BatchSize = field(
        default=32,
        metadata={
            "help": "Rows (prompt x sample) decoded together; finished rows are replaced from the queue. "
            "The default's choice is measured in benchmarks/generation_throughput.md."
        },
    )
    stop_strings: tuple[str, ...] = field(
        default=("</answer>",),
        metadata={"help": "A sample ends right after the first of these strings; the text is cut there."},
    )
    sort_by_length: bool = field(
        default=True,
        metadata={"help": "Batch prompts of similar token length together to minimise padding."},
    )
    seed: int = field(default=0, metadata={"help": "Seeds sampling per generate() call."})

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(SamplingConfig, include_extras=True)
        errors = [
            str(issue)
            for name in ("max_new_tokens", "temperature", "top_p", "num_samples", "batch_size")
            for issue in value_issues(name, getattr(self, name), hints[name], f"SamplingConfig.{name}")
        ]
        if self.num_samples > 1 and self.temperature == 0:
            errors.append(
                f"num_samples ({self.num_samples}) > 1 with temperature 0 would return identical greedy "
                "samples; set temperature > 0 (e.g. 0.7) or num_samples=1"
            )
        if isinstance(self.stop_strings, str) or not all(isinstance(s, str) and s for s in self.stop_strings):
            errors.append(
                f"stop_strings ({self.stop_strings!r}) must be a tuple of non-empty strings, "
                "e.g. ('</answer>',) or () for none"
            )
        if errors:
            raise ValueError("Invalid SamplingConfig:\n  - " + "\n  - ".join(errors))
