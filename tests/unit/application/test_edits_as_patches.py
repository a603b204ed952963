"""An approver's edit patches the proposal: what the edit leaves out runs as proposed, never as the
tool's default, and the merged arguments are validated as a whole against the tool's schema."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dcaf_like import Agent, InvalidToolArguments, tool
from dcaf_like.testing import FakeRuntime, tool_call

PROPOSED = {"deployment": "api", "replicas": 5, "namespace": "prod"}


def scaling_agent() -> tuple[Agent, list[dict[str, Any]]]:
    ran: list[dict[str, Any]] = []

    @tool(requires_approval=True, editable=True)
    def scale(deployment: str, replicas: int, namespace: str = "default", reason: str | None = None) -> str:
        """Scale a deployment."""
        ran.append({"deployment": deployment, "replicas": replicas, "namespace": namespace, "reason": reason})
        return "scaled"

    runtime = FakeRuntime([tool_call("scale", **PROPOSED, reason="load"), "Done."])
    return Agent(tools=[scale], runtime=runtime), ran


def test_an_edit_of_some_arguments_keeps_the_others_as_proposed():
    agent, ran = scaling_agent()
    first = agent.run("scale api")

    second = agent.approve(
        first.conversation_id, first.pending_tool_calls[0].id, edited_arguments={"replicas": 3}
    )

    assert ran == [{"deployment": "api", "replicas": 3, "namespace": "prod", "reason": "load"}]
    assert second.executed_tool_calls[0].input == {**PROPOSED, "replicas": 3, "reason": "load"}


def test_null_removes_an_optional_argument_so_the_tool_default_applies():
    agent, ran = scaling_agent()
    first = agent.run("scale api")

    agent.approve(first.conversation_id, first.pending_tool_calls[0].id, edited_arguments={"reason": None})

    assert ran == [{**PROPOSED, "reason": None}]


def test_null_on_a_required_argument_is_refused_by_the_schema():
    agent, ran = scaling_agent()
    first = agent.run("scale api")

    with pytest.raises(InvalidToolArguments, match="deployment"):
        agent.approve(
            first.conversation_id, first.pending_tool_calls[0].id, edited_arguments={"deployment": None}
        )
    assert ran == []


_edits = st.fixed_dictionaries(
    {},
    optional={
        "deployment": st.text(min_size=1, max_size=5),
        "replicas": st.integers(0, 50),
        "namespace": st.text(min_size=1, max_size=5),
    },
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edit=_edits)
def test_any_valid_partial_edit_runs_with_every_argument_it_leaves_out_as_proposed(edit: dict[str, Any]):
    agent, ran = scaling_agent()
    first = agent.run("scale api")

    agent.approve(first.conversation_id, first.pending_tool_calls[0].id, edited_arguments=edit)

    assert ran == [{**PROPOSED, "reason": "load", **edit}]
