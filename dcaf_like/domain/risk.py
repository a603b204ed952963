"""What a tool's call may do to the world, as its author declares it: shown to whoever approves it."""

from __future__ import annotations

from dcaf_like.domain.errors import DomainError

#: Reads and changes nothing.
READ = "read"
#: Changes something that can be changed back (scale a deployment, stop an instance).
REVERSIBLE = "reversible"
#: Changes something for good (delete a volume, terminate an instance): never approved in bulk.
IRREVERSIBLE = "irreversible"

_MAX_LENGTH = 64


def checked_risk(risk: str) -> str:
    """`risk` as a tool may declare it: one of :data:`READ`, :data:`REVERSIBLE`, :data:`IRREVERSIBLE`,
    or a custom level of the operator's (a short printable word, such as ``"costly"``)."""
    if not isinstance(risk, str) or not risk or len(risk) > _MAX_LENGTH or not risk.isprintable():
        raise DomainError(f"a risk is a short printable word such as {IRREVERSIBLE!r}, not {risk!r}")
    return risk


def is_irreversible(risk: str | None) -> bool:
    return risk == IRREVERSIBLE
