"""End-of-run report: accuracy before / after SFT / after GRPO with 95% CIs, steps, wall time, plots.

A run on several tasks or with extra evaluation sets also gets a table per task and per set
(each stage's accuracy with its CI) and one accuracy curve per task and set. A curriculum run
(rlvr.data.curriculum) also gets its difficulty over the GRPO steps, as a table row and a panel.
A run continued after a preemption (``resume``) reports the whole run: the evaluations, phases,
training curves and wall time of its earlier attempts come from rlvr.run_history.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlvr import events as ev
from rlvr.evaluation.schedule import Stage, run_order, stage_changes
from rlvr.io import atomic_write_json, atomic_write_text

STAGE_NAMES: dict[str, str] = {
    Stage.BASELINE: "base model",
    Stage.AFTER_SFT: "after SFT",
    Stage.FINAL: "final",
}
# The GRPO stage's start and end sampled at the training temperature (evaluation.sampled).
SAMPLED_NAMES: dict[str, str] = {Stage.AFTER_SFT_SAMPLED: "after SFT", Stage.FINAL_SAMPLED: "final"}


def report_rows(evaluations: list[ev.EvalResult]) -> list[dict[str, Any]]:
    """Baseline, after-SFT and final rows (in-training evaluations go to the plot, not the table)."""
    return [{"stage": STAGE_NAMES[e.label], **e.record()} for e in evaluations if e.label in STAGE_NAMES]


LEVEL = "grpo/curriculum/level"


def difficulty_curve(history: list[dict[str, float]]) -> list[dict[str, float]]:
    """The curriculum's level per GRPO step (overall and per attribute), from the step metrics.

    >>> difficulty_curve([{"step": 1, "grpo/curriculum/level": 0.0, "grpo/curriculum/level/n": 0.0},
    ...                   {"step": 2, "grpo/reward/mean": 0.5}])
    [{'step': 1, 'level': 0.0, 'n': 0.0}]
    """
    prefix = LEVEL + "/"
    return [
        {
            "step": h["step"],
            "level": h[LEVEL],
            **{k.removeprefix(prefix): v for k, v in h.items() if k.startswith(prefix)},
        }
        for h in history
        if LEVEL in h
    ]


def _plot_difficulty(ax: Any, curve: list[dict[str, float]]) -> None:
    steps = [c["step"] for c in curve]
    ax.step(steps, [c["level"] for c in curve], where="post", label="level (highest attribute)", linewidth=2)
    for name in sorted({k for c in curve for k in c} - {"step", "level"}):
        ax.step(steps, [c.get(name) for c in curve], where="post", linestyle="--", label=name)
    ax.set_xlabel("GRPO step")
    ax.set_ylabel("reasoning-gym level")
    ax.set_title("Curriculum difficulty")
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.legend(loc="best", fontsize="small")


def _plot(history: list[dict[str, float]], evaluations: list[ev.EvalResult], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = difficulty_curve(history)
    fig, axes = plt.subplots(1, 3 if curve else 2, figsize=(16 if curve else 11, 4))
    ax_r, ax_a = axes[0], axes[1]
    if curve:
        _plot_difficulty(axes[2], curve)
    offset = 0
    for phase in ("sft", "grpo"):
        rows = [h for h in history if f"{phase}/loss" in h or f"{phase}/reward/mean" in h]
        key = f"{phase}/reward/mean" if phase == "grpo" else f"{phase}/loss"
        rows = [h for h in rows if key in h]
        if rows:
            label = "GRPO reward (mean)" if phase == "grpo" else "SFT loss"
            ax_r.plot([offset + h["step"] for h in rows], [h[key] for h in rows], label=label)
            offset += int(max(h["step"] for h in rows)) if phase == "sft" else 0
    # A mixture: each task's mean reward (logged when a generation batch was scored).
    task_keys = sorted({k for h in history for k in h if k.startswith("grpo/reward/task/")})
    for key in task_keys:
        rows = [h for h in history if key in h]
        name = key.removeprefix("grpo/reward/task/").removesuffix("/mean")
        ax_r.plot(
            [offset + h["step"] for h in rows],
            [h[key] for h in rows],
            linestyle="--",
            label=f"reward: {name}",
        )
    ax_r.set_xlabel("training step (SFT then GRPO)")
    ax_r.set_title("Training signal")
    if ax_r.get_legend_handles_labels()[0]:  # an evaluation-only run has no training curve
        ax_r.legend(loc="best")
    points = sorted(evaluations, key=lambda e: (e.label != Stage.BASELINE, e.label == Stage.FINAL))
    xs, ys, lo, hi = [], [], [], []
    sft_steps = max([e.step for e in evaluations if e.label == Stage.AFTER_SFT], default=0)
    for e in points:
        x = e.step + (sft_steps if e.label == Stage.GRPO else 0)
        xs.append(x)
        ys.append(e.accuracy)
        lo.append(e.accuracy - e.ci_low)
        hi.append(e.ci_high - e.accuracy)
    if xs:
        headline = "starting level (held out)" if curve else "training tasks (held out)"
        ax_a.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=headline)
    for name in sorted({g for e in points for g in e.evaluation.groups()}):
        group_curve = [
            (x, e.evaluation.groups()[name])
            for x, e in zip(xs, points, strict=True)
            if name in e.evaluation.groups()
        ]
        ax_a.plot(
            [x for x, _ in group_curve],
            [g.accuracy for _, g in group_curve],
            marker=".",
            linestyle="--",
            label=name,
        )
    if len(ax_a.get_legend_handles_labels()[0]) > 1:
        ax_a.legend(loc="best", fontsize="small")
    ax_a.set_ylim(0, 1)
    ax_a.set_xlabel("training step")
    ax_a.set_title("Held-out accuracy (95% CI)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def group_rows(evaluations: list[ev.EvalResult]) -> list[dict[str, Any]]:
    """One row per task (of a mixture) and per extra evaluation set: each report stage's summary."""
    stages = [e for e in evaluations if e.label in STAGE_NAMES]
    names = sorted(
        {g for e in stages for g in e.evaluation.groups()}, key=lambda g: (g.startswith("set/"), g)
    )
    return [
        {
            "group": name,
            **{
                e.label: e.evaluation.groups()[name].to_dict()
                for e in stages
                if name in e.evaluation.groups()
            },
        }
        for name in names
    ]


def _group_lines(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    labels = [label for label in STAGE_NAMES if any(label in r for r in rows)]

    def cell(summary: dict[str, Any] | None) -> str:
        if summary is None:
            return "-"
        return f"{summary['accuracy']:.1%} ({summary['ci_low']:.1%} - {summary['ci_high']:.1%}, n={summary['n']})"

    return [
        "Per task and evaluation set (task/ = a training task's held-out questions, set/ = an extra "
        "evaluation set; accuracy, 95% CI, n):",
        "",
        "| group | " + " | ".join(STAGE_NAMES[label] for label in labels) + " |",
        "|---" * (len(labels) + 1) + "|",
        *[f"| {r['group']} | " + " | ".join(cell(r.get(label)) for label in labels) + " |" for r in rows],
        "",
    ]


def _sampled_lines(sampled: list[ev.EvalResult]) -> list[str]:
    """pass@1 (mean accuracy over the samples) and pass@k of the sampled stage evaluations."""
    if not sampled:
        return []
    lines = ["Sampled at the training temperature (pass@1 = mean accuracy of the samples):", ""]
    for e in sampled:
        summary = e.evaluation.summary
        at_k = ", ".join(f"pass@{k} {v:.1%}" for k, v in summary.pass_at_k.items())
        lines.append(f"- {SAMPLED_NAMES[e.label]} (step {e.step}, n={summary.n}): {at_k}")
    return [*lines, ""]


def _curriculum_lines(curve: list[dict[str, float]]) -> list[str]:
    levels = [int(c["level"]) for c in curve]
    moves = sum(a != b for a, b in zip(levels, levels[1:], strict=False))
    return [
        f"Curriculum: level {levels[0]} at GRPO step {int(curve[0]['step'])}, {levels[-1]} at step "
        f"{int(curve[-1]['step'])} (lowest {min(levels)}, highest {max(levels)}, {moves} change(s)); "
        "the per-step levels are in report.json and metrics.jsonl, the curve in training.png. The "
        "evaluation above stays on fixed levels (the starting level, and each set/level_<L>).",
        "",
    ]


def lora_summary(final_dir: Path) -> dict[str, Any] | None:
    """The LoRA adapter that ``final/`` holds (PEFT's adapter_config.json), or None for full weights.
    The pipeline saves an adapter unmerged: it loads on its base model (``base``)."""
    from rlvr.model.loader import adapter_quantization

    config = final_dir / "adapter_config.json"
    if not config.is_file():
        return None
    adapter = json.loads(config.read_text())
    targets = adapter.get("target_modules")
    return {
        "r": adapter.get("r"),
        "alpha": adapter.get("lora_alpha"),
        "target_modules": sorted(targets) if isinstance(targets, list) else targets,
        "base": adapter.get("base_model_name_or_path"),
        "quantization": adapter_quantization(final_dir),
        "merged": False,
    }


def _lora_text(lora: dict[str, Any]) -> str:
    targets = lora["target_modules"]
    targets = ", ".join(targets) if isinstance(targets, list) else str(targets)
    base = f"a {lora['quantization']} base" if lora["quantization"] else "its base"
    return (
        f"Trained with LoRA (rank {lora['r']}, alpha {lora['alpha']}, on {targets}) on {base} "
        f"({lora['base']}); final/ holds the adapter only, not merged into the base weights."
    )


def _hardware_text(hw: dict[str, str]) -> str:
    return f" on {hw['device']} in {hw['precision']} ({hw['reason']})" if hw else ""


def _wall_text(attempts: list[dict[str, Any]]) -> str:
    total = sum(a["seconds"] for a in attempts)
    text = f"Wall time (with model load and evaluations): {total / 60:.1f} min"
    if len(attempts) > 1:
        each = ", ".join(f"{a['seconds'] / 60:.1f} min {a.get('status', '?')}" for a in attempts)
        text += f" over {len(attempts)} attempts ({each})"
    return text + "."


def _throughput_text(found: dict[str, Any] | None) -> str:
    """`` (5,400 tokens/s, MFU 0.5%)`` for a phase's throughput record (rlvr.training_loop.throughput)."""
    if not found:
        return ""
    mfu = f", MFU {found['mfu']:.1%}" if found.get("mfu") is not None else ""
    return f" ({found['tokens_per_second']:,.0f} tokens/s{mfu})"


def write_report(
    run_dir: Path,
    evaluations: list[ev.EvalResult],
    outcome: Any,
    meta: dict[str, Any],
    seconds: float,
    history: Any = None,
    attempt: dict[str, Any] | None = None,
) -> dict[str, str]:
    """Write report.json, report.md and training.png into ``run_dir``; return their paths by name.

    ``evaluations`` are the whole run's (those reused from earlier attempts included); ``history``
    (rlvr.run_history.RunHistory) adds the earlier attempts' phases, training time, curves and
    attempts; ``attempt`` is this attempt's entry of attempts.json (else one of ``seconds``).
    ``wall_seconds`` is the sum over the attempts, each attempt's own is in ``attempts``.
    """
    from rlvr.run_history import RunHistory

    history = history or RunHistory()
    evaluations = run_order(evaluations)
    steps = history.steps(outcome.steps)
    train_seconds = history.train_seconds(outcome.seconds)
    this = attempt or {
        "attempt": len(history.attempts) + 1,
        "seconds": round(seconds, 1),
        "status": "COMPLETED",
    }
    attempts = [*history.attempts, this]
    wall = sum(a["seconds"] for a in attempts)
    sampled = [e for e in evaluations if e.label in SAMPLED_NAMES]
    evaluations = [e for e in evaluations if e.label not in SAMPLED_NAMES]
    rows = report_rows(evaluations)
    changes = [c.record() for c in stage_changes(evaluations + sampled)]
    groups = group_rows(evaluations)
    curve = difficulty_curve(history.train_history(outcome.history))
    lora = lora_summary(run_dir / "final")
    report = {
        **meta,
        **({"lora": lora} if lora else {}),
        "accuracy": rows,
        "groups": groups,
        "paired_changes": changes,
        "in_training": [e.record() for e in evaluations if e.label not in STAGE_NAMES],
        "sampled": [e.record() for e in sampled],
        "steps": steps,
        **({"curriculum": curve} if curve else {}),
        "hardware": getattr(outcome, "hardware", {}),
        "train_seconds": {k: round(v, 1) for k, v in train_seconds.items()},
        "wall_seconds": round(wall, 1),
        "attempts": attempts,
        **({"not_reused": history.notes} if history.notes else {}),
    }
    atomic_write_json(run_dir / "report.json", report)
    lines = [
        f"# Run report: {meta.get('model')} on {', '.join(meta.get('tasks', []))}",
        "",
        *([_lora_text(lora), ""] if lora else []),
        "| stage | step | accuracy | 95% CI | n |",
        "|---|---|---|---|---|",
        *[
            f"| {r['stage']} | {r['step']} | {r['accuracy']:.1%} | {r['ci_low']:.1%} - {r['ci_high']:.1%} | {r['n']} |"
            for r in rows
        ],
        "",
        *_sampled_lines(sampled),
        *_group_lines(groups),
        *(
            [
                "What each stage changed, paired on the same questions (95% CI, exact McNemar test):",
                "",
                *[f"- {c['stage']}: {c['text']}" for c in changes],
                "",
            ]
            if changes
            else []
        ),
        *[f"Note: {n}\n" for n in meta.get("notes", [])],
        "Training: "
        + (
            ", ".join(
                f"{phase.upper()} {n} steps in {train_seconds.get(phase, 0.0) / 60:.1f} min"
                + _throughput_text(meta.get("throughput", {}).get(phase))
                for phase, n in steps.items()
            )
            or "none"
        )
        + _hardware_text(getattr(outcome, "hardware", {}))
        + ". "
        + _wall_text(attempts),
        "",
        *(_curriculum_lines(curve) if curve else []),
        "![training](training.png)",
    ]
    atomic_write_text(run_dir / "report.md", "\n".join(lines) + "\n")
    plot = _plot(history.train_history(outcome.history), evaluations, run_dir / "training.png")
    return {"report": str(run_dir / "report.md"), "plot": str(plot)}
