"""FallbackRuntime and RoutingRuntime: runtimes made of runtimes."""

from __future__ import annotations

import pytest

from dcaf_like import (
    Agent,
    FallbackRuntime,
    ModelAccessDenied,
    ModelCompleted,
    ModelRateLimited,
    ModelRequest,
    ModelTimeout,
    RoutingRuntime,
    RuntimeNotConfigured,
    TextDelta,
    ToolSpec,
    UserTurn,
    attachment,
)
from dcaf_like.testing import FakeRuntime, Step, fail, reply


def ask(text: str = "hi", *, tools: tuple[ToolSpec, ...] = ()) -> ModelRequest:
    return ModelRequest("", (UserTurn(text),), tools)


def named(name: str, script) -> FakeRuntime:
    runtime = FakeRuntime(script)
    runtime.name = name
    return runtime


def test_a_retryable_failure_falls_back_to_the_next_runtime():
    primary = named("primary", [fail(ModelRateLimited("throttled", runtime="primary"))])
    backup = named("backup", ["from the backup"])
    runtime = FallbackRuntime([primary, backup])

    response = runtime.invoke(ask())

    assert response.text == "from the backup"
    assert len(primary.requests) == len(backup.requests) == 1
    assert runtime.name == "fallback(primary, backup)"


def test_a_failure_that_is_not_retryable_does_not_fall_back():
    primary = named("primary", [fail(ModelAccessDenied("no access to the model", runtime="primary"))])
    backup = named("backup", ["never"])

    with pytest.raises(ModelAccessDenied, match="no access"):
        FallbackRuntime([primary, backup]).invoke(ask())

    assert backup.requests == []


def test_when_every_runtime_fails_the_error_names_each_failure():
    runtime = FallbackRuntime(
        [
            named("a", [fail(ModelTimeout("a timed out", runtime="a"))]),
            named("b", [fail(ModelRateLimited("b is throttled", runtime="b"))]),
        ]
    )

    with pytest.raises(ModelRateLimited) as raised:
        runtime.invoke(ask())

    assert "a timed out" in str(raised.value)
    assert "b is throttled" in str(raised.value)
    assert raised.value.retryable


def test_a_stream_falls_back_only_before_its_first_event():
    class BreaksMidStream(FakeRuntime):
        def stream(self, request):
            yield TextDelta("half an ans")
            raise ModelTimeout("cut off", runtime="mid")

    early = FallbackRuntime(
        [named("down", [fail(ModelTimeout("down", runtime="down"))]), named("up", ["whole"])]
    )
    late = FallbackRuntime([BreaksMidStream(), named("up", ["never"])])

    events = list(early.stream(ask()))
    assert isinstance(events[-1], ModelCompleted)
    assert events[-1].response.text == "whole"
    with pytest.raises(ModelTimeout, match="cut off"):
        list(late.stream(ask()))
    assert late.runtimes[1].requests == []  # type: ignore[attr-defined]


async def test_the_async_twins_fall_back_too():
    runtime = FallbackRuntime(
        [
            named("down", [fail(ModelTimeout("down", runtime="down"))] * 2),
            named("up", ["async one", "async two"]),
        ]
    )

    response = await runtime.ainvoke(ask())
    events = [e async for e in runtime.astream(ask())]

    assert response.text == "async one"
    assert events[-1].response.text == "async two"


def test_an_agent_on_a_fallback_runtime_keeps_its_approval_gate(cluster):
    from dcaf_like.testing import tool_call

    runtime = FallbackRuntime(
        [
            named("down", [fail(ModelRateLimited("throttled", runtime="down"))]),
            named("up", [tool_call("delete_pod", name="web-1")]),
        ]
    )

    response = Agent(tools=cluster.tools(), runtime=runtime).run("delete web-1")

    assert [c.name for c in response.pending_tool_calls] == ["delete_pod"]
    assert cluster.deleted == []


def test_routing_sends_each_request_where_the_route_says():
    small = named("small", ["small answer", "streamed small"])
    large = named("large", [Step(text="large answer")])
    runtime = RoutingRuntime(lambda r: "large" if r.tools else "small", {"small": small, "large": large})

    plain = runtime.invoke(ask())
    with_tools = runtime.invoke(ask(tools=(ToolSpec("list_pods", "List.", {"type": "object"}),)))
    streamed = list(runtime.stream(ask()))

    assert (plain.text, with_tools.text) == ("small answer", "large answer")
    assert streamed[-1].response.text == "streamed small"
    assert (len(small.requests), len(large.requests)) == (2, 1)
    assert runtime.name == "router(small=small, large=large)"


def test_a_route_to_an_unknown_runtime_is_a_clear_error():
    runtime = RoutingRuntime(lambda _: "huge", {"small": FakeRuntime([reply("x")])})

    with pytest.raises(RuntimeNotConfigured, match="the route chose 'huge'; the runtimes are small"):
        runtime.invoke(ask())


def test_a_strategy_needs_runtimes():
    with pytest.raises(ValueError, match="at least one"):
        FallbackRuntime([])
    with pytest.raises(ValueError, match="at least one"):
        RoutingRuntime(lambda _: "a", {})
    with pytest.raises(RuntimeNotConfigured, match="no runtime provider named 'nope'"):
        FallbackRuntime(["nope:model"])


# -- which runtime answered -----------------------------------------------------------------------


def test_a_fallback_says_which_runtime_answered_each_way():
    def falling_back(answers):
        down = named("down", [fail(ModelTimeout("down", runtime="down"))] * 2)
        return FallbackRuntime([down, named("up", answers)])

    assert falling_back(["one"]).invoke(ask()).runtime == "up"
    assert list(falling_back(["two"]).stream(ask()))[-1].response.runtime == "up"
    first_answers = FallbackRuntime([named("first", ["three"]), named("second", ["never"])])
    assert first_answers.invoke(ask()).runtime == "first"


async def test_a_fallback_says_which_runtime_answered_async():
    runtime = FallbackRuntime(
        [named("down", [fail(ModelTimeout("down", runtime="down"))] * 2), named("up", ["a", "b"])]
    )

    assert (await runtime.ainvoke(ask())).runtime == "up"
    assert [e async for e in runtime.astream(ask())][-1].response.runtime == "up"


async def test_a_router_says_which_runtime_answered_and_a_strategy_inside_one_names_the_innermost():
    inner = FallbackRuntime(
        [named("down", [fail(ModelTimeout("down", runtime="down"))] * 4), named("up", ["x"] * 4)]
    )
    runtime = RoutingRuntime(
        lambda r: "large" if r.tools else "small", {"small": inner, "large": named("big", ["y"] * 2)}
    )
    tools = (ToolSpec("list_pods", "List.", {"type": "object"}),)

    assert runtime.invoke(ask()).runtime == "up"
    assert runtime.invoke(ask(tools=tools)).runtime == "big"
    assert list(runtime.stream(ask()))[-1].response.runtime == "up"
    assert (await runtime.ainvoke(ask(tools=tools))).runtime == "big"
    assert [e async for e in runtime.astream(ask())][-1].response.runtime == "up"


def test_the_agent_records_the_runtime_that_answered_in_its_response_and_stored_message():
    runtime = FallbackRuntime(
        [
            named("down", [fail(ModelRateLimited("throttled", runtime="down"))] * 2),
            named("up", ["hi", "again"]),
        ]
    )
    agent = Agent(runtime=runtime)

    response = agent.run("hello")
    streamed = list(agent.run_stream("hello again", conversation_id=response.conversation_id))

    assert (response.runtime, response.answered_by) == ("fallback(down, up)", "up")
    assert streamed[-1].response.answered_by == "up"
    stored = agent.conversation(response.conversation_id)
    assert stored is not None
    assert [(m.role.value, m.runtime) for m in stored.messages] == [
        ("user", None), ("assistant", "up"), ("user", None), ("assistant", "up")
    ]  # fmt: skip


def test_a_plain_runtime_answers_itself_and_a_turn_without_a_model_call_names_none(cluster):
    from dcaf_like.testing import tool_call, tool_calls

    script = [tool_calls(tool_call("delete_pod", name="web-1"), tool_call("delete_pod", name="web-2"))]
    agent = Agent(tools=cluster.tools(), runtime=named("plain", script))

    proposed = agent.run("delete web-1 and web-2")
    first = proposed.pending_tool_calls[0].id
    half_decided = agent.approve(proposed.conversation_id, first)  # the other still waits: no model call

    assert proposed.answered_by == "plain"
    assert half_decided.answered_by is None
    assert [name for _, name in cluster.deleted] == ["web-1"]


def test_a_strategy_takes_the_kinds_of_parts_every_runtime_behind_it_takes():
    seeing = FakeRuntime(accepts={"image", "file"})
    images_only = FakeRuntime(accepts={"image"})
    blind = FakeRuntime()

    assert FallbackRuntime([seeing, images_only]).accepts == {"image"}
    assert FallbackRuntime([seeing, blind]).accepts == frozenset()
    assert RoutingRuntime(lambda _: "a", {"a": seeing, "b": seeing}).accepts == {"image", "file"}


class _NoUrls(FakeRuntime):
    """A runtime whose provider takes images' bytes, not their URLs (as Bedrock Converse)."""

    name = "no-urls"

    def refused_part(self, parts):
        refused = super().refused_part(parts)
        urls = [i for i, part in enumerate(parts) if part.url is not None]
        return refused or ((urls[0], "it takes no image URLs") if urls else None)


def test_a_strategy_refuses_a_part_any_runtime_behind_it_refuses_naming_that_runtime():
    inline = attachment("image", media_type="image/png", data="iVBORw0KGgo=")
    by_url = attachment("image", url="https://example.com/a.png")
    seeing = FakeRuntime(accepts={"image"})
    no_urls = _NoUrls(accepts={"image"})

    fallback = FallbackRuntime([seeing, no_urls])
    router = RoutingRuntime(lambda _: "a", {"a": seeing, "b": no_urls})

    assert fallback.refused_part([inline]) is None
    assert fallback.refused_part([inline, by_url]) == (1, "no-urls: it takes no image URLs")
    assert router.refused_part([by_url]) == (0, "no-urls: it takes no image URLs")


def test_a_strategy_takes_a_part_only_when_every_runtime_behind_it_does():
    from dcaf_like import attachment
    from dcaf_like.runtimes.local import LocalRuntime

    notes = attachment("file", media_type="text/plain", data="aGk=", name="notes.txt")
    report = attachment("file", media_type="application/pdf", data="JVBERi0=", name="report.pdf")
    seeing, local = FakeRuntime(accepts={"image", "file"}), LocalRuntime("unused.gguf")

    assert FallbackRuntime([seeing, local]).takes(notes)
    assert not FallbackRuntime([seeing, local]).takes(report)  # its kind is taken by both, not it
    assert not RoutingRuntime(lambda _: "a", {"a": seeing, "b": local}).takes(report)
