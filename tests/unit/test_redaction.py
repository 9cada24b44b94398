"""rlvr.runtime.secrets: one redaction for every output, tried the way an attacker's config file would try it.

Values read from the environment are recorded as OmegaConf resolves them (any spelling its grammar
accepts), and masked wherever they reach an output: files written through rlvr.runtime.io, events handed to
observers, the console, log handlers, pickled trainer arguments, the resume fingerprint. A path that
would hold one is refused before the run. These tests fail when ``redact`` is made a no-op.
"""

from __future__ import annotations

import io
import json
import logging
import pickle
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf
from tests.conftest import ROOT, SIGNAL

from rlvr import events as ev
from rlvr.config.gate import checked_config
from rlvr.config.hydra_check import screen_command_line
from rlvr.issues import ConfigValidationError
from rlvr.observers.base import Observer, ObserverHub
from rlvr.runtime import secrets
from rlvr.runtime.io import atomic_write_json, atomic_write_text
from rlvr.runtime.secrets import REDACTED, redact, redact_text

SECRET = "s3cr-et-from-env-91f0"  # not credential-named: masked only because a config read it
APP = {"_target_": "rlvr.app.train"}


@pytest.fixture(autouse=True)
def fresh_reads(monkeypatch):
    """Each test starts with no recorded environment reads (they are per process)."""
    monkeypatch.setattr(secrets, "_MARKED", set())
    monkeypatch.setenv("RLVR_TEST_READ", SECRET)


@pytest.mark.parametrize(
    "spelling",
    [
        "${oc.env:'RLVR_TEST_READ'}",
        '${oc.env:"RLVR_TEST_READ"}',
        "${oc.env:${name}}",
        "${oc.env:${oc.select:name}}",
        "pre-${oc.env:'RLVR_TEST_READ', fallback}-post",
    ],
)
def test_environment_reads_are_masked_in_every_spelling_that_resolves(spelling):
    cfg = OmegaConf.create({"name": "RLVR_TEST_READ", "value": spelling, "app": APP})
    resolved = OmegaConf.to_container(checked_config(cfg))
    assert SECRET in resolved["value"]  # the run itself gets the real value
    assert SECRET not in json.dumps(redact(resolved)) and REDACTED in redact(resolved)["value"]
    assert redact_text(f"run dir /tmp/{SECRET}/x") == f"run dir /tmp/{REDACTED}/x"


def test_a_default_is_not_an_environment_read_and_short_values_are_not_masked(monkeypatch):
    monkeypatch.setenv("RLVR_TEST_COUNT", "8")
    cfg = OmegaConf.create(
        {
            "a": "${oc.env:RLVR_TEST_UNSET,plain-default}",
            "n": "${oc.env:'RLVR_TEST_COUNT'}",
            "b": "${oc.env:'RLVR_TEST_READ'}",
            "app": APP,
        }
    )
    checked_config(cfg)
    assert secrets.env_reads() == [SECRET]  # "8" is read but too short to mask; the default is no read
    assert redact({"a": "plain-default", "n": "8", "steps": 8}) == {
        "a": "plain-default",
        "n": "8",
        "steps": 8,
    }


def test_redact_masks_by_what_a_value_is_in_every_shape(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf-env-value-0042")  # a credential variable, read or not
    secrets.mark_secret(SECRET)
    event = ev.RunWarning(f"could not open {SECRET}")
    data = {
        "note": f"x {SECRET} y",
        "nested": [("a", SECRET), {"deep": "hf-env-value-0042"}],
        "api_key": "anything",  # a credential-named key
        "path": Path(f"/runs/{SECRET}"),
        "event": event,
        "error": FileNotFoundError(f"no such file: {SECRET}"),
        # settings that merely contain a word stay: the record must still rerun
        "max_new_tokens": 12,
        "pad_token": "<pad>",
        "num_tokens": "all",
    }
    out = redact(data)
    assert out["note"] == f"x {REDACTED} y"
    assert out["nested"] == [("a", REDACTED), {"deep": REDACTED}]
    assert out["api_key"] == REDACTED
    assert out["path"] == Path(f"/runs/{REDACTED}")
    assert out["event"] == ev.RunWarning(f"could not open {REDACTED}") and event.message.endswith(SECRET)
    assert (
        SECRET not in str(out["error"])
        and "FileNotFoundError" in f"{type(out['error']).__name__}{out['error']}"
    )
    assert (out["max_new_tokens"], out["pad_token"], out["num_tokens"]) == (12, "<pad>", "all")


@pytest.mark.parametrize(
    "shaped",
    [
        "hf_" + "aB3" * 12,
        "ghp_" + "x1Y2" * 10,
        "github_pat_" + "A1b2_" * 6,
        "AKIA" + "ABCDEFGHIJ234567",
        "sk-" + "proj-" + "Zz9" * 10,
        "xoxb-1234567890-abcdefghij",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
    ],
)
def test_credential_shaped_text_is_masked_whatever_its_origin(shaped):
    text = f"answer: {shaped} done"
    assert shaped not in redact_text(text) and REDACTED in redact_text(text)


def test_a_password_in_a_url_is_masked_and_ids_are_kept():
    assert redact_text("db postgres://user:pw-9f8e7d@db:5432/x") == f"db postgres://user:{REDACTED}@db:5432/x"
    commit, uuid = "0123456789abcdef" * 2 + "01234567", "123e4567-e89b-12d3-a456-426614174000"
    assert redact_text(f"{commit} {uuid} https://huggingface.co/org/model") == (
        f"{commit} {uuid} https://huggingface.co/org/model"
    )


def test_every_file_written_through_rlvr_io_is_masked(tmp_path):
    awkward = 'pa"ss\\wo-rd-7781'  # JSON escapes the quote and the backslash
    secrets.mark_secret(SECRET)
    secrets.mark_secret(awkward)
    atomic_write_json(tmp_path / "m.json", {"name": f"gsm-{SECRET}", "other": [awkward]})
    atomic_write_text(tmp_path / "r.md", f"# report of {SECRET}\n")
    written = (tmp_path / "m.json").read_text() + (tmp_path / "r.md").read_text()
    assert SECRET not in written and json.dumps(awkward)[1:-1] not in written and awkward not in written
    assert json.loads((tmp_path / "m.json").read_text()) == {"name": f"gsm-{REDACTED}", "other": [REDACTED]}


class Recorder(Observer):
    def __init__(self):
        self.seen: list = []

    def on_pipeline_start(self, event):
        self.seen.append(event)

    def on_warning(self, event):
        self.seen.append(event)

    def on_error(self, event):
        self.seen.append(event)

    def on_train_step(self, event):
        self.seen.append(event)


def test_observers_receive_every_event_masked():
    secrets.mark_secret(SECRET)
    recorder = Recorder()
    hub = ObserverHub({"r": recorder})
    hub.emit(ev.PipelineStart(Path("/runs/x"), {"data": {"name": f"gsm-{SECRET}"}}))
    hub.emit(ev.RunWarning(f"resume: {SECRET}"))
    hub.emit(ev.ErrorEvent("data", ValueError(f"row 3 of {SECRET}.jsonl")))
    hub.emit(ev.TrainStep("grpo", 1, 2, {f"grpo/reward/task/{SECRET}/mean": 0.5}))
    seen = repr(recorder.seen) + "".join(str(e.error) for e in recorder.seen if isinstance(e, ev.ErrorEvent))
    assert len(recorder.seen) == 4 and SECRET not in seen
    assert recorder.seen[2].error.__class__ is ValueError  # the type survives for the observers
    assert recorder.seen[3].metrics == {f"grpo/reward/task/{REDACTED}/mean": 0.5}


def test_the_console_and_log_handlers_are_masked(monkeypatch):
    secrets.mark_secret(SECRET)
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    secrets.redact_console()
    print(f"run directory: {SECRET}")
    assert out.getvalue() == f"run directory: {REDACTED}\n"

    stream = io.StringIO()
    logger = logging.getLogger("rlvr.test_secrets")
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    try:
        secrets.redact_logging()
        try:
            raise OSError(f"cannot read {SECRET}")
        except OSError:
            logger.exception("loading %s failed", SECRET)
    finally:
        logger.removeHandler(handler)
    assert SECRET not in stream.getvalue() and stream.getvalue().count(REDACTED) == 2


def test_trainer_arguments_are_pickled_masked(tmp_path):
    import torch

    from rlvr.training_loop.loop import GRPOPhase

    secrets.mark_secret(SECRET)
    hardware = lambda: SimpleNamespace(trainer_args=lambda: {"use_cpu": True, "bf16": False})  # noqa: E731
    phase = GRPOPhase({"run_name": f"run-{SECRET}", "max_steps": 1}, 0, hardware, rewards=None, signal=SIGNAL)
    args = phase.config(tmp_path)
    torch.save(args, tmp_path / "training_args.bin")  # what transformers does in every checkpoint
    assert SECRET.encode() not in (tmp_path / "training_args.bin").read_bytes()
    assert args.run_name == f"run-{SECRET}"  # the trainer itself keeps the real value
    assert pickle.loads(pickle.dumps(args)).run_name == f"run-{REDACTED}"


def test_the_resume_fingerprint_is_masked_and_still_matches(tmp_path):
    from rlvr.training_loop.checkpoints import check_fingerprint, write_fingerprint
    from rlvr.training_loop.resume import fingerprint

    secrets.mark_secret(SECRET)
    cfg = OmegaConf.create({"data": {"name": f"gsm-{SECRET}", "path": f"/data/{SECRET}.jsonl"}, "seed": 1})
    write_fingerprint(tmp_path, fingerprint(cfg))
    assert SECRET not in (tmp_path / "run_fingerprint.json").read_text()
    assert check_fingerprint(tmp_path, fingerprint(cfg), allow_changes=False) == []


def test_a_credential_file_given_as_data_is_not_echoed(tmp_path):
    from rlvr.data.files import FileData
    from rlvr.data.processors import GSM8K
    from rlvr.verifier.checkers import ExactMatch

    secret = "GOCSPX-q8Zr0cXv1Lm2Nb3Vc4Xz"
    creds = tmp_path / "application_default_credentials.json"
    creds.write_text(
        json.dumps({"client_id": "1234.apps", "client_secret": secret, "type": "authorized_user"})
    )
    data = FileData(
        name="x", path=str(creds), processor=GSM8K(question_field="client_id", answer_field="client_secret"),
        checker=ExactMatch(ignore_case=False), train_size=None, eval_size=None, seed=0, split=None,
        subset=None, eval_sets=None,
    )  # fmt: skip
    with pytest.raises(ConfigValidationError) as exc:
        data.items()
    assert secret not in str(exc.value) and "client_secret" in str(exc.value)


def test_errors_about_a_file_show_quoted_content_only_by_its_length():
    exc = ValueError("Could not convert 'hunter2-very-private' with type str: tried to convert to int64")
    text = secrets.error_text(exc)
    assert "hunter2" not in text and "<20 characters>" in text and text.startswith("ValueError: ")
    assert len(secrets.error_text(ValueError("x" * 1000))) <= 200


SCRIPT = ROOT / "run_pipeline.py"


RUN_DIRS = [
    "/tmp/rlvr-t/${oc.env:'RLVR_TEST_READ'}",
    '/tmp/rlvr-t/${oc.env:"RLVR_TEST_READ"}',
    "/tmp/rlvr-t/a-${oc.env:${name}}-b",
    "/tmp/rlvr-t/${oc.env:HF_TOKEN}",  # a credential variable, whatever reads it
]


def _secret_path_refusals(exc: pytest.ExceptionInfo, key: str) -> list:
    assert SECRET not in str(exc.value) and "hf-env-value-0042" not in str(exc.value)
    return [i for i in exc.value.issues if i.key == key and "read from the environment" in i.problem]


@pytest.mark.parametrize("run_dir", RUN_DIRS)
def test_a_run_directory_holding_a_secret_is_refused_before_the_run(tmp_path, monkeypatch, run_dir):
    monkeypatch.setenv("HF_TOKEN", "hf-env-value-0042")
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "theirs.yaml").write_text(
        f"# @package _global_\ndefaults:\n  - smoke\nname: RLVR_TEST_READ\nhydra:\n  run:\n    dir: {run_dir}\n"
    )
    # from an experiment file (a config file may not choose the run directory at all, SECURITY.md
    # "Where a run writes"; the secret is refused in its own right and never echoed)
    with pytest.raises(ConfigValidationError) as exc:
        screen_command_line(["--config-dir", str(tmp_path), "experiment=theirs"], SCRIPT, "conf", "config")
    assert len(_secret_path_refusals(exc, "hydra.run.dir")) == 1
    # and typed on the command line, where the folder is the user's to choose (the nested spelling
    # reads a key of the config, which the command-line location check cannot resolve on its own)
    if "${name}" not in run_dir:
        quote = '"' if "'" in run_dir else "'"
        with pytest.raises(ConfigValidationError) as exc:
            screen_command_line(
                ["experiment=smoke", f"hydra.run.dir={quote}{run_dir}{quote}"], SCRIPT, "conf", "config"
            )
        assert len(_secret_path_refusals(exc, "hydra.run.dir")) == 1 == len(exc.value.issues)


def test_a_sweep_subdir_holding_a_secret_is_refused_before_the_sweep(tmp_path):
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "theirs.yaml").write_text(
        "# @package _global_\ndefaults:\n  - smoke\nhydra:\n  sweep:\n"
        "    subdir: ${hydra.job.num}-${oc.env:'RLVR_TEST_READ'}\n"
    )
    with pytest.raises(ConfigValidationError) as exc:
        screen_command_line(
            ["-m", "--config-dir", str(tmp_path), "experiment=theirs", "seed=1,2"], SCRIPT, "conf", "config"
        )
    assert len(_secret_path_refusals(exc, "hydra.sweep.subdir")) == 1
