"""The cursors of paginated lists (the approvals inbox, the conversation list): a place in the list as
URL-safe base64 of a JSON array, opaque to the caller, checked on the way back in. A cursor the list
did not give is an :class:`InvalidCursor` (HTTP 422 ``invalid_cursor``), never a page from the start."""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Sequence

from dcaf_like.application.errors import InvalidRequest

#: The longest cursor read back: far more than any place a list gives.
MAX_CURSOR = 1024


class InvalidCursor(InvalidRequest):
    """A cursor that is not one the list gave (HTTP 422 ``invalid_cursor``)."""

    def __init__(self, detail: str, *, of: str) -> None:
        super().__init__("cursor", f"not a cursor {of} gave: {detail}")


def make_cursor(place: Sequence[float | str]) -> str:
    text = json.dumps(list(place), separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def read_cursor(cursor: str, *, of: str) -> tuple[float, list[object]]:
    """The place a cursor names: its time (a finite number) and the rest of it, for the caller to
    check. Raises InvalidCursor."""
    if not isinstance(cursor, str) or not cursor or len(cursor) > MAX_CURSOR:
        raise InvalidCursor("empty or too long", of=of)
    try:
        value = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError) as exc:
        raise InvalidCursor("it does not decode", of=of) from exc
    match value:
        case [int() | float() as at, *rest] if not isinstance(at, bool):
            try:
                moment = float(at)
            except OverflowError as exc:  # an integer too large for a float names no moment
                raise InvalidCursor("its time is out of range", of=of) from exc
            if not math.isfinite(moment):
                raise InvalidCursor("its time is out of range", of=of)
            return moment, rest
    raise InvalidCursor("it does not name a place in the list", of=of)
