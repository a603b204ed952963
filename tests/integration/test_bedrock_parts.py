"""Images and files through BedrockRuntime and real boto3, against the local Converse server (which
refuses content blocks as Converse does): sent as ``image`` and ``document`` blocks, and what
Converse cannot take refused before any request."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator

import pytest

from dcaf_like import (
    Agent,
    AgentRequest,
    AssistantTurn,
    ModelCompleted,
    ModelRequest,
    ModelRequestInvalid,
    UnsupportedPart,
    UserTurn,
    attachment,
)
from dcaf_like.runtimes.bedrock import EMPTY_MESSAGE, BedrockRuntime
from dcaf_like.testing import BedrockConverseServer

boto3 = pytest.importorskip("boto3", reason="the bedrock extra is not installed: pip install -e '.[bedrock]'")

PNG_BYTES = b"\x89PNG\r\n\x1a\n fake pixels"
PDF_BYTES = b"%PDF-1.4 a report"
PNG = attachment("image", media_type="image/png", data=base64.b64encode(PNG_BYTES).decode())
REPORT = attachment(
    "file", media_type="application/pdf", data=base64.b64encode(PDF_BYTES).decode(), name="report.pdf"
)


def file(name: str, media_type: str, content: bytes = b"some text") -> object:
    return attachment("file", media_type=media_type, data=base64.b64encode(content).decode(), name=name)


@pytest.fixture
def server() -> Iterator[BedrockConverseServer]:
    with BedrockConverseServer() as server:
        yield server


@pytest.fixture
def runtime(server) -> Iterator[BedrockRuntime]:
    runtime = BedrockRuntime("anthropic.claude-3-5-haiku-20241022-v1:0", client=server.client())
    yield runtime
    runtime.close()


def asked(*attachments, text: str = "what is wrong here?") -> ModelRequest:
    return ModelRequest(system="", messages=(UserTurn(text, tuple(attachments)),))


@pytest.mark.parametrize("streamed", [False, True])
def test_an_image_and_a_file_go_as_converse_image_and_document_blocks(server, runtime, streamed):
    server.reply("A crash loop.")

    if streamed:
        *_, done = runtime.stream(asked(PNG, REPORT))
        assert isinstance(done, ModelCompleted)
        answer = done.response
    else:
        answer = runtime.invoke(asked(PNG, REPORT))

    assert answer.text == "A crash loop."
    [(_, body)] = server.requests
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"text": "what is wrong here?"},
                {"image": {"format": "png", "source": {"bytes": base64.b64encode(PNG_BYTES).decode()}}},
                {
                    "document": {
                        "format": "pdf",
                        "name": "report pdf",
                        "source": {"bytes": base64.b64encode(PDF_BYTES).decode()},
                    }
                },
            ],
        }
    ]


def test_document_names_are_made_as_converse_takes_them_and_none_twice(server, runtime):
    server.reply("Read them.")
    files = [
        REPORT,
        REPORT,
        file("kube_events (prod).log", "text/plain"),
        file("résumé.md", "text/markdown"),
        file("...", "text/csv", b"a,b"),
    ]

    runtime.invoke(asked(*files))

    [(_, body)] = server.requests
    documents = [b["document"] for b in body["messages"][0]["content"] if "document" in b]
    assert [(d["name"], d["format"]) for d in documents] == [
        ("report pdf", "pdf"),
        ("report pdf (2)", "pdf"),
        ("kube events (prod) log", "txt"),
        ("resume md", "md"),
        ("document", "csv"),
    ]


def test_json_and_yaml_files_go_as_text_documents(server, runtime):
    server.reply("Read them.")

    runtime.invoke(asked(file("pod.json", "application/json", b"{}"), file("pod.yaml", "application/yaml")))

    [(_, body)] = server.requests
    formats = [b["document"]["format"] for b in body["messages"][0]["content"] if "document" in b]
    assert formats == ["txt", "txt"]


def test_a_file_sent_without_text_gets_the_text_block_converse_wants_beside_it(server, runtime):
    server.reply("A report.")

    runtime.invoke(asked(REPORT, text=""))

    [(_, body)] = server.requests
    [message] = body["messages"]
    assert [next(iter(block)) for block in message["content"]] == ["document", "text"]


def test_an_image_alone_is_sent_without_a_text_block(server, runtime):
    server.reply("A graph.")

    runtime.invoke(asked(PNG, text=""))

    [(_, body)] = server.requests
    assert [next(iter(block)) for block in body["messages"][0]["content"]] == ["image"]


def test_a_client_history_with_an_empty_message_and_a_blank_answer_is_sent_without_blank_text(
    server, runtime
):
    # A HelpDesk client's history holds an empty user message where its user only decided a call;
    # a blank answer can be in it too. Converse refuses blank text: both are left out.
    server.reply("Rolled back.")
    history = (UserTurn(""), AssistantTurn("Restarted."), UserTurn("roll back"), AssistantTurn("  "))

    runtime.invoke(ModelRequest(system="", messages=(*history, UserTurn("and now?"))))

    [(_, body)] = server.requests
    assert body["messages"] == [
        {"role": "user", "content": [{"text": EMPTY_MESSAGE}]},
        {"role": "assistant", "content": [{"text": "Restarted."}]},
        {"role": "user", "content": [{"text": "roll back"}, {"text": "and now?"}]},
    ]


def test_a_blank_last_message_is_sent_as_one_saying_it_was_empty(server, runtime):
    server.reply("Anything else?")

    answer = runtime.invoke(
        ModelRequest(system="", messages=(UserTurn("hi"), AssistantTurn("Hello."), UserTurn("  ")))
    )

    assert answer.text == "Anything else?"
    [(_, body)] = server.requests
    assert body["messages"][-1] == {"role": "user", "content": [{"text": EMPTY_MESSAGE}]}


def test_an_agent_answers_a_blank_message_over_converse(server, runtime):
    server.reply("Yes?")

    reply = Agent(runtime=runtime, tools=[]).run("   ")

    assert reply.text == "Yes?"


def test_a_file_of_an_image_format_goes_as_an_image(server, runtime):
    server.reply("A screenshot.")

    runtime.invoke(asked(file("screen.png", "image/png", PNG_BYTES)))

    [(_, body)] = server.requests
    assert body["messages"][0]["content"][1] == {
        "image": {"format": "png", "source": {"bytes": base64.b64encode(PNG_BYTES).decode()}}
    }


@pytest.mark.parametrize(
    ("parts", "reason"),
    [
        ([attachment("image", url="https://grafana.example.com/cpu.png")], "not its URL"),
        ([attachment("image", media_type="image/svg+xml", data="PHN2Zz4=")], "not image/svg+xml"),
        ([file("backup.zip", "application/zip")], "no application/zip documents"),
        ([file("big.png", "image/png", b"\x89PNG" + b"\0" * 3_750_000)], "images of at most"),
        ([file("big.pdf", "application/pdf", b"%PDF" + b"\0" * 4_500_000)], "documents of at most"),
        ([REPORT] * 6, "at most 5 documents"),
        ([PNG] * 21, "at most 20 images"),
    ],
)
def test_what_converse_cannot_take_is_refused_before_any_request(server, runtime, parts, reason):
    refused = runtime.refused_part(parts)

    assert refused is not None
    assert refused[0] == len(parts) - 1
    assert reason in refused[1]
    with pytest.raises(ModelRequestInvalid, match=re.escape(reason)):
        runtime.invoke(asked(*parts))
    assert server.requests == []


def test_a_runtime_for_a_text_model_refuses_images(server):
    runtime = BedrockRuntime("mistral.mistral-large-2402-v1:0", client=server.client(), accepts=())

    assert runtime.refused_part([PNG]) == (0, "it takes no image parts")


def test_an_agent_refuses_the_turn_naming_the_part_and_why(server, runtime):
    agent = Agent(runtime=runtime)
    url = attachment("image", url="https://grafana.example.com/cpu.png")

    with pytest.raises(UnsupportedPart) as refused:
        agent.run_request(AgentRequest(text="why?", attachments=(PNG, url)))

    assert refused.value.index == 1
    assert "image by URL" in str(refused.value)
    assert "send the image as data" in str(refused.value)
    assert server.requests == []


def test_a_sixth_document_in_a_conversation_is_refused_before_it_is_kept(server, runtime):
    agent = Agent(runtime=runtime)
    server.reply("Five read.")
    five = tuple(file(f"r{i}.txt", "text/plain") for i in range(5))
    first = agent.run_request(AgentRequest(text="read these", attachments=five))

    with pytest.raises(UnsupportedPart, match="at most 5 documents"):
        agent.run_request(
            AgentRequest(text="and this", attachments=(REPORT,), conversation_id=first.conversation_id)
        )

    assert len(server.requests) == 1
    stored = agent.repository.get(first.conversation_id)
    assert stored is not None
    assert len(stored.messages) == 2  # the refused message was not kept: the conversation goes on


def document(name: str) -> dict:
    return {"document": {"format": "pdf", "name": name, "source": {"bytes": REPORT.data}}}


def image(image_format: str, data: str | None) -> dict:
    return {"image": {"format": image_format, "source": {"bytes": data}}}


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ([{"text": " "}], "is blank"),
        ([{"text": "see"}, image("bmp", "AAAA")], "format"),
        ([{"text": "see"}, image("png", "not base64!")], "not base64"),
        ([{"text": "see"}, image("jpeg", PNG.data)], "not jpeg"),
        ([{"text": "see"}, document("a.pdf")], "name"),
        ([{"text": "see"}, document("a  b")], "name"),
        ([document("a")], "text block"),
        ([{"text": "see"}, document("a"), document("a")], "duplicate document names"),
    ],
)
def test_the_server_refuses_blocks_as_converse_does(server, content, problem):
    import httpx

    body = {"messages": [{"role": "user", "content": content}]}
    answer = httpx.post(f"{server.endpoint_url}/model/m/converse", json=body)

    assert answer.status_code == 400
    assert answer.headers["x-amzn-errortype"].startswith("ValidationException")
    assert problem in answer.json()["message"]
