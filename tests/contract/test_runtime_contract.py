"""The runtime contract: every AgentRuntime must behave like this, whichever model it drives.

Each runtime joins by adding a fixture to RUNTIMES that returns a `Script` for it: a way to make the
runtime answer the next call with given text or calls (for a real SDK, by scripting the local
server that speaks its wire protocol).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import pytest

from dcaf_like import (
    Agent,
    AgentRuntime,
    AssistantTurn,
    FallbackAnswer,
    FallbackRuntime,
    ModelCompleted,
    ModelError,
    ModelRateLimited,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    TextDelta,
    ToolResult,
    ToolSpec,
    UserTurn,
    attachment,
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
    """The tool results the runtime sent with its last call, read back from what it sent. Each one's
    `tool_name` is that of the call whose id it carries in the same request (ids may be rewritten on
    the way, as Agno does, but must still pair each result with its call); "" if none matches."""
    sent_wire: Callable[[], str] = str
    """The last request the runtime sent, as its provider received it (as text)."""
    sent_settings: Callable[[], dict[str, float | int | None]] = dict
    """The temperature and the most tokens the last call asked the provider for, read back from what it
    sent in the provider's own terms (None: not sent)."""


def fake_script(cleanup: Callable[[Callable[[], None]], None]) -> Script:
    runtime = FakeRuntime()
    return Script(
        runtime=runtime,
        answer=lambda text: runtime.then(reply(text)),
        answer_in_chunks=lambda chunks: runtime.then(reply("".join(chunks), chunks=chunks)),
        call=lambda calls: runtime.then(tool_calls(*(tool_call(n, a) for n, a in calls))),
        fail_rate_limited=lambda: runtime.then(fail(ModelRateLimited("slow down", runtime="fake"))),
        sent_tool_results=lambda: _fake_results(runtime.requests[-1]),
        sent_settings=lambda: _fake_settings(runtime),
        sent_wire=lambda: repr(runtime.requests[-1]),
    )


def _fake_settings(runtime: FakeRuntime) -> dict[str, float | int | None]:
    settings = runtime.settings_for(runtime.requests[-1])
    return {"temperature": settings.temperature, "max_tokens": settings.max_tokens}


def _fake_results(request: ModelRequest) -> list[ToolResult]:
    calls = {c.id: c.name for m in request.messages if isinstance(m, AssistantTurn) for c in m.tool_calls}
    return [
        ToolResult(m.call_id, calls.get(m.call_id, ""), m.content, m.is_error)
        for m in request.messages
        if isinstance(m, ToolResult)
    ]


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
        messages = server.requests[-1]["messages"]
        calls = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls") or ()}
        return [
            ToolResult(
                m["tool_call_id"],
                calls.get(m["tool_call_id"], ""),
                m["content"].removeprefix("Error: "),
                m["content"].startswith("Error: "),
            )
            for m in messages
            if m["role"] == "tool"
        ]

    return Script(
        runtime=runtime,
        answer=server.reply,
        answer_in_chunks=lambda chunks: server.reply("".join(chunks), chunks=chunks),
        call=server.call,
        fail_rate_limited=lambda: server.fail(429, "rate_limit_exceeded", "Rate limit reached, slow down"),
        sent_tool_results=sent_tool_results,
        sent_wire=lambda: json.dumps(server.requests[-1]),
        sent_settings=lambda: {
            "temperature": server.requests[-1].get("temperature"),
            "max_tokens": server.requests[-1].get(
                "max_tokens", server.requests[-1].get("max_completion_tokens")
            ),
        },
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
        blocks = [b for m in body["messages"] for b in m["content"]]
        calls = {b["toolUse"]["toolUseId"]: b["toolUse"]["name"] for b in blocks if "toolUse" in b}
        results = [b["toolResult"] for b in blocks if "toolResult" in b]
        return [
            ToolResult(
                r["toolUseId"], calls.get(r["toolUseId"], ""), r["content"][0]["text"], r["status"] == "error"
            )
            for r in results
        ]

    return Script(
        runtime=runtime,
        answer=server.reply,
        answer_in_chunks=lambda chunks: server.reply("".join(chunks), chunks=chunks),
        call=server.call,
        fail_rate_limited=lambda: server.fail(429, "ThrottlingException", "Too many requests, please wait"),
        sent_tool_results=sent_tool_results,
        sent_wire=lambda: json.dumps(server.requests[-1][1]),
        sent_settings=lambda: {
            "temperature": server.requests[-1][1].get("inferenceConfig", {}).get("temperature"),
            "max_tokens": server.requests[-1][1].get("inferenceConfig", {}).get("maxTokens"),
        },
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


def agno_script(cleanup: Callable[[Callable[[], None]], None]) -> Script:
    """A real Agno model (OpenAILike) against the local OpenAI-compatible server."""
    pytest.importorskip("agno", reason="the agno extra is not installed: pip install -e '.[agno]'")
    from agno.models.openai.like import OpenAILike

    from dcaf_like.runtimes.agno import AgnoRuntime

    inner = openai_script(cleanup)
    base_url = inner.runtime.base_url  # type: ignore[attr-defined]
    runtime = AgnoRuntime(OpenAILike(id="test-model", base_url=base_url, api_key="unused", max_retries=0))
    cleanup(runtime.close)
    return replace(inner, runtime=runtime)


def adk_gemini_script(cleanup: Callable[[Callable[[], None]], None]) -> Script:
    """Google ADK's real Gemini model (google-genai underneath) against the local generateContent server."""
    pytest.importorskip("google.adk", reason="the adk extra is not installed: pip install -e '.[adk]'")
    from google.adk.models import Gemini

    from dcaf_like.runtimes.adk import AdkRuntime
    from dcaf_like.testing import GeminiServer

    server = GeminiServer().start()
    cleanup(server.stop)
    model = Gemini(model="gemini-2.5-flash", base_url=server.base_url, client_kwargs={"api_key": "testing"})
    runtime = AdkRuntime(model)
    cleanup(runtime.close)

    def sent_tool_results() -> list[ToolResult]:
        _, body = server.requests[-1]
        parts = [p for content in body["contents"] for p in content["parts"]]
        calls = {p["functionCall"].get("id"): p["functionCall"]["name"] for p in parts if "functionCall" in p}
        results = [p["functionResponse"] for p in parts if "functionResponse" in p]
        return [
            ToolResult(
                r.get("id", ""),
                calls.get(r.get("id"), ""),
                r["response"].get("result") or r["response"].get("error", ""),
                "error" in r["response"],
            )
            for r in results
        ]

    return Script(
        runtime=runtime,
        answer=server.reply,
        answer_in_chunks=lambda chunks: server.reply("".join(chunks), chunks=chunks),
        call=server.call,
        fail_rate_limited=lambda: server.fail(429, "Resource has been exhausted (e.g. check quota)."),
        sent_tool_results=sent_tool_results,
        sent_wire=lambda: json.dumps(server.requests[-1][1]),
        sent_settings=lambda: {
            "temperature": server.requests[-1][1].get("generationConfig", {}).get("temperature"),
            "max_tokens": server.requests[-1][1].get("generationConfig", {}).get("maxOutputTokens"),
        },
    )


def adk_custom_script(cleanup: Callable[[Callable[[], None]], None]) -> Script:
    """A user-defined ADK model (a BaseLlm subclass) answering from a script in ADK's own types."""
    pytest.importorskip("google.adk", reason="the adk extra is not installed: pip install -e '.[adk]'")
    from google.adk.models import BaseLlm, LlmResponse
    from google.genai import errors, types

    from dcaf_like.runtimes.adk import AdkRuntime

    class ScriptedLlm(BaseLlm):
        model: str = "scripted"
        script: list = []  # noqa: RUF012  (a pydantic field: copied per instance)
        seen: list = []  # noqa: RUF012

        async def generate_content_async(self, llm_request, stream=False):
            self.seen.append(llm_request)
            kind, value = self.script.pop(0)
            if kind == "error":
                raise value
            if kind == "calls":
                parts = [types.Part(function_call=types.FunctionCall(name=n, args=a)) for n, a in value]
                yield LlmResponse(content=types.Content(role="model", parts=parts), partial=False)
                return
            chunks = value if kind == "chunks" else [value]
            if stream:
                for chunk in chunks:
                    yield LlmResponse(
                        content=types.Content(role="model", parts=[types.Part(text=chunk)]), partial=True
                    )
            whole = types.Content(role="model", parts=[types.Part(text="".join(chunks))])
            yield LlmResponse(content=whole, partial=False, turn_complete=True)

    llm = ScriptedLlm()
    runtime = AdkRuntime(llm)
    cleanup(runtime.close)
    quota = {"error": {"code": 429, "message": "Resource has been exhausted", "status": "RESOURCE_EXHAUSTED"}}

    def sent_tool_results() -> list[ToolResult]:
        parts = [p for content in llm.seen[-1].contents for p in content.parts]
        calls = {p.function_call.id: p.function_call.name for p in parts if p.function_call}
        return [
            ToolResult(
                r.id or "",
                calls.get(r.id, ""),
                (r.response or {}).get("result") or (r.response or {}).get("error", ""),
                "error" in (r.response or {}),
            )
            for r in (p.function_response for p in parts if p.function_response)
        ]

    return Script(
        runtime=runtime,
        answer=lambda text: llm.script.append(("text", text)),
        answer_in_chunks=lambda chunks: llm.script.append(("chunks", chunks)),
        call=lambda calls: llm.script.append(("calls", calls)),
        fail_rate_limited=lambda: llm.script.append(("error", errors.ClientError(429, quota))),
        sent_tool_results=sent_tool_results,
        sent_wire=lambda: repr(llm.seen[-1].contents),
        sent_settings=lambda: {
            "temperature": llm.seen[-1].config.temperature,
            "max_tokens": llm.seen[-1].config.max_output_tokens,
        },
    )


RUNTIMES = {
    "fake": fake_script,
    "openai": openai_script,
    "bedrock": bedrock_script,
    "fallback": fallback_script,
    "langchain-openai": langchain_openai_script,
    "langchain-bedrock": langchain_bedrock_script,
    "agno": agno_script,
    "adk-gemini": adk_gemini_script,
    "adk-custom": adk_custom_script,
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
    # The result went back paired with the call it answers, whatever the wire did to the ids.
    assert [(r.tool_name, r.content) for r in script.sent_tool_results()] == [
        ("delete_pod", 'pod "web-1" deleted')
    ]


def test_a_rejection_reason_reaches_the_model(script):
    script.answer("OK, I will not.")
    call = tool_call("delete_pod", name="web-1")
    rejected = ToolResult(call.id, "delete_pod", "Not run. Rejected: serving traffic", is_error=True)

    script.runtime.invoke(
        ModelRequest("sys", (UserTurn("delete"), AssistantTurn("", (call,)), rejected), TOOLS)
    )

    [sent] = script.sent_tool_results()
    assert sent.tool_name == "delete_pod"
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


PNG = attachment("image", media_type="image/png", data=base64.b64encode(b"\x89PNG\r\n\x1a\n pixels").decode())
PDF = attachment("file", media_type="application/pdf", data="JVBERi0xLjQ=", name="report.pdf")


@pytest.mark.parametrize("part", [PNG, PDF], ids=["image", "file"])
def test_a_part_of_a_kind_it_accepts_reaches_its_model_and_one_of_another_is_refused(script, part):
    """A kind in `accepts` goes in the provider's format (the local servers refuse a wrong one); a kind
    not in it is refused by `refused_part`, which an agent asks before the turn."""
    runtime = script.runtime

    if part.kind.value not in runtime.accepts:
        at, reason = runtime.refused_part([part]) or (None, "")
        assert at == 0
        assert reason.endswith(f"it takes no {part.kind.value} parts")  # a fallback names its runtime
        return
    assert runtime.refused_part([part]) is None
    script.answer("A report.")
    assert runtime.invoke(ModelRequest("", (UserTurn("what is this?", (part,)),))).text == "A report."


@pytest.mark.parametrize("streamed", [False, True], ids=["invoke", "stream"])
def test_model_settings_reach_the_providers_request_the_agents_over_the_runtime_strings(script, streamed):
    """docs/runtimes.md, "Model settings": the runtime's own (from its string) unless the request's
    (the agent's) say otherwise."""
    script.runtime.settings = ModelSettings(temperature=0.7, max_tokens=64)
    asked = replace(ask("hello"), settings=ModelSettings(temperature=0.0))

    script.answer("hi")
    if streamed:
        list(script.runtime.stream(asked))
    else:
        script.runtime.invoke(asked)

    assert script.sent_settings() == {"temperature": 0.0, "max_tokens": 64}


def test_a_request_without_settings_sends_none_of_them(script):
    script.answer("hi")
    script.runtime.invoke(ask("hello"))

    assert script.sent_settings() == {"temperature": None, "max_tokens": None}


# -- hooks that shape and recover, on every runtime (docs/operations.md, "Hooks") -------------------


class Shaping:
    """Redacts a secret from what the model reads, says the answer in capitals, and answers for a
    model that failed."""

    def before_model(self, context, request):
        redacted = tuple(
            replace(m, text=m.text.replace("hunter2", "[redacted]")) if isinstance(m, UserTurn) else m
            for m in request.messages
        )
        return replace(request, messages=redacted)

    def after_model(self, context, response):
        return replace(response, text=response.text.upper())

    def on_error(self, context, error):
        return FallbackAnswer("The model is busy: try again in a minute.")


def test_hooks_rewrite_what_the_model_reads_and_says_on_every_runtime(script):
    agent = Agent(runtime=script.runtime, hooks=[Shaping()])

    script.answer("noted")
    response = agent.run("the old password was hunter2")

    assert response.text == "NOTED"
    assert "hunter2" not in script.sent_wire()
    assert "[redacted]" in script.sent_wire()


def test_a_hook_answers_for_a_model_that_failed_and_the_conversation_goes_on(script):
    agent = Agent(runtime=script.runtime, hooks=[Shaping()])

    script.fail_rate_limited()
    fallback = agent.run("status?", conversation_id="conv_hooks")
    script.answer("all good")
    after = agent.run("and now?", conversation_id="conv_hooks")

    assert (fallback.stop_reason, fallback.text) == ("fallback", "The model is busy: try again in a minute.")
    assert after.text == "ALL GOOD"
