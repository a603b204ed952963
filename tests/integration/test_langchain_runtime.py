"""LangChainRuntime with LangChain's real chat models against the local servers."""

from __future__ import annotations

import asyncio
import base64

import pytest

from dcaf_like import (
    Agent,
    AgentRequest,
    ModelRequest,
    RuntimeNotConfigured,
    UnsupportedPart,
    UserTurn,
    attachment,
    resolve_runtime,
)
from dcaf_like.testing import OpenAICompatibleServer

pytest.importorskip("langchain_openai", reason="langchain-openai is a dev dependency: make install")

from langchain_openai import ChatOpenAI

from dcaf_like.runtimes.langchain import LangChainRuntime


@pytest.fixture
def server():
    with OpenAICompatibleServer() as server:
        yield server


def chat(server: OpenAICompatibleServer) -> ChatOpenAI:
    return ChatOpenAI(model="test-model", base_url=server.base_url, api_key="unused", max_retries=0)


def test_an_agent_on_a_langchain_model_keeps_the_approval_gate(server, cluster):
    agent = Agent(tools=cluster.tools(), system="Operate.", runtime=LangChainRuntime(chat(server)))
    server.call([("delete_pod", {"name": "web-2"})])
    server.reply("Deleted web-2.")

    proposed = agent.run("delete web-2")
    assert cluster.deleted == []
    answered = agent.approve(proposed.conversation_id, proposed.pending_tool_calls[0].id)

    assert answered.text == "Deleted web-2."
    assert cluster.deleted == [("default", "web-2")]
    first = server.requests[0]
    assert first["messages"][0] == {"role": "system", "content": "Operate."}
    assert [t["function"]["name"] for t in first["tools"]] == ["list_pods", "delete_pod", "restart_pod"]
    tool_messages = [m for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert tool_messages[0]["content"] == 'pod "web-2" deleted'


def test_closing_one_agent_leaves_another_on_the_same_provider_working(server):
    """langchain-openai shares one HTTP client between chat models of the same base URL: closing
    it with the first agent made the second fail ("the client has been closed")."""
    first, second = (
        Agent(runtime=LangChainRuntime(chat(server))),
        Agent(runtime=LangChainRuntime(chat(server))),
    )
    server.reply("One.")
    server.reply("Two.")
    server.reply("Three.")

    async def first_then_second() -> tuple[str, str]:
        one = (await first.arun("hi")).text
        await first.aclose()
        first.close()
        return one, (await second.arun("hi")).text

    assert asyncio.run(first_then_second()) == ("One.", "Two.")
    assert second.run("hi").text == "Three."


def test_a_call_langchain_could_not_read_is_reported_to_the_model_and_not_run(server, cluster):
    agent = Agent(tools=cluster.tools(), runtime=LangChainRuntime(chat(server)))
    server.call_with_raw_arguments("delete_pod", '{"name": ')
    server.reply("Let me try again.")

    response = agent.run("delete web-2")

    assert cluster.deleted == []
    assert response.pending_tool_calls == ()
    assert "could not be read" in (response.executed_tool_calls[0].error or "")


def test_a_runtime_named_langchain_openai_uses_the_environment(server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    server.reply("via the string")

    runtime = resolve_runtime("langchain:openai:test-model")

    assert runtime.name == "langchain:ChatOpenAI:test-model"
    assert runtime.invoke(ModelRequest("", (UserTurn("hi"),))).text == "via the string"


def test_a_provider_whose_package_is_missing_names_the_install():
    with pytest.raises(RuntimeNotConfigured, match="pip install langchain-anthropic"):
        resolve_runtime("langchain:anthropic:claude-sonnet")
    with pytest.raises(RuntimeNotConfigured, match="expected one of"):
        resolve_runtime("langchain:nonsense")


def test_only_a_chat_model_is_accepted():
    with pytest.raises(TypeError, match="LangChain chat model"):
        LangChainRuntime("gpt-4o")


PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n fake pixels").decode()
IMAGE = attachment("image", media_type="image/png", data=PNG)
BY_URL = attachment("image", url="https://example.com/a.png")
REPORT = attachment("file", media_type="application/pdf", data="JVBERi0xLjQ=", name="report.pdf")
AS_CHAT_COMPLETIONS = [
    {"type": "text", "text": "what is wrong here?"},
    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
    {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
    {
        "type": "file",
        "file": {"filename": "report.pdf", "file_data": "data:application/pdf;base64,JVBERi0xLjQ="},
    },
]


@pytest.mark.parametrize("call", ["invoke", "stream"])
def test_images_and_files_reach_an_openai_chat_model_as_its_apis_parts(server, call):
    runtime = LangChainRuntime(chat(server))
    server.reply("A crash loop.")
    request = ModelRequest("", (UserTurn("what is wrong here?", (IMAGE, BY_URL, REPORT)),))

    answer = runtime.invoke(request) if call == "invoke" else list(runtime.stream(request))[-1].response

    assert answer.text == "A crash loop."
    assert runtime.accepts == {"image", "file"}
    assert server.requests[0]["messages"] == [{"role": "user", "content": AS_CHAT_COMPLETIONS}]


def test_an_agent_shows_the_model_the_parts_again_on_later_turns(server):
    agent = Agent(runtime=LangChainRuntime(chat(server)))
    server.reply("A crash loop.")
    server.reply("Still one.")

    first = agent.run_request(AgentRequest(text="what is wrong here?", attachments=(IMAGE, REPORT)))
    agent.run("and now?", conversation_id=first.conversation_id)

    [earlier, _, latest] = server.requests[1]["messages"]
    assert earlier["content"] == [AS_CHAT_COMPLETIONS[0], AS_CHAT_COMPLETIONS[1], AS_CHAT_COMPLETIONS[3]]
    assert latest == {"role": "user", "content": "and now?"}


def test_a_chat_model_not_known_to_take_parts_refuses_them_unless_told():
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    def model() -> GenericFakeChatModel:
        return GenericFakeChatModel(messages=iter([AIMessage("seen")]))

    blind = Agent(runtime=LangChainRuntime(model()))
    told = LangChainRuntime(model(), accepts={"image"})

    with pytest.raises(UnsupportedPart, match="GenericFakeChatModel"):
        blind.run_request(AgentRequest(text="what is wrong here?", attachments=(IMAGE,)))
    assert told.accepts == {"image"}
    assert (
        Agent(runtime=told).run_request(AgentRequest(text="and this?", attachments=(IMAGE,))).text == "seen"
    )
