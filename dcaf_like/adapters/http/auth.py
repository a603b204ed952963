"""Optional API-key authentication: who is calling, so that who approved what is on record.

Keys map to identities (``{"<key>": "alice"}``); a client sends ``Authorization: Bearer <key>`` or
``X-API-Key: <key>``. Keys are compared in constant time and never logged or returned.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

ENV_VAR = "DCAF_API_KEYS"


class ApiKeys:
    def __init__(self, keys: Mapping[str, str]) -> None:
        if not keys:
            raise ValueError("ApiKeys needs at least one key")
        for key, identity in keys.items():
            if len(key) < 16:
                raise ValueError(f"the API key of {identity!r} is too short: use 16 characters or more")
            if not identity:
                raise ValueError("every API key needs the identity it stands for")
        self._keys = [(key.encode(), identity) for key, identity in keys.items()]

    @classmethod
    def from_environment(cls) -> ApiKeys | None:
        """``DCAF_API_KEYS="alice=<key>,bob=<key>"``, if set."""
        raw = os.environ.get(ENV_VAR, "").strip()
        if not raw:
            return None
        keys = {}
        for item in raw.split(","):
            identity, sep, key = item.strip().partition("=")
            if not sep:
                raise ValueError(f"{ENV_VAR} holds identity=key pairs separated by commas")
            keys[key.strip()] = identity.strip()
        return cls(keys)

    def identify(self, request: Request) -> str | None:
        """The identity of the request's key, or None when it has no valid one."""
        offered = request.headers.get("x-api-key") or ""
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            offered = credentials.strip()
        if not offered:
            return None
        candidate = offered.encode()
        found = None
        for key, identity in self._keys:  # no early exit: the time taken says nothing about the keys
            if hmac.compare_digest(key, candidate):
                found = identity
        return found

    def __repr__(self) -> str:
        return f"ApiKeys({len(self._keys)} keys)"


OPEN_PATHS = frozenset(
    {
        "/health",
        "/docs",
        "/docs/oauth2-redirect",
        "/redoc",
        "/openapi.json",
        # A2A discovery: the agent card says who the agent is and where it listens, nothing more.
        "/.well-known/agent-card.json",
        "/.well-known/agent.json",
    }
)


class AuthMiddleware:
    """Refuses requests without a valid key (401, JSON) except to the open paths (`open_paths`); puts
    the caller's identity in ``request.state.identity``."""

    def __init__(self, app: ASGIApp, keys: ApiKeys, open_paths: frozenset[str] = OPEN_PATHS) -> None:
        self.app = app
        self.keys = keys
        self.open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        identity = self.keys.identify(Request(scope))
        if identity is None:
            from dcaf_like.adapters.http.middleware import current_request_id

            body = {
                "error": {
                    "code": "unauthorized",
                    "message": "send an API key: Authorization: Bearer <key> or X-API-Key: <key>",
                    "request_id": current_request_id(),
                }
            }
            headers = {"WWW-Authenticate": 'Bearer realm="dcaf_like"'}
            await JSONResponse(body, status_code=401, headers=headers)(scope, receive, send)
            return
        scope.setdefault("state", {})["identity"] = identity
        await self.app(scope, receive, send)
