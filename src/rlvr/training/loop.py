"""The training loop component: optional SFT warm start (TRL SFTTrainer), then GRPO (TRL GRPOTrainer).

Every TRL knob is reachable: ``training_loop.sft.*`` are ``trl.SFTConfig`` fields and
``training_loop.grpo.*`` are ``trl.GRPOConfig`` fields, checked by name (with
suggestions) and by TRL's own validation before any model loads.
"""

from __future__ import annotations

import dataclasses
import functools
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlvr import events as ev
from rlvr import hardware
from rlvr.config_errors import ConfigIssue, suggest
from rlvr.training.callbacks import EventBridge
from rlvr.training.checkpoints import CompletionMarker, Preempted

# Set by the pipeline, not by the user: where files go, and that TRL does not start its own trackers.
_MANAGED = {"output_dir", "report_to", "reward_weights", "seed", "data_seed"}
# Refused from config (SECURITY.md): a config file must not make a run upload anything.
_NO_UPLOADS = {"push_to_hub", "hub_model_id", "hub_strategy", "hub_always_push", "log_completions_hub_repo"}
# Chosen once for both phases by training_loop.device / training_loop.precision (rlvr.hardware).
_HARDWARE = {"use_cpu": "device", "no_cuda": "device", "bf16": "precision", "fp16": "precision"}


def _quiet(trainer: Any) -> Any:
    """Drop transformers' own progress bar and log printer: the console observer shows progress."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)
    return trainer


def _train(trainer: Any, phase: str, bridge: EventBridge, ckpt: Path | None, outcome: Any) -> Any:
    """Run one phase (resuming from ``ckpt`` if given) and record its steps, time, evaluations, history."""
    start = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(ckpt) if ckpt else None)
    outcome.seconds[phase] = time.perf_counter() - start
    outcome.steps[phase] = trainer.state.global_step
    outcome.evals.extend(bridge.evals)
    outcome.history.extend(bridge.history)
    return trainer.model


@dataclass
class TrainOutcome:
    model: Any
    steps: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    evals: list[ev.EvalResult] = field(default_factory=list)
    history: list[dict[str, float]] = field(default_factory=list)
    hardware: dict[str, str] = field(default_factory=dict)

    def eval_of_last_weights(self) -> ev.EvalResult | None:
        """The in-training evaluation made on the weights training ended with, if there was one.

        An evaluation at a phase's last step already measured the model that the after-SFT or
        final evaluation would measure again (greedy, same questions), so callers reuse it.
        """
        if not self.steps:
            return None
        phase, last_step = list(self.steps.items())[-1]
        labels = {"sft", "after_sft"} if phase == "sft" else {phase}
        same = [e for e in self.evals if e.label in labels and e.step == last_step]
        return same[-1] if same else None


def _checkpointing_follows_model(args: Any, explicit: dict[str, Any], model: Any) -> Any:
    """TRL turns gradient checkpointing on by default; unless the training_loop sets it, follow ``model.gradient_checkpointing``.

    On a CPU the recomputation costs time and saves memory nobody needs: with it off, an SFT step of the
    embedded default went from 7.0 s to 5.3 s, and GRPO generation keeps its KV cache (benchmarks/learning.md).
    """
    if not {"gradient_checkpointing", "activation_checkpointing"} & explicit.keys():
        # transformers 5 renamed the flag; its TrainingArguments keep both names in step.
        flag = getattr(model, "is_activation_checkpointing", None)
        if flag is None:
            flag = getattr(model, "is_gradient_checkpointing", False)
        args.activation_checkpointing = args.gradient_checkpointing = bool(flag)
    return args


def _check_keys(key: str, values: dict[str, Any], config_cls: type) -> list[ConfigIssue]:
    names = {f.name for f in dataclasses.fields(config_cls)}
    issues = []
    for name in values:
        if name in _MANAGED:
            issues.append(ConfigIssue(f"{key}.{name}", values[name], "is set by the pipeline", "remove it"))
        elif name in _HARDWARE:
            owner = _HARDWARE[name]
            issues.append(
                ConfigIssue(
                    f"{key}.{name}",
                    values[name],
                    f"both phases take it from training_loop.{owner}",
                    f"remove it and set training_loop.{owner}=... ({'/'.join(getattr(hardware, owner.upper() + 'S'))})",
                )
            )
        elif name in _NO_UPLOADS and values[name]:
            issues.append(
                ConfigIssue(
                    f"{key}.{name}",
                    values[name],
                    "a run never uploads from config (a shared config must not publish your model)",
                    "push final/ yourself after the run, e.g. `huggingface-cli upload <repo> <run_dir>/final`",
                )
            )
        elif name not in names:
            issues.append(
                ConfigIssue(
                    f"{key}.{name}", values[name], f"not a {config_cls.__name__} field", suggest(name, names)
                )
            )
    return issues


def _vllm_rollout_issues(grpo: dict[str, Any], device: str) -> list[ConfigIssue]:
    """vLLM rollouts need CUDA and the vllm package: refused before anything loads otherwise."""
    import importlib.util

    mode = grpo.get("vllm_mode", "server")
    missing = []
    if device != "cuda":
        missing.append("a CUDA GPU (none is visible, or training_loop.device pins the CPU)")
    if importlib.util.find_spec("vllm") is None:  # both modes: the trainer syncs weights through vllm
        missing.append("the vllm package (make setup GPU=1)")
    if not missing:
        return []
    return [
        ConfigIssue(
            "training_loop.grpo.use_vllm",
            f"true (rollout=vllm_{mode})",
            "vLLM rollouts need " + " and ".join(missing),
            "use rollout=hf on this machine",
        )
    ]


class GRPOLoop:
    """SFT warm start (optional) then GRPO.

    Args:
        sft: ``enabled`` plus ``trl.SFTConfig`` fields for the warm start on generated gold answers.
        grpo: ``enabled`` plus ``trl.GRPOConfig`` fields (learning_rate, max_steps, num_generations,
            per_device_train_batch_size, max_completion_length, temperature, beta, loss_type, ...).
        seed: training seed (sampling order, dropout, generation).
        device: ``auto`` (CUDA when visible, else CPU), ``cpu`` or ``cuda``.
        precision: ``auto`` (bf16 where the hardware runs it natively, else fp32 on CPU / fp16 on
            old GPUs), ``bf16``, ``fp16`` or ``fp32``; see rlvr.hardware.
    """

    def __init__(
        self,
        sft: dict[str, Any],
        grpo: dict[str, Any],
        seed: int = 0,
        device: str = "auto",
        precision: str = "auto",
    ):
        self.sft = dict(sft)
        self.grpo = dict(grpo)
        self.sft_enabled = bool(self.sft.pop("enabled", True))
        self.grpo_enabled = bool(self.grpo.pop("enabled", True))
        self.seed = seed
        self.device = device
        self.precision = precision

    @functools.cached_property
    def hardware(self) -> hardware.Hardware:
        return hardware.resolve(self.device, self.precision)

    def place(self, model: Any) -> Any:
        """Move a freshly loaded model to the training device, so evaluations before training run there too.

        Quantised models (bitsandbytes) are placed by their loader and stay where they are.
        """
        if getattr(model, "hf_device_map", None) or getattr(model, "is_quantized", False):
            return model
        return model.to(self.hardware.device)

    # -- configuration -------------------------------------------------------------------------------
    def sft_config(self, output_dir: Path) -> Any:
        from trl import SFTConfig

        return SFTConfig(
            output_dir=str(output_dir),
            report_to="none",
            seed=self.seed,
            data_seed=self.seed,
            **self.hardware.trainer_args(),
            **self.sft,
        )

    def grpo_config(self, output_dir: Path, reward_weights: list[float] | None = None) -> Any:
        from trl import GRPOConfig

        return GRPOConfig(
            output_dir=str(output_dir),
            report_to="none",
            seed=self.seed,
            data_seed=self.seed,
            reward_weights=reward_weights,
            **self.hardware.trainer_args(),
            **self.grpo,
        )

    def validate(self) -> list[ConfigIssue]:
        from trl import GRPOConfig, SFTConfig

        issues = hardware.issues(self.device, self.precision)
        if issues:
            return issues
        checks: list[tuple[bool, str, dict[str, Any], type, Callable[[Path], Any]]] = [
            (self.sft_enabled, "training_loop.sft", self.sft, SFTConfig, self.sft_config),
            (self.grpo_enabled, "training_loop.grpo", self.grpo, GRPOConfig, self.grpo_config),
        ]
        for enabled, key, values, cls, build in checks:
            if not enabled:
                continue
            key_issues = _check_keys(key, values, cls)
            issues.extend(key_issues)
            if key_issues:
                continue
            for name in ("learning_rate", "max_steps"):
                if name in values and not values[name] > 0:
                    issues.append(
                        ConfigIssue(f"{key}.{name}", values[name], "must be > 0", "set a positive value")
                    )
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    build(Path(tmp))  # TRL's own __post_init__ checks (divisibility etc.)
            except (ValueError, TypeError) as exc:
                issues.append(
                    ConfigIssue(key, "(combination)", f"rejected by {cls.__name__}: {exc}", "see the message")
                )
        if self.grpo_enabled:
            g = self.grpo
            if g.get("use_vllm"):
                issues.extend(_vllm_rollout_issues(g, self.hardware.device))
            if g.get("num_generations", 8) < 2:
                issues.append(
                    ConfigIssue(
                        "training_loop.grpo.num_generations",
                        g["num_generations"],
                        "must be >= 2: GRPO compares completions within a group",
                        "set 4 or 8",
                    )
                )
            if "temperature" in g and not g["temperature"] > 0:
                issues.append(
                    ConfigIssue(
                        "training_loop.grpo.temperature", g["temperature"], "must be > 0", "set e.g. 1.0"
                    )
                )
            if "max_completion_length" in g and not g["max_completion_length"] > 0:
                issues.append(
                    ConfigIssue(
                        "training_loop.grpo.max_completion_length",
                        g["max_completion_length"],
                        "must be > 0",
                        "set e.g. 64",
                    )
                )
        return issues

    # -- running -------------------------------------------------------------------------------------
    def run(
        self,
        model: Any,
        tokenizer: Any,
        train_dataset: Any,
        rewards: Any,
        prompt: Any,
        emit: Callable[[Any], None],
        evaluate: Callable[..., ev.EvalResult],
        eval_every: int,
        run_dir: Path,
        resume: tuple[str, Path] | None = None,
        guard: Any = None,
    ) -> TrainOutcome:
        """Train ``model`` in place; ``evaluate(model, label, step, reuse=None)`` runs held-out
        evaluation, or records ``reuse`` (an evaluation of the same weights) under the new label.

        ``resume`` is (phase, checkpoint): an SFT checkpoint resumes SFT and then runs GRPO;
        a GRPO checkpoint skips SFT (its weights are in the checkpoint) and resumes GRPO.
        ``guard`` (a PreemptionGuard) stops training cleanly with a checkpoint on SIGTERM or USR2.
        """
        outcome = TrainOutcome(model=model, hardware=self.hardware.record())
        for message in hardware.warnings(self.device, self.precision):
            emit(ev.Warning_(message))
        extra = [CompletionMarker()] + ([guard] if guard is not None else [])
        phase, ckpt = resume if resume else (None, None)
        if self.sft_enabled and phase != "grpo":
            model = self._run_sft(
                model,
                tokenizer,
                train_dataset,
                prompt,
                emit,
                evaluate,
                eval_every,
                run_dir,
                outcome,
                extra,
                ckpt if phase == "sft" else None,
            )
            self._stop_if_preempted(guard, "sft", outcome)
            if self.grpo_enabled:
                outcome.evals.append(
                    evaluate(model, "after_sft", outcome.steps["sft"], outcome.eval_of_last_weights())
                )
        if self.grpo_enabled:
            model = self._run_grpo(
                model,
                tokenizer,
                train_dataset,
                rewards,
                emit,
                evaluate,
                eval_every,
                run_dir,
                outcome,
                extra,
                ckpt if phase == "grpo" else None,
            )
            self._stop_if_preempted(guard, "grpo", outcome)
        outcome.model = model
        return outcome

    @staticmethod
    def _stop_if_preempted(guard: Any, phase: str, outcome: TrainOutcome) -> None:
        if guard is not None and guard.requested:
            raise Preempted(
                f"stopped by {signal.Signals(guard.signum).name} during {phase} at step "
                f"{outcome.steps.get(phase)}; checkpoint saved"
            )

    def _run_sft(
        self, model, tokenizer, dataset, prompt, emit, evaluate, eval_every, run_dir, outcome, extra, ckpt
    ) -> Any:
        from trl import SFTTrainer

        sft_data = dataset.map(
            lambda row: {
                "completion": [{"role": "assistant", "content": prompt.format_answer(row["answer"])}]
            },
            remove_columns=[c for c in dataset.column_names if c != "prompt"],
        )
        args = _checkpointing_follows_model(self.sft_config(run_dir / "checkpoints" / "sft"), self.sft, model)
        bridge = EventBridge(
            emit, "sft", args.max_steps, eval_every, lambda step: evaluate(model, "sft", step)
        )
        trainer = _quiet(
            SFTTrainer(
                model=model,
                args=args,
                train_dataset=sft_data,
                processing_class=tokenizer,
                callbacks=[bridge, *extra],
            )
        )
        return _train(trainer, "sft", bridge, ckpt, outcome)

    def _run_grpo(
        self, model, tokenizer, dataset, rewards, emit, evaluate, eval_every, run_dir, outcome, extra, ckpt
    ) -> Any:
        from trl import GRPOTrainer

        args = _checkpointing_follows_model(
            self.grpo_config(run_dir / "checkpoints" / "grpo", rewards.weights), self.grpo, model
        )
        rewards.group_size = args.num_generations
        bridge = EventBridge(
            emit,
            "grpo",
            args.max_steps,
            eval_every,
            lambda step: evaluate(model, "grpo", step),
            extra_metrics=rewards.counters,
        )
        trainer = _quiet(
            GRPOTrainer(
                model=model,
                reward_funcs=rewards.functions,
                args=args,
                train_dataset=dataset,
                processing_class=tokenizer,
                callbacks=[bridge, *extra],
            )
        )
        return _train(trainer, "grpo", bridge, ckpt, outcome)
