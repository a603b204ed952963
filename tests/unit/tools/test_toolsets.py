"""Toolsets in an Agent, with a fake toolset: loaded once, before the model, names kept provider-safe."""

from __future__ import annotations

import pytest

from dcaf_like import Agent, RunFailed, Toolset, ToolsetUnavailable, tool
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls
from dcaf_like.toolsets import MAX_NAME, combine, safe_name


class FakeToolset(Toolset):
    """Tools from 'elsewhere'; counts its loads; fails to load while `down`."""

    def __init__(self, name: str, *tools, down: bool = False) -> None:
        self.name = name
        self.tools = list(tools)
        self.down = down
        self.loads = 0
        self.closed = False

    async def aload(self):
        self.loads += 1
        if self.down:
            raise ToolsetUnavailable(self.name, "it is down")
        return self.tools

    def close(self) -> None:
        self.closed = True


def _list_pods():
    @tool(requires_approval=False)
    def list_pods() -> str:
        """List pods."""
        return "web-1"

    return list_pods


def test_names_are_made_safe_for_every_provider():
    long_a, long_b = "x" * 70 + "a", "x" * 70 + "b"

    assert safe_name("admin.pods/list") == "admin_pods_list"
    assert safe_name("list-pods_2") == "list-pods_2"
    assert len(safe_name(long_a)) == MAX_NAME
    assert safe_name(long_a) != safe_name(long_b)


def test_only_colliding_names_are_namespaced_and_the_agents_own_tools_keep_theirs():
    own = _list_pods()
    a, b = _list_pods(), tool(requires_approval=False, name="describe")(lambda: "")

    combined = combine([own], [("prod", [a, b])])

    assert [t.name for t in combined] == ["list_pods", "prod__list_pods", "describe"]
    assert combined[1].requires_approval is False
    assert combined[1].spec().name == "prod__list_pods"


def test_a_toolset_is_loaded_once_before_the_first_model_call_and_kept():
    toolset = FakeToolset("k8s", _list_pods())
    model = FakeRuntime([tool_calls("list_pods"), reply("one"), reply("two")])
    agent = Agent(tools=[toolset], runtime=model)
    assert toolset.loads == 0

    first = agent.run("pods?")
    second = agent.run("again")

    assert toolset.loads == 1
    assert first.executed_tool_calls[0].output == "web-1"
    assert second.text == "two"
    assert [t.name for t in model.requests[0].tools] == ["list_pods"]
    agent.close()
    assert toolset.closed


async def test_a_toolset_that_cannot_load_stops_the_run_before_the_model_and_the_next_run_retries():
    toolset = FakeToolset("k8s", _list_pods(), down=True)
    model = FakeRuntime([reply("up again")])
    agent = Agent(tools=[toolset], runtime=model)

    with pytest.raises(ToolsetUnavailable, match="toolset 'k8s' is unavailable: it is down"):
        await agent.arun("pods?")
    events = [e async for e in agent.arun_stream("pods?")]
    toolset.down = False
    response = await agent.arun("pods?")

    assert [type(e) for e in events] == [RunFailed]
    assert events[0].kind == "ToolsetUnavailable"
    assert response.text == "up again"
    assert len(model.requests) == 1


def test_an_approval_arriving_after_a_restart_loads_the_toolset_first():
    deleted = []

    @tool
    def delete_pod(name: str) -> str:
        """Delete a pod."""
        deleted.append(name)
        return "deleted"

    store = Agent(tools=[], runtime=FakeRuntime()).repository
    script = [tool_calls(tool_call("delete_pod", name="web-2")), reply("Deleted.")]
    model = FakeRuntime(script)
    before = Agent(tools=[FakeToolset("k8s", delete_pod)], runtime=model, repository=store)
    proposed = before.run("delete web-2")
    after_restart = FakeToolset("k8s", delete_pod)
    agent = Agent(tools=[after_restart], runtime=model, repository=store)

    response = agent.approve(proposed.conversation_id, proposed.pending_tool_calls[0].id)

    assert after_restart.loads == 1
    assert deleted == ["web-2"]
    assert response.text == "Deleted."


def test_two_toolsets_may_not_share_a_name():
    with pytest.raises(ValueError, match="two toolsets share a name"):
        Agent(tools=[FakeToolset("k8s"), FakeToolset("k8s")], runtime=FakeRuntime())


def test_a_renamed_tool_keeps_its_time_limit():
    from dcaf_like import tool
    from dcaf_like.toolsets import Renamed

    @tool(timeout=5)
    def status() -> str:
        """Status."""
        return "ok"

    assert Renamed(status, "a__status").timeout == 5
