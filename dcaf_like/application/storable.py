"""What a request may carry into a conversation: only values that can be stored and shown again.

A number that is not finite (NaN, Infinity, or a literal such as ``1e999`` that overflows to it) is
accepted by Python's JSON reader but cannot be written back as JSON: stored in a session, a context
or a call's arguments, it made every later response of that conversation fail to render, after its
turn ran. It is refused before anything is applied, naming where it was.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from dcaf_like.application.dto import AgentRequest
from dcaf_like.application.errors import NotStorable

NOT_FINITE = "a number that is not finite (NaN or Infinity) cannot be stored: send a finite number"


def refuse_non_finite(request: AgentRequest) -> None:
    """NotStorable naming the first non-finite number in what `request` would store."""
    check_storable(request.session, "session")
    check_storable(request.platform_context, "platform_context")
    for n, decision in enumerate(request.decisions):
        check_storable(decision.arguments, f"decisions[{n}].arguments")
        check_storable(decision.edited_arguments, f"decisions[{n}].edited_arguments")


def check_storable(value: Any, where: str) -> None:
    """NotStorable naming the first non-finite number in `value` (a JSON value found at `where`): for an
    entrance whose wire cannot carry one to the request (A2A's JSON-RPC, whose SDK fails on it)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotStorable(where, NOT_FINITE)
    elif isinstance(value, dict | Mapping):  # a dict first: no ABC check for it
        for key, item in value.items():
            check_storable(item, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for n, item in enumerate(value):
            check_storable(item, f"{where}[{n}]")
