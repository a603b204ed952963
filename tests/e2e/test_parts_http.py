"""Images and files in a user's message, over HTTP: read as parts, bounded in size, kept with the
message, sent to a runtime that takes them in its own format, refused by one that does not (naming
the part and the runtime), never dropped silently."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from _helpdesk import user

from dcaf_like import MAX_PART_BYTES, MAX_PARTS_BYTES, Agent, UserTurn
from dcaf_like.testing import FakeRuntime, OpenAICompatibleServer

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n fake pixels").decode()
IMAGE = {"type": "image", "media_type": "image/png", "data": PNG}
REPORT = {"type": "file", "name": "report.pdf", "media_type": "application/pdf", "data": "JVBERi0xLjQ="}


def parts(*items: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": "what is wrong here?"}, *items]


def inline(size: int) -> dict[str, Any]:
    """An image part of `size` decoded bytes."""
    return {"type": "image", "media_type": "image/png", "data": base64.b64encode(b"\0" * size).decode()}


@pytest.fixture
def seeing(start_server):
    runtime = FakeRuntime(["A crash loop.", "Still one."], accepts={"image", "file"})
    agent = Agent(runtime=runtime)
    return start_server(agent, max_body_bytes=4 * MAX_PARTS_BYTES), runtime, agent


def test_an_image_and_a_file_reach_the_model_with_the_text_and_stay_with_the_message(seeing):
    client, runtime, agent = seeing

    first = client.post("/api/chat", json={"messages": [user(parts(IMAGE, REPORT))]})
    conversation_id = first.json()["data"]["conversation_id"]
    later = client.post("/api/chat", json={"messages": [user("and now?", conversation_id=conversation_id)]})

    assert first.status_code == later.status_code == 200, first.text
    [turn] = runtime.requests[0].messages
    assert isinstance(turn, UserTurn)
    assert turn.text == "what is wrong here?"
    assert [(a.kind.value, a.media_type, a.data, a.name) for a in turn.attachments] == [
        ("image", "image/png", PNG, None),
        ("file", "application/pdf", "JVBERi0xLjQ=", "report.pdf"),
    ]
    assert runtime.requests[1].messages[0] == turn, "a later turn shows the model the image again"
    stored = agent.repository.get(conversation_id)
    assert stored is not None
    assert stored.messages[0].attachments == turn.attachments
    shown = client.get(f"/api/conversations/{conversation_id}").json()["messages"]
    assert shown[0]["attachments"] == [
        {
            "type": "image",
            "media_type": "image/png",
            "size": len(base64.b64decode(PNG)),
            "name": None,
            "url": None,
        },
        {"type": "file", "media_type": "application/pdf", "size": 8, "name": "report.pdf", "url": None},
    ]  # what they are, not their bytes
    assert shown[1]["attachments"] == []


def test_an_image_by_url_is_taken(seeing):
    client, runtime, _ = seeing

    answer = client.post(
        "/api/chat", json={"messages": [user(parts({"type": "image", "url": "https://example.com/a.png"}))]}
    )

    assert answer.status_code == 200, answer.text
    [attached] = runtime.requests[0].messages[0].attachments
    assert attached.url == "https://example.com/a.png"


@pytest.mark.parametrize("path", ["/api/chat", "/api/chat-stream"])
def test_a_part_over_its_limit_is_refused_naming_it_and_nothing_is_kept(seeing, path):
    client, runtime, agent = seeing

    answer = client.post(path, json={"messages": [user(parts(IMAGE, inline(MAX_PART_BYTES + 1)))]})

    assert answer.status_code == 413, answer.text
    error = answer.json()["error"]
    assert error["code"] == "part_too_large"
    assert error["field"] == "messages[0].content[2]"
    assert runtime.requests == []
    assert agent.repository.list_ids(10) == []


def test_parts_over_the_messages_total_are_refused_naming_the_part_that_passes_it(seeing):
    client, runtime, _ = seeing
    each = MAX_PART_BYTES - 1
    count = MAX_PARTS_BYTES // each + 1

    answer = client.post("/api/chat", json={"messages": [user(parts(*[inline(each)] * count))]})

    assert answer.status_code == 413, answer.text
    assert answer.json()["error"]["field"] == f"messages[0].content[{count}]"
    assert "more than" in answer.json()["error"]["message"]
    assert runtime.requests == []


@pytest.mark.parametrize(
    ("part", "problem"),
    [
        ({"type": "video", "url": "https://example.com/a.mp4"}, "text, image or file"),
        ({"type": "image", "media_type": "image/png", "data": "not base64!"}, "not base64"),
        ({"type": "image", "data": PNG}, "media_type"),
        ({"type": "image", "media_type": "text/plain", "data": PNG}, "not an image type"),
        ({"type": "file", "media_type": "application/pdf", "data": PNG}, "name"),
        ({"type": "file", "name": "a.pdf", "url": "https://example.com/a.pdf"}, "data"),
        ({"type": "image", "url": "file:///etc/passwd"}, "http"),
    ],
)
def test_a_part_that_is_not_one_is_refused_naming_it(seeing, part, problem):
    client, runtime, _ = seeing

    answer = client.post("/api/chat", json={"messages": [user(parts(part))]})

    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_part", "messages[0].content[1]")
    assert problem in error["message"]
    assert runtime.requests == []


def test_images_in_earlier_messages_are_refused_not_dropped(seeing):
    client, runtime, _ = seeing
    history = {"role": "user", "content": parts(IMAGE)}

    answer = client.post("/api/chat", json={"messages": [history, {"role": "assistant"}, user("so?")]})

    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["field"] == "messages[0].content[1]"
    assert runtime.requests == []


@pytest.mark.parametrize("path", ["/api/chat", "/api/chat-stream"])
def test_a_runtime_that_cannot_take_a_part_refuses_the_turn_naming_the_part_and_itself(start_server, path):
    runtime = FakeRuntime(["never"])
    agent = Agent(runtime=runtime)
    client = start_server(agent)

    answer = client.post(path, json={"messages": [user(parts(REPORT))]})

    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "unsupported_part"
    assert error["field"] == "attachments[0]"
    assert "'report.pdf'" in error["message"]
    assert "'fake'" in error["message"]
    assert runtime.requests == []
    assert agent.repository.list_ids(10) == []


def test_the_openai_compatible_runtime_sends_parts_in_the_apis_format(start_server):
    pytest.importorskip("openai", reason="the openai extra is not installed")
    from dcaf_like.runtimes.openai_chat import OpenAIRuntime

    with OpenAICompatibleServer() as model:
        runtime = OpenAIRuntime("test-model", base_url=model.base_url, max_retries=0)
        client = start_server(Agent(runtime=runtime))
        model.reply("A crash loop.")
        url = {"type": "image", "url": "https://example.com/a.png"}

        answer = client.post("/api/chat", json={"messages": [user(parts(IMAGE, url, REPORT))]})
        runtime.close()

    assert answer.status_code == 200, answer.text
    assert answer.json()["content"] == "A crash loop."
    assert model.requests[-1]["messages"][-1] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is wrong here?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
            {
                "type": "file",
                "file": {"filename": "report.pdf", "file_data": "data:application/pdf;base64,JVBERi0xLjQ="},
            },
        ],
    }


def test_the_test_server_refuses_a_part_the_api_would_refuse():
    import httpx

    with OpenAICompatibleServer() as model:
        body = {"model": "m", "messages": [{"role": "user", "content": [{"type": "image", "data": PNG}]}]}
        answer = httpx.post(f"{model.base_url}/chat/completions", json=body)

    assert answer.status_code == 400
    assert "messages[0].content[0]" in answer.json()["error"]["message"]


def test_an_agent_function_receives_the_parts_as_the_client_sent_them(start_server):
    seen: list[Any] = []

    def describe(messages: list[dict[str, Any]], context: Any) -> str:
        seen.append(messages[-1]["content"])
        return "seen"

    client = start_server(describe)

    answer = client.post("/api/chat", json={"messages": [user(parts(IMAGE, REPORT))]})

    assert answer.status_code == 200, answer.text
    assert seen == [parts(IMAGE, REPORT)]


def test_a_conversation_with_images_continued_by_a_runtime_that_cannot_take_them_is_refused(start_server):
    from dcaf_like import InMemoryConversationRepository

    store = InMemoryConversationRepository()
    seeing = start_server(Agent(runtime=FakeRuntime(["A crash loop."], accepts={"image"}), repository=store))
    first = seeing.post("/api/chat", json={"messages": [user(parts(IMAGE))]}).json()
    blind_runtime = FakeRuntime(["never"])
    blind = start_server(Agent(runtime=blind_runtime, repository=store))

    answer = blind.post(
        "/api/chat", json={"messages": [user("and now?", conversation_id=first["data"]["conversation_id"])]}
    )

    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "unsupported_part"
    assert "earlier message" in answer.json()["error"]["message"]
    assert blind_runtime.requests == []
