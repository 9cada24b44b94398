"""Keep API keys out of everything a run writes (config files, metrics, trackers, logs)."""

from __future__ import annotations

import os
import re
from typing import Any

SECRET_KEY = re.compile(r"(api[_-]?key|token|secret|password|passwd|credential)", re.IGNORECASE)
SECRET_ENV = re.compile(r"(_KEY|_TOKEN|_SECRET|_PASSWORD)$")
REDACTED = "***REDACTED***"


def secret_values() -> list[str]:
    """Values of environment variables that look like credentials (WANDB_API_KEY, HF_TOKEN, ...)."""
    return [v for k, v in os.environ.items() if SECRET_ENV.search(k) and len(v) >= 6]


def redact(obj: Any, values: list[str] | None = None) -> Any:
    """A copy of ``obj`` with secret-named keys and any secret environment value masked."""
    values = secret_values() if values is None else values
    if isinstance(obj, dict):
        return {
            k: REDACTED
            if isinstance(k, str) and SECRET_KEY.search(k) and v not in (None, "")
            else redact(v, values)
            for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact(v, values) for v in obj)
    if isinstance(obj, str):
        for secret in values:
            obj = obj.replace(secret, REDACTED)
    return obj
