"""What the server vouches for in a run, apart from anything a client sent: who is asking, and the
dependencies the agent's author gave it.

The session and the platform context travel in the request's body, so whoever sends the request
chooses them: they are never authority. :class:`Identity` comes only from the server's
authentication (an API key), and ``deps`` only from the code that built or runs the agent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

if TYPE_CHECKING:  # a type checker reads the default (PEP 696); Python 3.11's TypeVar takes none
    #: The type of an agent's dependencies (``Agent(deps=...)``); ``Any`` where it is not said.
    DepsT = TypeVar("DepsT", default=Any)
else:
    DepsT = TypeVar("DepsT")


@dataclass(frozen=True, slots=True)
class Identity:
    """Who sent the request, as the server authenticated them: the identity an API key stands for
    (``DCAF_API_KEYS="alice:chat+approve=<key>"``) and the key's scopes.

    A server without keys knows nobody: instructions, tools and policies then see ``None``. Nothing a
    client puts in a request (its body, the session, the platform context, a header other than the
    key) makes one.
    """

    name: str
    scopes: frozenset[str] = frozenset()

    def can(self, scope: str) -> bool:
        """True if the key has `scope`, or ``admin`` (which holds every scope)."""
        return scope in self.scopes or "admin" in self.scopes


@dataclass(frozen=True, slots=True)
class Trusted(Generic[DepsT]):
    """What a rule's condition may see besides the call (its fourth argument, when it takes one): the
    request's authenticated :class:`Identity` (None without keys) and the agent's ``deps``.

    ``deps`` is the server's own, never a client's; it is left out of the repr (it may hold clients
    and credentials)."""

    identity: Identity | None = None
    deps: DepsT = field(default=cast(Any, None), repr=False, compare=False)


#: A run nobody authenticated, with no dependencies.
NOBODY: Trusted[Any] = Trusted()
