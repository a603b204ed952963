"""The A2A protocol on a live server, spoken by the official a2a-sdk client and by raw JSON-RPC."""

from __future__ import annotations

import asyncio
import base64
import threading
import uuid
from typing import Any

import pytest

pytest.importorskip("a2a.client", reason="the a2a extra is not installed: pip install -e '.[a2a]'")

from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotCancelableError
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Value

from dcaf_like import MAX_PART_BYTES, MAX_PARTS_BYTES, Agent, ask_user
from dcaf_like.testing import FakeRuntime, ManualClock, reply, tool_call, tool_calls


def k8s_agent(cluster: Any, *script: Any, **options: Any) -> Agent:
    return Agent(
        tools=cluster.tools(),
        name="k8s",
        description="Operates the Kubernetes cluster.",
        runtime=FakeRuntime(script),
        **options,
    )


def message(
    text: str = "", *, decisions: list[dict[str, Any]] | None = None, task: Task | None = None
) -> Message:
    parts = [Part(text=text)] if text else []
    if decisions is not None:
        parts.append(Part(data=ParseDict({"tool_calls": decisions}, Value())))
    return Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_USER,
        parts=parts,
        task_id=task.id if task else "",
        context_id=task.context_id if task else "",
    )


async def send(url: str, msg: Message, *, streaming: bool = False, immediately: bool = False) -> Any:
    """The last event the official client yields for `msg`."""
    client = await create_client(url, ClientConfig(streaming=streaming))
    try:
        request = SendMessageRequest(
            message=msg, configuration=SendMessageConfiguration(return_immediately=immediately)
        )
        events = [event async for event in client.send_message(request)]
    finally:
        await client.close()
    return events


async def send_task(url: str, msg: Message, **options: Any) -> Task:
    [event] = await send(url, msg, **options)
    return event.task


def status_data(task: Task) -> dict[str, Any]:
    parts = MessageToDict(task.status.message).get("parts", [])
    return next(p["data"] for p in parts if "data" in p)


async def get_task(url: str, task_id: str) -> Task:
    client = await create_client(url, ClientConfig(streaming=False))
    try:
        return await client.get_task(GetTaskRequest(id=task_id))
    finally:
        await client.close()


# -- discovery and a plain answer ------------------------------------------------------------------


async def test_the_official_client_reads_the_card_and_gets_the_answer_streamed(start_server, cluster):
    answer = reply("Two pods run in default.", chunks=["Two pods ", "run in default."])
    http = start_server(k8s_agent(cluster, answer), a2a=True)
    url = str(http.base_url)

    client = await create_client(url)
    card = client._card
    await client.close()
    events = await send(url, message("how many pods?"), streaming=True)

    assert (card.name, card.description) == ("k8s", "Operates the Kubernetes cluster.")
    assert [s.id for s in card.skills] == ["list_pods", "delete_pod", "restart_pod"]
    assert card.supported_interfaces[0].url == f"{url}/a2a"
    assert card.version
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds == ["task", "artifact_update", "artifact_update", "artifact_update", "status_update"]
    pieces = [e.artifact_update for e in events[1:3]]
    assert [(p.append, p.artifact.parts[0].text) for p in pieces] == [
        (True, "Two pods "),
        (True, "run in default."),
    ]
    whole = events[3].artifact_update
    assert (whole.append, whole.last_chunk, whole.artifact.parts[0].text) == (
        False,
        True,
        "Two pods run in default.",
    )
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


def test_the_card_is_also_at_the_older_path_and_open_without_a_key(start_server, cluster):
    keys = {"k" * 16: "alice"}
    http = start_server(k8s_agent(cluster), a2a=True, api_keys=keys)

    old, new = http.get("/.well-known/agent.json"), http.get("/.well-known/agent-card.json")
    rpc = http.post("/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x~1"}})

    assert old.status_code == new.status_code == 200
    assert old.json()["name"] == "k8s"
    assert old.json()["url"].endswith("/a2a")
    assert rpc.status_code == 401


def test_the_card_gives_the_seeds_skills_and_protocol_version_in_the_a2a_schema_and_no_model(
    start_server, cluster
):
    http = start_server(k8s_agent(cluster), a2a=True)

    card = http.get("/.well-known/agent-card.json").json()

    # ADR 33: the seed's "skills" (tool names) are the skills' names, its "version" (the protocol's)
    # is each interface's protocolVersion, and the model and provider are not published.
    assert [s["name"] for s in card["skills"]] == ["list_pods", "delete_pod", "restart_pod"]
    assert "1.0" in [i["protocolVersion"] for i in card["supportedInterfaces"]]
    assert "metadata" not in card


# -- approvals ---------------------------------------------------------------------------------------


def deletion_agent(cluster: Any, **options: Any) -> Agent:
    return k8s_agent(
        cluster,
        tool_calls(tool_call("delete_pod", name="web-2"), text="web-2 crash-loops; deleting it."),
        "Deleted web-2.",
        **options,
    )


async def test_a_call_needing_approval_waits_as_input_required_and_runs_once_approved(start_server, cluster):
    url = str(start_server(deletion_agent(cluster), a2a=True).base_url)

    waiting = await send_task(url, message("fix the crashing pod"))
    [pending] = status_data(waiting)["tool_calls"]
    assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert (pending["name"], pending["input"]) == ("delete_pod", {"name": "web-2", "namespace": "default"})
    assert cluster.deleted == []

    done = await send_task(url, message(decisions=[{"id": pending["id"], "execute": True}], task=waiting))

    assert done.id == waiting.id
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    [executed] = status_data(done)["executed_tool_calls"]
    assert executed["output"] == 'pod "web-2" deleted'
    assert done.artifacts[0].parts[0].text == "Deleted web-2."
    assert cluster.deleted == [("default", "web-2")]


async def test_a_rejected_call_never_runs_and_the_model_is_told(start_server, cluster):
    agent = k8s_agent(cluster, tool_calls(tool_call("delete_pod", name="web-2")), "Understood, web-2 stays.")
    url = str(start_server(agent, a2a=True).base_url)
    waiting = await send_task(url, message("delete web-2"))
    [pending] = status_data(waiting)["tool_calls"]

    decision = {"id": pending["id"], "execute": False, "rejection_reason": "not during business hours"}
    done = await send_task(url, message(decisions=[decision], task=waiting), streaming=True)

    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert status_data(done)["rejected_tool_calls"][0]["rejection_reason"] == "not during business hours"
    assert cluster.deleted == []
    assert "not during business hours" in str(agent.runtime.requests[-1].messages[-1])


@pytest.mark.parametrize(
    ("decision", "code"),
    [
        ({"id": "tc_000000000000000000000000", "execute": True}, "unknown_tool_call"),
        ({"execute": True, "input": {"name": "web-1", "namespace": "default"}}, "approval_mismatch"),
        ({"execute": True, "name": "restart_pod"}, "approval_mismatch"),
    ],
    ids=["never-proposed", "other-arguments", "other-tool"],
)
async def test_a_decision_on_anything_but_the_proposal_is_refused_and_changes_nothing(
    start_server, cluster, decision, code
):
    url = str(start_server(deletion_agent(cluster), a2a=True).base_url)
    waiting = await send_task(url, message("fix the crashing pod"))
    [pending] = status_data(waiting)["tool_calls"]

    with pytest.raises(InvalidParamsError) as refused:
        await send_task(url, message(decisions=[{"id": pending["id"], **decision}], task=waiting))

    assert refused.value.data == {"code": code, "call_id": decision.get("id", pending["id"])}
    still = await get_task(url, waiting.id)
    assert still.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert cluster.deleted == []


async def test_an_approval_is_honoured_once(start_server, cluster):
    url = str(start_server(deletion_agent(cluster), a2a=True).base_url)
    waiting = await send_task(url, message("fix the crashing pod"))
    [pending] = status_data(waiting)["tool_calls"]
    approval = [{"id": pending["id"], "execute": True}]
    await send_task(url, message(decisions=approval, task=waiting))

    with pytest.raises(InvalidParamsError, match="completed"):
        await send_task(url, message(decisions=approval, task=waiting))
    with pytest.raises(InvalidParamsError) as replayed:  # through the context, not the task
        await send_task(url, message(decisions=approval, task=Task(context_id=waiting.context_id)))

    assert replayed.value.data["code"] == "tool_call_already_decided"
    assert cluster.deleted == [("default", "web-2")]


async def test_canceling_a_waiting_task_rejects_its_calls_and_a_finished_one_cannot_be(start_server, cluster):
    url = str(start_server(deletion_agent(cluster), a2a=True).base_url)
    waiting = await send_task(url, message("fix the crashing pod"))
    client = await create_client(url, ClientConfig(streaming=False))
    try:
        canceled = await client.cancel_task(CancelTaskRequest(id=waiting.id))
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=waiting.id))
    finally:
        await client.close()

    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert status_data(canceled)["rejected_tool_calls"][0]["rejection_reason"] == "the task was canceled"
    assert cluster.deleted == []


async def test_canceling_a_working_task_stops_its_run(start_server, cluster):
    class WaitingRuntime(FakeRuntime):
        """A model that answers only when told to (never, here)."""

        async def ainvoke(self, request):
            await asyncio.Event().wait()
            return self.invoke(request)

    agent = Agent(tools=cluster.tools(), name="k8s", runtime=WaitingRuntime([reply("never")]))
    url = str(start_server(agent, a2a=True).base_url)
    working = await send_task(url, message("summarize the incident"), immediately=True)
    assert working.status.state == TaskState.TASK_STATE_WORKING
    client = await create_client(url, ClientConfig(streaming=False))
    try:
        canceled = await client.cancel_task(CancelTaskRequest(id=working.id))
    finally:
        await client.close()

    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert (await get_task(url, working.id)).status.state == TaskState.TASK_STATE_CANCELED


# -- questions to the user -------------------------------------------------------------------------


async def test_a_streamed_question_is_the_input_required_status_and_the_next_streamed_message_answers_it(
    start_server,
):
    ask = tool_call("ask_user", question="Which namespace?", kind="selection", options=["prod", "staging"])
    agent = Agent(tools=[ask_user], runtime=FakeRuntime([tool_calls(ask), "Cleaning up staging."]))
    url = str(start_server(agent, a2a=True).base_url)

    events = await send(url, message("clean up"), streaming=True)

    assert [e.WhichOneof("payload") for e in events] == ["task", "status_update"]
    waiting = events[-1].status_update
    assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert waiting.status.message.parts[0].text == "Which namespace?"
    [question] = MessageToDict(waiting.status.message.parts[1])["data"]["questions"]
    assert (question["kind"], question["options"]) == ("selection", ["prod", "staging"])
    read = await get_task(url, waiting.task_id)  # what GetTask (and SendMessage) say of the task
    assert read.status.state == waiting.status.state
    assert MessageToDict(read.status.message) == MessageToDict(waiting.status.message)

    task = Task(id=waiting.task_id, context_id=waiting.context_id)
    [answered] = await send(url, message("staging", task=task), streaming=True)

    done = answered.task
    assert (done.id, done.status.state) == (waiting.task_id, TaskState.TASK_STATE_COMPLETED)
    assert done.artifacts[0].parts[0].text == "Cleaning up staging."
    assert status_data(done)["executed_tool_calls"][0]["output"] == "staging"
    assert "staging" in str(agent.runtime.requests[-1].messages[-1])  # the model read the answer


# -- the store is the truth: another worker answers, long tasks run in the background -------------


async def test_a_second_server_sharing_the_store_reads_and_resumes_the_task(start_server, cluster, tmp_path):
    store = f"sqlite:///{tmp_path / 'tasks.db'}"
    first = str(start_server(deletion_agent(cluster), a2a=True, store=store).base_url)
    second = str(start_server(k8s_agent(cluster, "Deleted web-2."), a2a=True, store=store).base_url)

    waiting = await send_task(first, message("fix the crashing pod"))
    seen = await get_task(second, waiting.id)
    [pending] = status_data(seen)["tool_calls"]
    done = await send_task(second, message(decisions=[{"id": pending["id"], "execute": True}], task=seen))

    assert seen.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert (seen.context_id, pending["name"]) == (waiting.context_id, "delete_pod")
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert (await get_task(first, waiting.id)).status.state == TaskState.TASK_STATE_COMPLETED
    assert cluster.deleted == [("default", "web-2")]


async def test_a_long_task_runs_in_the_background_and_get_task_follows_it(start_server, cluster, tmp_path):
    release = threading.Event()

    def slow_answer(request: Any) -> Any:
        from dcaf_like import ModelResponse

        assert release.wait(10)
        return ModelResponse(text="All pods are healthy.")

    store = f"sqlite:///{tmp_path / 'tasks.db'}"
    url = str(start_server(k8s_agent(cluster, slow_answer), a2a=True, store=store).base_url)
    other = str(start_server(k8s_agent(cluster), a2a=True, store=store).base_url)

    started = await send_task(url, message("check every pod"), immediately=True)
    meanwhile = await get_task(other, started.id)
    release.set()
    for _ in range(200):
        done = await get_task(other, started.id)
        if done.status.state == TaskState.TASK_STATE_COMPLETED:
            break
        await asyncio.sleep(0.02)

    assert started.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
    assert meanwhile.status.state == TaskState.TASK_STATE_WORKING
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert done.artifacts[0].parts[0].text == "All pods are healthy."


@pytest.mark.parametrize("streaming", [False, True], ids=["send", "stream"])
async def test_a_failing_model_fails_the_task_with_its_error(start_server, cluster, streaming):
    from dcaf_like import ModelTimeout
    from dcaf_like.testing.fake_runtime import fail

    url = str(start_server(k8s_agent(cluster, fail(ModelTimeout("bedrock timed out"))), a2a=True).base_url)

    events = await send(url, message("anything"), streaming=streaming)

    status = events[-1].status_update.status if streaming else events[-1].task.status
    assert status.state == TaskState.TASK_STATE_FAILED
    assert "bedrock timed out" in status.message.parts[0].text


# -- the 0.3 method names and the seed's simple routes ---------------------------------------------


def test_the_0_3_method_names_work_on_the_same_endpoint(start_server, cluster):
    http = start_server(deletion_agent(cluster), a2a=True)
    sent = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {
            "message": {
                "kind": "message",
                "messageId": "m1",
                "role": "user",
                "parts": [{"kind": "text", "text": "fix the crashing pod"}],
            }
        },
    }

    task = http.post("/a2a", json=sent).json()["result"]
    got = http.post(
        "/a2a", json={"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": task["id"]}}
    ).json()["result"]

    canceled = http.post(
        "/a2a", json={"jsonrpc": "2.0", "id": 3, "method": "tasks/cancel", "params": {"id": task["id"]}}
    ).json()["result"]

    assert task["status"]["state"] == got["status"]["state"] == "input-required"
    data = next(p["data"] for p in got["status"]["message"]["parts"] if p["kind"] == "data")
    assert data["tool_calls"][0]["name"] == "delete_pod"
    assert canceled["status"]["state"] == "canceled"
    assert cluster.deleted == []


def test_the_simple_routes_send_resume_and_read_a_task(start_server, cluster):
    http = start_server(deletion_agent(cluster), a2a=True)

    waiting = http.post("/a2a/tasks/send", json={"message": "fix the crashing pod"}).json()
    [pending] = waiting["tool_calls"]
    approval = {"tool_calls": [{"id": pending["id"], "execute": True}]}
    done = http.post("/a2a/tasks/send", json={"task_id": waiting["id"], "data": approval}).json()
    read = http.get(f"/a2a/tasks/{waiting['id']}").json()
    missing = http.get("/a2a/tasks/conv_nothing~1")
    replay = http.post("/a2a/tasks/send", json={"task_id": waiting["id"], "data": approval})

    assert waiting["status"] == "input-required"
    assert done["status"] == read["status"] == "completed"
    assert read["text"] == "Deleted web-2."
    assert read["executed_tool_calls"][0]["output"] == 'pod "web-2" deleted'
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "task_not_found")
    assert (replay.status_code, replay.json()["error"]["code"]) == (409, "task_not_waiting")


async def test_a_run_stopped_at_max_iterations_is_a_failed_task_not_a_working_one(start_server, cluster):
    agent = k8s_agent(cluster, tool_calls("list_pods"), max_iterations=1)
    url = str(start_server(agent, a2a=True).base_url)

    task = await send_task(url, message("look around"))

    assert task.status.state == TaskState.TASK_STATE_FAILED
    assert "max_iterations" in task.status.message.parts[0].text


async def test_a_new_message_in_a_context_is_a_new_task_of_the_same_conversation(start_server, cluster):
    agent = k8s_agent(cluster, "Two pods run.", "web-2 is the crashing one.")
    url = str(start_server(agent, a2a=True).base_url)
    first = await send_task(url, message("how many pods?"))

    follow_up = message("which one crashes?")
    follow_up.context_id = first.context_id
    events = await send(url, follow_up, streaming=True)

    second = events[0].task
    assert (second.context_id, second.id) == (first.context_id, first.context_id + "~2")
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert "how many pods?" in str(agent.runtime.requests[-1].messages)
    assert (await get_task(url, first.id)).status.state == TaskState.TASK_STATE_COMPLETED
    assert [m.parts[0].text for m in (await get_task(url, second.id)).history] == [
        "which one crashes?",
        "web-2 is the crashing one.",
    ]


@pytest.mark.parametrize(
    ("script", "state"),
    [
        (["Hi."], "completed"),
        ([tool_calls(tool_call("delete_pod", name="web-2"))], "input-required"),  # interrupted: final too
    ],
    ids=["answered", "waiting-for-approval"],
)
def test_the_0_3_stream_ends_with_the_final_status(start_server, cluster, script, state):
    import json

    http = start_server(k8s_agent(cluster, *script), a2a=True)
    sent = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/stream",
        "params": {
            "message": {
                "kind": "message",
                "messageId": "m1",
                "role": "user",
                "parts": [{"kind": "text", "text": "hi"}],
            }
        },
    }

    with http.stream("POST", "/a2a", json=sent) as response:
        events = [
            json.loads(line[5:])["result"] for line in response.iter_lines() if line.startswith("data:")
        ]

    assert events[0]["kind"] == "task"
    assert (events[-1]["kind"], events[-1]["status"]["state"], events[-1]["final"]) == (
        "status-update",
        state,
        True,
    )
    assert [e["final"] for e in events if e["kind"] == "status-update"] == [True]  # the last event only


# -- images and files: A2A file parts ---------------------------------------------------------------

GRAPH = b"\x89PNG\r\n\x1a\n cpu of web-2"
REPORT = b"%PDF-1.4 events"


def seeing_agent(**options: Any) -> Agent:
    return Agent(
        name="k8s", runtime=FakeRuntime(["A crash loop.", "Still."], accepts={"image", "file"}), **options
    )


def rpc_0_3(http: Any, *parts: dict[str, Any]) -> dict[str, Any]:
    """message/send of a 0.3 message with `parts`: the JSON-RPC answer."""
    message = {"kind": "message", "messageId": uuid.uuid4().hex, "role": "user", "parts": list(parts)}
    sent = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
    answer: dict[str, Any] = http.post("/a2a", json=sent).json()
    return answer


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


async def test_file_parts_reach_the_model_as_the_messages_images_and_files_and_stay_with_it(start_server):
    agent = seeing_agent()
    url = str(start_server(agent, a2a=True).base_url)
    msg = message("what is wrong here?")
    msg.parts.append(Part(raw=GRAPH, media_type="image/png", filename="cpu.png"))
    msg.parts.append(Part(raw=REPORT, media_type="application/pdf", filename="events.pdf"))

    task = await send_task(url, msg)

    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    [turn] = agent.runtime.requests[0].messages
    assert turn.text == "what is wrong here?"
    assert [
        (a.kind.value, a.media_type, a.name, base64.b64decode(a.data or "")) for a in turn.attachments
    ] == [
        ("image", "image/png", "cpu.png", GRAPH),
        ("file", "application/pdf", "events.pdf", REPORT),
    ]
    stored = agent.repository.get(task.context_id)
    assert stored is not None
    assert stored.messages[0].attachments == turn.attachments


async def test_get_task_shows_a_messages_file_parts_by_what_they_are_not_their_bytes(start_server):
    agent = seeing_agent()
    url = str(start_server(agent, a2a=True).base_url)
    msg = message("what is wrong here?")
    msg.parts.append(Part(raw=GRAPH, media_type="image/png", filename="cpu.png"))
    msg.parts.append(Part(raw=REPORT, media_type="application/pdf", filename="events.pdf"))
    sent = await send_task(url, msg)

    task = await get_task(url, sent.id)

    asked, answered = task.history
    assert [MessageToDict(p) for p in asked.parts] == [
        {"text": "what is wrong here?"},
        {
            "data": {
                "attachment": {
                    "kind": "image",
                    "name": "cpu.png",
                    "mediaType": "image/png",
                    "size": len(GRAPH),
                }
            }
        },
        {
            "data": {
                "attachment": {
                    "kind": "file",
                    "name": "events.pdf",
                    "mediaType": "application/pdf",
                    "size": len(REPORT),
                }
            }
        },
    ]
    assert [p.text for p in answered.parts] == ["A crash loop."]


def test_a_0_3_client_reads_an_image_sent_by_url_as_a_file_part_and_one_sent_alone_in_the_history(
    start_server,
):
    agent = seeing_agent()
    http = start_server(agent, a2a=True)
    sent = rpc_0_3(
        http,
        {"kind": "file", "file": {"uri": "https://grafana.invalid/render/cpu.png", "mimeType": "image/png"}},
    )["result"]

    got = http.post(
        "/a2a", json={"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": sent["id"]}}
    ).json()["result"]

    asked = got["history"][0]
    assert asked["role"] == "user"
    assert asked["parts"] == [
        {"kind": "file", "file": {"uri": "https://grafana.invalid/render/cpu.png", "mimeType": "image/png"}}
    ]


def test_0_3_file_parts_with_bytes_or_an_images_uri_are_read_and_the_uri_is_not_fetched(start_server):
    agent = seeing_agent()
    http = start_server(agent, a2a=True)

    answer = rpc_0_3(
        http,
        {"kind": "text", "text": "compare these"},
        {"kind": "file", "file": {"bytes": b64(GRAPH), "mimeType": "image/png", "name": "cpu.png"}},
        {"kind": "file", "file": {"uri": "https://grafana.invalid/render/cpu.png", "mimeType": "image/png"}},
    )

    assert answer["result"]["status"]["state"] == "completed", answer
    [turn] = agent.runtime.requests[0].messages
    inline, by_url = turn.attachments
    assert (inline.name, base64.b64decode(inline.data or "")) == ("cpu.png", GRAPH)
    assert (by_url.url, by_url.data) == ("https://grafana.invalid/render/cpu.png", None)  # passed on as a URL


@pytest.mark.parametrize(
    ("part", "code", "problem"),
    [
        ({"kind": "file", "file": {"bytes": b64(b"\0" * (MAX_PART_BYTES + 1)), "mimeType": "image/png"}},
         "part_too_large", "larger than"),
        ({"kind": "file", "file": {"uri": "https://example.com/a.pdf", "mimeType": "application/pdf"}},
         "invalid_part", "fetches nothing"),
        ({"kind": "file", "file": {"bytes": b64(REPORT), "mimeType": "application/pdf"}},
         "invalid_part", "name"),
        ({"kind": "file", "file": {"bytes": b64(REPORT)}}, "invalid_part", "media_type"),
    ],
)  # fmt: skip
def test_a_file_part_that_cannot_be_taken_is_invalid_params_naming_it_and_opens_no_task(
    start_server, part, code, problem
):
    agent = seeing_agent()
    http = start_server(agent, a2a=True, max_body_bytes=4 * MAX_PART_BYTES)

    answer = rpc_0_3(http, {"kind": "text", "text": "look"}, part)

    error = answer["error"]
    assert error["code"] == -32602
    assert (error["data"]["code"], error["data"]["field"]) == (code, "message.parts[1]")
    assert problem in error["message"]
    assert agent.runtime.requests == []
    assert agent.repository.list_ids(10) == []


def test_parts_over_the_messages_total_are_refused_naming_the_part_that_passes_it(start_server):
    http = start_server(seeing_agent(), a2a=True, max_body_bytes=4 * MAX_PARTS_BYTES)
    each = {"kind": "file", "file": {"bytes": b64(b"\0" * (MAX_PART_BYTES - 1)), "mimeType": "image/png"}}
    count = MAX_PARTS_BYTES // (MAX_PART_BYTES - 1) + 1

    error = rpc_0_3(http, *[each] * count)["error"]

    assert (error["data"]["code"], error["data"]["field"]) == (
        "part_too_large",
        f"message.parts[{count - 1}]",
    )


def test_a_runtime_that_cannot_take_a_file_part_refuses_the_message_before_a_task_is_opened(start_server):
    agent = Agent(runtime=FakeRuntime(["never"]))
    http = start_server(agent, a2a=True)

    error = rpc_0_3(http, {"kind": "file", "file": {"bytes": b64(GRAPH), "mimeType": "image/png"}})["error"]

    assert (error["code"], error["data"]["code"]) == (-32602, "unsupported_part")
    assert "'fake'" in error["message"]
    assert agent.repository.list_ids(10) == []


def test_the_simple_route_takes_a_message_as_parts_with_the_same_limits(start_server):
    agent = seeing_agent()
    http = start_server(agent, a2a=True, max_body_bytes=4 * MAX_PART_BYTES)
    image = {"type": "image", "media_type": "image/png", "data": b64(GRAPH)}
    too_large = {"type": "image", "media_type": "image/png", "data": b64(b"\0" * (MAX_PART_BYTES + 1))}

    done = http.post("/a2a/tasks/send", json={"message": [{"type": "text", "text": "look"}, image]})
    refused = http.post("/a2a/tasks/send", json={"message": [too_large]})

    assert done.json()["status"] == "completed", done.text
    [turn] = agent.runtime.requests[0].messages
    assert (turn.text, base64.b64decode(turn.attachments[0].data or "")) == ("look", GRAPH)
    assert refused.status_code == 413
    assert (refused.json()["error"]["code"], refused.json()["error"]["field"]) == (
        "part_too_large",
        "message[0]",
    )


@pytest.mark.parametrize("entrance", ["/api/chat", "/a2a/tasks/send"])
def test_a_message_to_a_context_whose_call_expired_is_taken_alike_on_every_entrance(
    start_server, cluster, entrance
):
    """Issue 34: A2A added the message without closing the calls past their window first, and refused
    what /api/chat accepted. Both now go through Conversation.receive_user_message, on the agent's clock."""
    clock = ManualClock(1_000_000.0)
    script = [tool_calls(tool_call("delete_pod", name="web-2")), reply("Left alone.")]
    agent = k8s_agent(cluster, *script, approval_ttl=60, clock=clock)
    http = start_server(agent, a2a=True)
    proposed = http.post("/api/chat", json={"messages": [{"role": "user", "content": "delete web-2"}]}).json()
    conversation_id = proposed["data"]["conversation_id"]
    clock.advance(61)  # the approval window closed

    if entrance == "/api/chat":
        later = {
            "messages": [
                {"role": "user", "content": "never mind", "data": {"conversation_id": conversation_id}}
            ]
        }
    else:
        later = {"message": "never mind", "context_id": conversation_id}
    response = http.post(entrance, json=later)

    assert response.status_code == 200, response.text
    stored = http.get(f"/api/conversations/{conversation_id}").json()
    (call,) = stored["tool_calls"]
    assert (call["status"], call["rejection_reason"]) == (
        "rejected",
        "the approval window closed before a decision",
    )
    assert call["decided_at"] == 1_000_061.0  # the agent's clock, not the wall's
    assert stored["messages"][-2]["content"] == "never mind"
    assert stored["messages"][-2]["at"] == 1_000_061.0
    assert cluster.deleted == []


async def test_a_waiting_calls_risk_and_preview_are_in_the_status_data_and_bind_its_approval(start_server):
    """docs/approvals.md, "What the approver sees": A2A status data carries the risk and the preview."""
    from dcaf_like import tool

    ran: list[str] = []

    @tool(risk="irreversible", preview=lambda instance: f"would terminate {instance} and its 2 disks")
    def terminate_instance(instance: str) -> str:
        """Terminate an instance."""
        ran.append(instance)
        return "terminated"

    runtime = FakeRuntime([tool_call("terminate_instance", instance="i-1"), reply("Terminated.")])
    url = str(start_server(Agent(tools=[terminate_instance], runtime=runtime), a2a=True).base_url)

    waiting = await send_task(url, message("terminate i-1"))
    [pending] = status_data(waiting)["tool_calls"]
    assert (pending["risk"], pending["preview_kind"]) == ("irreversible", "text")
    assert pending["preview"] == "would terminate i-1 and its 2 disks"

    forged = {"id": pending["id"], "execute": True, "preview_digest": "0" * 64}
    with pytest.raises(InvalidParamsError, match="preview"):
        await send_task(url, message(decisions=[forged], task=waiting))
    assert ran == []
    approval = {"id": pending["id"], "execute": True, "preview_digest": pending["preview_digest"]}
    done = await send_task(url, message(decisions=[approval], task=waiting))
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    assert ran == ["i-1"]
