"""``serve(agent)``: the agent's app (:func:`~dcaf_like.server.app.create_app`) under uvicorn. FastAPI
and uvicorn are imported only when it is called. Which store the conversations go to:
``store_choice.py``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dcaf_like.application.ports import ServedAgent
from dcaf_like.application.retention import DEFAULT_RETENTION_DAYS
from dcaf_like.domain.trail import DigestKey
from dcaf_like.helpdesk.function_agent import as_served
from dcaf_like.server.detached import SHUTDOWN_GRACE
from dcaf_like.server.middleware import DEFAULT_MAX_BODY_BYTES
from dcaf_like.server.store_choice import DEFAULT_STORE, Store, check_store, configured


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
    shutdown_grace: float = SHUTDOWN_GRACE,
    audit_key: DigestKey | None = None,
    escalation_sweep: float | None = None,
) -> None:
    """Serve `agent` over HTTP until interrupted. Binds to loopback unless told otherwise.
    Conversations survive a restart: they go to ``./dcaf_like.sqlite3`` unless `store`, the agent's
    own repository or ``DCAF_STORE`` says otherwise. A store named by URL forgets a conversation
    `retention_days` after its last save (a call waiting for approval not before its window closes),
    unless the URL has its own ``ttl``; None keeps them all. For several worker processes, see
    ``dcaf-like serve --workers`` or run :func:`create_app` under uvicorn with a shared store.
    The chat page is at ``/`` unless `ui` is False. `allowed_hosts`, `allowed_origins`: see
    :func:`~dcaf_like.create_app`; a `host` that is a name, not an address, is an allowed host too.
    On SIGTERM it drains for up to `shutdown_grace` seconds before it stops (docs/deployment.md).
    `audit_key` (else ``DCAF_AUDIT_KEY``) signs the audit trail's digests (docs/operations.md).
    `escalation_sweep` (else ``DCAF_ESCALATION_SWEEP``, else 30): seconds between two sweeps of the
    reminders and escalations due (docs/approvals.md, "Escalation")."""
    from dcaf_like.server.app import create_app

    served, chosen = configured(as_served(agent), store, default=DEFAULT_STORE, retention_days=retention_days)
    check_store(served)
    app = create_app(
        served,
        max_body_bytes=max_body_bytes,
        api_keys=api_keys,
        ui=ui,
        a2a=a2a,
        mcp=mcp,
        allowed_hosts=with_bound_name(allowed_hosts, host),
        allowed_origins=allowed_origins,
        metrics=metrics,
        shutdown_grace=shutdown_grace,
        audit_key=audit_key,
        escalation_sweep=escalation_sweep,
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


# Python's own thresholds; a process whose owner chose others keeps theirs.
_PYTHON_GC_THRESHOLDS = (700, 10, 10)
# A server's: a young collection after this many more allocations than frees, not 700, and a full
# collection (which stops every turn while it walks them all) considered a tenth as often.
SERVER_GC_THRESHOLDS = (5_000, 10, 100)


def settle_heap() -> None:
    """Move everything loaded so far (the SDKs' modules, the app) out of the garbage collector's way,
    and collect less often.

    A full collection walks every tracked object; with an SDK or three loaded that is hundreds of
    thousands, visited again and again though they live as long as the process. Frozen, they are
    skipped, and a turn on a long conversation with the SDKs loaded is quicker. A server holding
    many turns in flight (waiting on a model, a tool or a human) keeps their objects alive across
    collections, so with Python's thresholds every turn paid to walk the others again, and a full
    collection paused them all for as long as it walked: collections are spaced out instead
    (:data:`SERVER_GC_THRESHOLDS`), unless the process set its own
    (docs/benchmarks.md, "Figures behind the code's choices"). For processes this package starts,
    never for an app a user mounts."""
    import gc

    gc.collect()
    gc.freeze()
    if gc.get_threshold() == _PYTHON_GC_THRESHOLDS:
        gc.set_threshold(*SERVER_GC_THRESHOLDS)
