"""The wire client of OpenAIRuntime (dcaf_like/runtimes/_chat_wire.py), as docs/runtimes.md,
"OpenAIRuntime" promises it: what the openai SDK did that a caller relies on, kept (retries and their
delays, typed errors without the key, a time limit), server-sent events however they are cut, a stream
never tried again once it began; and an SDK client given as ``client=`` still used for every call."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from dcaf_like import ModelError, ModelRateLimited, ModelRequest, ModelRequestInvalid, ModelTimeout, UserTurn
from dcaf_like.runtimes import _chat_wire
from dcaf_like.runtimes._chat_wire import WireError, _delay, _Lines, _retries
from dcaf_like.runtimes.openai_chat import OpenAIRuntime
from dcaf_like.testing import OpenAICompatibleServer

pytest.importorskip("httpcore", reason="the openai extra is not installed: pip install -e '.[openai]'")


@pytest.fixture
def server() -> Iterator[OpenAICompatibleServer]:
    with OpenAICompatibleServer() as server:
        yield server


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch):
    """Retries wait the SDK's backoff, times zero here: what is checked is that they happen."""
    monkeypatch.setattr(_chat_wire, "INITIAL_RETRY_DELAY", 0.0)


def ask(text: str) -> ModelRequest:
    return ModelRequest("You operate Kubernetes.", (UserTurn(text),))


def test_a_server_error_is_tried_again_as_the_sdk_did_and_the_answer_comes_back(server):
    runtime = OpenAIRuntime("test-model", base_url=server.base_url, max_retries=2)
    server.fail(503, "overloaded", "try later")
    server.fail(429, "rate_limit", "slow down")
    server.reply("web-1 is running.")

    assert runtime.invoke(ask("hi")).text == "web-1 is running."
    assert len(server.requests) == 3
    runtime.close()


def test_a_request_the_server_refuses_is_not_tried_again(server):
    runtime = OpenAIRuntime("test-model", base_url=server.base_url, max_retries=2)
    server.fail(400, "invalid_request_error", "no such model")
    server.reply("never read")

    with pytest.raises(ModelRequestInvalid, match="HTTP 400: no such model"):
        asyncio.run(runtime.ainvoke(ask("hi")))
    assert len(server.requests) == 1


def test_retries_run_out_on_the_last_answer_s_error(server):
    runtime = OpenAIRuntime("test-model", base_url=server.base_url, max_retries=1)
    server.fail(500, "server_error", "down")
    server.fail(429, "rate_limit", "slow down")

    with pytest.raises(ModelRateLimited, match="HTTP 429: slow down"):
        list(runtime.stream(ask("hi")))
    assert len(server.requests) == 2


def test_the_server_s_retry_headers_decide_as_they_did_for_the_sdk():
    assert _retries(500, [])
    assert _retries(409, [])
    assert not _retries(400, [])
    assert _retries(400, [(b"x-should-retry", b"true")])
    assert not _retries(503, [(b"X-Should-Retry", b"false")])
    assert not _retries(429, [(b"retry-after", b"600")])  # more than two minutes: not waited for
    assert _delay(0, [(b"retry-after-ms", b"1500")]) == 1.5
    assert _delay(3, [(b"retry-after", b"2")]) == 2.0


def test_backoff_doubles_up_to_eight_seconds_less_up_to_a_quarter(monkeypatch):
    monkeypatch.setattr(_chat_wire, "INITIAL_RETRY_DELAY", 0.5)

    for attempt, full in ((0, 0.5), (1, 1.0), (2, 2.0), (6, 8.0)):
        assert 0.75 * full <= _delay(attempt, []) <= full


def test_events_are_read_however_the_stream_is_cut():
    stream = (
        b'data: {"a": 1}\n\n: a comment\nevent: x\ndata: {"b":\ndata: 2}\r\n\r\n'
        b'data: [DONE]\n\ndata: {"c": 3}\n\n'
    )
    for size in (1, 3, 7, len(stream)):
        lines, events = _Lines(), []
        for start in range(0, len(stream), size):
            events += list(lines.add(stream[start : start + size]))
            if None in events:
                break
        assert events == [{"a": 1}, {"b": 2}, None], size


def test_an_error_event_in_a_stream_is_raised():
    with pytest.raises(WireError, match="the model is overloaded"):
        list(_Lines().add(b'data: {"error": {"message": "the model is overloaded"}}\n\n'))


def test_a_time_limit_is_a_model_timeout_and_the_key_is_never_shown():
    with socket.create_server(("127.0.0.1", 0)) as silent:  # connects, never answers
        port = silent.getsockname()[1]
        runtime = OpenAIRuntime(
            "m",
            base_url=f"http://127.0.0.1:{port}/v1",
            api_key="sk-do-not-leak-456",
            timeout=0.2,
            max_retries=0,
        )

        with pytest.raises(ModelTimeout) as raised:
            runtime.invoke(ask("hi"))

    assert "sk-do-not-leak-456" not in str(raised.value) + repr(runtime) + repr(runtime._wire)
    runtime.close()


def test_a_stream_that_failed_once_begun_is_not_tried_again(server, monkeypatch):
    runtime = OpenAIRuntime("test-model", base_url=server.base_url, max_retries=3)
    server.reply("web-1 is running.", chunks=["web-1 ", "is running."])
    real_add = _Lines.add

    def cut_after_the_first_event(self, piece):
        for event in real_add(self, piece):
            yield event
            raise _chat_wire.httpcore.ReadError("connection reset")

    monkeypatch.setattr(_Lines, "add", cut_after_the_first_event)

    with pytest.raises(ModelError, match="Connection error"):
        list(runtime.stream(ask("hi")))
    assert len(server.requests) == 1
    runtime.close()


def test_an_sdk_client_given_is_used_for_every_call(server):
    openai = pytest.importorskip("openai")
    sync = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
    runtime = OpenAIRuntime("test-model", client=sync)
    server.reply("from the SDK", chunks=["from ", "the SDK"])
    server.call([("list_pods", {"namespace": "prod"})])

    streamed = list(runtime.stream(ask("hi")))
    called = runtime.invoke(ask("list"))

    assert runtime._wire is None
    assert streamed[-1].response.text == "from the SDK"
    assert [(c.name, dict(c.arguments)) for c in called.tool_calls] == [("list_pods", {"namespace": "prod"})]
    runtime.close()


def test_the_proxy_the_environment_names_is_used_unless_the_host_is_excluded(monkeypatch):
    from dcaf_like.runtimes._chat_wire import _proxy_for

    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    assert _proxy_for("https://api.openai.com/v1/chat/completions") is None

    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "localhost,.corp.example")
    assert _proxy_for("https://api.openai.com/v1/chat/completions") == "http://proxy.internal:3128"
    assert _proxy_for("https://llm.corp.example/v1/chat/completions") is None
    assert _proxy_for("http://localhost:11434/v1/chat/completions") is None


def test_the_organization_and_project_of_the_environment_are_sent(monkeypatch):
    monkeypatch.setenv("OPENAI_ORG_ID", "org-ops")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-k8s")

    wire = _chat_wire.ChatCompletions("https://api.openai.com/v1", "sk-x", timeout=5, max_retries=0)

    assert (b"OpenAI-Organization", b"org-ops") in wire._headers
    assert (b"OpenAI-Project", b"proj-k8s") in wire._headers
    assert wire.url == "https://api.openai.com/v1/chat/completions"


def test_a_connection_is_kept_for_the_next_call_and_one_is_opened_per_call_in_flight(server, monkeypatch):
    """docs/benchmarks.md, "Runs in flight": each call in flight has a connection of its own, taken
    from those kept idle or opened; at most MAX_KEEPALIVE are kept once their answers were read."""
    monkeypatch.setattr(_chat_wire, "MAX_KEEPALIVE", 3)
    wire = _chat_wire.ChatCompletions(server.base_url, "unused", timeout=5, max_retries=0)
    body = {"model": "test-model", "messages": [{"role": "user", "content": "hi"}]}

    async def calls() -> None:
        pool = wire.async_pool()
        assert isinstance(pool, _chat_wire.AsyncConnections)
        server.reply("one")
        await wire.acreate(pool, body)
        kept = list(pool.idle)
        server.reply("two")
        await wire.acreate(pool, body)
        assert pool.idle == kept  # the same connection, reused

        in_flight = [await pool._take() for _ in range(5)]  # five calls at once: the kept one, four new
        assert in_flight[0] is kept[0]
        assert len({id(c) for c in in_flight}) == 5
        for connection in in_flight:
            await pool._give_back(connection)
        assert pool.idle == kept  # the four never connected are not kept

        for _ in range(5):
            server.reply("at once")
        answers = await asyncio.gather(*(wire.acreate(pool, body) for _ in range(5)))
        assert [a["choices"][0]["message"]["content"] for a in answers] == ["at once"] * 5
        assert len(pool.idle) <= 3
        await pool.aclose()
        assert pool.idle == []

    asyncio.run(calls())
