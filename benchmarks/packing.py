"""Padding-free and packed SFT against padded SFT: the default run's SFT phase three ways, one seed.

    .venv/bin/python benchmarks/packing.py                 # the default run's SFT; run it alone on the machine
    .venv/bin/python benchmarks/packing.py --tiny          # the wiring, on the tiny random model (~1 min)
    .venv/bin/python benchmarks/packing.py --analyze-only  # re-print from --out

Each arm is a real ``run_pipeline.py`` run of the default config with GRPO off, the same seed (so the
same training rows in the same order and the same 200 held-out questions), no in-training or
baseline evaluation, and a final greedy evaluation after SFT:

- ``padded``: the default (each step's 16 rows padded to the longest of them);
- ``padding_free``: ``training_loop.sft.padding_free=true`` (and ``max_length=null``, which TRL needs
  without packing): the same 16 rows a step, concatenated into one row whose position ids restart at
  each row, so the loss and the update are the padded run's up to rounding (tests/unit/test_packing.py);
- ``packed``: ``training_loop.sft.packing=true`` with one bin a step of B tokens, B the padded run's
  real tokens a step rounded up to a multiple of 64: about 16 whole rows a step (TRL's best-fit
  decreasing packing), the same step count, so the same rows at about the same pace. Its rows reach
  the steps in another order than the padded run's, so its accuracy may differ by more than rounding.

Prints one markdown table: steps, SFT real tokens/s and seconds (TRL's token count over the summed
step times, report.json ``throughput``: padding is never counted), held-out accuracy with its 95% CI,
and the change from the padded arm on the same questions (paired, McNemar). A finished arm (its
report.json, from the same command line) is reused, so an interrupted benchmark continues.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the scripts import each other as siblings
from learning import ROOT, finished, run  # noqa: E402

ARMS = ("padded", "padding_free", "packed")
# The SFT phase alone, evaluated once at its end.
SFT_ONLY = ["training_loop.grpo.enabled=false", "evaluation.baseline=false", "evaluation.every_n_steps=0",
            "evaluation.sampled=null"]  # fmt: skip
# The tiny random model and a few steps: checks the wiring, measures nothing.
TINY = ["experiment=smoke", "training_loop.sft.max_steps=8", "data.train_size=128"]


def arm_overrides(arm: str, base: list[str], bin_tokens: int | None) -> list[str]:
    """The command line of one arm (``bin_tokens``: the packed arm's bin, from the padded arm)."""
    if arm == "padded":
        return base
    if arm == "padding_free":
        return [*base, "training_loop.sft.padding_free=true", "training_loop.sft.max_length=null"]
    return [*base, "training_loop.sft.packing=true", f"training_loop.sft.max_length={bin_tokens}",
            "training_loop.sft.per_device_train_batch_size=1"]  # fmt: skip


def bin_size(report: dict, multiple: int = 64) -> int:
    """The padded arm's real tokens a step (TRL's count), rounded up to ``multiple``."""
    sft = report["throughput"]["sft"]
    return multiple * math.ceil(sft["tokens"] / sft["steps"] / multiple)


def final_evaluation(run_dir: Path):
    from rlvr.evaluation.results import Evaluation

    report = json.loads((run_dir / "report.json").read_text())
    (final,) = [e for e in report["accuracy"] if e["label"] == "final"]
    return Evaluation.from_dict(json.loads(Path(final["path"]).read_text()))


def row(arm: str, run_dir: Path, padded) -> str:
    from rlvr.evaluation.results import paired

    report = json.loads((run_dir / "report.json").read_text())
    sft = report["throughput"]["sft"]
    evaluation = final_evaluation(run_dir)
    s = evaluation.summary
    change = "" if arm == "padded" else paired(padded, evaluation).text()
    return (
        f"| {arm} | {report['steps']['sft']} | {sft['tokens_per_second']:,.0f} | {sft['seconds']:.1f} | "
        f"{s.accuracy:.1%} [{s.ci_low:.1%}, {s.ci_high:.1%}] (n={s.n}) | {change} |"
    )


def table(out: Path) -> str:
    dirs = {arm: out / arm for arm in ARMS if (out / arm / "report.json").is_file()}
    if "padded" not in dirs:
        raise SystemExit(f"no finished padded arm under {out}")
    padded = final_evaluation(dirs["padded"])
    lines = [
        "| arm | SFT steps | SFT tokens/s (real) | SFT step seconds | held-out accuracy [95% CI] | vs padded, same questions |",
        "|---|---:|---:|---:|---|---|",
    ]
    return "\n".join(lines + [row(arm, path, padded) for arm, path in dirs.items()])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "packing")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--tiny", action="store_true", help="the tiny random model, a few steps")
    parser.add_argument("--arms", nargs="+", choices=ARMS, default=list(ARMS))
    parser.add_argument("--analyze-only", action="store_true")
    parser.add_argument("overrides", nargs="*", help="more run_pipeline.py overrides, for every arm")
    args = parser.parse_args(argv)
    out = args.out / ("tiny" if args.tiny else f"seed{args.seed}")
    base = [f"seed={args.seed}", *(TINY if args.tiny else []), *SFT_ONLY, *args.overrides]
    if not args.analyze_only:
        out.mkdir(parents=True, exist_ok=True)
        arms = ["padded", *(a for a in args.arms if a != "padded")]  # the packed bin comes from padded
        for arm in arms:
            bins = (
                bin_size(json.loads((out / "padded" / "report.json").read_text()))
                if arm == "packed"
                else None
            )
            overrides = arm_overrides(arm, base, bins)
            if not finished(out / arm, overrides):
                run(out / arm, overrides)
    print(table(out))


if __name__ == "__main__":
    main()
