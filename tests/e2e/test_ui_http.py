"""The chat page's files over HTTP: served at ``/`` unless switched off, open without an API key
(they hold no data) while the data routes still need one, and locked down against injected content."""

from __future__ import annotations

import base64
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


# -- attachments, as the page sends them -------------------------------------------------------------

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n pixels").decode()


def page_message(*parts: dict[str, Any], conversation_id: str = "conv_" + "0" * 24) -> dict[str, Any]:
    """A message as the page's script builds it: the text part, then one part a file attached."""
    content = [{"type": "text", "text": "look"}, *parts]
    return {"messages": [{"role": "user", "content": content, "data": {"conversation_id": conversation_id}}]}


def test_a_message_with_attachments_as_the_page_sends_it_is_taken_and_listed_back_by_name(start_server):
    runtime = FakeRuntime(["Seen."], accepts={"image", "file"})
    client = start_server(Agent(runtime=runtime))
    image = {"type": "image", "media_type": "image/png", "data": PNG, "name": "cpu.png"}
    events = {"type": "file", "name": "events.txt", "media_type": "text/plain", "data": "QmFja09mZg=="}

    streamed = client.post("/api/chat-stream", json=page_message(image, events))
    reopened = client.get(f"/api/conversations/conv_{'0' * 24}").json()

    assert streamed.status_code == 200, streamed.text
    assert [a.name for a in runtime.requests[0].messages[0].attachments] == ["cpu.png", "events.txt"]
    listed = reopened["messages"][0]["attachments"]
    assert [(a["type"], a["name"], a["media_type"]) for a in listed] == [
        ("image", "cpu.png", "image/png"),
        ("file", "events.txt", "text/plain"),
    ]  # what the page shows under a reopened message: names, not bytes
    assert all("data" not in a for a in listed)


def test_what_the_page_shows_when_the_server_refuses_an_attachment_is_a_json_error_naming_it(start_server):
    client = start_server(Agent(runtime=FakeRuntime(["never"])))  # reads text only
    image = {"type": "image", "media_type": "image/png", "data": PNG, "name": "cpu.png"}
    too_big = {
        "type": "file",
        "name": "dump.bin",
        "media_type": "application/octet-stream",
        "data": "A" * 2_000_000,
    }

    unsupported = client.post("/api/chat-stream", json=page_message(image))
    over_the_cap = client.post("/api/chat-stream", json=page_message(too_big))

    assert unsupported.status_code == 422
    assert unsupported.json()["error"]["code"] == "unsupported_part"
    assert "image/png image" in unsupported.json()["error"]["message"]
    assert over_the_cap.status_code == 413  # the server's body cap (1 MiB unless raised) comes first
    assert over_the_cap.json()["error"]["code"] == "body_too_large"
