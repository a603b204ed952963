"""Optional API-key authentication: who is calling, what the key may do, and whose conversations it sees.

Keys map to identities with scopes (``{"<key>": "alice"}`` or ``{"<key>": "alice:chat+read"}``); a client
sends ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``. Keys are compared in constant time and
never logged or returned.

Scopes: ``chat`` (send messages), ``approve`` (decide pending tool calls, cancel tasks), ``read`` (list and
read conversations), ``admin`` (all of them, on every identity's conversations, and the audit trail);
``approve:<group>`` makes the holder a member of a group of approvers that rules name. A
key named without scopes has :data:`DEFAULT_SCOPES`. With keys, a conversation belongs to the identity
that started it: another identity (but an admin) is told it does not exist.
"""

from __future__ import annotations

import hmac
import os
import re
import stat
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from dcaf_like.application.dto import AgentRequest, ToolDecision
from dcaf_like.application.errors import MissingScope
from dcaf_like.domain import Conversation, DecisionRecord, Identity
from dcaf_like.server.middleware import current_request_id

ENV_VAR = "DCAF_API_KEYS"

SCOPES = frozenset({"chat", "approve", "read", "admin"})
DEFAULT_SCOPES = frozenset({"chat", "approve", "read"})
"""What a key named without scopes may do (what every key could before scopes existed), on its own
conversations."""

_IDENTITY = re.compile(r"[A-Za-z0-9._@-]{1,64}")
# A scope that makes the key's holder a member of a group of approvers (docs/approvals.md, "Approvals
# by teams"). It gives no right of its own: deciding still takes ``approve``.
_GROUP_SCOPE = re.compile(r"approve:[A-Za-z0-9._-]{1,64}")
# Names the records use for deciders that are not a key: a key named so would make a human's
# decision read as automatic.
RESERVED_IDENTITIES = frozenset({"user", "policy", "approver", "system"})


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sends a request: a key's identity and scopes, or, on a server without keys, anyone."""

    name: str
    scopes: frozenset[str] = DEFAULT_SCOPES
    keyed: bool = True

    def can(self, scope: str) -> bool:
        return scope in self.scopes or "admin" in self.scopes

    def require(self, scope: str, doing: str) -> None:
        if not self.can(scope):
            raise MissingScope(scope, doing)

    @property
    def owner(self) -> str | None:
        """Who a conversation this caller starts belongs to (None without keys: no one)."""
        return self.name if self.keyed else None

    @property
    def identity(self) -> Identity | None:
        """Who the key authenticated, as instructions, tools and policies see it (None without keys)."""
        return Identity(self.name, self.scopes) if self.keyed else None

    @property
    def sees_all(self) -> bool:
        return not self.keyed or "admin" in self.scopes

    def sees(self, conversation: Conversation) -> bool:
        return conversation.is_visible_to(self.identity)


ANYONE = Caller("user", SCOPES, keyed=False)
"""The caller of a server without keys: it trusts its network, as it always did."""


def caller_of(connection: HTTPConnection | Any) -> Caller:
    """The caller the auth layer put on a request (or a websocket), :data:`ANYONE` without keys."""
    caller = connection.scope.get("state", {}).get("caller")
    return caller if isinstance(caller, Caller) else ANYONE


def authorized(request: AgentRequest, caller: Caller, entrance: str, at: float | None = None) -> AgentRequest:
    """`request` as `caller` may send it (MissingScope otherwise): decisions need ``approve``, a message
    ``chat``, and so does an answer to a question the run asked (the user's reply, as a message is;
    docs/runs.md); the conversation must be the caller's (the service checks that as it loads it)."""
    chats = bool(request.text or request.answers)
    decisions_checked(caller, request.decisions, request.conversation_id, entrance, at, chats=chats)
    # Everything about who is asking comes from the key alone: whatever a request's body said is
    # replaced here (the session and the platform context stay the client's, and are no authority).
    return replace(
        request,
        owner=caller.owner,
        sees_all=caller.sees_all,
        entrance=entrance,
        identity=caller.identity,
        deps=None,
    )


def decisions_checked(
    caller: Caller,
    decisions: Sequence[ToolDecision],
    conversation_id: str | None,
    entrance: str,
    at: float | None,
    *,
    chats: bool,
) -> None:
    """:func:`check_scopes`, and a refusal of decisions for a missing ``approve`` carries their audit
    records (docs/operations.md: every refused decision is in the trail)."""
    try:
        check_scopes(caller, decides=bool(decisions), chats=chats)
    except MissingScope as refusal:
        if decisions and conversation_id and refusal.scope == "approve":
            when = time.time() if at is None else at
            refusal.refused = tuple(
                DecisionRecord.refused(
                    conversation_id,
                    str(refusal),
                    by=caller.name,
                    entrance=entrance,
                    at=when,
                    call_id=d.call_id,
                )
                for d in decisions
            )
        raise


def check_scopes(caller: Caller, *, decides: bool, chats: bool) -> None:
    """What :func:`authorized` checks, for a request not built yet: MissingScope unless `caller` may
    decide tool calls (`decides`) and send a message (`chats`, or a request that decides nothing)."""
    if decides:
        caller.require("approve", "decide tool calls")
    if chats or not decides:
        caller.require("chat", "send messages")


def parse_holder(holder: str) -> Caller:
    """``"alice"`` or ``"alice:chat+approve"`` as the caller a key stands for."""
    name, sep, listed = holder.strip().partition(":")
    name = name.strip()
    if not _IDENTITY.fullmatch(name):
        raise ValueError(
            f"an API key's identity is 1 to 64 letters, digits or . _ @ -, not {name!r}"
            if name
            else "every API key needs the identity it stands for"
        )
    if name.lower() in RESERVED_IDENTITIES:
        raise ValueError(f"{name!r} names a decider in the records; give the key another identity")
    if not sep:
        return Caller(name)
    scopes = frozenset(s.strip() for s in listed.split("+") if s.strip())
    if not scopes:
        raise ValueError(f"{name!r} lists no scopes after ':'")
    if unknown := sorted(s for s in scopes - SCOPES if not _GROUP_SCOPE.fullmatch(s)):
        known = ", ".join(sorted(SCOPES))
        raise ValueError(
            f"unknown scopes {unknown} for {name!r}; the scopes are {known} and approve:<group>, "
            "joined by '+'"
        )
    return Caller(name, scopes)


MIN_KEY_LENGTH = 16


class ApiKeysFileError(ValueError):
    """An API keys file that cannot be used as it is: the message names the file, the line when one
    is wrong, and the fix; never a key."""


def keys_from_file(path: str | Path) -> dict[str, str]:
    """``{key: holder}`` from the file at `path` (``dcaf-like serve --api-keys-file``): one
    ``identity[:scope+scope]=key`` a line, as in ``DCAF_API_KEYS``; blank lines and lines starting with
    ``#`` are skipped. Refused with :class:`ApiKeysFileError` when the file can be read or written by
    anyone but its owner, or a line is not a key (named by its number, its key never shown)."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ApiKeysFileError(f"no API keys file at {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ApiKeysFileError(f"the API keys file {path} cannot be read: {reason}") from None
    if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ApiKeysFileError(
            f"the API keys file {path} is open to other users (mode {stat.S_IMODE(mode):04o}): make it "
            f"readable by its owner only: chmod 600 {path}"
        )
    keys: dict[str, str] = {}
    lines: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{path}, line {number}"
        holder, sep, key = line.partition("=")
        key = key.strip()
        if not sep:
            raise ApiKeysFileError(f"{where}: expected identity[:scope+scope]=key")
        try:
            caller = parse_holder(holder)
        except ValueError as exc:
            raise ApiKeysFileError(f"{where}: {exc}") from None
        if len(key) < MIN_KEY_LENGTH:
            raise ApiKeysFileError(
                f"{where}: the key of {caller.name!r} is "
                + ("missing after '='" if not key else f"too short: use {MIN_KEY_LENGTH} characters or more")
            )
        if key in lines:
            raise ApiKeysFileError(f"{where}: the same key as line {lines[key]}; give each key once")
        keys[key], lines[key] = holder.strip(), number
    if not keys:
        raise ApiKeysFileError(
            f"the API keys file {path} holds no key: write one identity[:scope+scope]=key a line"
        )
    return keys


class ApiKeys:
    def __init__(self, keys: Mapping[str, str]) -> None:
        if not keys:
            raise ValueError("ApiKeys needs at least one key")
        callers = {}
        for key, holder in keys.items():
            caller = parse_holder(holder)
            if len(key) < MIN_KEY_LENGTH:
                raise ValueError(
                    f"the API key of {caller.name!r} is too short: use {MIN_KEY_LENGTH} characters or more"
                )
            callers[key] = caller
        self._keys = [(key.encode(), caller) for key, caller in callers.items()]

    @classmethod
    def from_environment(cls) -> ApiKeys | None:
        """``DCAF_API_KEYS="alice=<key>,bob:chat+read=<key>"``, if set."""
        raw = os.environ.get(ENV_VAR, "").strip()
        if not raw:
            return None
        keys = {}
        for item in raw.split(","):
            holder, sep, key = item.strip().partition("=")
            if not sep:
                raise ValueError(f"{ENV_VAR} holds identity[:scopes]=key pairs separated by commas")
            keys[key.strip()] = holder.strip()
        return cls(keys)

    def identify(self, connection: HTTPConnection) -> Caller | None:
        """The caller of the request's key, or None when it has no valid one."""
        offered = connection.headers.get("x-api-key") or ""
        scheme, _, credentials = connection.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer":
            offered = credentials.strip()
        if not offered:
            return None
        candidate = offered.encode()
        found = None
        for key, caller in self._keys:  # no early exit: the time taken says nothing about the keys
            if hmac.compare_digest(key, candidate):
                found = caller
        return found

    def __repr__(self) -> str:
        return f"ApiKeys({len(self._keys)} keys)"


OPEN_PATHS = frozenset(
    {
        "/health",
        "/ready",
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
    the caller in ``request.state.caller`` and its identity in ``request.state.identity``.

    Every connection is checked, whatever its type: an HTTP request, and a websocket a user's route
    accepts (refused before it is accepted: the handshake is answered 403). Only the server's own
    lifespan messages pass."""

    def __init__(self, app: ASGIApp, keys: ApiKeys, open_paths: frozenset[str] = OPEN_PATHS) -> None:
        self.app = app
        self.keys = keys
        self.open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan" or (kind == "http" and scope["path"] in self.open_paths):
            await self.app(scope, receive, send)
            return
        caller = self.keys.identify(HTTPConnection(scope))
        if caller is None and kind != "http":
            # A websocket (or any other kind of connection): its handshake refused (403) before the
            # app sees it.
            if kind == "websocket":
                await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1008, "reason": "unauthorized"})
            return
        if caller is None:
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
        state = scope.setdefault("state", {})
        state["caller"] = caller
        state["identity"] = caller.name
        await self.app(scope, receive, send)
