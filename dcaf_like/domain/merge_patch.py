"""An approver's edit as a patch onto the proposal: JSON merge patch (RFC 7396).

A key the patch leaves out keeps its proposed value, `null` removes a key, an object merges into the
object it replaces key by key, and anything else (a scalar, a list) replaces the value whole. A full
set of arguments is a merge patch too, so a client that sends every argument gets exactly those.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def merge_patch(target: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """`target` with `patch` applied, as a new dict; neither argument is changed."""
    merged = dict(target)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping):
            base = merged.get(key)
            merged[key] = merge_patch(base if isinstance(base, Mapping) else {}, value)
        else:
            merged[key] = value
    return merged
