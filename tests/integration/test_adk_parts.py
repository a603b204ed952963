"""Images and files through AdkRuntime and ADK's real ``Gemini`` model (google-genai), against the
local Gemini server (which refuses parts as the Gemini API does): sent as ``inlineData`` and
``fileData`` parts, and what Gemini reads no such part of refused before any request."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from typing import Any

import pytest

from dcaf_like import (
    Agent,
    AgentRequest,
    ModelCompleted,
    ModelRequest,
    ModelRequestInvalid,
    UnsupportedPart,
    UserTurn,
    attachment,
)
from dcaf_like.domain.attachment import Attachment
from dcaf_like.runtimes.adk import AdkRuntime, gemini_media_type
from dcaf_like.testing import GeminiServer

pytest.importorskip("google.adk", reason="the adk extra is not installed: pip install -e '.[adk]'")

PNG_BYTES = b"\x89PNG\r\n\x1a\n\xff\xfe fake pixels"  # \xff\xfe: base64 that differs from URL-safe base64
PDF_BYTES = b"%PDF-1.4 a report"
PNG = attachment("image", media_type="image/png", data=base64.b64encode(PNG_BYTES).decode())
REPORT = attachment(
    "file", media_type="application/pdf", data=base64.b64encode(PDF_BYTES).decode(), name="report.pdf"
)


def file(name: str, media_type: str, content: bytes = b"some text") -> Attachment:
    return attachment("file", media_type=media_type, data=base64.b64encode(content).decode(), name=name)


def asked(*attachments: Attachment, text: str = "what is wrong here?") -> ModelRequest:
    return ModelRequest(system="", messages=(UserTurn(text, attachments),))


def camel(fields: Any) -> Any:
    """A part as JSON with each field by its lowerCamelCase name: the Gemini API takes a field by
    that name or its proto name, and google-genai sends some by the latter (``mime_type``)."""
    if isinstance(fields, dict):
        return {re.sub(r"_([a-z])", lambda m: m.group(1).upper(), k): camel(v) for k, v in fields.items()}
    return fields


def decoded(part: dict[str, Any]) -> tuple[str, bytes]:
    """An ``inlineData`` part's MIME type and bytes, whichever base64 alphabet google-genai used."""
    blob = camel(part)["inlineData"]
    data = blob["data"].replace("-", "+").replace("_", "/")
    return blob["mimeType"], base64.b64decode(data + "=" * (-len(data) % 4))


@pytest.fixture
def server() -> Iterator[GeminiServer]:
    with GeminiServer() as server:
        yield server


@pytest.fixture
def runtime(server) -> Iterator[AdkRuntime]:
    from google.adk.models import Gemini

    runtime = AdkRuntime(
        Gemini(model="gemini-2.5-flash", base_url=server.base_url, client_kwargs={"api_key": "x"})
    )
    yield runtime
    runtime.close()


@pytest.mark.parametrize("streamed", [False, True])
def test_images_and_files_go_as_inline_data_and_an_image_url_as_file_data(server, runtime, streamed):
    server.reply("A crash loop.")
    by_url = attachment("image", url="https://grafana.example.com/render/cpu.png")

    if streamed:
        *_, done = runtime.stream(asked(PNG, by_url, REPORT))
        assert isinstance(done, ModelCompleted)
        answer = done.response
    else:
        answer = runtime.invoke(asked(PNG, by_url, REPORT))

    assert answer.text == "A crash loop."
    [(_, body)] = server.requests
    [content] = body["contents"]
    text, image, url, report = content["parts"]
    assert content["role"] == "user"
    assert text == {"text": "what is wrong here?"}
    assert decoded(image) == ("image/png", PNG_BYTES)
    assert camel(url) == {
        "fileData": {"fileUri": "https://grafana.example.com/render/cpu.png", "mimeType": "image/png"}
    }
    assert decoded(report) == ("application/pdf", PDF_BYTES)


def test_text_files_reach_gemini_as_text_and_audio_as_it_is(server, runtime):
    """Text files go as ``text/plain`` inline data, which ADK's ``Gemini`` sends as text parts (it
    sends inline only the images, PDF, audio and video Gemini takes so)."""
    server.reply("Read them.")
    files = [file("events.log", "text/x-log", b"BackOff"), file("pod.yaml", "application/yaml", b"kind: Pod")]

    runtime.invoke(asked(*files, file("a.mp3", "audio/mp3"), text=""))

    [(_, body)] = server.requests
    events, pod, audio = body["contents"][0]["parts"]  # no empty text part before them
    assert (events, pod) == ({"text": "BackOff"}, {"text": "kind: Pod"})
    assert decoded(audio) == ("audio/mp3", b"some text")


@pytest.mark.parametrize(
    ("part", "reason"),
    [
        (attachment("image", media_type="image/gif", data="R0lGODlh"), "not image/gif"),
        (attachment("image", url="https://example.com/render?panel=cpu"), "media type"),
        (file("backup.zip", "application/zip"), "no application/zip files"),
        (
            file("notes.docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
            "files",
        ),
    ],
)
def test_what_gemini_reads_no_such_part_of_is_refused_before_any_request(server, runtime, part, reason):
    assert runtime.refused_part([PNG, part]) == (1, runtime.refused_part([part])[1])
    assert reason in runtime.refused_part([part])[1]
    with pytest.raises(ModelRequestInvalid, match=re.escape(reason)):
        runtime.invoke(asked(PNG, part))
    assert server.requests == []


def test_an_image_url_with_its_media_type_is_taken_whatever_its_path():
    by_url = attachment("image", media_type="image/webp", url="https://example.com/render?panel=cpu")

    assert gemini_media_type(by_url) == "image/webp"


def test_a_model_that_reads_text_only_refuses_parts(server):
    from google.adk.models import Gemini

    model = Gemini(model="gemma-text", base_url=server.base_url, client_kwargs={"api_key": "x"})
    runtime = AdkRuntime(model, accepts=())

    assert runtime.refused_part([REPORT]) == (0, "it takes no file parts")


def test_an_agent_refuses_the_turn_naming_the_part_and_why(server, runtime):
    agent = Agent(runtime=runtime)
    gif = attachment("image", media_type="image/gif", data="R0lGODlh")

    with pytest.raises(UnsupportedPart) as refused:
        agent.run_request(AgentRequest(text="why?", attachments=(PNG, gif)))

    assert refused.value.index == 1
    assert "Gemini reads PNG, JPEG, WebP, HEIC and HEIF images, not image/gif" in str(refused.value)
    assert server.requests == []


def inline(mime_type: str, data: str) -> dict[str, Any]:
    return {"inlineData": {"mimeType": mime_type, "data": data}}


@pytest.mark.parametrize(
    ("part", "problem"),
    [
        (inline("image/gif", "R0lGODlh"), "Unsupported MIME type: image/gif"),
        (inline("image/png", "not base64!"), "Base64 decoding failed"),
        (inline("image/jpeg", base64.b64encode(PNG_BYTES).decode()), "not image/jpeg"),
        ({"fileData": {"fileUri": "https://example.com/a.png"}}, "Unsupported MIME type: None"),
        ({"fileData": {"fileUri": "file:///etc/passwd", "mimeType": "image/png"}}, "file_uri"),
        ({"text": "two", **inline("image/png", base64.b64encode(PNG_BYTES).decode())}, "exactly one"),
    ],
)
def test_the_server_refuses_parts_as_gemini_does(server, part, problem):
    import httpx

    body = {"contents": [{"role": "user", "parts": [{"text": "see"}, part]}]}
    answer = httpx.post(f"{server.base_url}/v1beta/models/gemini-2.5-flash:generateContent", json=body)

    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert problem in error["message"]
    assert "contents[0].parts[1]" in error["message"]
