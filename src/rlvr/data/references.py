"""Reference answers: which training data has none, and what each training stage needs.

Some verifiable data comes with a checker and no reference answer: reasoning-gym gives
``graph_color`` (any valid colouring is right) no gold answer, and a user's own task may have only
a constraint checker or unit tests. Such a row's ``answer`` column holds None (never the string
``'None'``), and the data component says which of its tasks lack references (detected for
reasoning-gym tasks, whose entries carry ``answer: None``; declared for a file with
``data.processor.answer_field=null``).

What each stage needs:

- SFT imitates reference answers: it refuses data without them (:func:`stage_issues`).
- RFT (rejection-sampling fine-tuning) and GRPO need only the checker: the task's verifier,
  run by the correctness reward term, scores the model's own answers.
- Evaluation scores with the same checker; the per-question records hold ``reference: null``.
"""

from __future__ import annotations

from typing import Any

from rlvr.issues import ConfigIssue

# How many entries of a reasoning-gym task are drawn to see whether it gives reference answers.
PROBE = 8


def reasoning_gym_lacks_references(task: str, params: dict[str, Any], seed: int) -> bool:
    """Whether reasoning-gym's ``task`` generator gives entries without an answer (``answer: None``);
    False when the task or its parameters are invalid (validation reports those)."""
    import reasoning_gym
    from reasoning_gym.factory import DATASETS

    if task not in DATASETS:
        return False
    try:
        dataset = reasoning_gym.create_dataset(task, size=PROBE, seed=seed, **params)
    except Exception:  # bad parameters: ReasoningGymData.validate names them
        return False
    return any(dataset[i]["answer"] is None for i in range(PROBE))


def stage_issues(data: Any, loop: Any) -> list[ConfigIssue]:
    """An enabled SFT phase on training data whose tasks (some of them) have no reference answer."""
    lacking = getattr(data, "tasks_without_references", None)
    sft = getattr(loop, "sft_phase", None)
    if lacking is None or sft is None or sft.enabled is not True:
        return []
    tasks = lacking()
    if not tasks:
        return []
    return [
        ConfigIssue(
            "training_loop.sft.enabled",
            True,
            f"SFT imitates reference answers, and the training data of {', '.join(tasks)} has none "
            "(only a checker: RFT and GRPO need nothing else, and evaluation scores with it)",
            "use training_loop=rft_grpo (rejection sampling, then GRPO) or training_loop=grpo, or set "
            "training_loop.sft.enabled=false; the model must already answer in the prompt's format",
        )
    ]
