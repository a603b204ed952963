"""OpenAIRuntime through the real openai SDK against the local OpenAI-compatible server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dcaf_like import (
    Agent,
    ModelAccessDenied,
    ModelCompleted,
    ModelError,
    ModelRequest,
    ModelRequestInvalid,
    ToolSpec,
    UserTurn,
    resolve_runtime,
)
from dcaf_like.runtimes.openai_chat import OpenAIRuntime
from dcaf_like.testing import OpenAICompatibleServer

pytest.importorskip("openai", reason="the openai extra is not installed: pip install -e '.[openai]'")


@pytest.fixture
def server() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer() as server:
        yield server


@pytest.fixture
def runtime(server: OpenAICompatibleServer) -> Iterator[OpenAIRuntime]:
    runtime = OpenAIRuntime("test-model", base_url=server.base_url, max_retries=0)
    yield runtime
    runtime.close()


def ask(text: str) -> ModelRequest:
    return ModelRequest("You operate Kubernetes.", (UserTurn(text),))


def test_the_request_carries_system_tools_and_model(server, runtime, cluster):
    agent = Agent(tools=cluster.tools(), system="You operate Kubernetes.", runtime=runtime)
    server.reply("ok")

    agent.run("status?")

    body = server.requests[-1]
    assert body["model"] == "test-model"
    assert body["messages"][0] == {"role": "system", "content": "You operate Kubernetes."}
    assert body["messages"][-1] == {"role": "user", "content": "status?"}
    names = [t["function"]["name"] for t in body["tools"]]
    assert names == ["list_pods", "delete_pod", "restart_pod"]
    delete = body["tools"][1]["function"]["parameters"]
    assert delete["required"] == ["name"]


def test_a_streamed_tool_call_is_assembled_from_its_fragments(server, runtime):
    server.call([("delete_pod", {"name": "web-1", "namespace": "prod"})])

    events = list(runtime.stream(ask("delete web-1")))

    completed = events[-1]
    assert isinstance(completed, ModelCompleted)
    [call] = completed.response.tool_calls
    assert (call.name, dict(call.arguments)) == ("delete_pod", {"name": "web-1", "namespace": "prod"})
    assert completed.response.stop_reason == "tool_use"
    assert completed.response.usage.input_tokens == 12


def test_malformed_arguments_run_nothing_and_the_model_is_told(server, runtime, cluster):
    agent = Agent(tools=cluster.tools(), runtime=runtime)
    server.call_with_raw_arguments("delete_pod", '{"name": "web-1"')  # cut off
    server.reply("Sorry, let me retry that.")

    response = agent.run("delete web-1")

    assert cluster.deleted == []
    assert response.pending_tool_calls == ()
    [failed] = response.executed_tool_calls
    assert "not a JSON object" in (failed.error or "")
    told = [m for m in server.requests[-1]["messages"] if m["role"] == "tool"]
    assert told[0]["content"].startswith("Error: ")
    assert response.text == "Sorry, let me retry that."


@pytest.mark.parametrize(
    ("status", "kind", "typed", "retryable"),
    [
        (401, "invalid_api_key", ModelAccessDenied, False),
        (400, "invalid_request_error", ModelRequestInvalid, False),
        (500, "server_error", ModelError, True),
    ],
)
def test_http_errors_are_typed_and_never_show_the_key(server, status, kind, typed, retryable):
    runtime = OpenAIRuntime(
        "test-model", base_url=server.base_url, api_key="sk-do-not-leak-123", max_retries=0
    )
    server.fail(status, kind, f"the server says {kind}")

    with pytest.raises(ModelError) as raised:
        runtime.invoke(ask("hi"))

    assert type(raised.value) is typed
    assert raised.value.retryable is retryable
    assert f"HTTP {status}" in str(raised.value)
    assert f"the server says {kind}" in str(raised.value)
    assert "sk-do-not-leak-123" not in str(raised.value)
    assert "sk-do-not-leak-123" not in repr(runtime)
    runtime.close()


def test_a_server_that_is_down_is_a_retryable_model_error():
    runtime = OpenAIRuntime("m", base_url="http://127.0.0.1:9/v1", max_retries=0, timeout=2)

    with pytest.raises(ModelError) as raised:
        runtime.invoke(ask("hi"))

    assert raised.value.retryable
    assert "openai:m" in str(raised.value)
    runtime.close()


def test_without_a_key_or_a_local_base_url_the_error_says_what_to_set(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)

    with pytest.raises(ModelAccessDenied, match="OPENAI_API_KEY"):
        OpenAIRuntime("gpt-4o-mini")


def test_a_runtime_named_by_a_string_takes_its_base_url_from_the_environment(server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server.reply("from the string")

    runtime = resolve_runtime("openai:qwen2.5-coder")

    assert runtime.name == "openai:qwen2.5-coder"
    assert runtime.invoke(ask("hi")).text == "from the string"
    assert server.requests[-1]["model"] == "qwen2.5-coder"
    runtime.close()


# -- tool calls written in the text (small models behind Ollama, llama.cpp's server, LM Studio) --------

OFFERED = (ToolSpec("delete_pod", "Delete a pod.", {"type": "object"}),)
WRITTEN_CALL = '```json\n{"name": "delete_pod", "arguments": {"name": "web-1", "namespace": "prod"}}\n```'


@pytest.fixture
def lenient(server: OpenAICompatibleServer) -> Iterator[OpenAIRuntime]:
    runtime = OpenAIRuntime("test-model", base_url=server.base_url, max_retries=0, tool_calls_in_text=True)
    yield runtime
    runtime.close()


def test_a_call_written_in_the_text_waits_for_approval_like_a_real_one(server, lenient, cluster):
    agent = Agent(tools=cluster.tools(), runtime=lenient)
    server.reply(WRITTEN_CALL)

    response = agent.run("delete web-1 in prod")

    [pending] = response.pending_tool_calls
    assert (pending.name, dict(pending.input)) == ("delete_pod", {"name": "web-1", "namespace": "prod"})
    assert cluster.deleted == []
    assert "delete_pod" not in response.text


def test_without_the_option_a_written_call_stays_text(server, runtime, cluster):
    agent = Agent(tools=cluster.tools(), runtime=runtime)
    server.reply(WRITTEN_CALL)

    response = agent.run("delete web-1 in prod")

    assert response.pending_tool_calls == ()
    assert '"delete_pod"' in response.text


def test_json_naming_no_offered_tool_stays_text(server, lenient, cluster):
    agent = Agent(tools=cluster.tools(), runtime=lenient)
    answer = '{"name": "api", "replicas": 3}'
    server.reply(answer)

    response = agent.run("show the deployment as JSON")

    assert response.pending_tool_calls == ()
    assert response.text == answer


def test_a_streamed_written_call_is_never_shown_as_text(server, lenient):
    request = ModelRequest("", (UserTurn("delete web-1"),), OFFERED)
    server.reply(WRITTEN_CALL, chunks=[WRITTEN_CALL[:9], WRITTEN_CALL[9:40], WRITTEN_CALL[40:]])

    events = list(lenient.stream(request))

    assert [e for e in events if not isinstance(e, ModelCompleted)] == []
    [call] = events[-1].response.tool_calls
    assert call.name == "delete_pod"


def test_streamed_prose_still_streams_as_it_comes(server, lenient):
    request = ModelRequest("", (UserTurn("status?"),), OFFERED)
    server.reply("All pods are healthy.", chunks=["All pods ", "are healthy."])

    events = list(lenient.stream(request))

    assert [e.text for e in events if not isinstance(e, ModelCompleted)] == ["All pods ", "are healthy."]
    assert events[-1].response.text == "All pods are healthy."
