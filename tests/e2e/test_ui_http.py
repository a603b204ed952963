"""The chat page's files over HTTP: served at ``/`` unless switched off, open without an API key
(they hold no data) while the data routes still need one, and locked down against injected content."""

from __future__ import annotations

from typing import Any

import httpx
from _server import dcaf_like_serve

from dcaf_like import Agent, create_app
from dcaf_like.testing import FakeRuntime

KEY = "a-key-of-sixteen-chars"


async def get(path: str, **options: Any) -> httpx.Response:
    app = create_app(Agent(runtime=FakeRuntime([])), **options)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agent") as http:
        return await http.get(path)


async def test_the_page_its_script_and_its_stylesheet_are_served_with_a_strict_content_policy():
    page = await get("/")
    script = await get("/ui/app.js")
    style = await get("/ui/app.css")

    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert '<script src="ui/app.js">' in page.text
    assert script.headers["content-type"].startswith("text/javascript")
    assert "api/chat-stream" in script.text
    assert style.headers["content-type"].startswith("text/css")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy
    assert "connect-src 'self'" in policy
    assert page.headers["x-content-type-options"] == "nosniff"


async def test_ui_false_serves_the_protocol_only():
    assert (await get("/", ui=False)).status_code == 404
    assert (await get("/ui/app.js", ui=False)).status_code == 404
    assert (await get("/health", ui=False)).status_code == 200


async def test_with_api_keys_the_page_loads_without_one_but_the_data_behind_it_does_not():
    assert (await get("/", api_keys={KEY: "alice"})).status_code == 200
    assert (await get("/ui/app.js", api_keys={KEY: "alice"})).status_code == 200
    assert (await get("/api/conversations", api_keys={KEY: "alice"})).status_code == 401


async def test_with_the_page_off_its_paths_are_not_opened_by_the_key_check():
    assert (await get("/", api_keys={KEY: "alice"}, ui=False)).status_code == 401


async def test_the_page_is_not_in_the_openapi_description():
    paths = (await get("/openapi.json")).json()["paths"]

    assert "/" not in paths
    assert "/ui/app.js" not in paths


def test_dcaf_like_serve_no_ui_serves_no_page():
    with dcaf_like_serve("examples/triage_function.py:triage", "--port", "0", "--no-ui") as served:
        assert httpx.get(f"{served.url}/", timeout=10).status_code == 404
        assert httpx.get(f"{served.url}/health", timeout=10).status_code == 200
