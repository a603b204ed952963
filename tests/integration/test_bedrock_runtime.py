"""BedrockRuntime through real boto3 against the local Converse / ConverseStream server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dcaf_like import (
    Agent,
    AssistantTurn,
    ModelAccessDenied,
    ModelCompleted,
    ModelError,
    ModelRequest,
    ModelRequestInvalid,
    ModelTimeout,
    ReasoningDelta,
    ToolResult,
    UserTurn,
    resolve_runtime,
)
from dcaf_like.runtimes.bedrock import BedrockRuntime
from dcaf_like.testing import BedrockConverseServer, tool_call

boto3 = pytest.importorskip("boto3", reason="the bedrock extra is not installed: pip install -e '.[bedrock]'")
from botocore.config import Config  # noqa: E402

MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"


@pytest.fixture
def server() -> Iterator[BedrockConverseServer]:
    with BedrockConverseServer() as server:
        yield server


@pytest.fixture
def runtime(server) -> Iterator[BedrockRuntime]:
    client = boto3.client(
        "bedrock-runtime",
        endpoint_url=server.endpoint_url,
        region_name="eu-west-1",
        aws_access_key_id="AKIATESTINGONLY",
        aws_secret_access_key="secret-do-not-leak",
        config=Config(retries={"total_max_attempts": 1}),
    )
    runtime = BedrockRuntime(MODEL, client=client, max_tokens=256, temperature=0.2)
    yield runtime
    runtime.close()


def test_the_request_has_system_tools_inference_and_alternating_roles(server, runtime, cluster):
    agent = Agent(tools=cluster.tools(), system="You operate Kubernetes.", runtime=runtime)
    server.call([("list_pods", {"namespace": "default"}), ("list_pods", {"namespace": "prod"})])
    server.reply("All listed.")

    agent.run("list default and prod")

    model_id, first = server.requests[0]
    assert model_id == MODEL
    assert first["system"] == [{"text": "You operate Kubernetes."}]
    assert first["inferenceConfig"] == {"maxTokens": 256, "temperature": 0.2}
    specs = [t["toolSpec"] for t in first["toolConfig"]["tools"]]
    assert [s["name"] for s in specs] == ["list_pods", "delete_pod", "restart_pod"]
    assert specs[1]["inputSchema"]["json"]["required"] == ["name"]
    _, second = server.requests[1]
    roles = [m["role"] for m in second["messages"]]
    assert roles == ["user", "assistant", "user"]
    uses = [b["toolUse"] for b in second["messages"][1]["content"] if "toolUse" in b]
    assert [u["input"] for u in uses] == [{"namespace": "default"}, {"namespace": "prod"}]
    results = [b["toolResult"] for b in second["messages"][2]["content"]]  # both results in one user turn
    assert [r["toolUseId"] for r in results] == [u["toolUseId"] for u in uses]
    assert [r["status"] for r in results] == ["success", "success"]


def test_a_rejection_goes_back_as_an_error_tool_result(server, runtime):
    call = tool_call("delete_pod", name="web-1")
    server.reply("Understood.")

    runtime.invoke(
        ModelRequest(
            "",
            (
                UserTurn("delete web-1"),
                AssistantTurn("", (call,)),
                ToolResult(call.id, "delete_pod", "Rejected: it serves traffic", is_error=True),
            ),
        )
    )

    _, body = server.requests[-1]
    [result] = [b["toolResult"] for b in body["messages"][-1]["content"]]
    assert result == {
        "toolUseId": call.id,
        "content": [{"text": "Rejected: it serves traffic"}],
        "status": "error",
    }


def test_the_stream_assembles_tool_use_fragments_and_reasoning(server, runtime):
    server.reply("Looking.", reasoning="The user wants pods.")
    server.call([("delete_pod", {"name": "wéb-1", "labels": {"a": "b"}})])

    first = list(runtime.stream(ModelRequest("", (UserTurn("pods?"),))))
    second = list(runtime.stream(ModelRequest("", (UserTurn("delete"),))))

    assert [e.text for e in first if isinstance(e, ReasoningDelta)] == ["The user wants pods."]
    assert first[-1].response.reasoning == "The user wants pods."
    completed = second[-1]
    assert isinstance(completed, ModelCompleted)
    [call] = completed.response.tool_calls
    assert dict(call.arguments) == {"name": "wéb-1", "labels": {"a": "b"}}
    assert completed.response.stop_reason == "tool_use"
    assert completed.response.usage.input_tokens == 21


@pytest.mark.parametrize(
    ("status", "code", "typed", "retryable"),
    [
        (403, "AccessDeniedException", ModelAccessDenied, False),
        (400, "ValidationException", ModelRequestInvalid, False),
        (408, "ModelTimeoutException", ModelTimeout, True),
        (503, "ServiceUnavailableException", ModelError, True),
    ],
)
def test_aws_errors_are_typed_with_awss_message_and_no_secret(
    server, runtime, status, code, typed, retryable
):
    server.fail(status, code, f"AWS says {code}")

    with pytest.raises(ModelError) as raised:
        runtime.invoke(ModelRequest("", (UserTurn("hi"),)))

    assert type(raised.value) is typed
    assert raised.value.retryable is retryable
    assert f"{code}: AWS says {code}" in str(raised.value)
    assert "secret-do-not-leak" not in str(raised.value)


def test_an_error_inside_the_stream_is_typed_too(server, runtime):
    server.fail(429, "ThrottlingException", "slow down")

    with pytest.raises(ModelError) as raised:
        list(runtime.stream(ModelRequest("", (UserTurn("hi"),))))

    assert raised.value.retryable


def test_a_runtime_named_by_a_string_uses_the_aws_environment(server, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", server.endpoint_url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIATESTINGONLY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    server.reply("from the string")

    runtime = resolve_runtime(f"bedrock:{MODEL}")

    assert runtime.name == f"bedrock:{MODEL}"
    assert runtime.invoke(ModelRequest("", (UserTurn("hi"),))).text == "from the string"
    runtime.close()
