"""Cost bombs: a YAML alias bomb in a config file or a results directory is refused in milliseconds.

A few hundred bytes of nested aliases stand for billions of nodes; Hydra and OmegaConf walk them as
a tree (66 s and 836 MB for 278 bytes, ten times more per level). rlvr.runtime.safe_yaml measures the node
graph before anything builds from it, and the check before Hydra runs it on every config file.
"""

from __future__ import annotations

import time

import pytest
from tests.conftest import ROOT

from rlvr.config.hydra_check import screen_command_line
from rlvr.issues import ConfigValidationError
from rlvr.runtime.safe_yaml import MAX_CONFIG_NODES, YamlRefused, config_file_issue, load_data

SCRIPT = ROOT / "run_pipeline.py"


def alias_bomb(depth: int, header: str = "") -> str:
    """``depth`` levels of ten aliases each to the level below: about 1.1 x 10^(depth + 1) nodes."""
    lines = [header, "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, depth + 1):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("depth", [4, 6, 9])
@pytest.mark.parametrize("where", ["experiment", "rerun record"])
def test_an_alias_bomb_in_a_config_file_is_refused_before_hydra_composes_it(tmp_path, depth, where):
    if where == "experiment":  # --config-dir their_conf experiment=theirs
        (tmp_path / "experiment").mkdir()
        path = tmp_path / "experiment" / "theirs.yaml"
        path.write_text(alias_bomb(depth, "# @package _global_"))
        argv = ["--config-dir", str(tmp_path), "experiment=theirs"]
    else:  # a run directory from elsewhere, rerun from its record
        path = tmp_path / "config_resolved.yaml"
        path.write_text(alias_bomb(depth))
        argv = ["--config-dir", str(tmp_path), "--config-name", "config_resolved"]
    start = time.perf_counter()
    with pytest.raises(ConfigValidationError) as exc:
        screen_command_line(argv, SCRIPT, "conf", "config")
    assert time.perf_counter() - start < 5  # a guard, not a benchmark: unchecked, depth 9 runs for hours
    (issue,) = exc.value.issues
    assert issue.key == str(path) and "alias bomb" in issue.problem and "aliases" in issue.fix


def test_ordinary_anchors_in_an_experiment_file_still_compose(tmp_path):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "anchors.yaml").write_text(
        "# @package _global_\ndefaults:\n  - smoke\nshared: &lr 1.0e-05\n"
        "training_loop:\n  grpo:\n    learning_rate: *lr\n"
    )
    screen_command_line(["--config-dir", str(tmp_path), "experiment=anchors"], SCRIPT, "conf", "config")
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(alias_bomb(4))
    assert (
        config_file_issue(bomb) is not None
        and config_file_issue(bomb, max_nodes=10 * MAX_CONFIG_NODES) is None
    )


def test_a_node_that_contains_itself_is_refused(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text("a: &a [x, *a]\n")
    assert "alias bomb" in config_file_issue(path).rule


def test_results_files_are_data_bounded_and_alias_free(tmp_path):
    path = tmp_path / "config_resolved.yaml"
    path.write_text("seed: ${oc.env:HOME}\nlr: 1.0e-05\n")
    assert load_data(path) == {"seed": "${oc.env:HOME}", "lr": 1e-05}  # never interpolated
    path.write_text("a: &x 1\nb: *x\n")
    with pytest.raises(YamlRefused, match="aliases"):
        load_data(path)
    path.write_text("a: 1\n" * 100)
    with pytest.raises(YamlRefused, match="over the limit"):
        load_data(path, max_bytes=100)
    path.write_text("a: 1\n---\nb: 2\n")
    with pytest.raises(YamlRefused, match="several"):
        load_data(path)
