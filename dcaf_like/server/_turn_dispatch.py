"""A fast path (ADR 17): the turn routes dispatched by Starlette itself; FastAPI's routes for the same
paths stay, for the OpenAPI document.

The turn handlers take the request alone and read their own body (``chat.chat_body``), so what
FastAPI's route wrapper does for every request (look for a body to read, solve the handler's
dependencies, open an exit stack for them) is work they never use: a plain Starlette ``Route`` to the
same handler, put before FastAPI's, answers instead. Both run inside the same middleware and the same
exception handlers (Starlette's, which FastAPI registers on the app), so the answers are the same;
``tests/unit/server/test_turn_dispatch.py`` pins that they are, for good turns and refused ones. The plain
code it stands for is FastAPI's route, which answers when this module is not used. Its figures are
``make bench``'s HTTP table (docs/benchmarks.md).
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.routing import APIRoute
from starlette.routing import Match, Route
from starlette.types import Scope


class TurnRoute(Route):
    """A plain route that names itself in the request's scope, as FastAPI's routes do: what reads the
    matched route (the metrics' ``route`` label, the logs) sees the same template either way."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child_scope = super().matches(scope)
        if match is not Match.NONE:
            child_scope["route"] = self
        return match, child_scope


def dispatch_turns_plainly(app: FastAPI, paths: frozenset[str]) -> None:
    """Put a plain Starlette route before each FastAPI route of `app` whose path is in `paths`, to the
    same handler and methods, left out of the OpenAPI document (FastAPI's route describes it)."""
    routes = app.router.routes
    plain = [
        TurnRoute(route.path, route.endpoint, methods=sorted(route.methods or ()), include_in_schema=False)
        for route in routes
        if isinstance(route, APIRoute) and route.path in paths
    ]
    routes[:0] = plain
