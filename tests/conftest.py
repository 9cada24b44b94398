"""Shared test helpers: compose the real conf/ with Hydra's compose API."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True)
def _environment_as_before():
    """Each test leaves os.environ as it found it: a variable one test sets in this process (vLLM's
    usage-stats opt-out, a rank) must not reach the next test's runs, in process or started."""
    saved = dict(os.environ)
    yield
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)


# CONTRIBUTING.md "Tests": a test's folder says its tier, and its markers say the same.
TIERS = {"integration", "long", "slow", "slurm"}
FOLDER_TIERS = {
    "unit": [set()],
    "static": [set()],
    "integration": [{"integration"}, {"integration", "long"}],
    "slow": [{"slow"}],
    "slurm": [{"slurm"}],
}


def folder_marker_issues(items: list[pytest.Item]) -> list[str]:
    """Each test whose tier markers are not its folder's, and each unit file that starts an
    interpreter (:func:`interpreter_starts`: a unit test starts none; such a test goes to
    integration/)."""
    issues, unit_files = [], set()
    for item in items:
        path = Path(str(item.path))
        folder = path.relative_to(ROOT / "tests").parts[0] if path.is_relative_to(ROOT / "tests") else None
        if folder not in FOLDER_TIERS:
            continue
        tiers = {m.name for m in item.iter_markers()} & TIERS
        if tiers not in FOLDER_TIERS[folder]:
            wanted = " or ".join("+".join(sorted(t)) or "none" for t in FOLDER_TIERS[folder])
            issues.append(
                f"{item.nodeid}: markers {sorted(tiers) or 'none'} in tests/{folder}/, which takes {wanted}: "
                "move the test to the folder of its tier, or fix its markers"
            )
        if folder == "unit":
            unit_files.add(path)
    for path in sorted(unit_files):
        for found in interpreter_starts(path.read_text()):
            issues.append(
                f"{path.relative_to(ROOT)}: a unit test file names {found} (a unit test starts no "
                "interpreter): move the tests that start one to tests/integration/"
            )
    return issues


def interpreter_starts(source: str) -> list[str]:
    """What a test file's code does to start a Python interpreter: a command of ``sys.executable``, or
    (torch.)multiprocessing's spawn of one per process."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "executable" and ast.unparse(node.value) == "sys":
            found.append("sys.executable")
        elif isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            methods = [
                a.value
                for a in node.args
                if isinstance(a, ast.Constant) and a.value in ("spawn", "forkserver")
            ]
            if name == "spawn" or (name in ("get_context", "set_start_method") and methods):
                found.append(ast.unparse(node.func) + "(...)")
    return found


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: every collected test is judged
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    issues = folder_marker_issues(items)
    if issues:
        raise pytest.UsageError(
            'folders and markers disagree (CONTRIBUTING.md "Tests"):\n  ' + "\n  ".join(issues)
        )


def compose_config(overrides: list[str] | None = None, config_name: str = "config") -> DictConfig:
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name=config_name, overrides=overrides or [], return_hydra_config=False)


@pytest.fixture
def compose_cfg():
    return compose_config


def loop_collaborators() -> dict:
    """What the orchestrator passes a training loop at instantiation: a prompt and a reward set (one
    format term of weight 0.5, no verifier needed)."""
    from rlvr.prompts import PromptTemplate
    from rlvr.reward import FormatReward, RewardSet

    prompt = PromptTemplate("{question}")
    rewards = RewardSet(
        {"format": FormatReward(0.5, prompt=prompt, verifier=None)},
        plugin_timeout_s=60.0,
        completions_per_step=0,
        seed=0,
        prompt=prompt,
        verifier=None,
    )
    return {"prompt": prompt, "rewards": rewards}


def make_loop(**kwargs):
    """A TrainingLoop built with :func:`loop_collaborators`."""
    from rlvr.training_loop import TrainingLoop

    kwargs.setdefault("signal", SIGNAL)
    kwargs.setdefault("rft", {"enabled": False})
    for key, value in {"seed": 0, "device": "auto", "precision": "auto"}.items():  # conf/training_loop's
        kwargs.setdefault(key, value)
    return TrainingLoop(**loop_collaborators(), **kwargs)


# conf/training_loop/sft_grpo.yaml's training_loop.signal
SIGNAL = {"skip_zero_advantage": True, "dynamic_sampling": False, "max_rounds": 4}


def make_eval_result(label: str, step: int, correct: int, n: int = 200):
    """An EvalResult over ``n`` questions of which ``correct`` were answered right (no model needed)."""
    from rlvr import events as ev
    from rlvr.evaluation.results import Evaluation, SampleRecord

    samples = [
        SampleRecord(
            i, "t", f"q{i}", "1", ["c"], ["1" if i < correct else "0"], [1.0 if i < correct else 0.0], ["ok"]
        )
        for i in range(n)
    ]
    return ev.EvalResult(label, step, Evaluation(samples, ks=[1], seconds=1.0, samples_per_second=10.0))


def make_evaluator(overrides: list[str] | None = None, config_name: str = "config", **kwargs):
    """The Evaluator conf/evaluation/default.yaml builds (``overrides`` compose into it), with a plain
    prompt and no verifier unless ``kwargs`` give them; other ``kwargs`` replace YAML values."""
    from hydra.utils import instantiate

    from rlvr.prompts import PromptTemplate

    node = compose_config(overrides, config_name).evaluation
    kwargs = {"prompt": PromptTemplate("{question}"), "verifier": None, **kwargs}
    return instantiate(node, _convert_="all", _partial_=True)(**kwargs)


def verifier_pool(**kwargs):
    """A VerifierPool with conf/verifier/sandbox.yaml's limits, ``kwargs`` replacing them."""
    from omegaconf import OmegaConf

    from rlvr.verifier import VerifierPool

    limits = OmegaConf.to_container(OmegaConf.load(CONF / "verifier" / "sandbox.yaml"))
    limits.pop("_target_")
    return VerifierPool(**{**limits, **kwargs})


def conf_checker(name: str, **kwargs):
    """The answer checker conf/data/checker/<name>.yaml builds, ``kwargs`` replacing its values."""
    from hydra.utils import get_object
    from omegaconf import OmegaConf

    values = OmegaConf.to_container(OmegaConf.load(CONF / "data" / "checker" / f"{name}.yaml"))
    return get_object(values.pop("_target_"))(**{**values, **kwargs})


def tiny_model(**kwargs):
    """The TinyRandomModel conf/model/tiny.yaml builds, ``kwargs`` replacing its values."""
    from hydra.utils import get_object
    from omegaconf import OmegaConf

    values = OmegaConf.to_container(compose_config(["model=tiny"]).model, resolve=True)
    return get_object(values.pop("_target_"))(**{**values, **kwargs})
