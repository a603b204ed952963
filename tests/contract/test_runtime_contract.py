"""The runtime contract: every AgentRuntime must behave like this, whichever model it drives.

Each runtime joins by adding a fixture to RUNTIMES that returns a `Script` for it: a way to make the
runtime answer the next call with given text or calls (for a real SDK, by scripting the local
server that speaks its wire protocol).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import pytest

from dcaf_like import (
    AgentRuntime,
    AssistantTurn,
    FallbackRuntime,
    ModelCompleted,
    ModelError,
    ModelRateLimited,
    ModelRequest,
    ModelResponse,
    TextDelta,
    ToolResult,
    ToolSpec,
    UserTurn,
)
from dcaf_like.testing import FakeRuntime, Step, fail, reply, tool_call, tool_calls


@dataclass
class Script:
    runtime: AgentRuntime
    answer: Callable[[str], None]
    answer_in_chunks: Callable[[list[str]], None]
    call: Callable[[list[tuple[str, dict]]], None]
    fail_rate_limited: Callable[[], None]
    sent_tool_results: Callable[[], list[ToolResult]]
    """The tool results the runtime sent with its last call, read back from what it sent."""


def fake_script(cleanup: Callable[[Callable[[], None]], None]) -> Script:
    runtime = FakeRuntime()
    return Script(
        runtime=runtime,
        answer=lambda text: runtime.then(reply(text)),
        answer_in_chunks=lambda chunks: runtime.then(reply("".join(chunks), chunks=chunks)),
        call=lambda calls: runtime.then(tool_calls(*(tool_call(n, a) for n, a in calls))),
        fail_rate_limited=lambda: runtime.then(fail(ModelRateLimited("slow down", runtime="fake"))),
        sent_tool_results=lambda: [m for m in runtime.requests[-1].messages if isinstance(m, ToolResult)],
    )


def openai_script(cleanup: Callable[[Callable[[], None]], None]) -> Script:
    """The real openai SDK against the local OpenAI-compatible server."""
    pytest.importorskip("openai", reason="the openai extra is not installed: pip install -e '.[openai]'")
    from dcaf_like.runtimes.openai_chat import OpenAIRuntime
    from dcaf_like.testing import OpenAICompatibleServer

    server = OpenAICompatibleServer().start()
    cleanup(server.stop)
    runtime = OpenAIRuntime("test-model", base_url=server.base_url, max_retries=0)
    cleanup(runtime.close)

    def sent_tool_results() -> list[ToolResult]:
        sent = [m for m in server.requests[-1]["messages"] if m["role"] == "tool"]
        return [
            ToolResult(
                m["tool_call_id"],
                "",
                m["content"].removeprefix("Error: "),
                m["content"].startswith("Error: "),
            )
            for m in sent
        ]

    return Script(
        runtime=runtime,
        answer=server.reply,
        answer_in_chunks=lambda chunks: server.reply("".join(chunks), chunks=chunks),
        call=server.call,
        fail_rate_limited=lambda: server.fail(429, "rate_limit_exceeded", "Rate limit reached, slow down"),
        sent_tool_results=sent_tool_results,
    )


def bedrock_script(cleanup: Callable[[Callable[[], None]], None]) -> Script:
    """Real boto3 (Converse, and ConverseStream's event-stream framing) against the local server."""
    pytest.importorskip("boto3", reason="the bedrock extra is not installed: pip install -e '.[bedrock]'")
    from dcaf_like.runtimes.bedrock import BedrockRuntime
    from dcaf_like.testing import BedrockConverseServer

    server = BedrockConverseServer().start()
    cleanup(server.stop)
    client = server.client()
    runtime = BedrockRuntime("anthropic.claude-3-5-haiku-20241022-v1:0", client=client)
    cleanup(runtime.close)

    def sent_tool_results() -> list[ToolResult]:
        _, body = server.requests[-1]
        blocks = [b["toolResult"] for m in body["messages"] for b in m["content"] if "toolResult" in b]
        return [
            ToolResult(b["toolUseId"], "", b["content"][0]["text"], b["status"] == "error") for b in blocks
        ]

    return Script(
        runtime=runtime,
        answer=server.reply,
        answer_in_chunks=lambda chunks: server.reply("".join(chunks), chunks=chunks),
        call=server.call,
        fail_rate_limited=lambda: server.fail(429, "ThrottlingException", "Too many requests, please wait"),
        sent_tool_results=sent_tool_results,
    )


class Down(AgentRuntime):
    """A runtime whose provider is down: every call fails with a retryable error."""

    name = "down"

    def invoke(self, request: ModelRequest) -> ModelResponse:
        raise ModelError("connection refused", runtime=self.name, retryable=True)


def fallback_script(cleanup: Callable[[Callable[[], None]], None]) -> Script:
    """A FallbackRuntime whose first runtime is down: the second answers everything."""
    inner = fake_script(cleanup)
    return replace(inner, runtime=FallbackRuntime([Down(), inner.runtime]))


def langchain_openai_script(cleanup: Callable[[Callable[[], None]], None]) -> Script:
    """LangChain's real ChatOpenAI against the local OpenAI-compatible server."""
    pytest.importorskip("langchain_openai", reason="langchain-openai is a dev dependency: make install")
    from langchain_openai import ChatOpenAI

    from dcaf_like.runtimes.langchain import LangChainRuntime

    inner = openai_script(cleanup)
    base_url = inner.runtime.base_url  # type: ignore[attr-defined]
    chat = ChatOpenAI(model="test-model", base_url=base_url, api_key="unused", max_retries=0)
    runtime = LangChainRuntime(chat)
    cleanup(runtime.close)
    return replace(inner, runtime=runtime)


def langchain_bedrock_script(cleanup: Callable[[Callable[[], None]], None]) -> Script:
    """LangChain's real ChatBedrockConverse (over boto3) against the local Bedrock server."""
    pytest.importorskip("langchain_aws", reason="langchain-aws is a dev dependency: make install")
    from langchain_aws import ChatBedrockConverse

    from dcaf_like.runtimes.langchain import LangChainRuntime

    inner = bedrock_script(cleanup)
    client = inner.runtime.client  # type: ignore[attr-defined]
    chat = ChatBedrockConverse(
        model="anthropic.claude-3-5-haiku-20241022-v1:0", client=client, region_name="us-east-1"
    )
    runtime = LangChainRuntime(chat)
    cleanup(runtime.close)
    return replace(inner, runtime=runtime)


RUNTIMES = {
    "fake": fake_script,
    "openai": openai_script,
    "bedrock": bedrock_script,
    "fallback": fallback_script,
    "langchain-openai": langchain_openai_script,
    "langchain-bedrock": langchain_bedrock_script,
}


@pytest.fixture(params=sorted(RUNTIMES))
def script(request) -> Iterator[Script]:
    cleanups: list[Callable[[], None]] = []
    yield RUNTIMES[request.param](cleanups.append)
    for cleanup in cleanups:
        cleanup()


TOOLS = (
    ToolSpec("delete_pod", "Delete a pod", {"type": "object", "properties": {"name": {"type": "string"}}}),
    ToolSpec("list_pods", "List pods", {"type": "object", "properties": {}}),
)


def ask(text: str, *history) -> ModelRequest:
    return ModelRequest(system="You operate Kubernetes.", messages=(*history, UserTurn(text)), tools=TOOLS)


def test_a_plain_answer(script):
    script.answer("All pods are healthy.")

    response = script.runtime.invoke(ask("status?"))

    assert response.text == "All pods are healthy."
    assert response.tool_calls == ()


def test_one_tool_call(script):
    script.call([("delete_pod", {"name": "web-1"})])

    response = script.runtime.invoke(ask("delete web-1"))

    [call] = response.tool_calls
    assert (call.name, dict(call.arguments)) == ("delete_pod", {"name": "web-1"})
    assert call.id


def test_several_tool_calls_in_one_answer(script):
    script.call([("list_pods", {}), ("delete_pod", {"name": "web-1"})])

    response = script.runtime.invoke(ask("clean up"))

    assert [c.name for c in response.tool_calls] == ["list_pods", "delete_pod"]
    assert len({c.id for c in response.tool_calls}) == 2


def test_a_tool_result_then_an_answer(script):
    script.answer("web-1 is deleted.")
    history = (
        UserTurn("delete web-1"),
        AssistantTurn("", (tool_call("delete_pod", name="web-1"),)),
    )
    call_id = history[1].tool_calls[0].id

    response = script.runtime.invoke(
        ModelRequest("sys", (*history, ToolResult(call_id, "delete_pod", 'pod "web-1" deleted')), TOOLS)
    )

    assert response.text == "web-1 is deleted."
    assert [(r.call_id, r.content) for r in script.sent_tool_results()] == [(call_id, 'pod "web-1" deleted')]


def test_a_rejection_reason_reaches_the_model(script):
    script.answer("OK, I will not.")
    call = tool_call("delete_pod", name="web-1")
    rejected = ToolResult(call.id, "delete_pod", "Not run. Rejected: serving traffic", is_error=True)

    script.runtime.invoke(
        ModelRequest("sys", (UserTurn("delete"), AssistantTurn("", (call,)), rejected), TOOLS)
    )

    [sent] = script.sent_tool_results()
    assert sent.is_error
    assert "serving traffic" in sent.content


def test_streaming_deltas_arrive_in_order_then_one_completion(script):
    script.answer_in_chunks(["Pods ", "are ", "healthy."])

    events = list(script.runtime.stream(ask("status?")))

    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert "".join(deltas) == "Pods are healthy."
    assert isinstance(events[-1], ModelCompleted)
    assert events[-1].response.text == "Pods are healthy."
    assert sum(isinstance(e, ModelCompleted) for e in events) == 1


async def test_the_async_twins_give_the_same_answers(script):
    script.answer("async hello")
    script.answer_in_chunks(["a", "b"])

    response = await script.runtime.ainvoke(ask("hi"))
    events = [e async for e in script.runtime.astream(ask("hi"))]

    await script.runtime.aclose()
    assert response.text == "async hello"
    assert events[-1].response.text == "ab"


def test_a_provider_error_is_mapped_to_a_typed_error(script):
    script.fail_rate_limited()

    with pytest.raises(ModelError) as info:
        script.runtime.invoke(ask("hi"))

    assert isinstance(info.value, ModelRateLimited)
    assert info.value.retryable


def test_unicode_and_large_arguments_survive(script):
    big = {"name": "pød-ünïcødé-🚀", "labels": {f"k{i}": "v" * 50 for i in range(200)}}
    script.call([("delete_pod", big)])

    response = script.runtime.invoke(ask("delete the rocket pod ✈"))

    assert dict(response.tool_calls[0].arguments) == big


def test_a_step_function_sees_the_request():
    runtime = FakeRuntime([lambda request: Step(text=f"{len(request.tools)} tools").response()])

    assert runtime.invoke(ask("hi")).text == "2 tools"
