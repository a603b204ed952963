"""The perimeter: what a request must show before any route, or the API-key check, sees it.

Checked in this order, each refusal a JSON error (``docs/operations.md``, "Threat model"):

1. ``Host`` names this server (DNS rebinding: a page on an attacker's name that resolves to 127.0.0.1
   is another origin to the browser, but the same socket to the server). Allowed: ``localhost``,
   ``127.0.0.1``, ``[::1]``, the address the connection came in on, and the configured names;
   otherwise 421 ``host_not_allowed``.
2. A state-changing request (POST, PUT, PATCH, DELETE) comes from this server's own page or from a
   configured origin: an ``Origin`` that is neither, or ``Sec-Fetch-Site: cross-site`` without an
   Origin, is 403 ``cross_origin_request`` (CSRF). A request with no ``Origin`` (curl, SDKs) passes.
   A WebSocket handshake is checked the same way, whatever its method.
3. Its body, if it has one or names a type, is JSON: ``Content-Type: application/json`` (optionally
   ``; charset=utf-8``) or another JSON type a protocol served here names; otherwise 415
   ``unsupported_media_type``. A form or a ``text/plain`` fetch, which a browser sends cross-origin
   without asking first, never reaches a route.

The body's framing and size are checked by :class:`~dcaf_like.server.middleware.RequestMiddleware`
next, then the API key (``auth.py``).

Why not Starlette's ``TrustedHostMiddleware``: it answers a plain-text 400 where every other refusal of
this server is a JSON error, it is a second middleware layer (each costs every request), and it knows
neither the connection's own address nor Origin. The checks here are a few dictionary and string
comparisons per request, no regular expression.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from dcaf_like.server.errors import HttpError

HOSTS_ENV = "DCAF_ALLOWED_HOSTS"
ORIGINS_ENV = "DCAF_ALLOWED_ORIGINS"

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")

# application/json is what the HelpDesk routes, the MCP transport and A2A's JSON-RPC binding send;
# the A2A specification also names application/a2a+json for its HTTP+JSON binding.
JSON_TYPES = frozenset({"application/json", "application/a2a+json"})
_COMMON_JSON = frozenset(
    {
        b"application/json",
        b"application/json; charset=utf-8",
        b"application/json;charset=utf-8",
        b"application/json; charset=UTF-8",
        b"application/json;charset=UTF-8",
    }
)
_UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_REMEMBERED = 256
_DEFAULT_PORTS = {"http": "80", "https": "443"}
_PAGE_SCHEMES = {"ws": "http", "wss": "https"}


class Perimeter:
    """The Host, Origin and Content-Type rules of one app.

    `allowed_hosts` are added to the loopback names and the connection's own address: ``name`` (any
    port), ``name:port``, ``*.example.com`` (its subdomains), or ``*`` (any Host at all). None reads
    ``DCAF_ALLOWED_HOSTS`` (comma-separated). `allowed_origins` are origins besides the server's own
    that may send state-changing requests (``https://ops.example.com``, ``*`` for any); None reads
    ``DCAF_ALLOWED_ORIGINS``."""

    def __init__(
        self, allowed_hosts: Iterable[str] | None = None, allowed_origins: Iterable[str] | None = None
    ) -> None:
        hosts = _configured(allowed_hosts, HOSTS_ENV)
        origins = _configured(allowed_origins, ORIGINS_ENV)
        self.any_host = "*" in hosts
        self._names: set[str] = set(LOOPBACK_HOSTS)
        self._with_port: set[str] = set()
        self._suffixes: list[str] = []
        for entry in hosts:
            if entry == "*":
                continue
            name, port = _split_host(entry.lower())
            if name is None:
                raise ValueError(f"allowed host {entry!r} is not a host name, host:port or *.domain")
            if name.startswith("*."):
                self._suffixes.append(name[1:])
            elif port:
                self._with_port.add(f"{name}:{port}")
            else:
                self._names.add(name)
        # What passed once passes again at the cost of a set lookup; only values that passed are kept,
        # and at most _REMEMBERED of them, so a client cannot grow the sets without end.
        self._hosts_passed: set[tuple[bytes | None, Any]] = set()
        self._origins_passed: set[tuple[bytes, bytes | None, str]] = set()
        self.any_origin = "*" in origins
        self._origins = {_origin_key(o) for o in origins if o != "*"}
        if None in self._origins:
            raise ValueError(f"allowed origins are scheme://host[:port] (no path), not {sorted(origins)}")

    def refusal(self, scope: Mapping[str, Any], headers: Mapping[bytes, bytes]) -> HttpError | None:
        """Why the request of `scope` (its `headers` as a dict) is refused, or None."""
        host = headers.get(b"host")
        if not self.any_host and not self._host_passes(host, scope.get("server")):
            shown = host.decode("latin-1") if host is not None else "(none)"
            return HttpError(
                421,
                "host_not_allowed",
                f"this server does not answer for Host {shown[:200]!r}; add it to the allowed hosts "
                f"(--allowed-host, {HOSTS_ENV}) if it is this server's name",
                field="Host",
            )
        websocket = scope["type"] == "websocket"
        if not websocket and scope["method"] not in _UNSAFE:
            return None
        origin = headers.get(b"origin")
        if origin is not None:
            scheme = scope.get("scheme", "http")
            scheme = _PAGE_SCHEMES.get(scheme, scheme)  # a WebSocket's page is http(s)
            if not self.any_origin and not self._origin_passes(origin, host, scheme):
                shown = origin.decode("latin-1")[:200]
                return HttpError(
                    403,
                    "cross_origin_request",
                    f"a request from origin {shown!r} may not change anything here; add the origin to "
                    f"the allowed origins (--allowed-origin, {ORIGINS_ENV}) if it is trusted",
                    field="Origin",
                )
        elif headers.get(b"sec-fetch-site") == b"cross-site" and not self.any_origin:
            return HttpError(
                403,
                "cross_origin_request",
                "a cross-site request may not change anything here",
                field="Sec-Fetch-Site",
            )
        if websocket:
            return None
        content_type = headers.get(b"content-type")
        if content_type in _COMMON_JSON:
            return None
        if content_type is None and not _has_body(headers):
            return None  # nothing to read: the route answers (a DELETE, a 405 for a wrong method)
        if content_type is None or not _is_json(content_type):
            shown = content_type.decode("latin-1")[:100] if content_type is not None else "none"
            return HttpError(
                415,
                "unsupported_media_type",
                f"send the body as JSON (Content-Type: application/json), not {shown}",
                field="Content-Type",
            )
        return None

    def _host_passes(self, host: bytes | None, server: Any) -> bool:
        bound = server[0] if server else None
        if (host, bound) in self._hosts_passed:
            return True
        if not self._host_allowed(host, bound):
            return False
        if len(self._hosts_passed) < _REMEMBERED:
            self._hosts_passed.add((host, bound))
        return True

    def _origin_passes(self, origin: bytes, host: bytes | None, scheme: str) -> bool:
        if (origin, host, scheme) in self._origins_passed:
            return True
        if not self._origin_allowed(origin, host, scheme):
            return False
        if len(self._origins_passed) < _REMEMBERED:
            self._origins_passed.add((origin, host, scheme))
        return True

    def _host_allowed(self, host: bytes | None, bound: Any) -> bool:
        if host is None:
            # HTTP/1.0 without a Host (some load balancers' health checks): no name is claimed, and
            # a browser always sends one, so this is not the rebinding a Host check is for.
            return True
        name, port = _split_host(host.decode("latin-1").lower())
        if name is None:
            return False
        if name in self._names:
            return True
        if bound:
            address = str(bound).lower()
            if name == address or (":" in address and name == f"[{address}]"):
                return True
        if port and f"{name}:{port}" in self._with_port:
            return True
        return any(name.endswith(suffix) for suffix in self._suffixes)

    def _origin_allowed(self, origin: bytes, host: bytes | None, scheme: str) -> bool:
        text = origin.decode("latin-1").lower()
        if host is not None and text == f"{scheme}://{host.decode('latin-1').lower()}":
            return True  # the common case: the page this server served
        key = _origin_key(text)
        if key is None:
            return False  # "null" (a sandboxed frame, a file), or garbage
        if key in self._origins:
            return True
        if host is None:
            return False
        name, port = _split_host(host.decode("latin-1").lower())
        return key == (scheme, name, port or _DEFAULT_PORTS.get(scheme, ""))


def _configured(given: Iterable[str] | None, env: str) -> list[str]:
    if given is None:
        given = os.environ.get(env, "").split(",")
    elif isinstance(given, str):
        raise TypeError(f"give a list of names, not one string ({given!r})")
    return [entry.strip() for entry in given if entry.strip()]


def _split_host(value: str) -> tuple[str | None, str]:
    """``("example.com", "8000")`` of ``example.com:8000``; ``("[::1]", "")`` of ``[::1]``; a name
    of None when `value` is not a host with an optional numeric port."""
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None, ""
        name, rest = value[: end + 1], value[end + 1 :]
        if rest and not rest.startswith(":"):
            return None, ""
        port = rest[1:]
    else:
        name, _, port = value.partition(":")
    if not name or (port and not (port.isascii() and port.isdigit())) or value.endswith(":"):
        return None, ""
    if any(c in name for c in "/@?#\\ \t"):
        return None, ""
    return name, port


def _origin_key(origin: str) -> tuple[str, str, str] | None:
    """``(scheme, host, port)`` of an origin, the default port written out; None if not an origin."""
    scheme, sep, rest = origin.strip().lower().partition("://")
    if not sep or scheme not in _DEFAULT_PORTS or not rest or "/" in rest.rstrip("/"):
        return None
    name, port = _split_host(rest.rstrip("/"))
    if name is None:
        return None
    return scheme, name, port or _DEFAULT_PORTS[scheme]


def _is_json(content_type: bytes) -> bool:
    """application/json or another JSON type served here, with no parameter but a UTF-8 charset."""
    media, *parameters = content_type.decode("latin-1").lower().split(";")
    if media.strip() not in JSON_TYPES:
        return False
    for parameter in parameters:
        name, _, value = parameter.strip().partition("=")
        if name.strip() != "charset" or value.strip().strip('"') not in ("utf-8", "utf8"):
            return False
    return True


def _has_body(headers: Mapping[bytes, bytes]) -> bool:
    return b"transfer-encoding" in headers or headers.get(b"content-length", b"0") != b"0"
