"""A plain ``@tool`` function that returns a ToolOutput: its images and files reach the model as an MCP
tool's do (in a user's turn after the results), are kept with the call, and stay within the limits
of a message's parts, any left out named in the result."""

from __future__ import annotations

import base64
import json

import pytest

from dcaf_like import (
    MAX_PART_BYTES,
    MAX_PARTS_BYTES,
    Agent,
    AgentResponse,
    Attachment,
    AttachmentView,
    DataDTO,
    ExecutedToolCallDTO,
    ToolOutput,
    UserTurn,
    attachment,
    tool,
)
from dcaf_like.domain.attachment import PartKind
from dcaf_like.helpdesk.protocol import assistant_message
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls

PANEL = b"\x89PNG\r\n\x1a\n a latency panel"


def png(content: bytes = PANEL) -> Attachment:
    return attachment("image", media_type="image/png", data=base64.b64encode(content).decode())


@tool(requires_approval=False)
def render_panel(panel: str) -> ToolOutput:
    """Render a Grafana panel as a PNG."""
    return ToolOutput(f"panel {panel}, last hour", (png(),))


@tool(requires_approval=False)
async def arender_panel(panel: str) -> ToolOutput:
    """Render a Grafana panel as a PNG."""
    return ToolOutput(f"panel {panel}, last hour", (png(),))


@pytest.mark.parametrize("panel_tool", [render_panel, arender_panel], ids=["def", "async def"])
def test_a_tools_image_reaches_a_model_that_takes_images_and_stays_with_the_call(panel_tool):
    name = panel_tool.name
    model = FakeRuntime(
        [tool_calls(tool_call(name, panel="latency")), reply("p99 is up."), reply("Still up.")],
        accepts={"image"},
    )
    agent = Agent(tools=[panel_tool], runtime=model)

    response = agent.run("is latency up?")
    agent.run("and now?", conversation_id=response.conversation_id)

    [ran] = response.executed_tool_calls
    assert ran.output == "panel latency, last hour"
    _, _, result, shown = model.requests[1].messages
    assert result.content.startswith("panel latency, last hour\n[It also returned image/png image")
    assert isinstance(shown, UserTurn)
    assert shown.attachments == (png(),)
    assert model.requests[2].messages[:4] == model.requests[1].messages, "a later turn shows it again"
    stored = agent.conversation(response.conversation_id)
    assert stored is not None
    assert stored.tool_call(ran.id).result_attachments == (png(),)


async def test_an_async_run_keeps_a_tools_image_too():
    model = FakeRuntime(
        [tool_calls(tool_call("arender_panel", panel="cpu")), reply("Flat.")], accepts={"image"}
    )

    response = await Agent(tools=[arender_panel], runtime=model).arun("cpu?")

    assert response.text == "Flat."
    assert model.requests[1].messages[-1].attachments == (png(),)


def test_a_model_that_cannot_take_images_reads_what_was_left_out():
    model = FakeRuntime([tool_calls(tool_call("render_panel", panel="latency")), reply("Seen.")])

    Agent(tools=[render_panel], runtime=model).run("is latency up?")

    _, _, result = model.requests[1].messages
    assert f"image/png image of {len(PANEL)} bytes, which this model cannot read: left out." in result.content


def test_images_past_the_total_limit_are_left_out_and_named_in_the_result():
    big = MAX_PARTS_BYTES // 3 + 1  # three of them come to more than the total

    @tool(requires_approval=False)
    def panels() -> ToolOutput:
        """Three panels."""
        return ToolOutput("three panels", tuple(png(bytes([i]) * big) for i in range(3)))

    model = FakeRuntime([tool_calls(tool_call("panels")), reply("Seen.")], accepts={"image"})

    Agent(tools=[panels], runtime=model).run("panels?")

    _, _, result, shown = model.requests[1].messages
    assert len(shown.attachments) == 2
    assert (
        f"[image/png image of {big} bytes left out: with it the result's images and files come to more "
        f"than {MAX_PARTS_BYTES} bytes]"
    ) in result.content


def test_an_attachment_over_the_part_limit_is_named_in_the_result_not_sent():
    size = MAX_PART_BYTES + 3  # built without attachment(), which would refuse it
    huge = Attachment(PartKind.IMAGE, "image/png", data=base64.b64encode(b"x" * size).decode())
    model = FakeRuntime([tool_calls(tool_call("huge")), reply("Too big.")], accepts={"image"})

    Agent(
        tools=[tool(lambda: ToolOutput("a panel", (huge,)), name="huge", requires_approval=False)],
        runtime=model,
    ).run("?")

    _, _, result = model.requests[1].messages  # no image after it
    why = f"image part: larger than {MAX_PART_BYTES} bytes"
    assert result.content == f"a panel\n[image image/png of {size} bytes left out: {why}]"


def test_a_tool_output_whose_attachments_are_not_attachments_fails_the_call_saying_so():
    bad = tool(lambda: ToolOutput("a panel", ({"type": "image"},)), name="bad", requires_approval=False)
    model = FakeRuntime([tool_calls(tool_call("bad")), reply("It failed.")], accepts={"image"})

    response = Agent(tools=[bad], runtime=model).run("?")

    [failed] = response.executed_tool_calls
    assert failed.status == "failed"
    assert "attachments are Attachments" in (failed.error or "")


def test_a_single_attachment_not_in_a_tuple_fails_the_call_saying_so():
    bad = tool(lambda: ToolOutput("a panel", png()), name="bad", requires_approval=False)
    model = FakeRuntime([tool_calls(tool_call("bad")), reply("It failed.")], accepts={"image"})

    [failed] = Agent(tools=[bad], runtime=model).run("?").executed_tool_calls

    assert "a tuple of Attachments, (image,), not Attachment" in (failed.error or "")


def test_attachments_given_as_a_list_are_kept_as_a_tuple():
    listed = tool(lambda: ToolOutput("a panel", [png()]), name="listed", requires_approval=False)
    model = FakeRuntime([tool_calls(tool_call("listed")), reply("Seen.")], accepts={"image"})

    [ran] = Agent(tools=[listed], runtime=model).run("?").executed_tool_calls

    assert ran.attachments == (png(),)


# -- the seed's shape of a call that ran: ExecutedToolCallDTO ---------------------------------------

PANEL_VIEW = AttachmentView(PartKind.IMAGE, "image/png", len(PANEL))
PANEL_SHOWN = {"type": "image", "media_type": "image/png", "size": len(PANEL), "name": None, "url": None}


def ran_panel() -> AgentResponse:
    model = FakeRuntime(
        [tool_calls(tool_call("render_panel", panel="latency")), reply("p99 is up.")], accepts={"image"}
    )
    return Agent(tools=[render_panel], runtime=model).run("is latency up?")


def test_a_run_calls_dto_lists_the_tools_image_by_what_it_is_without_its_bytes():
    [ran] = ran_panel().executed_tool_calls

    dto = ExecutedToolCallDTO.of(ran)

    assert (dto.output, dto.attachments) == ("panel latency, last hour", (PANEL_VIEW,))
    assert dto.to_dict()["attachments"] == [PANEL_SHOWN]
    assert base64.b64encode(PANEL).decode() not in repr(dto) + json.dumps(dto.to_dict())


def test_a_response_read_into_dtos_keeps_each_calls_attachments_and_writes_them_back_alike():
    wire = assistant_message(ran_panel())["data"]

    data = DataDTO.from_dict(wire)

    [dto] = data.executed_tool_calls
    assert dto.attachments == (PANEL_VIEW,)
    assert data.to_dict()["executed_tool_calls"][0]["attachments"] == [PANEL_SHOWN]
    assert ExecutedToolCallDTO.from_dict(dto.to_dict()) == dto


def test_an_answer_built_from_dtos_lists_their_attachments_as_the_agents_own_calls_do():
    wire = assistant_message(ran_panel())["data"]

    forwarded = AgentResponse(conversation_id="c1", text="p99 is up.", data=DataDTO.from_dict(wire))

    [ran] = assistant_message(forwarded)["data"]["executed_tool_calls"]
    assert ran["attachments"] == wire["executed_tool_calls"][0]["attachments"] == [PANEL_SHOWN]
