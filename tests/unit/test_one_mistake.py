"""One mistake, one message (issue 56 item 7): a value that other keys copy by interpolation is reported
once, on the key it was set at, naming the override and the keys that copy it (rlvr.config.copies)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf
from tests.conftest import compose_config

from rlvr.config.copies import copies, merged, source_of
from rlvr.config.gate import check
from rlvr.issues import ConfigIssue, ConfigValidationError


def test_one_wrong_temperature_is_one_message_naming_its_copies(tmp_path):
    """``training_loop.grpo.temperature=-1`` was three issues: the GRPO key, ``training_loop.rft.temperature``
    (``${training_loop.grpo.temperature}``) and ``evaluation.sampled.temperature``
    (``${oc.select:training_loop.grpo.temperature,1.0}``)."""
    cfg = compose_config(["model=tiny", "training_loop.grpo.temperature=-1"])
    with pytest.raises(ConfigValidationError) as refused:
        check(cfg, tmp_path)
    [issue] = [i for i in refused.value.issues if "temperature" in i.key]
    assert (issue.key, issue.value, issue.problem) == ("training_loop.grpo.temperature", -1, "must be > 0")
    assert "training_loop.rft.temperature and evaluation.sampled.temperature" in issue.origin
    assert issue.fix.endswith("the keys that copy it follow")
    line = str(refused.value)
    assert line.count("temperature=-1") == 1 and line.startswith("1 configuration problem(s)")


def test_the_message_names_the_override_that_set_the_value():
    cfg = OmegaConf.create({"t": -1, "copy": "${t}", "other": {"t": "${oc.select:t,1.0}"}})
    issues = [ConfigIssue(k, -1, "must be > 0", f"set {k} to a value > 0") for k in ("copy", "t", "other.t")]
    [issue] = merged(issues, cfg, overrides={"t": "t=-1"})
    assert issue.key == "t"
    assert str(issue) == (
        "t=-1 (set by the override 't=-1'; copied by interpolation into copy and other.t, which refuse it "
        "too: one mistake, one message): must be > 0. Fix: set t to a value > 0; the keys that copy it follow"
    )


def test_a_value_only_a_copy_refuses_is_blamed_on_where_it_was_set():
    """The source key accepts 0, the copy's rule does not: the message is on the key the user set."""
    cfg = OmegaConf.create({"a": 0, "b": {"d": "${oc.select:a,1}"}})
    [issue] = merged([ConfigIssue("b.d", 0, "must be > 0", "set b.d to a value > 0")], cfg, overrides={})
    assert (issue.key, issue.value, issue.problem) == ("a", 0, "copied into b.d, where it must be > 0")
    assert issue.fix.startswith("set a to a value b.d can take too, or give b.d a value of its own")


def test_copies_of_copies_and_relative_keys_lead_to_the_source():
    cfg = OmegaConf.create({"a": 1, "b": {"x": "${..a}", "y": "${.x}", "z": "x is ${.x}"}, "n": "${b}"})
    assert copies(cfg) == {"b.x": "a", "b.y": "b.x", "n": "b"}  # text around one is no copy
    assert source_of("b.y", copies(cfg)) == ("a", ["b.y", "b.x", "a"])
    assert source_of("n.y", copies(cfg))[0] == "a"  # a key under a copied node


def test_other_values_and_keys_that_copy_nothing_stay_apart():
    cfg = OmegaConf.create({"a": -1, "b": "${a}", "c": -1})
    issues = [
        ConfigIssue("a", -1, "must be > 0", "fix a"),
        ConfigIssue("c", -1, "must be > 0", "fix c"),  # the same value, set on its own
        ConfigIssue("b", "-1", "has type str", "fix b"),  # another value: not the copy's
    ]
    assert merged(issues, cfg, overrides={}) == issues
