"""What the local protocol servers of the test kit share: a threaded HTTP server on a loopback port."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self


class LoopbackServer(ABC):
    """Start with :meth:`start` (or a ``with`` block), stop with :meth:`stop`. Subclasses give
    :meth:`handler`, the request handler class bound to them."""

    _server: ThreadingHTTPServer | None = None

    @abstractmethod
    def handler(self) -> type[BaseHTTPRequestHandler]:
        """The request handler class, bound to this server's script."""

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        if self._server is None:
            raise RuntimeError("the server is not started")
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Self:
        handler = self.handler()
        # An answer's head and body go out as two writes: with Nagle's algorithm the body waited for
        # the client's delayed acknowledgement of the head, some 40 ms per request.
        handler.disable_nagle_algorithm = True
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=type(self).__name__,
            daemon=True,
        ).start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
