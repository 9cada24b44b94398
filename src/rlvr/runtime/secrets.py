"""Keep credentials out of everything a run writes (files, metrics, trackers, console, logs).

One redaction, :func:`redact` / :func:`redact_text`, masks three kinds of value wherever they
appear in an output:

- every value a config read from the environment: the ``oc.env`` resolver is wrapped
  (:func:`watch_env_reads`), so each value it returns during resolution is recorded, whatever
  the spelling (``${oc.env:NAME}``, ``${oc.env:'NAME'}``, ``${oc.env:${name}}``);
- values of credential environment variables (``WANDB_API_KEY``, ``HF_TOKEN``, ``*_SECRET``, ...),
  whether or not a config reads them;
- credential-shaped text (a hub or cloud token format, a password in a URL), whatever its origin.

Dicts also mask the values of credential-named keys (``api_key``, ``hub_token``, ``password``).
Masking is by what a value *is*, not by a word it happens to contain: ``max_new_tokens`` or
``pad_token`` are settings, and a run record that masked them could not be rerun.

The outputs route through it: ``rlvr.runtime.io`` (every file the product writes), the observer hub (every
event: metrics.jsonl, console, W&B, TensorBoard), the observers' own settings, the console streams
and log handlers (:func:`redact_console`, :func:`redact_logging`) and the trainer's pickled
arguments (``training_args.bin``, :func:`redact_pickles_of`).
"""

from __future__ import annotations

import copy
import copyreg
import dataclasses
import logging
import os
import re
import sys
from pathlib import PurePath
from typing import Any

# A key that names a credential: ends in token (hub_token, HF_TOKEN, token) unless it is a
# tokenizer's special token, or contains a password / secret / api-key style word.
_TOKEN_KEY = re.compile(r"token$", re.IGNORECASE)
_SPECIAL_TOKEN = re.compile(r"^(pad|eos|bos|unk|sep|cls|mask|start|end|stop|think|answer)_?token$", re.I)
_CREDENTIAL_WORD = re.compile(
    r"(api[_-]?key|access[_-]?key|secret|password|passwd|credential|private[_-]?key|auth[_-]?header)",
    re.IGNORECASE,
)
SECRET_ENV = re.compile(r"(_KEY|_TOKEN|_SECRET|_PASSWORD|_PASS|_CREDENTIALS?)$")
REDACTED = "***REDACTED***"
# Shorter values read from the environment (a count, a flag) are not masked: replacing "8" in
# every output would destroy the numbers, and a credential is never that short.
MIN_ENV_SECRET = 4
MIN_CREDENTIAL_ENV = 6

# Credential formats recognised by their shape, whatever their origin (a data file, a model's
# completion, a path): hub and forge tokens, cloud keys, chat-service tokens, PEM private keys.
# A 40-hex-digit W&B key is not among them: git commit ids have that shape (WANDB_API_KEY is
# masked by its variable's name instead).
_SHAPES = re.compile(
    r"""
      \bhf_[A-Za-z0-9]{30,}                          # Hugging Face
    | \bgh[pousr]_[A-Za-z0-9]{36,}                   # GitHub
    | \bgithub_pat_[A-Za-z0-9_]{22,}
    | \bglpat-[A-Za-z0-9_-]{20,}                     # GitLab
    | \bsk-[A-Za-z0-9_-]{20,}                        # OpenAI / Anthropic style keys
    | \b(?:AKIA|ASIA)[0-9A-Z]{16}\b                  # AWS access key id
    | \bxox[abposr]-[A-Za-z0-9-]{10,}                # Slack
    | \bAIza[0-9A-Za-z_-]{35}                        # Google API key
    | -----BEGIN[A-Z ]*PRIVATE\ KEY-----[\s\S]*?(?:-----END[A-Z ]*PRIVATE\ KEY-----|$)
    """,
    re.VERBOSE,
)
# scheme://user:password@host: the password part.
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^\s/:@'\"]*:)[^\s/@'\"]+(?=@)")


def is_credential_key(key: str) -> bool:
    """Whether a config or environment key names a credential.

    >>> [is_credential_key(k) for k in ("hub_token", "HF_TOKEN", "api_key", "password")]
    [True, True, True, True]
    >>> [is_credential_key(k) for k in ("max_new_tokens", "pad_token", "tokenizer", "num_tokens")]
    [False, False, False, False]
    """
    if _TOKEN_KEY.search(key):
        return not _SPECIAL_TOKEN.match(key)
    return bool(_CREDENTIAL_WORD.search(key))


_MARKED: set[str] = set()


def mark_secret(value: str) -> None:
    """Treat ``value`` as a credential from now on (e.g. a value a config read with ``${oc.env:...}``)."""
    if isinstance(value, str) and len(value) >= MIN_ENV_SECRET:
        _MARKED.add(value)


def _env_read(key: str, *default: Any) -> Any:
    """OmegaConf's own ``oc.env``, recording the value it returns when it comes from the environment."""
    from omegaconf.resolvers import oc

    value = oc.env(key, *default)
    if isinstance(key, str) and key in os.environ:
        mark_secret(os.environ[key])
    return value


def watch_env_reads() -> None:
    """Wrap the ``oc.env`` resolver (idempotent): OmegaConf's grammar decides what is an environment
    read, so every spelling that resolves is recorded, and nothing that does not resolve is."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("oc.env", _env_read, replace=True, use_cache=False)


def env_reads() -> list[str]:
    """The values config resolution has read from the environment so far in this process."""
    return sorted(_MARKED)


def secret_values() -> list[str]:
    """Values of environment variables that hold credentials (WANDB_API_KEY, HF_TOKEN, ...) and marked values."""
    from_env = {
        v
        for k, v in os.environ.items()
        if (SECRET_ENV.search(k) or is_credential_key(k)) and len(v) >= MIN_CREDENTIAL_ENV
    }
    return sorted(
        from_env | _MARKED,
        key=len,
        reverse=True,  # longest first, so a secret that contains another is masked whole
    )


def redact_text(text: str, values: list[str] | None = None) -> str:
    """``text`` with every secret value and every credential-shaped substring masked."""
    for secret in secret_values() if values is None else values:
        if secret in text:
            text = text.replace(secret, REDACTED)
    text = _SHAPES.sub(REDACTED, text)
    return _URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED, text)


def contains_secret(text: str) -> bool:
    """Whether :func:`redact_text` would change ``text`` (a path must not hold a secret at all)."""
    return redact_text(text) != text


def redact(obj: Any, values: list[str] | None = None) -> Any:
    """A copy of ``obj`` with secrets masked: strings, containers, dataclasses (events, results),
    paths and exceptions; dict values under credential-named keys too. An object with nothing to
    mask is returned as it is."""
    return _redact(obj, secret_values() if values is None else values)


def _redact(obj: Any, values: list[str]) -> Any:
    if isinstance(obj, str):
        return redact_text(obj, values)
    if isinstance(obj, dict):
        pairs = [
            (
                _redact(k, values),  # keys too: a metric name holds a task's (a data source's) name
                REDACTED
                if isinstance(k, str) and is_credential_key(k) and v not in (None, "")
                else _redact(v, values),
            )
            for k, v in obj.items()
        ]
        unchanged = all(k is k2 and v is v2 for (k, v), (k2, v2) in zip(obj.items(), pairs, strict=True))
        return obj if unchanged else dict(pairs)
    if isinstance(obj, (list, tuple)):
        items = [_redact(v, values) for v in obj]
        if all(a is b for a, b in zip(items, obj, strict=True)):
            return obj
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a named tuple
            return type(obj)(*items)
        return type(obj)(items)
    if isinstance(obj, PurePath):
        text = str(obj)
        masked = redact_text(text, values)
        return obj if masked == text else type(obj)(masked)
    if isinstance(obj, BaseException):
        return _redact_exception(obj, values)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changed = {}
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            masked = _redact(value, values)
            if masked is not value:
                changed[f.name] = masked
        if not changed:
            return obj
        clone = copy.copy(obj)  # no __init__ / __post_init__ rerun; frozen dataclasses too
        for name, value in changed.items():
            object.__setattr__(clone, name, value)
        return clone
    return obj


class RedactedError(Exception):
    """Stands in for an exception whose text held a secret (its type name leads the message)."""


def _redact_exception(exc: BaseException, values: list[str]) -> BaseException:
    text = str(exc)
    masked = redact_text(text, values)
    if masked == text:
        return exc
    try:
        clone = copy.copy(exc)
        clone.args = (masked,)
        if str(clone) == masked:
            return clone
    except Exception:  # an exception type that cannot be copied: the stand-in below
        pass
    return RedactedError(f"{type(exc).__name__}: {masked}")


def redact_overrides(overrides: list[str]) -> list[str]:
    """Command-line overrides (``key=value``) with credential keys and credential values masked."""
    out = []
    for item in overrides:
        key, sep, value = item.partition("=")
        name = key.lstrip("+~").split(".")[-1]
        out.append(f"{key}{sep}{REDACTED}" if sep and is_credential_key(name) else redact_text(item))
    return out


# Text quoted in an error message ('...' or "..."): it may be a file's content.
_QUOTED = re.compile(r"""'[^'\n]*'|"[^"\n]*\"""")


def error_text(exc: BaseException, limit: int = 200) -> str:
    """``Type: message`` of an error about a file, safe to print: quoted text (which may be the file's
    content, e.g. a credential file given as data) shown only by its length, secrets masked, cut."""
    message = _QUOTED.sub(
        lambda m: f"<{len(m.group(0)) - 2} characters>", str(exc).splitlines()[0] if str(exc) else ""
    )
    text = redact_text(f"{type(exc).__name__}: {message}")
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- the console, the log files and pickled trainer arguments ----------------------------------------
class _RedactingStream:
    """A text stream that masks secrets in everything written to it (the console of a run)."""

    def __init__(self, stream: Any):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(redact_text(text) if isinstance(text, str) else text)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def redact_console() -> None:
    """Route ``sys.stdout`` and ``sys.stderr`` through :func:`redact_text` (idempotent). Installed
    before Hydra configures logging, so its console handler writes through it too."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _RedactingStream):
            setattr(sys, name, _RedactingStream(stream))


class RedactingFilter(logging.Filter):
    """Masks secrets in a log record's message and traceback before any handler formats it."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact_text(record.getMessage())
        record.args = ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info)
        return True


def redact_logging() -> None:
    """Add :class:`RedactingFilter` to every handler configured so far (Hydra's console and log file)."""
    loggers = [logging.getLogger(), *(logging.getLogger(n) for n in logging.root.manager.loggerDict)]
    for logger in loggers:
        for handler in getattr(logger, "handlers", []):
            if not any(isinstance(f, RedactingFilter) for f in handler.filters):
                handler.addFilter(RedactingFilter())


def _reduce_redacted(obj: Any) -> Any:
    reduced = obj.__reduce_ex__(2)  # object's own reduction: (reconstructor, args, state, ...)
    if len(reduced) >= 3 and isinstance(reduced[2], dict):
        return (*reduced[:2], redact(reduced[2]), *reduced[3:])
    return reduced


def redact_pickles_of(cls: type) -> None:
    """Every pickle of an instance of ``cls`` (e.g. TRL's config, which transformers saves as
    ``training_args.bin`` in each checkpoint) holds its fields with secrets masked; the object in
    memory keeps its real values."""
    copyreg.pickle(cls, _reduce_redacted)
