"""The chat page: one HTML file, one script and one stylesheet shipped in the package, served as they
are (no build step). The page talks to the same routes as any client (``/api/chat-stream``,
``/api/conversations``), so it can do nothing a client could not; an API key, if the server wants
one, is entered in the page. The page's own files need no key: they hold no data.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib.resources import files

from fastapi import APIRouter
from fastapi.responses import Response

ASSETS = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/ui/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/ui/app.css": ("app.css", "text/css; charset=utf-8"),
    "/ui/inbox.js": ("inbox.js", "text/javascript; charset=utf-8"),
}
PAGE_PATHS = frozenset(ASSETS)

# Only the page's own files may run or style it, and it talks only to its own server: model or tool
# text that slipped past the page's escaping still could not load or run anything.
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-cache",
}


def ui_routes() -> APIRouter:
    """``GET /`` (the page), ``GET /ui/app.js``, ``GET /ui/app.css``; read once, when the app is built."""
    router = APIRouter(include_in_schema=False)
    static = files("dcaf_like.server") / "static"
    for path, (name, media_type) in ASSETS.items():
        router.add_api_route(path, _asset((static / name).read_bytes(), media_type), methods=["GET"])
    return router


def _asset(body: bytes, media_type: str) -> Callable[[], Awaitable[Response]]:
    async def asset() -> Response:
        return Response(body, media_type=media_type, headers=HEADERS)

    return asset
