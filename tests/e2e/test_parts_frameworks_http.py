"""Images and files over HTTP to agents on LangChain, Agno and the local model: the first two send
them to the provider in its own format, through their framework's model class; the local model,
which reads text only, refuses an image naming the part and itself."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest
from _helpdesk import user

from dcaf_like import Agent
from dcaf_like.application.ports import AgentRuntime
from dcaf_like.testing import OpenAICompatibleServer

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n fake pixels").decode()
ASKED = [
    {"type": "text", "text": "what is wrong here?"},
    {"type": "image", "media_type": "image/png", "data": PNG},
    {"type": "image", "url": "https://example.com/a.png"},
    {"type": "file", "name": "report.pdf", "media_type": "application/pdf", "data": "JVBERi0xLjQ="},
]
TEXT, IMAGE, BY_URL, REPORT = (
    {"type": "text", "text": "what is wrong here?"},
    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
    {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
    {
        "type": "file",
        "file": {"filename": "report.pdf", "file_data": "data:application/pdf;base64,JVBERi0xLjQ="},
    },
)


def langchain(base_url: str) -> AgentRuntime:
    pytest.importorskip("langchain_openai", reason="langchain-openai is a dev dependency: make install")
    from langchain_openai import ChatOpenAI

    from dcaf_like.runtimes.langchain import LangChainRuntime

    return LangChainRuntime(ChatOpenAI(model="test-model", base_url=base_url, api_key="x", max_retries=0))


def agno(base_url: str) -> AgentRuntime:
    pytest.importorskip("agno", reason="the agno extra is not installed: pip install -e '.[agno]'")
    from agno.models.openai.like import OpenAILike

    from dcaf_like.runtimes.agno import AgnoRuntime

    return AgnoRuntime(OpenAILike(id="test-model", base_url=base_url, api_key="x"))


@pytest.mark.parametrize("path", ["/api/chat", "/api/chat-stream"])
@pytest.mark.parametrize(
    ("runtime", "sent"),
    [(langchain, [TEXT, IMAGE, BY_URL, REPORT]), (agno, [REPORT, TEXT, IMAGE, BY_URL])],  # Agno's order
    ids=["langchain", "agno"],
)
def test_a_frameworks_openai_model_receives_the_parts_in_the_apis_format(
    start_server, runtime: Callable[[str], AgentRuntime], sent: list[dict[str, Any]], path: str
):
    with OpenAICompatibleServer() as model:
        agent = Agent(runtime=runtime(model.base_url))
        client = start_server(agent)
        model.reply("A crash loop.")

        answer = client.post(path, json={"messages": [user(ASKED)]})
        agent.runtime.close()

    assert answer.status_code == 200, answer.text
    assert "A crash loop." in answer.text
    assert model.requests[-1]["messages"][-1] == {"role": "user", "content": sent}


class ScriptedLlama:
    """Plays llama.cpp's ``create_chat_completion`` (the real model runs in test_local_model_http.py)."""

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.prompts: list[list[dict[str, str]]] = []

    def create_chat_completion(self, messages: list[dict[str, str]], **_: Any) -> Any:
        self.prompts.append(messages)
        yield {"choices": [{"delta": {"content": self.answer}}]}

    def tokenize(self, data: bytes, **_: Any) -> list[bytes]:
        return data.split()


def local_model(answer: str = "") -> tuple[Any, ScriptedLlama]:
    from dcaf_like.runtimes.local import LocalRuntime  # llama.cpp is imported when the model loads

    runtime, llm = LocalRuntime("model.gguf", probe=False), ScriptedLlama(answer)
    runtime._llm = llm
    return runtime, llm


@pytest.mark.parametrize(
    ("part", "named", "refused"),
    [
        (ASKED[1], "image/png image", "takes no image parts"),
        (ASKED[3], "file 'report.pdf' (application/pdf)", "takes no application/pdf parts"),
    ],
    ids=["image", "pdf"],
)
def test_the_local_model_refuses_what_is_not_text_naming_it(start_server, part, named, refused):
    runtime, llm = local_model()
    client = start_server(Agent(runtime=runtime))

    answer = client.post("/api/chat", json={"messages": [user([ASKED[0], part])]})

    assert answer.status_code == 422, answer.text
    error: dict[str, Any] = answer.json()["error"]
    assert (error["code"], error["field"]) == ("unsupported_part", "attachments[0]")
    assert named in error["message"]
    assert refused in error["message"]
    assert "'local:model.gguf'" in error["message"]
    assert llm.prompts == []


def test_the_local_model_reads_a_text_file_inlined_in_the_message_named_by_it(start_server):
    runtime, llm = local_model("web-2 cannot pull its image.")
    client = start_server(Agent(runtime=runtime))
    events = {
        "type": "file",
        "name": "events.txt",
        "media_type": "text/plain",
        "data": "QmFja09mZiB3ZWItMg==",
    }

    answer = client.post("/api/chat", json={"messages": [user([ASKED[0], events])]})

    assert answer.status_code == 200, answer.text
    assert answer.json()["content"] == "web-2 cannot pull its image."
    assert llm.prompts[0][-1] == {
        "role": "user",
        "content": 'what is wrong here?\n\n<file name="events.txt">\nBackOff web-2\n</file>',
    }
