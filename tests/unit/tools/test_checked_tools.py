"""The checked tool set (dcaf_like/toolsets/checked.py): built once per tuple of tool objects and shared,
pinned equal to the plain code it stands for (docs/architecture.md, "Performance budget"), and never
keeping a tool list that fails: a tool that cannot be called fails at every construction."""

from __future__ import annotations

import pytest

from dcaf_like import Agent, ToolDefinitionError, Toolset, approvers, tool
from dcaf_like.application.service import AgentService
from dcaf_like.stores.memory import InMemoryConversationRepository
from dcaf_like.testing import FakeRuntime
from dcaf_like.toolsets import checked
from dcaf_like.toolsets.checked import MAX_KEPT, check_tools, checked_tools


class FakeToolset(Toolset):
    def __init__(self, name: str, *tools) -> None:
        self.name = name
        self.tools = list(tools)

    async def aload(self):
        return self.tools


def list_pods(namespace: str = "default") -> str:
    """List the pods of a namespace."""
    return "web-1"


@tool(approvers=approvers(2, "sre"))
def delete_pod(name: str) -> str:
    """Delete a pod."""
    return f"deleted {name}"


@tool(requires_approval=False)
def describe(name: str) -> str:
    """Describe a pod."""
    return name


def _with_companion():
    @tool
    def forward(call_id: str) -> str:
        """Forward a decision."""
        return call_id

    @tool(requires_approval=False)
    def ask(question: str) -> str:
        """Ask the remote agent."""
        return question

    ask.companions = (forward,)
    return ask


def _lists():
    toolset = FakeToolset("prod", describe)
    return [
        [],
        [list_pods],
        [describe, delete_pod],
        [list_pods, delete_pod, toolset],
        [_with_companion(), describe],
    ]


@pytest.mark.parametrize("given", _lists(), ids=["none", "function", "tools", "toolset", "companion"])
def test_the_kept_tool_set_is_what_the_plain_code_builds(given):
    plain, kept = check_tools(given), checked_tools(given)

    assert [t.name for t in kept.tools] == [t.name for t in plain.tools]
    assert [t.schema for t in kept.tools] == [t.schema for t in plain.tools]
    assert [t.requires_approval for t in kept.tools] == [t.requires_approval for t in plain.tools]
    assert kept.toolsets == plain.toolsets
    assert kept.rules == plain.rules


def test_the_same_tools_give_the_same_checked_set_and_agents_share_it():
    first = Agent(tools=[list_pods, delete_pod], runtime=FakeRuntime())
    second = Agent(tools=[list_pods, delete_pod], runtime=FakeRuntime())

    assert checked_tools([list_pods, delete_pod]) is checked_tools((list_pods, delete_pod))
    assert first.tools == second.tools  # one Tool of list_pods, built once
    assert first.approval_policy.rules == second.approval_policy.rules
    assert "delete_pod needs 2 approvers from sre" in str(first.approval_policy.rules)


def test_a_function_that_cannot_be_a_tool_fails_at_every_construction():
    def scale(replicas) -> str:  # no annotation: nothing would check what the model sends
        return str(replicas)

    for _ in range(2):
        with pytest.raises(ToolDefinitionError, match="replicas"):
            Agent(tools=[scale], runtime=FakeRuntime())
    assert all(scale not in objects for objects, _ in checked._kept.values())


def test_two_tools_of_one_name_fail_when_the_agent_is_built():
    other = tool(name="list_pods", requires_approval=False)(lambda: "")

    with pytest.raises(ValueError, match="two tools share a name: list_pods"):
        Agent(tools=[list_pods, other], runtime=FakeRuntime())


def test_toolsets_that_compare_equal_stay_two_toolsets():
    class Equal(FakeToolset):
        def __eq__(self, other: object) -> bool:
            return isinstance(other, Equal)

        __hash__ = object.__hash__

    a, b = Equal("a"), Equal("b")

    assert checked_tools([a]).toolsets[0] is a
    assert checked_tools([b]).toolsets[0] is b


def test_it_keeps_only_the_last_tool_lists():
    made = [tool(name=f"t{i}", requires_approval=False)(lambda: "") for i in range(MAX_KEPT + 5)]
    for each in made:
        checked_tools([each])

    assert len(checked._kept) <= MAX_KEPT
    assert all(made[0] not in objects for objects, _ in checked._kept.values())


@pytest.mark.parametrize(
    ("argument", "error"),
    [
        ({"max_iterations": 0}, "max_iterations must be at least 1"),
        ({"lease_ttl": 0}, "lease_ttl must be a positive"),
        ({"turn_timeout": -1}, "turn_timeout must be a positive"),
        ({"model_timeout": 0}, "model_timeout must be a positive"),
        ({"question_ttl": 0}, "question_ttl must be a positive"),
        ({"hooks": [object()]}, "none of the methods of a hook"),
    ],
)
def test_the_agent_refuses_when_built_what_its_service_refuses(argument, error):
    """The service is built at the agent's first run: its refusals come when the agent is built."""
    with pytest.raises((ValueError, TypeError), match=error):
        AgentService(FakeRuntime(), InMemoryConversationRepository(), **argument)
    with pytest.raises((ValueError, TypeError), match=error):
        Agent(runtime=FakeRuntime(), **argument)
