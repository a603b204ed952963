"""RemoteAgent against a live A2A server, and as the tool of an orchestrator Agent."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _parts import PANEL, PANEL_B64, PANEL_SHOWN, render_panel

pytest.importorskip("a2a.client", reason="the a2a extra is not installed: pip install -e '.[a2a]'")

from dcaf_like import (
    Agent,
    ModelRequest,
    ModelResponse,
    RemoteAgent,
    RemoteResult,
    RemoteText,
    ToolResult,
)
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls


def specialist(cluster: Any, *script: Any) -> Agent:
    return Agent(
        tools=cluster.tools(),
        name="k8s",
        description="Operates the Kubernetes cluster.",
        runtime=FakeRuntime(script),
    )


def deleting(cluster: Any) -> Agent:
    return specialist(cluster, tool_calls(tool_call("delete_pod", name="web-2")), "Deleted web-2.")


def test_send_returns_the_answer_and_the_card_describes_the_agent(start_server, cluster):
    url = str(start_server(specialist(cluster, "Two pods run in default."), a2a=True).base_url)
    remote = RemoteAgent(url)

    result = remote.send("how many pods?")

    assert (remote.card.name, [s.name for s in remote.card.skills]) == (
        "k8s",
        ["list_pods", "delete_pod", "restart_pod"],
    )
    assert (result.status, result.text, result.pending) == ("completed", "Two pods run in default.", ())


def test_a_remote_approval_comes_back_pending_and_runs_only_when_approved(start_server, cluster):
    remote = RemoteAgent(str(start_server(deleting(cluster), a2a=True).base_url))

    waiting = remote.send("fix the crashing pod")
    [call] = waiting.pending
    assert waiting.needs_approval
    assert (call.tool, call.arguments) == ("delete_pod", {"name": "web-2", "namespace": "default"})
    assert cluster.deleted == []

    done = remote.approve(waiting, call.call_id)

    assert (done.status, done.text) == ("completed", "Deleted web-2.")
    assert done.executed[0]["output"] == 'pod "web-2" deleted'
    assert remote.get_task(waiting.task_id).status == "completed"
    assert cluster.deleted == [("default", "web-2")]


async def test_astream_yields_the_answer_as_it_is_written_then_the_finished_task(start_server, cluster):
    answer = reply("Two pods run in default.", chunks=["Two pods ", "run ", "in default."])
    remote = RemoteAgent(str(start_server(specialist(cluster, answer), a2a=True).base_url))

    events = [event async for event in remote.astream("how many pods?")]

    *pieces, result = events
    assert pieces == [RemoteText("Two pods "), RemoteText("run "), RemoteText("in default.")]
    assert isinstance(result, RemoteResult)
    assert (result.status, result.text, result.pending) == ("completed", "Two pods run in default.", ())
    assert remote.get_task(result.task_id).status == "completed"


def test_a_streamed_task_that_needs_approval_ends_waiting_with_the_call_not_run(start_server, cluster):
    remote = RemoteAgent(str(start_server(deleting(cluster), a2a=True).base_url))

    *_, waiting = list(remote.stream("fix the crashing pod"))

    assert isinstance(waiting, RemoteResult)
    assert waiting.needs_approval
    assert [(c.tool, c.arguments) for c in waiting.pending] == [
        ("delete_pod", {"name": "web-2", "namespace": "default"})
    ]
    assert cluster.deleted == []
    done = remote.approve(waiting, waiting.pending[0].call_id)
    assert (done.status, cluster.deleted) == ("completed", [("default", "web-2")])


async def test_the_async_twins_reject_and_the_call_never_runs(start_server, cluster):
    agent = specialist(cluster, tool_calls(tool_call("delete_pod", name="web-2")), "Left it alone.")
    remote = RemoteAgent(str(start_server(agent, a2a=True).base_url))

    waiting = await remote.asend("fix the crashing pod")
    done = await remote.areject(waiting, waiting.pending[0].call_id, "not today")

    assert (done.status, done.text) == ("completed", "Left it alone.")
    assert done.data["rejected_tool_calls"][0]["rejection_reason"] == "not today"
    assert cluster.deleted == []


def test_approving_other_arguments_than_the_remote_proposed_is_refused(start_server, cluster):
    from a2a.utils.errors import InvalidParamsError

    remote = RemoteAgent(str(start_server(deleting(cluster), a2a=True).base_url))
    waiting = remote.send("fix the crashing pod")

    with pytest.raises(InvalidParamsError, match="differ from the proposal"):
        remote.approve(waiting.task_id, waiting.pending[0].call_id, arguments={"name": "web-1"})

    assert remote.get_task(waiting.task_id).status == "input-required"
    assert cluster.deleted == []


# -- an orchestrator whose user approves what the specialist wants to do ---------------------------


def last_result(request: ModelRequest) -> dict[str, Any]:
    result = next(m for m in reversed(request.messages) if isinstance(m, ToolResult))
    answer: dict[str, Any] = json.loads(result.content)
    return answer


def forward_the_pending_call(request: ModelRequest) -> ModelResponse:
    """What a model does with the specialist's answer: propose the decision the answer describes."""
    answer = last_result(request)
    [pending] = answer["pending"]
    call = tool_call(
        "decide_k8s_call",
        task_id=answer["task_id"],
        call_id=pending["call_id"],
        tool=pending["tool"],
        arguments=pending["arguments"],
    )
    return ModelResponse(text="The k8s agent needs your approval.", tool_calls=(call,))


def summarize(request: ModelRequest) -> ModelResponse:
    return ModelResponse(text=f"k8s says: {last_result(request)['text']}")


def orchestrator(url: str) -> Agent:
    k8s = RemoteAgent(url)
    model = FakeRuntime(
        [
            tool_calls(tool_call("ask_k8s", message="fix the crashing pod")),
            forward_the_pending_call,
            summarize,
        ]
    )
    return Agent(tools=[k8s.as_tool()], name="orchestrator", runtime=model)


def test_the_remote_approval_surfaces_to_the_orchestrators_user_with_the_exact_call(start_server, cluster):
    boss = orchestrator(str(start_server(deleting(cluster), a2a=True).base_url))

    response = boss.run("web-2 keeps crashing, deal with it")

    [pending] = response.pending_tool_calls
    assert pending.name == "decide_k8s_call"
    assert pending.input["tool"] == "delete_pod"
    assert pending.input["arguments"] == {"name": "web-2", "namespace": "default"}
    assert pending.input["approve"] is True
    assert cluster.deleted == []  # asking the specialist ran; deleting waits for this user

    done = boss.approve(response.conversation_id, pending.id)

    assert done.text == "k8s says: Deleted web-2."
    assert cluster.deleted == [("default", "web-2")]


def test_when_the_orchestrators_user_says_no_the_remote_call_never_runs(start_server, cluster):
    url = str(start_server(deleting(cluster), a2a=True).base_url)
    boss = orchestrator(url)
    boss.runtime.script[-1] = "Understood, I left web-2 alone."  # type: ignore[attr-defined]

    response = boss.run("web-2 keeps crashing, deal with it")
    [pending] = response.pending_tool_calls
    done = boss.reject(response.conversation_id, pending.id, "no deletions today")

    assert done.text == "Understood, I left web-2 alone."
    assert cluster.deleted == []
    task = RemoteAgent(url).get_task(pending.input["task_id"])
    assert task.status == "input-required"  # the remote still waits; nothing was approved on its side


def test_the_companion_tool_comes_with_as_tool_and_needs_approval(start_server, cluster):
    remote = RemoteAgent(str(start_server(deleting(cluster), a2a=True).base_url))

    agent = Agent(tools=[remote.as_tool()], runtime=FakeRuntime())

    assert [(t.name, t.requires_approval) for t in agent.tools] == [
        ("ask_k8s", False),
        ("decide_k8s_call", True),
    ]


def test_with_an_api_key_the_remote_records_who_approved(start_server, cluster):
    from a2a.client import A2AClientError

    agent = deleting(cluster)
    url = str(start_server(agent, a2a=True, api_keys={"alice-key-0123456789": "alice"}).base_url)

    with pytest.raises(A2AClientError, match="401"):
        RemoteAgent(url).send("fix the crashing pod")
    remote = RemoteAgent(url, api_key="alice-key-0123456789")
    waiting = remote.send("fix the crashing pod")
    remote.approve(waiting, waiting.pending[0].call_id)

    conversation = agent.conversation(waiting.context_id)
    assert conversation is not None
    [call] = conversation.tool_calls.values()
    assert (call.status.value, call.decided_by) == ("executed", "alice")


# -- the images and files a remote tool returned -----------------------------------------------------


def grafana() -> Agent:
    model = FakeRuntime(
        [tool_calls(tool_call("render_panel", panel="latency")), reply("p99 is up.")], accepts={"image"}
    )
    return Agent(tools=[render_panel], name="grafana", description="Renders panels.", runtime=model)


def test_a_remote_tools_image_comes_back_with_its_call_by_what_it_is(start_server):
    remote = RemoteAgent(str(start_server(grafana(), a2a=True).base_url))

    result = remote.send("is latency up?")

    [ran] = result.executed
    assert (ran["output"], ran["attachments"]) == ("panel latency", [PANEL_SHOWN])
    assert type(ran["attachments"][0]["size"]) is int  # not the float a data part's numbers arrive as
    assert result.data["executed_tool_calls"] == [ran]


def test_the_orchestrators_model_reads_what_the_remote_tool_returned_without_its_bytes(start_server):
    grafana_agent = RemoteAgent(str(start_server(grafana(), a2a=True).base_url))
    model = FakeRuntime([tool_calls(tool_call("ask_grafana", message="is latency up?")), "It is."])

    Agent(tools=[grafana_agent.as_tool()], runtime=model).run("latency?")

    [result] = [m for m in model.requests[1].messages if isinstance(m, ToolResult)]
    [ran] = json.loads(result.content)["executed_tool_calls"]
    assert ran["attachments"] == [PANEL_SHOWN]
    assert f'"size": {len(PANEL)},' in result.content
    assert PANEL_B64 not in result.content


def test_a_remote_that_sends_a_parts_bytes_has_them_left_out():
    from a2a.types.a2a_pb2 import Task
    from google.protobuf.json_format import ParseDict

    from dcaf_like.toolsets.remote import _result

    sent = {**PANEL_SHOWN, "size": 24.0, "data": PANEL_B64}
    call = {"id": "tc_1", "name": "render_panel", "output": "panel", "attachments": [sent]}
    status = {"state": "TASK_STATE_COMPLETED", "message": {"messageId": "m1", "role": "ROLE_AGENT",
              "parts": [{"data": {"executed_tool_calls": [call]}}]}}  # fmt: skip
    task = ParseDict({"id": "t1", "contextId": "c1", "status": status}, Task())

    result = _result(task)

    assert result.executed[0]["attachments"] == [PANEL_SHOWN]
    assert PANEL_B64 not in repr(result)
