"""LangChainRuntime with LangChain's real chat models against the local servers."""

from __future__ import annotations

import pytest

from dcaf_like import Agent, RuntimeNotConfigured, resolve_runtime
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
    from dcaf_like import ModelRequest, UserTurn

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
