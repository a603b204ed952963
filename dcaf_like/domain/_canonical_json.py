"""Canonical JSON, the one hot path of the domain: every proposed tool call writes its arguments so.

:func:`canonical_json` is exactly :func:`plain_canonical_json` (``json.dumps`` with sorted keys, no
spaces, unicode as is, no NaN) for any value without a cycle, and raises what it raises for a value
that is not JSON. It builds the C encoder ``json.dumps`` builds on every call once instead, and skips
the cycle check. The test that pins the two equal is `tests/unit/domain/test_canonical_json.py`;
what it saves is measured by `benchmarks/domain.py` (figures: docs/benchmarks.md).
"""

from __future__ import annotations

import json
from typing import Any


def plain_canonical_json(value: Any) -> str:
    """The definition: what :func:`canonical_json` returns, written the obvious way."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _not_json(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# json.encoder.c_make_encoder is the C accelerator json.JSONEncoder.iterencode builds on each call,
# here with the same settings as plain_canonical_json's and no cycle markers (None): the caller has
# walked the value already, and a cycle would have stopped that walk. A Python built without the
# accelerator has none (the attribute is None or missing) and gets the plain version.
_make_c_encoder = getattr(json.encoder, "c_make_encoder", None)
_c_encoder = (
    None
    if _make_c_encoder is None
    else _make_c_encoder(None, _not_json, json.encoder.encode_basestring, None, ":", ",", True, False, False)
)


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, unicode as is, no NaN: :func:`plain_canonical_json`, for a value
    without a cycle (a cycle is a RecursionError here, a ValueError there)."""
    if _c_encoder is None:
        return plain_canonical_json(value)
    return "".join(_c_encoder(value, 0))
