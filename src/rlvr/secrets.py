"""Keep credentials out of everything a run writes (config files, metrics, trackers, logs).

Masking is by what a value *is*, not by a word it happens to contain: a key is a
credential when it names one (``api_key``, ``hub_token``, ``password``, ...), and
a value is a credential when it equals the value of a credential environment
variable (``WANDB_API_KEY``, ``HF_TOKEN``, ...). ``max_new_tokens`` or
``pad_token`` are settings, and a run record that masked them could not be rerun.
"""

from __future__ import annotations

import os
import re
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
    if value:
        _MARKED.add(value)


def secret_values() -> list[str]:
    """Values of environment variables that hold credentials (WANDB_API_KEY, HF_TOKEN, ...) and marked values."""
    from_env = {
        v for k, v in os.environ.items() if (SECRET_ENV.search(k) or is_credential_key(k)) and len(v) >= 6
    }
    return sorted(
        from_env | _MARKED,
        key=len,
        reverse=True,  # longest first, so a secret that contains another is masked whole
    )


def redact_text(text: str, values: list[str] | None = None) -> str:
    for secret in secret_values() if values is None else values:
        text = text.replace(secret, REDACTED)
    return text


def redact(obj: Any, values: list[str] | None = None) -> Any:
    """A copy of ``obj`` with credential-named keys and credential environment values masked."""
    values = secret_values() if values is None else values
    if isinstance(obj, dict):
        return {
            k: REDACTED
            if isinstance(k, str) and is_credential_key(k) and v not in (None, "")
            else redact(v, values)
            for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact(v, values) for v in obj)
    if isinstance(obj, str):
        return redact_text(obj, values)
    return obj


def redact_overrides(overrides: list[str]) -> list[str]:
    """Command-line overrides (``key=value``) with credential keys and credential values masked."""
    out = []
    for item in overrides:
        key, sep, value = item.partition("=")
        name = key.lstrip("+~").split(".")[-1]
        out.append(f"{key}{sep}{REDACTED}" if sep and is_credential_key(name) else redact_text(item))
    return out
