"""Which store a served agent's conversations live in, first match wins (the server serves the agent
``agent.configured(...)`` builds on it, ADR 44; the agent it was given is left as it is):

1. ``store=`` given to ``serve``/``create_app`` (a repository or a URL);
2. ``Agent(repository=...)``, chosen in code;
3. the ``DCAF_STORE`` environment variable (a URL);
4. for ``serve()`` and ``dcaf-like serve``, the embedded SQLite file ``./dcaf_like.sqlite3``;
   ``create_app`` leaves the agent's in-memory store as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar
from urllib.parse import parse_qsl, urlsplit

from dcaf_like.application.errors import StoreUnavailable
from dcaf_like.application.ports import ConversationStore, ServedAgent
from dcaf_like.application.retention import DAY
from dcaf_like.application.tracing import Tracer
from dcaf_like.stores import DEFAULT_SQLITE_PATH, redact, store_from_environment

DEFAULT_STORE = f"sqlite:///{DEFAULT_SQLITE_PATH}"

Store = ConversationStore | str
AgentT = TypeVar("AgentT", bound=ServedAgent)


def with_retention(url: str, days: float | None) -> str:
    """`url` with ``ttl`` set to `days` when it sets none (a URL's own ``ttl`` wins; the in-memory
    store forgets on exit anyway; None or 0 days keep every conversation)."""
    parts = urlsplit(url)
    if not days or parts.scheme.lower() == "memory" or "ttl" in dict(parse_qsl(parts.query)):
        return url
    seconds = days * DAY
    ttl = f"ttl={int(seconds)}" if seconds == int(seconds) else f"ttl={seconds!r}"
    head, fragment = url.split("#", 1) if "#" in url else (url, None)
    head = f"{head}{'&' if parts.query else '?'}{ttl}"
    return head if fragment is None else f"{head}#{fragment}"


def check_store(agent: ServedAgent) -> None:
    """Read from the agent's store once before serving, so a store that cannot be reached is a
    StoreUnavailable at start-up rather than a 503 on every turn."""
    repository = agent.repository
    if repository is not None:
        try:
            repository.get("dcaf-start-up-check")
        except StoreUnavailable as exc:
            raise StoreUnavailable(
                f"the store cannot be read at start-up: {exc}. Check that it is running and reachable "
                "and that --store (or DCAF_STORE) names it"
            ) from exc


def configured(
    agent: AgentT,
    store: Store | None,
    *,
    default: str | None,
    retention_days: float | None = None,
    tracer: Callable[[Tracer], Tracer] | None = None,
) -> tuple[AgentT, str | None]:
    """The agent to serve, built by ``agent.configured`` on the store chosen by the rules of this
    module (`agent` is left as it is), and a description of that store (without credentials), or None
    when it keeps the one it had by default. A store named by URL keeps conversations
    `retention_days` unless the URL says otherwise (see :func:`with_retention`). `tracer` wraps the
    agent's tracer (a server's metrics)."""
    if agent.repository is None:  # it keeps no conversations: a store given is refused
        return agent.configured(repository=store, tracer=tracer), None
    fallback = store_from_environment() or default
    if isinstance(store, str):
        store = with_retention(store, retention_days)
    if isinstance(fallback, str):
        fallback = with_retention(fallback, retention_days)
    served = agent.configured(repository=store, default_repository=fallback, tracer=tracer)
    if store is None and served.repository is agent.repository:  # chosen in code, or no choice at all
        return served, None if fallback is None else repr(served.repository)
    chosen = store if store is not None else fallback
    return served, redact(chosen) if isinstance(chosen, str) else repr(chosen)
