"""Standing grants: an approver's yes given ahead of time, for a bounded time, to the calls a rule
matches (docs/approvals.md, "Grants"): "restart_pod in namespace dev for alice's conversations, 30
minutes".

A grant names one tool, the values its arguments and the platform context must hold, and whose
requests it covers (an identity, or ``*`` for anyone). It approves only what would otherwise wait for
today's one approver: never a call the policy denies, an irreversible one, or one whose rule asks for
more approvers (:meth:`Grant.covers` is the whole rule; ADR "grants-approve-only-what-one-approver-could").
It expires by the agent's clock and is revoked at once.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from dcaf_like.domain._canonical_json import canonical_json
from dcaf_like.domain.context import PlatformContext
from dcaf_like.domain.errors import DomainError
from dcaf_like.domain.risk import is_irreversible

#: The longest a grant may last: a standing yes is for a shift's work, not a standing policy.
MAX_GRANT_SECONDS = 24 * 3600.0
#: A grant's requester that covers anyone's requests (it must be said: none is not a default).
ANY_REQUESTER = "*"
#: The prefix of a grant's id.
GRANT_PREFIX = "g_"

_SCALARS = (str, int, float, bool)


class InvalidGrant(DomainError):
    """A grant that cannot be made as asked (HTTP 422 ``invalid_grant``): `field` names what is wrong."""

    def __init__(self, field: str, detail: str) -> None:
        self.field = field
        self.detail = detail
        super().__init__(f"{field}: {detail}")


class GrantNotFound(DomainError):
    """No grant has this id (HTTP 404 ``grant_not_found``)."""

    def __init__(self, grant_id: str) -> None:
        self.grant_id = grant_id
        super().__init__(f"no grant {grant_id!r}")


@dataclass(frozen=True, slots=True)
class Grant:
    """`granted_by`'s approval, from `created_at` until `expires_at`, of calls to `tool` whose
    arguments (and platform context) hold one of the values `arguments` (and `context`) list for each
    name, requested by `requester` (:data:`ANY_REQUESTER`: anyone)."""

    id: str
    tool: str
    requester: str
    granted_by: str
    created_at: float
    expires_at: float
    arguments: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    context: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    reason: str = ""
    revoked_at: float | None = None
    revoked_by: str | None = None

    @classmethod
    def new(
        cls,
        *,
        tool: str,
        requester: str,
        granted_by: str,
        at: float,
        duration: float,
        arguments: Mapping[str, Any] | None = None,
        context: Mapping[str, Any] | None = None,
        reason: str = "",
    ) -> Grant:
        """A grant lasting `duration` seconds from `at` (at most :data:`MAX_GRANT_SECONDS`). A condition's
        value is one JSON scalar or a list of them (any of which matches). Raises :class:`InvalidGrant`."""
        if not isinstance(tool, str) or not tool.strip():
            raise InvalidGrant("tool", "name the tool the grant approves calls of")
        if not isinstance(requester, str) or not requester.strip():
            raise InvalidGrant("requester", f"name whose requests it covers, or {ANY_REQUESTER!r} for anyone")
        if isinstance(duration, bool) or not isinstance(duration, int | float) or not duration > 0:
            raise InvalidGrant("duration", "a grant lasts a positive number of seconds")
        if duration > MAX_GRANT_SECONDS:
            raise InvalidGrant("duration", f"a grant lasts at most {MAX_GRANT_SECONDS:.0f} seconds")
        if not isinstance(reason, str) or len(reason) > 500:
            raise InvalidGrant("reason", "at most 500 characters of text")
        return cls(
            id=GRANT_PREFIX + secrets.token_hex(8),
            tool=tool,
            requester=requester,
            granted_by=granted_by,
            created_at=at,
            expires_at=at + float(duration),
            arguments=_conditions("arguments", arguments or {}),
            context=_conditions("context", context or {}),
            reason=reason,
        )

    def is_active(self, now: float) -> bool:
        """Not revoked, and its time not over by `now` (the agent's clock)."""
        return self.revoked_at is None and now < self.expires_at

    @property
    def ended_at(self) -> float:
        """When it stopped approving: its revocation, or its end, whichever came first."""
        return self.expires_at if self.revoked_at is None else min(self.revoked_at, self.expires_at)

    def covers(
        self,
        tool_name: str,
        arguments: Mapping[str, Any],
        context: PlatformContext,
        *,
        requested_by: str | None,
        risk: str | None,
        now: float,
    ) -> bool:
        """Whether this grant approves the call described: active at `now`, its tool, every argument
        and context condition met, its requester, and not irreversible. The caller asks only about a
        call the policy left waiting for today's one approver (not denied, no team rule)."""
        if not self.is_active(now) or tool_name != self.tool or is_irreversible(risk):
            return False
        if self.requester != ANY_REQUESTER and requested_by != self.requester:
            return False
        return _holds(self.arguments, arguments) and _holds(self.context, context)

    def revoked(self, *, by: str, at: float) -> Grant:
        """This grant, revoked by `by` at `at` (a revoked one stays as it was revoked first)."""
        if self.revoked_at is not None:
            return self
        return replace(self, revoked_at=at, revoked_by=by)

    @property
    def approval(self) -> str:
        """Who approved a call this grant covered, as the call and the trail say it."""
        return f"grant {self.id} from {self.granted_by}"

    def describe(self) -> str:
        """The rule in words: ``restart_pod where namespace is dev, for alice``."""
        conditions = [f"{name} is {_either(values)}" for name, values in sorted(self.arguments.items())]
        conditions += [f"context {key} is {_either(values)}" for key, values in sorted(self.context.items())]
        where = f" where {' and '.join(conditions)}" if conditions else ""
        who = "anyone" if self.requester == ANY_REQUESTER else self.requester
        return f"{self.tool}{where}, for {who}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tool": self.tool,
            "requester": self.requester,
            "granted_by": self.granted_by,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "arguments": {name: list(values) for name, values in self.arguments.items()},
            "context": {key: list(values) for key, values in self.context.items()},
            "reason": self.reason,
            "revoked_at": self.revoked_at,
            "revoked_by": self.revoked_by,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Grant:
        return cls(
            id=data["id"],
            tool=data["tool"],
            requester=data["requester"],
            granted_by=data["granted_by"],
            created_at=data["created_at"],
            expires_at=data["expires_at"],
            arguments={name: tuple(values) for name, values in data.get("arguments", {}).items()},
            context={key: tuple(values) for key, values in data.get("context", {}).items()},
            reason=data.get("reason", ""),
            revoked_at=data.get("revoked_at"),
            revoked_by=data.get("revoked_by"),
        )


def grant_of(decided_by: str | None) -> tuple[str, str] | None:
    """The grant id and the granter a call approved by a grant names (:attr:`Grant.approval`)."""
    if not decided_by or not decided_by.startswith("grant " + GRANT_PREFIX):
        return None
    _, grant_id, word, granter = [*decided_by.split(" ", 3), "", "", ""][:4]
    return (grant_id, granter) if word == "from" and granter else None


def _conditions(where: str, conditions: Mapping[str, Any]) -> dict[str, tuple[Any, ...]]:
    if not isinstance(conditions, Mapping):
        raise InvalidGrant(where, "an object of names to a value or a list of values")
    checked = {}
    for name, value in conditions.items():
        values = tuple(value) if isinstance(value, list | tuple) else (value,)
        if not isinstance(name, str) or not name:
            raise InvalidGrant(where, "a condition names an argument (or a context key)")
        if not values or not all(isinstance(v, _SCALARS) for v in values):
            raise InvalidGrant(f"{where}.{name}", "one JSON string, number or boolean, or a list of them")
        checked[name] = tuple(_normalized(v) for v in values)
    return checked


def _normalized(value: Any) -> Any:
    """``1.0`` as ``1``, as a call's arguments are kept (a browser cannot tell them apart)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _holds(conditions: Mapping[str, tuple[Any, ...]], values: Mapping[str, Any]) -> bool:
    """Every condition met: the name present, its value one of those listed, compared as JSON (so
    ``true`` never matches ``1``)."""
    for name, allowed in conditions.items():
        if name not in values:
            return False
        given = canonical_json(_normalized(values[name]))
        if all(canonical_json(a) != given for a in allowed):
            return False
    return True


def _either(values: tuple[Any, ...]) -> str:
    shown = [canonical_json(v) if not isinstance(v, str) else v for v in values]
    return shown[0] if len(shown) == 1 else "one of " + ", ".join(shown)
