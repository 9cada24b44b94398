"""The JSON form of a verifier entry: lossless for every value reasoning-gym puts in an entry.

Datasets carry each entry as JSON text (the ``entry`` column), and the verifier worker gets it
back as plain JSON. Plain ``json.dumps`` cannot write ``fractions.Fraction`` (gsm_symbolic's
metadata), ``Decimal``, sets, bytes, numpy values or non-string dict keys, writes NaN as text
that is not JSON, and silently turns tuples into lists, which some verifiers compare with
tuples (arc_agi and rearc score a correct board 0.05 against a list of lists). So
:func:`to_json_safe` keeps every value JSON can hold as it is and writes every other one as a
tagged object (``{"__rlvr_type__": "Fraction", "value": "7/2"}``), and :func:`from_json_safe`,
run by the verifier pool (rlvr.verifier.sandbox) before an entry is scored, rebuilds the very
objects the generator made.
A verifier therefore scores the converted entry exactly as the raw one, whatever it reads;
``tests/unit/test_reasoning_gym_entries.py`` checks that for every registered task.

Entries are trusted (generated here, never from the model); decoding builds only the types
listed in ``_DECODERS``, never runs code.
"""

from __future__ import annotations

import base64
import decimal
import fractions
import json
import math
from collections.abc import Callable
from typing import Any

TAG = "__rlvr_type__"


def _numpy() -> Any:
    """numpy if it is already imported (an entry cannot hold a numpy value otherwise)."""
    import sys

    return sys.modules.get("numpy")


def _sorted_items(items: list[Any]) -> list[Any]:
    # Set order follows str hashes, which differ per process: sort so the same entry always gives
    # the same text (dataset fingerprints and the identity of a draw depend on it).
    return sorted(items, key=lambda item: json.dumps(item, sort_keys=True))


def _encode_float(value: float) -> Any:
    return value if math.isfinite(value) else {TAG: "float", "value": repr(value)}


def _encode_other(value: Any, path: str) -> Any:
    """A value that is neither a JSON scalar nor a list/dict/tuple/set."""
    if isinstance(value, fractions.Fraction):
        return {TAG: "Fraction", "value": str(value)}
    if isinstance(value, decimal.Decimal):
        return {TAG: "Decimal", "value": str(value)}
    if isinstance(value, complex):
        return {TAG: "complex", "value": [_encode_float(value.real), _encode_float(value.imag)]}
    if isinstance(value, (bytes, bytearray)):
        return {TAG: type(value).__name__, "value": base64.b64encode(value).decode("ascii")}
    np = _numpy()
    if np is not None and isinstance(value, np.ndarray) and value.dtype != object:
        flat = to_json_safe(value.ravel().tolist(), path)
        return {TAG: "ndarray", "dtype": value.dtype.str, "shape": list(value.shape), "value": flat}
    if np is not None and isinstance(value, np.generic):
        return {TAG: "numpy", "dtype": value.dtype.str, "value": to_json_safe(value.item(), path)}
    raise TypeError(
        f"entry value at {path} is a {type(value).__module__}.{type(value).__qualname__} ({value!r:.80}), "
        "which has no lossless JSON form; add its encoder and decoder to rlvr.verifier.entries"
    )


def to_json_safe(value: Any, path: str = "entry") -> Any:
    """``value`` made of JSON types only (str keys, finite floats), losslessly; see the module doc.

    TypeError, naming the path inside the entry, for a type without a lossless form here.
    """
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float:
        return _encode_float(value)
    if type(value) is list:
        return [to_json_safe(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if type(value) is dict:
        if all(type(k) is str for k in value) and TAG not in value:
            return {k: to_json_safe(v, f"{path}[{k!r}]") for k, v in value.items()}
        # Non-string keys (or our own tag as a key): keep the pairs, in order.
        pairs = [
            [to_json_safe(k, f"{path} key"), to_json_safe(v, f"{path}[{k!r}]")] for k, v in value.items()
        ]
        return {TAG: "dict", "value": pairs}
    if type(value) is tuple:
        return {TAG: "tuple", "value": [to_json_safe(v, f"{path}[{i}]") for i, v in enumerate(value)]}
    if type(value) in (set, frozenset):
        items = [to_json_safe(v, f"{path} item") for v in value]
        return {TAG: type(value).__name__, "value": _sorted_items(items)}
    return _encode_other(value, path)


def _decode_numpy(encoded: dict) -> Any:
    import numpy as np

    dtype = np.dtype(encoded["dtype"])
    if "shape" in encoded:
        return np.array(from_json_safe(encoded["value"]), dtype=dtype).reshape(encoded["shape"])
    return dtype.type(from_json_safe(encoded["value"]))


_DECODERS: dict[str, Callable[[dict], Any]] = {
    "float": lambda e: float(e["value"]),
    "Fraction": lambda e: fractions.Fraction(e["value"]),
    "Decimal": lambda e: decimal.Decimal(e["value"]),
    "complex": lambda e: complex(*(from_json_safe(part) for part in e["value"])),
    "bytes": lambda e: base64.b64decode(e["value"]),
    "bytearray": lambda e: bytearray(base64.b64decode(e["value"])),
    "tuple": lambda e: tuple(from_json_safe(v) for v in e["value"]),
    "set": lambda e: {from_json_safe(v) for v in e["value"]},
    "frozenset": lambda e: frozenset(from_json_safe(v) for v in e["value"]),
    "dict": lambda e: {from_json_safe(k): from_json_safe(v) for k, v in e["value"]},
    "ndarray": _decode_numpy,
    "numpy": _decode_numpy,
}


def from_json_safe(value: Any) -> Any:
    """Undo :func:`to_json_safe`: the objects the generator made (a no-op on plain JSON values,
    and on values that were never encoded, such as a raw entry handed straight to the verifier)."""
    if type(value) is list:
        return [from_json_safe(v) for v in value]
    if type(value) is dict:
        kind = value.get(TAG)
        if isinstance(kind, str):
            if kind not in _DECODERS:
                raise ValueError(f"unknown {TAG} {kind!r} in an entry; known: {', '.join(sorted(_DECODERS))}")
            return _DECODERS[kind](value)
        return {k: from_json_safe(v) for k, v in value.items()}
    return value


def loads(text: str) -> Any:
    """An ``entry`` column value as the generator made it (what a verifier or a reader of
    metadata should see): ``from_json_safe(json.loads(text))``."""
    return from_json_safe(json.loads(text))
