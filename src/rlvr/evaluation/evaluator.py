"""Held-out evaluation: batched generation, the shared prompt's extraction, the sandboxed verifiers.

The same ``evaluate_questions`` call serves the pipeline (baseline, in-training,
final) and every benchmark cell, so a number here and a number there mean the
same thing.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TypedDict

from pydantic import Field

from rlvr import events as ev
from rlvr.evaluation.results import Evaluation, SampleRecord
from rlvr.evaluation.sampling import BatchSize, MaxNewTokens, Samples, Temperature
from rlvr.issues import ConfigIssue, value_issues
from rlvr.prompts import PromptTemplate
from rlvr.runtime.io import atomic_write_json
from rlvr.verifier.sandbox import Scorer

if TYPE_CHECKING:  # heavy imports (torch, transformers, datasets) stay out of config checks
    from datasets import Dataset
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

    from rlvr.evaluation.generation import Generator
    from rlvr.evaluation.sampling import SamplingConfig
    from rlvr.observers.base import ProgressHandle


class EvaluationBackend(Protocol):
    """A generation backend (conf/evaluation/generator/, rlvr.evaluation.generation.HFBackend and its siblings)."""

    name: str

    def __call__(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, sampling: SamplingConfig
    ) -> Generator: ...


class SampledNode(TypedDict):
    """``evaluation.sampled`` as a type (Evaluator's ``sampled``; the config gate binds it)."""

    num_samples: Annotated[
        int, Field(ge=1, examples=[4], description="samples per question (k); pass@k uses all")
    ]
    temperature: Annotated[
        float,
        Field(
            gt=0,
            description="greedy is the headline already; the GRPO temperature: ${training_loop.grpo.temperature}",
        ),
    ]
    max_examples: Annotated[int, Field(ge=1, examples=[300], description="null = all")] | None  # fmt: skip


@dataclass(frozen=True)
class SampledEvaluation:
    """``evaluation.sampled``: the GRPO stage's start (after SFT) and end (final) also evaluated with
    ``num_samples`` samples per question at ``temperature`` (the training temperature: what GRPO
    optimises), recorded as ``after_sft_sampled``/``final_sampled`` and paired in the report.
    :class:`SampledNode` types the node."""

    num_samples: int
    temperature: float
    max_examples: int | None  # questions shared among tasks and sets as Evaluator.rows does; None = all

    @classmethod
    def build(cls, raw: Mapping[str, Any] | None) -> SampledEvaluation | None:
        """The settings in the config's ``raw`` dict, or None: off (``raw`` None), or a node that does
        not hold for :class:`SampledNode` (the config gate names each key)."""
        if raw is None or value_issues("evaluation.sampled", dict(raw), SampledNode, "evaluation.sampled"):
            return None
        return cls(raw["num_samples"], float(raw["temperature"]), raw["max_examples"])


class Evaluator:
    """Greedy (or sampled, k per question) evaluation on a held-out split.

    Args:
        baseline: evaluate the model before any training.
        every_n_steps: in-training evaluation interval in optimizer steps (0 = off).
        max_examples: evaluate this many eval questions (None = all) for quick checks, shared among
            the tasks and extra evaluation sets in proportion, at least one of each (:meth:`rows`).
        num_samples: samples per question (k); accuracy uses the first, pass@k and majority vote use all.
        temperature: 0 = greedy; >0 needed when num_samples > 1.
        max_new_tokens: generation budget per completion (conf: the GRPO rollouts' budget).
        batch_size: generation batch size on a CPU (measured best on 2 CPU cores: see benchmarks/).
        cuda_batch_size: the most sequences generated at once on a CUDA device, fewer when the
            memory left cannot hold their KV cache (:func:`cuda_batch`): a GPU idles on small batches.
        ks: the k values reported for pass@k.
        seed: seeds sampling (and the vLLM engine).
        generator: the generation backend (``evaluation/generator=hf|hf_continuous|vllm``, a
            :class:`rlvr.evaluation.generation.HFBackend`, ``HFContinuousBackend`` or ``VLLMBackend``): called with
            the model, tokenizer and sampling settings before each evaluation.
        sampled: ``{num_samples, temperature, max_examples}`` (:class:`SampledEvaluation`) or None:
            also evaluate the GRPO stage's start and end sampled; greedy accuracy stays the headline.
        completions_per_eval: questions of each evaluation shown in the completions tables (W&B
            ``completions/eval/<label>``, ``completions.jsonl``), chosen by ``seed``: the same
            questions at every evaluation of a run, so a table reads as before/after; 0 = none.
        prompt: the run's PromptTemplate (rendering and answer extraction, shared with the rewards).
        verifier: the run's verifier sandbox (rlvr.verifier.VerifierPool).

    ``prompt`` and ``verifier`` are runtime objects: the orchestrator (or the benchmark) passes them
    at instantiation, beside the YAML values.
    """

    def __init__(
        self,
        *,
        baseline: bool,
        every_n_steps: Annotated[int, Field(ge=0, description="0 = off")],
        max_examples: int | None,
        num_samples: Samples,
        temperature: Temperature,
        max_new_tokens: MaxNewTokens,
        batch_size: BatchSize,
        cuda_batch_size: BatchSize,
        ks: list[int],
        seed: int,
        generator: EvaluationBackend,
        sampled: SampledNode | None,
        completions_per_eval: Annotated[int, Field(ge=0, examples=[16])],
        prompt: PromptTemplate,
        verifier: Scorer | None,
    ):
        self.baseline = baseline
        self.every_n_steps = every_n_steps
        self.max_examples = max_examples
        self.num_samples = num_samples
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.batch_size = batch_size
        self.cuda_batch_size = cuda_batch_size
        self.ks = list(ks)
        self.seed = seed
        self.generator = generator
        self.sampled = SampledEvaluation.build(sampled)
        self.completions_per_eval = completions_per_eval
        self.prompt = prompt
        self.verifier = verifier

    @property
    def backend(self) -> str:
        """The generator's name (hf, hf_continuous, vllm): benchmark fingerprints record it."""
        return self.generator.name

    def validate(self) -> list[ConfigIssue]:
        issues = []
        if self.num_samples > 1 and self.temperature <= 0:
            issues.append(
                ConfigIssue(
                    "evaluation.temperature",
                    self.temperature,
                    f"must be > 0 when evaluation.num_samples={self.num_samples} (greedy samples are identical)",
                    "set evaluation.temperature=0.7 or evaluation.num_samples=1",
                )
            )
        bad_ks = [k for k in self.ks if not 1 <= k <= self.num_samples]
        if bad_ks:
            issues.append(
                ConfigIssue(
                    "evaluation.ks",
                    self.ks,
                    f"every k must be between 1 and evaluation.num_samples ({self.num_samples})",
                    "drop the larger k or raise evaluation.num_samples",
                )
            )
        validate = getattr(self.generator, "validate", None)
        if not callable(self.generator):
            issues.append(
                ConfigIssue(
                    "evaluation.generator", self.generator, "not a generation backend",
                    "select one: evaluation/generator=hf (or hf_continuous, vllm)",
                )
            )  # fmt: skip
        elif validate is not None:
            issues.extend(validate())
        return issues

    def sampled_view(self) -> Evaluator | None:
        """This evaluator with ``sampled``'s settings (same prompt, verifier, generator, engine), or None."""
        if self.sampled is None:
            return None
        view = copy.copy(self)
        view.num_samples = self.sampled.num_samples
        view.temperature = self.sampled.temperature
        view.max_examples = min(
            (n for n in (self.max_examples, self.sampled.max_examples) if n is not None), default=None
        )
        view.ks = sorted({1, view.num_samples})
        view.sampled = None
        return view

    def sampling(self, batch_size: int | None = None) -> SamplingConfig:
        from rlvr.evaluation.sampling import SamplingConfig

        return SamplingConfig(
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            num_samples=self.num_samples,
            batch_size=batch_size or self.batch_size,
            stop_strings=(self.prompt.close_tag,),
            seed=self.seed,
        )

    def generator_for(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> Generator:
        """A generator over ``model``'s current weights (a vLLM backend pushes them into its engine
        first, so in-training evaluations score them)."""
        on_cuda = getattr(getattr(model, "device", None), "type", None) == "cuda"
        batch = cuda_batch(model, self.cuda_batch_size, self.max_new_tokens) if on_cuda else None
        return self.generator(model, tokenizer, self.sampling(batch))

    def rows(self, dataset: Dataset) -> Dataset:
        """The questions an evaluation of ``dataset`` scores: all of them, or ``max_examples`` shared
        among its tasks and extra evaluation sets (rlvr.data.base) in proportion to their sizes, at
        least one each, the first of each in dataset order. Taking the first ``max_examples`` rows of
        the concatenated set would drop later tasks and every extra set from a headline that still
        names them."""
        if self.max_examples is None or self.max_examples >= len(dataset):
            return dataset
        sets = dataset["eval_set"] if "eval_set" in dataset.column_names else [""] * len(dataset)
        return dataset.select(stratified(list(zip(sets, dataset["task"], strict=True)), self.max_examples))

    def sampling_record(self) -> dict[str, Any]:
        """The sampling settings every evaluation file records."""
        return {k: getattr(self, k) for k in ("num_samples", "temperature", "max_new_tokens", "seed")}

    def identity(self, dataset: Dataset, meta: dict[str, Any]) -> dict[str, Any]:
        """What an evaluation of ``dataset`` by this evaluator writes into its file beside the scores
        (``meta``, prompt hash, sampling) plus the identity of its question set: an evaluation file
        whose values differ measured something else (rlvr.records.run_history compares them on resume)."""
        from rlvr.data.identity import ids_of, set_hash

        rows = self.rows(dataset)
        return {
            **meta,
            "prompt_hash": self.prompt.hash,
            "sampling": self.sampling_record(),
            "question_set": set_hash(ids_of(zip(rows["task"], rows["question"], strict=True))),
        }

    def evaluate_questions(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        dataset: Dataset,
        progress: ProgressHandle | None = None,
    ) -> Evaluation:
        """Generate, extract and score every question of ``dataset`` (at most ``max_examples``)."""
        from rlvr.verifier import ScoreRequest

        rows = self.rows(dataset)
        prompts = [self.prompt.render(tokenizer, m) for m in rows["prompt"]]
        was_training = getattr(model, "training", False)
        model.eval()
        start = time.perf_counter()
        try:
            generator = self.generator_for(model, tokenizer)
            gen_start = time.perf_counter()
            generations = generator.generate(prompts, progress=progress.advance if progress else None)
            gen_seconds = time.perf_counter() - gen_start
        finally:
            if was_training:
                model.train()
        requests, owners = [], []
        for i, (gens, task, entry) in enumerate(zip(generations, rows["task"], rows["entry"], strict=True)):
            parsed = json.loads(entry)
            for g in gens:
                requests.append(ScoreRequest(task=task, answer=self.prompt.extract(g.text), entry=parsed))
                owners.append(i)
        # Extra evaluation sets ride in the same dataset, named per row (rlvr.data.base).
        eval_sets = rows["eval_set"] if "eval_set" in rows.column_names else [""] * len(rows)
        samples = [
            SampleRecord(
                index=i,
                task=rows["task"][i],
                eval_set=eval_sets[i] or None,
                question=rows["question"][i],
                reference=rows["answer"][i],
                completions=[g.text for g in generations[i]],
                answers=[],
                scores=[],
                status=[],
            )
            for i in range(len(generations))
        ]
        if self.verifier is None:
            raise ValueError(
                "an Evaluator needs a verifier (the verifier sandbox, rlvr.verifier.VerifierPool) to score answers"
            )
        for owner, req, score in zip(owners, requests, self.verifier.score(requests), strict=True):
            samples[owner].answers.append(req.answer)
            samples[owner].scores.append(score.value)
            samples[owner].status.append(score.status)
        n_samples = sum(len(g) for g in generations)
        return Evaluation(
            samples=samples,
            ks=self.ks,
            seconds=time.perf_counter() - start,
            samples_per_second=n_samples / gen_seconds if gen_seconds > 0 else 0.0,
        )

    def evaluate(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        dataset: Dataset,
        label: str,
        step: int,
        out_dir: Path,
        meta: dict[str, Any],
        progress: ProgressHandle | None = None,
    ) -> ev.EvalResult:
        """Evaluate and write ``<out_dir>/<label>_step<step>.json`` (summary, provenance, per-sample records)."""
        result = self.evaluate_questions(model, tokenizer, dataset, progress)
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"{label}_step{step}.json"
        payload = {
            "label": label,
            "step": step,
            **meta,
            "prompt_hash": self.prompt.hash,
            "sampling": self.sampling_record(),
            **result.to_dict(),
        }
        atomic_write_json(path, payload)
        return ev.EvalResult(label, step, result, path)

    def completions(self, result: ev.EvalResult, dataset: Dataset) -> ev.Completions | None:
        """``completions_per_eval`` of ``result``'s questions (this evaluator's rows of ``dataset``),
        one table row each with its first sample; None when there are none to show."""
        from rlvr.evaluation.metrics import SUCCESS_THRESHOLD

        samples = result.evaluation.samples
        picked = ev.Completions.pick(len(samples), self.completions_per_eval, self.seed, "eval")
        if not picked:
            return None
        prompts = self.rows(dataset)["prompt"]
        rows = [
            ev.CompletionRow(
                prompt=ev.as_text(prompts[s.index]),
                completion=s.completions[0],
                task=s.task,
                reference=s.reference,
                answer=s.answers[0],
                rewards={},
                score=s.scores[0],
                correct=s.scores[0] >= SUCCESS_THRESHOLD,
            )
            for s in (samples[i] for i in picked)
            if s.completions
        ]
        return ev.Completions(f"eval/{result.label}", result.step, rows)

    @staticmethod
    def relabel(path: Path, label: str, step: int) -> Path:
        """Copy the evaluation file ``path`` as ``<label>_step<step>.json``: the same weights evaluated
        once, recorded under a second stage name (``reused_from`` names the original)."""
        payload = json.loads(Path(path).read_text())
        payload.update(label=label, step=step, reused_from=Path(path).name)
        target = Path(path).with_name(f"{label}_step{step}.json")
        atomic_write_json(target, payload)
        return target


def stratified(labels: list[Any], n: int) -> list[int]:
    """Indices of ``n`` rows whose group labels are ``labels``, shared among the groups in proportion
    to their sizes (largest remainder, ties to the earlier group), each group at least one (more
    than ``n`` in all only when ``n`` is below the number of groups), each contributing its first
    rows; indices in their original order. Deterministic, so a resumed run scores the same rows."""
    members: dict[Any, list[int]] = {}
    for i, g in enumerate(labels):
        members.setdefault(g, []).append(i)
    if n >= len(labels):
        return list(range(len(labels)))
    sizes = [len(v) for v in members.values()]
    exact = [n * size / len(labels) for size in sizes]
    quota = [int(e) for e in exact]
    for k in sorted(range(len(sizes)), key=lambda k: (int(exact[k]) - exact[k], k))[: n - sum(quota)]:
        quota[k] += 1
    for k in range(len(sizes)):
        if quota[k] == 0:  # a group too small for a share still gets one, from the largest share
            quota[k] = 1
            largest = max(range(len(sizes)), key=lambda j: (quota[j], -j))
            if quota[largest] > 1 and sum(quota) > n:
                quota[largest] -= 1
    return sorted(i for rows, q in zip(members.values(), quota, strict=True) for i in rows[:q])


# Prompt tokens a generated sequence is sized for beside its completion, when sizing a CUDA batch.
_PROMPT_TOKENS = 512


def cuda_batch(model: Any, most: int, max_new_tokens: int, share: float = 0.5) -> int:
    """Sequences to generate at once on the model's GPU: at most ``most``, and no more than ``share``
    of the free memory holds (each sequence's KV cache over a 512-token prompt plus the completion,
    and its fp32 logits)."""
    import torch

    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    heads = cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    kv = (getattr(cfg, "num_key_value_heads", None) or heads) * head_dim
    per_sequence = 2 * cfg.num_hidden_layers * kv * (_PROMPT_TOKENS + max_new_tokens) * 2
    per_sequence += cfg.vocab_size * 4 * 3
    free, _ = torch.cuda.mem_get_info(model.device)
    return max(1, min(most, int(share * free // per_sequence)))
