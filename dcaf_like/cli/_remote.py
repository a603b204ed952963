"""What the commands that talk to a served agent share (``dcaf-like approvals``, ``dcaf-like grants``):
its URL and API key, requests that never follow a redirect (it would carry the key to wherever it
points), and the server's refusals said as it says them."""

from __future__ import annotations

import ipaddress
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


class RemoteError(Exception):
    """The server could not be asked (unreachable), or it refused what was asked."""


class Remote:
    """The agent served at `url`, asked with `api_key` when its server wants one."""

    def __init__(self, url: str, *, api_key: str | None = None, timeout: float = 300) -> None:
        self.base = url.rstrip("/")
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.timeout = timeout

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """The server's status and its JSON answer to `method` on `path` (with `body` as JSON)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.base}{path}", data=data, headers=self.headers, method=method)
        return self.send(request)

    def send(self, request: urllib.request.Request) -> tuple[int, Any]:
        try:
            with _NO_REDIRECTS.open(request, timeout=self.timeout) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            with exc:
                try:
                    return exc.code, json.loads(exc.read() or b"{}")
                except ValueError:
                    return exc.code, {}
        except (urllib.error.URLError, OSError) as exc:
            raise RemoteError(f"cannot reach {self.base}: {exc}") from exc


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is answered as the 3xx it is: following it would carry the API key to wherever it points."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_NO_REDIRECTS = urllib.request.build_opener(_RefuseRedirects)


def said(status: int, body: Any) -> str:
    """A refusal as the server said it: ``403 missing_scope: ...``."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return f"{status} {error.get('code')}: {error.get('message')}"
    return f"HTTP {status}"


def plain_http_warning(url: str, api_key: str | None) -> str | None:
    """Why sending `api_key` to `url` is unwise, or None: over plain http to a host other than this
    machine, anyone on the way reads the key."""
    parts = urllib.parse.urlsplit(url)
    if not api_key or parts.scheme != "http" or _is_this_machine(parts.hostname or ""):
        return None
    return (
        f"the API key goes to {parts.hostname} over plain http, readable by anyone on the way: "
        "use https (a TLS-terminating proxy in front of the server, docs/deployment.md)"
    )


def _is_this_machine(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
