"""End-of-run report: accuracy before / after SFT / after GRPO with 95% CIs, steps, wall time, plots.

A run on several tasks or with extra evaluation sets also gets a table per task and per set
(each stage's accuracy with its CI) and one accuracy curve per task and set. A curriculum run
(rlvr.data.curriculum) also gets its difficulty over the GRPO steps, as a table row and a panel.
A run continued after a preemption (``resume``) reports the whole run: the evaluations, phases,
training curves and wall time of its earlier attempts come from rlvr.records.run_history.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from rlvr import events as ev
from rlvr.evaluation.results import answer_spread, constant_gain
from rlvr.records.learning import stage_changes
from rlvr.runtime.charts import save_chart
from rlvr.runtime.io import atomic_write_json, atomic_write_text
from rlvr.stages import EvalLabel, run_order

STAGE_NAMES: dict[str, str] = {
    EvalLabel.BASELINE: "base model",
    EvalLabel.AFTER_SFT: "after SFT",
    EvalLabel.FINAL: "final",
}
# The GRPO stage's start and end sampled at the training temperature (evaluation.sampled).
SAMPLED_NAMES: dict[str, str] = {EvalLabel.AFTER_SFT_SAMPLED: "after SFT", EvalLabel.FINAL_SAMPLED: "final"}


def report_rows(evaluations: list[ev.EvalResult]) -> list[dict[str, Any]]:
    """Baseline, after-SFT and final rows (in-training evaluations go to the plot, not the table), each
    with how varied its answers are beside the gold answers (``answers``: degenerate outputs, issue 56)."""
    return [
        {"stage": STAGE_NAMES[e.label], **e.record(), "answers": answer_spread(e.evaluation).to_dict()}
        for e in evaluations
        if e.label in STAGE_NAMES
    ]


def change_records(evaluations: list[ev.EvalResult]) -> list[dict[str, Any]]:
    """report.json's ``paired_changes``: each stage's paired change, with ``degenerate`` saying why a
    change between greedy evaluations is only a constant answer's frequency (when it is)."""
    by_label = {e.label: e.evaluation for e in evaluations}
    records = []
    for c in stage_changes(evaluations):
        why = constant_gain(by_label[c.before], by_label[c.after], c.change)
        records.append({**c.record(), **({"degenerate": why} if why else {})})
    return records


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


PANEL_INCHES = (5.5, 4.0)  # one panel of training.png


def _phase_signal(ax: Any, history: list[dict[str, float]], phase: str) -> None:
    """One phase's training curve on its own axis, over that phase's steps: SFT/RFT loss, GRPO mean
    reward (and each task's, for a mixture)."""
    key = f"{phase}/reward/mean" if phase == "grpo" else f"{phase}/loss"
    rows = [h for h in history if key in h]
    name = phase.upper()
    ax.plot(
        [h["step"] for h in rows],
        [h[key] for h in rows],
        label="reward (mean)" if phase == "grpo" else "loss",
    )
    if phase == "grpo":  # a mixture: each task's mean reward (logged when a generation batch was scored)
        for task_key in sorted({k for h in history for k in h if k.startswith("grpo/reward/task/")}):
            task_rows = [h for h in history if task_key in h]
            task = task_key.removeprefix("grpo/reward/task/").removesuffix("/mean")
            ax.plot(
                [h["step"] for h in task_rows],
                [h[task_key] for h in task_rows],
                "--",
                label=f"reward: {task}",
            )
    ax.set_xlabel(f"{name} step")
    ax.set_ylabel("mean reward per completion" if phase == "grpo" else "training loss")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_title(f"{name} training {'reward' if phase == 'grpo' else 'loss'}")
    ax.legend(loc="best", fontsize="small")


MIN_PHASE_SHARE = 0.25  # of the run-step axis: a 10-step GRPO phase after 500 SFT steps stays readable


def phase_widths(steps: dict[str, int]) -> list[float]:
    """Each phase's share of the run-step axis: in proportion to its steps, but at least
    :data:`MIN_PHASE_SHARE` (the others shrink in proportion to make room).

    >>> phase_widths({"sft": 80, "grpo": 80})
    [0.5, 0.5]
    >>> [round(w, 3) for w in phase_widths({"sft": 500, "grpo": 10})]
    [0.75, 0.25]
    """
    total = sum(steps.values())
    shares = [n / total for n in steps.values()] if total else []
    short = [sh < MIN_PHASE_SHARE for sh in shares]
    floor = min(MIN_PHASE_SHARE, 1 / max(1, len(shares)))
    rest = 1.0 - floor * sum(short)
    long_total = sum(sh for sh, is_short in zip(shares, short, strict=True) if not is_short)
    return [floor if is_short else rest * sh / long_total for sh, is_short in zip(shares, short, strict=True)]


def _phase_scale(ax: Any, steps: dict[str, int]) -> None:
    """A run-step axis where each phase spans :func:`phase_widths` of it, linear within a phase, with
    a margin of 3% of the drawn axis at each end; the ticks stay real step numbers, and the phases'
    first and last steps are among them."""
    from matplotlib.ticker import FixedLocator, MaxNLocator

    bounds = np.cumsum([0, *steps.values()]).astype(float)  # run step where each phase starts / ends
    total = bounds[-1]
    places = np.cumsum([0.0, *phase_widths(steps)]) * total  # the same points on the drawn axis
    # The margins: the first and last phases' slopes continue beyond the run.
    first = (bounds[1] - bounds[0]) / (places[1] - places[0])  # run steps per drawn unit
    last = (bounds[-1] - bounds[-2]) / (places[-1] - places[-2])
    margin = 0.03 * total
    xs = np.concatenate([[-margin * first], bounds, [total + margin * last]])
    ys = np.concatenate([[-margin], places, [total + margin]])
    ax.set_xscale("function", functions=(lambda x: np.interp(x, xs, ys), lambda y: np.interp(y, ys, xs)))
    ax.set_xlim(xs[0], xs[-1])
    ticks = {float(b) for b in bounds}
    for start, end, width in zip(bounds, bounds[1:], phase_widths(steps), strict=False):
        locator = MaxNLocator(nbins=max(1, round(8 * width)), integer=True)
        ticks |= {t for t in locator.tick_values(start, end) if start < t < end}
    ax.xaxis.set_major_locator(FixedLocator(sorted(ticks)))
    widened = [p.upper() for p, n in steps.items() if n / total < MIN_PHASE_SHARE]
    if widened:  # the axis is not linear across phases: say so where the reader looks
        ax.set_xlabel(f"run step (all phases; {', '.join(widened)} drawn wider than its share)")


def _eval_x(e: ev.EvalResult, offsets: dict[str, int]) -> int:
    """An evaluation's place on the run's step axis: in-training ones count within their phase."""
    return offsets.get(e.label, 0) + e.step if e.label in offsets else e.step


def _plot_evaluations(
    ax: Any,
    evaluations: list[ev.EvalResult],
    sampled: list[ev.EvalResult],
    steps: dict[str, int],
    curve: bool,
) -> None:
    """Greedy accuracy (95% CI, in %) and sampled pass@1 over the run's steps, phases split by dotted
    lines, each phase's part of the axis in proportion to its steps (a short one widened to
    :data:`MIN_PHASE_SHARE`)."""
    from matplotlib.ticker import PercentFormatter

    offsets, done = {}, 0
    for phase, n in steps.items():
        offsets[phase] = done
        if done:
            ax.axvline(done, color="grey", linestyle=":", linewidth=1)
        ax.text(done + n / 2, 1.02, phase.upper(), ha="center", va="bottom", fontsize="small",
                transform=ax.get_xaxis_transform())  # fmt: skip
        done += n
    if done and len(steps) > 1:  # the whole run, so the phase names sit over their phases
        _phase_scale(ax, steps)
    elif done:
        ax.set_xlim(-0.03 * done, 1.03 * done)
    points = sorted(evaluations, key=lambda e: _eval_x(e, offsets))
    xs = [_eval_x(e, offsets) for e in points]
    if points:
        ax.errorbar(
            xs,
            [100 * e.accuracy for e in points],
            yerr=[
                [100 * (e.accuracy - e.ci_low) for e in points],
                [100 * (e.ci_high - e.accuracy) for e in points],
            ],
            marker="o",
            capsize=3,
            label=("starting level" if curve else "greedy accuracy") + " (held out)",
        )
    if sampled:
        ax.plot(
            [e.step for e in sampled],
            [100 * e.evaluation.summary.pass_at_k.get(1, e.accuracy) for e in sampled],
            "s",
            markersize=8,
            fillstyle="none",
            label="sampled pass@1 (training temperature)",
        )
    for name in sorted({g for e in points for g in e.evaluation.groups()}):
        at = [
            (x, e.evaluation.groups()[name])
            for x, e in zip(xs, points, strict=True)
            if name in e.evaluation.groups()
        ]
        ax.plot([x for x, _ in at], [100 * g.accuracy for _, g in at], marker=".", linestyle="--", label=name)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize="small")
    ax.set_ylim(-3, 103)  # a 0% or 100% point stays visible, not half under the frame
    ax.yaxis.set_major_formatter(PercentFormatter(100))
    ax.set_ylabel("held-out accuracy (%)")
    if len(steps) <= 1:
        ax.xaxis.get_major_locator().set_params(integer=True)
    if not ax.get_xlabel():
        ax.set_xlabel("run step (all phases)" if len(steps) > 1 else "training step")
    ax.set_title("Held-out accuracy (95% CI)", pad=20)  # above the phase names


def training_figure(
    history: list[dict[str, float]],
    evaluations: list[ev.EvalResult],
    sampled: list[ev.EvalResult],
    steps: dict[str, int],
) -> Any:
    """training.png: a panel per training phase that logged a curve, the held-out evaluations over the
    run's steps, and a curriculum's difficulty when there is one."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    curve = difficulty_curve(history)
    phases = [p for p in steps if any(f"{p}/reward/mean" in h or f"{p}/loss" in h for h in history)]
    panels = len(phases) + 1 + bool(curve)
    fig = Figure(figsize=(PANEL_INCHES[0] * panels, PANEL_INCHES[1]), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, panels, squeeze=False)[0]
    for ax, phase in zip(axes, phases, strict=False):
        _phase_signal(ax, history, phase)
    _plot_evaluations(axes[len(phases)], evaluations, sampled, steps, bool(curve))
    if curve:
        _plot_difficulty(axes[-1], curve)
    return fig


def _plot(
    history: list[dict[str, float]],
    evaluations: list[ev.EvalResult],
    sampled: list[ev.EvalResult],
    steps: dict[str, int],
    path: Path,
) -> Path:
    """The figure of :func:`training_figure`, in the format of ``path``'s suffix (PNG, SVG or PDF)."""
    return save_chart(training_figure(history, evaluations, sampled, steps), path, dpi=100)


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


def _changed_lines(attempts: list[dict[str, Any]]) -> list[str]:
    """What each resumed attempt changed from the checkpoint it continued (attempts.json
    ``changed_settings``, allowed by ``resume_allow_changes``): the report of such a run says so."""
    changed = [a for a in attempts if a.get("changed_settings")]
    if not changed:
        return []
    return [
        "Settings changed on resume (resume_allow_changes=true; saved -> now):",
        "",
        *[
            f"- attempt {a.get('attempt', '?')}, from {a.get('resumed_from')}: "
            + "; ".join(a["changed_settings"])
            for a in changed
        ],
        "",
    ]


def _budget_lines(record: dict[str, Any] | None) -> list[str]:
    """``budget_minutes``: each part of the run planned and as it went (this attempt's clock; rows of
    rlvr.training_loop.budget.planned_vs_actual), as a table."""
    if not record:
        return []

    def cell(seconds: float | None) -> str:
        return "-" if seconds is None else f"{seconds / 60:.1f} min ({seconds:.0f} s)"

    return [
        f"Time budget: {record['budget_minutes']:g} min (budget_minutes; the plan: budget_plan.json), planned "
        "against actual:",
        "",
        "| part | planned | actual |",
        "|---|---|---|",
        *[f"| {r['part']} | {cell(r['planned_s'])} | {cell(r['actual_s'])} |" for r in record["rows"]],
        "",
    ]


def _throughput_text(found: dict[str, Any] | None) -> str:
    """`` (5,400 tokens/s, MFU 0.5%)`` for a phase's throughput record (rlvr.training_loop.throughput)."""
    if not found:
        return ""
    mfu = f", MFU {found['mfu']:.1%}" if found.get("mfu") is not None else ""
    return f" ({found['tokens_per_second']:,.0f} tokens/s{mfu})"


def _markdown(
    meta: dict[str, Any],
    report: dict[str, Any],
    sampled: list[ev.EvalResult],
    train_seconds: dict[str, float],
) -> list[str]:
    """The lines of report.md: the record of :func:`write_report` (``report``) as tables and text;
    ``train_seconds`` unrounded."""
    lora, rows, groups = report.get("lora"), report["accuracy"], report["groups"]
    changes, steps, curve = report["paired_changes"], report["steps"], report.get("curriculum")
    attempts, warnings = report["attempts"], meta.get("warnings", [])
    return [
        f"# Run report: {meta.get('model')} on {', '.join(meta.get('tasks', []))}",
        "",
        *(
            [f"**{meta.get('status')}**: what the run did not learn:", "", *[f"- {w}" for w in warnings], ""]
            if warnings
            else []
        ),
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
                *[
                    f"- {c['stage']}: {c['text']}"
                    + (f" **Degenerate**: {c['degenerate']}." if c.get("degenerate") else "")
                    for c in changes
                ],
                "",
            ]
            if changes
            else []
        ),
        *[f"Note: {n}\n" for n in meta.get("notes", []) if n not in warnings],
        "Training: "
        + (
            ", ".join(
                f"{phase.upper()} {n} steps in {train_seconds.get(phase, 0.0) / 60:.1f} min"
                + _throughput_text(meta.get("throughput", {}).get(phase))
                for phase, n in steps.items()
            )
            or "none"
        )
        + _hardware_text(report["hardware"])
        + ". "
        + _wall_text(attempts),
        "",
        *_changed_lines(attempts),
        *_budget_lines(meta.get("budget")),
        *(_curriculum_lines(curve) if curve else []),
        "![training](training.png)",
    ]


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
    (rlvr.records.run_history.RunHistory) adds the earlier attempts' phases, training time, curves and
    attempts; ``attempt`` is this attempt's entry of attempts.json (else one of ``seconds``).
    ``wall_seconds`` is the sum over the attempts, each attempt's own is in ``attempts``.
    """
    from rlvr.records.run_history import RunHistory

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
    changes = change_records(evaluations + sampled)
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
    lines = _markdown(meta, report, sampled, train_seconds)
    atomic_write_text(run_dir / "report.md", "\n".join(lines) + "\n")
    plot = _plot(
        history.train_history(outcome.history), evaluations, sampled, steps, run_dir / "training.png"
    )
    return {"report": str(run_dir / "report.md"), "plot": str(plot)}
