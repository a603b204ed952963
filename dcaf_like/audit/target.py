"""Which URLs the audit may attack: its one target, on loopback unless its owner says otherwise."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


class TargetRefused(ValueError):
    """The URL is not one the audit may attack."""


def check_target(url: str, *, i_own_this_server: bool = False) -> str:
    """`url` without a trailing slash, if the audit may attack it: http(s), and loopback unless the
    caller says they own the server."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetRefused(f"not an http(s) URL: {url!r}")
    if parts.username or parts.password:
        raise TargetRefused("put no credentials in the URL; pass --api-key")
    if not i_own_this_server and not is_loopback(parts.hostname):
        raise TargetRefused(
            f"{parts.hostname} is not a loopback address: the audit sends hostile requests and approves "
            "a call it makes the agent propose. Run it against a staging agent you own, with "
            "--i-own-this-server"
        )
    return url.rstrip("/")


def is_loopback(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
