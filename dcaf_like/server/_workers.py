"""How ``serve`` and ``dcaf-like serve --workers N`` listen: the sockets and the worker supervisor.

Two things uvicorn's own multi-worker mode gets wrong for us:

- **Nagle on every keep-alive response.** uvicorn binds the shared socket without ``IPPROTO_TCP``; the
  sockets it accepts inherit that, and asyncio turns ``TCP_NODELAY`` on only for sockets that say they
  are TCP. Each response after the first on a connection then waited for the client's delayed ACK,
  about 40 ms (uvicorn issue 3149). Our listening sockets are made as TCP and carry ``TCP_NODELAY``
  themselves (Linux hands it down to the sockets they accept).
- **A restarted worker got no traffic.** With one socket shared by every worker, whichever worker
  is already awake accepts the next connection, so after a crash the survivor kept nearly all of
  them. On Linux each worker opens its own socket on the port (``SO_REUSEPORT``) and the kernel
  spreads new connections evenly across the workers listening, a replacement included.

The supervisor stays uvicorn's (restarts, ``SIGHUP``, ``SIGTTIN``/``SIGTTOU``); a worker's death is
logged at WARNING.
"""

from __future__ import annotations

import inspect
import logging
import socket
import sys
from typing import Any

logger = logging.getLogger("uvicorn.error")

#: Whether each worker gets its own listening socket (the kernel balances connections across them).
REUSE_PORT = sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def listening_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A bound TCP socket (not yet listening) whose accepted connections have TCP_NODELAY."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class PerWorkerSocket(socket.socket):
    """The port held by the supervisor (bound with SO_REUSEPORT, never listening). Handed to a worker
    process, it arrives as a socket of the worker's own on the same address, not as a copy of this one:
    uvicorn's supervisor passes its sockets to each worker it starts by pickling them."""

    def __reduce__(self) -> tuple[Any, tuple[str, int]]:
        host, port = self.getsockname()[:2]
        return _own_socket, (host, port)


def _own_socket(host: str, port: int) -> socket.socket:
    return listening_socket(host, port, reuse_port=True)


def supervisor_socket(host: str, port: int) -> socket.socket:
    """The socket a supervisor hands its workers: on Linux a :class:`PerWorkerSocket` (each worker
    listens on a socket of its own), elsewhere one socket the workers share."""
    sock = listening_socket(host, port, reuse_port=REUSE_PORT)
    if not REUSE_PORT:
        return sock
    per_worker = PerWorkerSocket(sock.family, sock.type, sock.proto, fileno=sock.detach())
    per_worker.set_inheritable(True)
    return per_worker


def run_workers(config: Any) -> None:
    """Run `config` (a ``uvicorn.Config`` with ``workers`` > 1) under uvicorn's supervisor, listening
    on our socket(s), until SIGINT or SIGTERM."""
    from uvicorn import Server
    from uvicorn.supervisors import Multiprocess

    class Supervisor(Multiprocess):
        def keep_subprocess_alive(self) -> None:
            before = list(self.processes)
            super().keep_subprocess_alive()
            for old, new in zip(before, self.processes, strict=False):
                if new is not old:
                    logger.warning(
                        "worker process [%s] died (exit code %s); started [%s] in its place",
                        old.pid,
                        old.exitcode,
                        new.pid,
                    )

    sock = supervisor_socket(config.host, config.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    how = "one socket per worker, balanced by the kernel" if REUSE_PORT else "one shared socket"
    logger.info(
        "Uvicorn running on http://%s:%d with %d workers (%s) (Press CTRL+C to quit)",
        shown,
        port,
        config.workers,
        how,
    )
    try:
        if "target" in inspect.signature(Multiprocess).parameters:  # uvicorn < 0.46
            Supervisor(config, target=Server(config).run, sockets=[sock]).run()  # type: ignore[call-arg]
        else:
            Supervisor(config, sockets=[sock]).run()
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
