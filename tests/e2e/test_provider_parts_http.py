"""Images and files over HTTP to an Agent on Bedrock Converse (real boto3) or on Gemini (ADK's real
``Gemini`` model, google-genai): each reaches its local provider server in that provider's own
format, and what the provider cannot take is a 422 naming the part and why, before any model call."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from _helpdesk import user

from dcaf_like import Agent
from dcaf_like.testing import BedrockConverseServer, GeminiServer

PNG_BYTES = b"\x89PNG\r\n\x1a\n fake pixels"
PNG = base64.b64encode(PNG_BYTES).decode()
IMAGE = {"type": "image", "media_type": "image/png", "data": PNG}
BY_URL = {"type": "image", "url": "https://grafana.example.com/render/cpu.png"}
REPORT = {"type": "file", "name": "report.pdf", "media_type": "application/pdf", "data": "JVBERi0xLjQ="}


def parts(*items: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": "what is wrong here?"}, *items]


def test_an_image_and_a_file_reach_bedrock_as_converse_blocks(start_server):
    pytest.importorskip("boto3", reason="the bedrock extra is not installed")
    from dcaf_like.runtimes.bedrock import BedrockRuntime

    with BedrockConverseServer() as bedrock:
        runtime = BedrockRuntime("anthropic.claude-3-5-haiku-20241022-v1:0", client=bedrock.client())
        client = start_server(Agent(runtime=runtime))
        bedrock.reply("A crash loop.")

        answer = client.post("/api/chat", json={"messages": [user(parts(IMAGE, REPORT))]})
        runtime.close()

    assert answer.status_code == 200, answer.text
    assert answer.json()["content"] == "A crash loop."
    [(_, body)] = bedrock.requests
    assert body["messages"][-1] == {
        "role": "user",
        "content": [
            {"text": "what is wrong here?"},
            {"image": {"format": "png", "source": {"bytes": PNG}}},
            {"document": {"format": "pdf", "name": "report pdf", "source": {"bytes": "JVBERi0xLjQ="}}},
        ],
    }


@pytest.mark.parametrize("path", ["/api/chat", "/api/chat-stream"])
def test_an_image_by_url_is_refused_for_bedrock_naming_it_and_why(start_server, path):
    pytest.importorskip("boto3", reason="the bedrock extra is not installed")
    from dcaf_like.runtimes.bedrock import BedrockRuntime

    with BedrockConverseServer() as bedrock:
        runtime = BedrockRuntime("anthropic.claude-3-5-haiku-20241022-v1:0", client=bedrock.client())
        agent = Agent(runtime=runtime)
        client = start_server(agent)

        answer = client.post(path, json={"messages": [user(parts(IMAGE, BY_URL))]})
        runtime.close()

    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["field"]) == ("unsupported_part", "attachments[1]")
    assert "image by URL" in error["message"]
    assert "send the image as data" in error["message"]
    assert bedrock.requests == []
    assert agent.repository.list_ids(10) == []


def test_an_image_a_file_and_an_image_url_reach_gemini_as_its_parts(start_server):
    pytest.importorskip("google.adk", reason="the adk extra is not installed")
    from google.adk.models import Gemini

    from dcaf_like.runtimes.adk import AdkRuntime

    with GeminiServer() as gemini:
        model = Gemini(model="gemini-2.5-flash", base_url=gemini.base_url, client_kwargs={"api_key": "x"})
        runtime = AdkRuntime(model)
        client = start_server(Agent(runtime=runtime))
        gemini.reply("A crash loop.")

        answer = client.post("/api/chat", json={"messages": [user(parts(IMAGE, BY_URL, REPORT))]})
        runtime.close()

    assert answer.status_code == 200, answer.text
    assert answer.json()["content"] == "A crash loop."
    [(_, body)] = gemini.requests
    text, image, url, report = body["contents"][-1]["parts"]
    assert text == {"text": "what is wrong here?"}
    assert _inline(image) == ("image/png", PNG_BYTES)
    assert _inline(report) == ("application/pdf", b"%PDF-1.4")
    assert set(url) == {"fileData"}
    assert sorted(url["fileData"].values()) == ["https://grafana.example.com/render/cpu.png", "image/png"]


def test_a_gif_is_refused_for_gemini_naming_it_and_why(start_server):
    pytest.importorskip("google.adk", reason="the adk extra is not installed")
    from google.adk.models import Gemini

    from dcaf_like.runtimes.adk import AdkRuntime

    with GeminiServer() as gemini:
        model = Gemini(model="gemini-2.5-flash", base_url=gemini.base_url, client_kwargs={"api_key": "x"})
        runtime = AdkRuntime(model)
        client = start_server(Agent(runtime=runtime))
        gif = {"type": "image", "media_type": "image/gif", "data": base64.b64encode(b"GIF89a").decode()}

        answer = client.post("/api/chat", json={"messages": [user(parts(gif))]})
        runtime.close()

    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["field"]) == ("unsupported_part", "attachments[0]")
    assert "not image/gif" in error["message"]
    assert gemini.requests == []


def _inline(part: dict[str, Any]) -> tuple[str, bytes]:
    """An inline part's MIME type and bytes, whichever JSON names (``mimeType`` or ``mime_type``)
    and base64 alphabet google-genai sent them with: the Gemini API takes either."""
    [blob] = part.values()
    mime_type = blob.get("mimeType") or blob["mime_type"]
    data = blob["data"].replace("-", "+").replace("_", "/")
    return mime_type, base64.b64decode(data + "=" * (-len(data) % 4))
