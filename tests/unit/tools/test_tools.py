"""Tools: the three schema options, validation before execution, injection, sync and async."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import warnings
from enum import Enum, StrEnum
from typing import Any

import pytest
from pydantic import BaseModel, Field

from dcaf_like import (
    Agent,
    InvalidToolArguments,
    PlatformContext,
    Session,
    Tool,
    ToolContext,
    UndocumentedToolWarning,
    tool,
)
from dcaf_like.testing import FakeRuntime


def context() -> ToolContext:
    return ToolContext("conv_1", "tc_1", PlatformContext({"tenant_name": "acme"}), Session())


class Size(StrEnum):
    SMALL = "small"
    LARGE = "large"


@tool(requires_approval=False)
def scale(deployment: str, replicas: int, size: Size = Size.SMALL, dry_run: bool = False) -> str:
    """Scale a deployment.

    Args:
        deployment: The deployment's name.
        replicas: How many pods to run.
    """
    return f"{deployment}={replicas} ({size.value}, dry_run={dry_run})"


def test_a_signature_becomes_a_json_schema_with_descriptions_from_the_docstring():
    assert scale.schema == {
        "name": "scale",
        "description": "Scale a deployment.",
        "input_schema": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "deployment": {"type": "string", "description": "The deployment's name."},
                "replicas": {"type": "integer", "description": "How many pods to run."},
                "size": {"$ref": "#/$defs/Size", "default": "small"},
                "dry_run": {"type": "boolean", "default": False},
            },
            "required": ["deployment", "replicas"],
            "$defs": {"Size": {"enum": ["small", "large"], "title": "Size", "type": "string"}},
        },
    }


def test_validation_fills_defaults_and_returns_json_ready_arguments():
    assert scale.validate({"deployment": "api", "replicas": "3"}) == {
        "deployment": "api",
        "replicas": 3,
        "size": "small",
        "dry_run": False,
    }


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [
        ({"replicas": 3}, "deployment: Field required"),
        ({"deployment": "api", "replicas": "many"}, "replicas"),
        ({"deployment": "api", "replicas": 3, "size": "huge"}, "size"),
        ({"deployment": "api", "replicas": 3, "force": True}, "force: Extra inputs are not permitted"),
    ],
)
def test_arguments_that_fail_the_schema_are_refused_with_what_is_wrong(arguments, complaint):
    with pytest.raises(InvalidToolArguments, match="scale") as info:
        scale.validate(arguments)

    assert complaint in info.value.detail


def test_the_tool_runs_with_typed_arguments():
    assert scale.invoke({"deployment": "api", "replicas": 2, "size": "large"}, context()) == (
        "api=2 (large, dry_run=False)"
    )


@tool(requires_approval=False)
def restart(deployment: str, wait: int = 30, force: bool = False, reason: str | None = None) -> str:
    """Restart a deployment."""
    return f"{deployment} {wait!r} {force!r} {reason!r}"


@tool(requires_approval=False)
def throttle(deployment: str, share: float) -> str:
    """Throttle a deployment."""
    return f"{deployment} {share!r}"


def test_stored_arguments_reach_the_function_as_validated():
    # What the turn runs a call with: the arguments as validated at proposal, read back from the store.
    stored = restart.validate({"deployment": "web", "force": True})
    assert restart.invoke(stored, context()) == "web 30 True None"
    # A float the store reads back as the integer it equals is a float again for the function.
    assert throttle.invoke({"deployment": "web", "share": 1}, context()) == "web 1.0"


@pytest.mark.parametrize(
    "arguments",
    [
        {"deployment": "web", "wait": "soon", "force": False, "reason": None},  # not an int
        {"wait": 30, "force": False, "reason": None},  # a required field missing
        {"deployment": "web", "wait": 30, "force": False, "reason": None, "now": True},  # one too many
    ],
)
def test_arguments_that_no_longer_fit_the_tool_are_refused_before_it_runs(arguments):
    # e.g. a call approved after the tool's signature changed: never a TypeError from inside the call
    with pytest.raises(InvalidToolArguments):
        restart.invoke(arguments, context())


def test_an_explicit_dict_schema_is_used_as_given_and_enforced():
    @tool(
        description="Delete a pod",
        schema={
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "Pod name", "minLength": 1},
                "namespace": {"type": "string", "default": "default"},
            },
            "required": ["name"],
            "additionalProperties": False,
        },
    )
    def delete_pod(name: str, namespace: str = "default") -> str:
        return f"{namespace}/{name}"

    assert delete_pod.input_schema["properties"]["name"]["description"] == "Pod name"
    assert delete_pod.validate({"name": "web"}) == {"name": "web", "namespace": "default"}
    with pytest.raises(InvalidToolArguments, match=r"name: required"):
        delete_pod.validate({})
    with pytest.raises(InvalidToolArguments, match="expected string, got integer"):
        delete_pod.validate({"name": 5})
    with pytest.raises(InvalidToolArguments, match="extra: not a parameter"):
        delete_pod.validate({"name": "web", "extra": 1})
    assert delete_pod.invoke({"name": "web"}, context()) == "default/web"


class DeletePodInput(BaseModel):
    name: str = Field(..., description="Pod name")
    namespace: str = Field(default="default")


def test_a_pydantic_model_schema_passes_fields_as_keyword_arguments():
    @tool(description="Delete a pod", schema=DeletePodInput)
    def delete_pod(name: str, namespace: str = "default") -> str:
        return f"{namespace}/{name}"

    assert delete_pod.input_schema["properties"]["name"] == {"description": "Pod name", "type": "string"}
    assert delete_pod.input_schema["required"] == ["name"]
    assert delete_pod.invoke({"name": "web", "namespace": "prod"}, context()) == "prod/web"


def test_a_pydantic_model_schema_is_passed_whole_to_a_function_that_takes_the_model():
    @tool(schema=DeletePodInput)
    def delete_pod(request: DeletePodInput) -> str:
        """Delete a pod."""
        return f"{request.namespace}/{request.name}"

    assert delete_pod.invoke({"name": "web"}, context()) == "default/web"


def test_session_platform_context_and_tool_context_are_injected_and_hidden_from_the_model():
    @tool
    def audit(action: str, session: Session, platform_context: PlatformContext, ctx: ToolContext) -> str:
        """Record an action."""
        session.set("last", action)
        return f"{platform_context['tenant_name']}:{ctx.call_id}:{action}"

    tool_context = context()

    assert list(audit.input_schema["properties"]) == ["action"]
    assert audit.invoke({"action": "restart"}, tool_context) == "acme:tc_1:restart"
    assert tool_context.session.get("last") == "restart"


def test_return_values_become_text_the_model_can_read():
    @tool
    def report() -> dict[str, object]:
        """Report."""
        return {"pods": ["a", "b"], "ok": True, "name": "ünïcode"}

    @tool
    def model_report() -> DeletePodInput:
        """Report."""
        return DeletePodInput(name="web")

    @tool
    def nothing() -> None:
        """Nothing."""

    assert report.invoke({}, context()) == '{"pods": ["a", "b"], "ok": true, "name": "ünïcode"}'
    assert model_report.invoke({}, context()) == '{"name":"web","namespace":"default"}'
    assert nothing.invoke({}, context()) == ""


class Colour(Enum):
    RED = "red"


@dataclasses.dataclass
class Rollout:
    colour: Colour
    started: datetime.date
    hosts: frozenset[str]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (b"pod web-1 deleted", "pod web-1 deleted"),
        (bytearray(b"ok"), "ok"),
        (b"\xffok", "\ufffdok"),
        (Colour.RED, "red"),
        (Size.LARGE, "large"),
        ({"web-1"}, '["web-1"]'),
        (datetime.datetime(2024, 5, 1, 12, 30), '"2024-05-01T12:30:00"'),
        (
            {"rollout": Rollout(Colour.RED, datetime.date(2024, 5, 1), frozenset({"a"})), "raw": b"x"},
            '{"rollout": {"colour": "red", "started": "2024-05-01", "hosts": ["a"]}, "raw": "x"}',
        ),
        ({"input": DeletePodInput(name="web")}, '{"input": {"name": "web", "namespace": "default"}}'),
        (3.5, "3.5"),
    ],
)
def test_bytes_enums_sets_dates_and_nested_values_become_readable_text(value, text):
    @tool
    def report() -> object:
        """Report."""
        return value

    result = report.invoke({}, context())
    assert result == text
    assert type(result) is str


def test_a_gated_tool_without_a_docstring_warns_where_it_is_defined():
    with pytest.warns(UndocumentedToolWarning, match="'restart_node' requires approval") as caught:

        @tool
        def restart_node(name: str) -> str:
            return name

    [warning] = caught
    assert "approver will see no description" in str(warning.message)
    assert warning.filename == __file__, "the warning points at the definition, not at the framework"
    assert restart_node.description == "restart node"


def test_a_plain_function_given_to_an_agent_warns_from_the_agent_s_line():
    def drain(node: str) -> str:
        return node

    with pytest.warns(UndocumentedToolWarning, match="'drain'") as caught:
        Agent(tools=[drain], runtime=FakeRuntime([]))
    assert caught[0].filename == __file__


def test_a_documented_described_or_ungated_tool_does_not_warn():
    def bare() -> str:
        return ""

    def documented() -> str:
        """Say nothing."""
        return ""

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tool(documented)
        tool(description="Say nothing.")(bare)
        tool(requires_approval=False)(bare)


async def test_async_tools_are_awaited_and_sync_tools_do_not_block_the_event_loop():
    @tool
    async def slow(seconds: float) -> str:
        """Sleep."""
        await asyncio.sleep(seconds)
        return "slept"

    @tool
    def blocking(value: int) -> int:
        """Blocking work."""
        return value * 2

    assert slow.is_async
    assert await slow.ainvoke({"seconds": 0}, context()) == "slept"
    assert slow.invoke({"seconds": 0}, context()) == "slept"
    assert await blocking.ainvoke({"value": 21}, context()) == "42"


def test_tools_require_approval_unless_their_author_says_otherwise():
    def plain(x: int) -> int:
        """A plain function."""
        return x

    assert tool(plain).requires_approval is True
    assert Tool(plain).requires_approval is True
    assert tool(requires_approval=False)(plain).requires_approval is False
    assert tool(plain)(3) == 3


def test_bad_tool_definitions_are_refused_when_defined():
    def spread(*args: int) -> int:
        return 0

    with pytest.raises(TypeError, match="args"):
        tool(spread)
    with pytest.raises(ValueError, match="tool name"):
        tool(name="rm -rf")(lambda: None)

    def noop() -> None:
        """Nothing."""

    with pytest.raises(TypeError, match="schema must be"):
        tool(schema=42)(noop)  # type: ignore[arg-type]


# -- parameters without a type (issue 36) -------------------------------------------------------------


def test_a_parameter_without_a_type_is_refused_when_the_tool_is_defined_naming_it():
    from dcaf_like.application.errors import ToolDefinitionError

    with pytest.raises(ToolDefinitionError) as refused:

        @tool
        def resize_instance(instance_id, new_type: str) -> str:  # type: ignore[no-untyped-def]
            """Resize an EC2 instance."""
            return "resized"

    assert (refused.value.tool_name, refused.value.parameter) == ("resize_instance", "instance_id")
    assert "`instance_id: str`" in str(refused.value)
    assert "`instance_id: Any`" in str(refused.value)


def test_a_forgotten_tool_context_is_named_as_such():
    from dcaf_like.application.errors import ToolDefinitionError

    with pytest.raises(ToolDefinitionError, match=r"did you mean `context: ToolContext`\?"):

        @tool(requires_approval=False)
        def where(context) -> str:  # type: ignore[no-untyped-def]
            """Where the agent acts."""
            return "here"


def test_any_taken_on_purpose_is_any_json():
    @tool(requires_approval=False)
    def echo(value: Any) -> str:
        """Echo a value."""
        return repr(value)

    assert echo.input_schema["properties"]["value"] == {}  # any JSON value
