"""``serve(agent)`` and ``create_app(agent)``. FastAPI and uvicorn are imported only when called.

Which store an Agent's conversations live in, first match wins:

1. ``store=`` given to ``serve``/``create_app`` (a repository or a URL);
2. ``Agent(repository=...)``, chosen in code;
3. the ``DCAF_STORE`` environment variable (a URL);
4. for ``serve()`` and ``dcaf-like serve``, the embedded SQLite file ``./dcaf_like.sqlite3``;
   ``create_app`` leaves the agent's in-memory store as it is.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from dcaf_like.application.errors import StoreUnavailable
from dcaf_like.application.ports import ConversationRepository
from dcaf_like.application.retention import DAY, DEFAULT_RETENTION_DAYS
from dcaf_like.stores import DEFAULT_SQLITE_PATH, redact, store_from_environment

if TYPE_CHECKING:
    from fastapi import FastAPI

    from dcaf_like.server.app import ServedAgent

DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_STORE = f"sqlite:///{DEFAULT_SQLITE_PATH}"

Store = ConversationRepository | str


def create_app(
    agent: ServedAgent | Callable[..., Any],
    *,
    store: Store | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    title: str | None = None,
    api_keys: Mapping[str, str] | None = None,
    ui: bool = True,
    a2a: bool = False,
    mcp: bool = False,
    allowed_hosts: Iterable[str] | None = None,
    allowed_origins: Iterable[str] | None = None,
    metrics: bool = False,
) -> FastAPI:
    """The FastAPI app serving `agent` (an Agent, or a ``(messages, context)`` function), for users
    who mount it in their own app or run it under their own server (``uvicorn --factory``, workers).
    Several workers must share a store: pass `store` or set ``DCAF_STORE``. With `api_keys`
    (``{"<key>": "<identity>"}``, or ``"<identity>:<scope>+<scope>"``) or ``DCAF_API_KEYS`` every route
    but health, docs and the page needs a key, and each key sees only its identity's conversations.
    `ui` serves the chat page at ``/`` (``ui=False``: the protocol's routes only). With `a2a`, the
    agent also speaks the A2A protocol (needs ``pip install "dcaf-like[a2a]"``). With `mcp`, the
    agent's tools that run without approval are an MCP server at ``/mcp`` too (streamable HTTP; see
    docs/mcp.md). The server answers only for the `Host` names loopback, the connection's own address
    and `allowed_hosts` (else ``DCAF_ALLOWED_HOSTS``); a state-changing request from a browser must
    come from its own page or one of `allowed_origins` (else ``DCAF_ALLOWED_ORIGINS``); see the
    threat model in docs/operations.md."""
    from dcaf_like.server.app import create_app as build

    attach_store(agent, store, default=None)
    return build(
        agent,
        max_body_bytes=max_body_bytes,
        title=title,
        api_keys=api_keys,
        ui=ui,
        a2a=a2a,
        mcp=mcp,
        allowed_hosts=allowed_hosts,
        allowed_origins=allowed_origins,
        metrics=metrics,
    )


def serve(
    agent: ServedAgent | Callable[..., Any],
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    store: Store | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    log_level: str = "info",
    api_keys: Mapping[str, str] | None = None,
    log_format: str | None = None,
    ui: bool = True,
    a2a: bool = False,
    mcp: bool = False,
    retention_days: float | None = DEFAULT_RETENTION_DAYS,
    allowed_hosts: Iterable[str] | None = None,
    allowed_origins: Iterable[str] | None = None,
    metrics: bool = False,
) -> None:
    """Serve `agent` over HTTP until interrupted. Binds to loopback unless told otherwise.
    Conversations survive a restart: they go to ``./dcaf_like.sqlite3`` unless `store`, the agent's
    own repository or ``DCAF_STORE`` says otherwise. A store named by URL forgets a conversation
    `retention_days` after its last save (a call waiting for approval not before its window closes),
    unless the URL has its own ``ttl``; None keeps them all. For several worker processes, see
    ``dcaf-like serve --workers`` or run :func:`create_app` under uvicorn with a shared store.
    The chat page is at ``/`` unless `ui` is False. `allowed_hosts`, `allowed_origins`: see
    :func:`create_app`; a `host` that is a name, not an address, is an allowed host too."""
    chosen = attach_store(agent, store, default=DEFAULT_STORE, retention_days=retention_days)
    check_store(agent)
    app = create_app(
        agent,
        max_body_bytes=max_body_bytes,
        api_keys=api_keys,
        ui=ui,
        a2a=a2a,
        mcp=mcp,
        allowed_hosts=with_bound_name(allowed_hosts, host),
        allowed_origins=allowed_origins,
        metrics=metrics,
    )
    run_uvicorn(
        app, host=host, port=port, log_level=log_level, store_description=chosen, log_format=log_format
    )


def with_bound_name(allowed_hosts: Iterable[str] | None, host: str) -> list[str] | None:
    """`allowed_hosts` (None: ``DCAF_ALLOWED_HOSTS``) and the name the server binds, when it binds
    one (``--host ops.internal``); an address needs no entry, the connection's own is allowed."""
    if host in ("", "0.0.0.0", "::") or host.replace(".", "").isdigit() or ":" in host:
        return None if allowed_hosts is None else list(allowed_hosts)
    from dcaf_like.server.perimeter import HOSTS_ENV

    given = list(allowed_hosts) if allowed_hosts is not None else os.environ.get(HOSTS_ENV, "").split(",")
    return [*given, host]


def run_uvicorn(
    app: Any,
    *,
    host: str,
    port: int,
    log_level: str,
    store_description: str | None = None,
    workers: int = 1,
    factory: bool = False,
    log_format: str | None = None,
) -> None:
    """uvicorn with our logging: our access line (it carries the request id) replaces uvicorn's.
    `app` is an app, or with several `workers` an import string of one (or of a `factory`)."""
    import logging
    import logging.config

    import uvicorn
    from uvicorn.config import LOGGING_CONFIG

    from dcaf_like.telemetry.logs import log_format as chosen_format

    log_config: dict[str, Any] = {
        **LOGGING_CONFIG,
        "loggers": {
            **LOGGING_CONFIG["loggers"],
            "dcaf_like": {"handlers": ["default"], "level": log_level.upper(), "propagate": False},
        },
    }
    if chosen_format(log_format) == "json":
        json_formatter = {"()": "dcaf_like.telemetry.logs.JsonFormatter"}
        log_config["formatters"] = {"default": json_formatter, "access": json_formatter}
    else:  # uvicorn's lines, with a client's control characters escaped (no forged lines)
        text = {**LOGGING_CONFIG["formatters"]["default"], "()": "dcaf_like.telemetry.logs.text_formatter"}
        log_config["formatters"] = {**LOGGING_CONFIG["formatters"], "default": text}
    if store_description is not None:
        logging.config.dictConfig(log_config)
        logging.getLogger("uvicorn.error").info("conversations are kept in %s", store_description)
    settle_heap()
    if workers > 1:
        from dcaf_like.server._workers import run_workers

        # Our sockets, not uvicorn's: TCP_NODELAY, and one per worker on Linux (see _workers).
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level,
            log_config=log_config,
            access_log=False,
            workers=workers,
            factory=factory,
        )
        run_workers(config)
        return
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level,
        log_config=log_config,
        access_log=False,
        factory=factory,
    )


def settle_heap() -> None:
    """Move everything loaded so far (the SDKs' modules, the app) out of the garbage collector's way.

    A full collection walks every tracked object; with an SDK or three loaded that is hundreds of
    thousands, visited again and again though they live as long as the process. Frozen, they are
    skipped: a turn on a 1,000-message conversation took 11.4 ms instead of 17.5 with Agno, ADK and
    LangChain loaded (docs/benchmarks.md). For processes this package starts, never for an app a
    user mounts."""
    import gc

    gc.collect()
    gc.freeze()


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


def check_store(agent: Any) -> None:
    """Read from the agent's store once before serving, so a store that cannot be reached is a
    StoreUnavailable at start-up rather than a 503 on every turn."""
    repository = getattr(agent, "repository", None)
    if isinstance(repository, ConversationRepository):
        try:
            repository.get("dcaf-start-up-check")
        except StoreUnavailable as exc:
            raise StoreUnavailable(
                f"the store cannot be read at start-up: {exc}. Check that it is running and reachable "
                "and that --store (or DCAF_STORE) names it"
            ) from exc


def attach_store(
    agent: Any, store: Store | None, *, default: str | None, retention_days: float | None = None
) -> str | None:
    """Give an Agent the store chosen by the rules of this module; return a description of it
    (without credentials), or None when the agent keeps the one it has. A store named by URL keeps
    conversations `retention_days` unless the URL says otherwise (see :func:`with_retention`)."""
    use = getattr(agent, "use_repository", None)
    if use is None:
        if store is not None:
            raise TypeError(
                f"{type(agent).__name__} keeps no conversations, so it takes no store; only an Agent does"
            )
        return None
    if store is None:
        if getattr(agent, "repository_chosen", False):
            return repr(agent.repository)
        store = store_from_environment() or default
        if store is None:
            return None
    if isinstance(store, str):
        store = with_retention(store, retention_days)
    use(store)
    return redact(store) if isinstance(store, str) else repr(store)
