"""MCP servers' tools behind the approval gate: a real MCP server (tests/mcp_server.py), over stdio
(a subprocess) and over streamable HTTP (uvicorn on a loopback port), driven by an Agent."""

from __future__ import annotations

import base64
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

import uvicorn

from dcaf_like import MAX_PART_BYTES, Agent, RunFailed, ToolsetUnavailable, UserTurn, tool
from dcaf_like.helpdesk.protocol import assistant_message
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls
from dcaf_like.toolsets.mcp import MCPServerUnavailable, MCPToolset

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from mcp_server import ARCHIVE, GRAPH, build_server, recorded  # noqa: E402

pytestmark = pytest.mark.integration

Connect = Callable[..., MCPToolset]


def _serve_http(record: Path, name: str, media: bool) -> tuple[uvicorn.Server, threading.Thread, str]:
    app = build_server(record, name, media=media).streamable_http_app()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, name=f"mcp-{name}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the MCP test server did not start")
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return server, thread, f"http://127.0.0.1:{port}/mcp"


@pytest.fixture(params=["stdio", "http"])
def connect(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Connect]:
    """``connect(name, record, media=False, **options)``: an MCPToolset for a fresh test server named
    `name`, which records the calls it gets in `record` (with `media`, it also has tools that return an
    image and a file); over stdio or streamable HTTP. Closed after the test."""
    toolsets: list[MCPToolset] = []
    servers: list[tuple[uvicorn.Server, threading.Thread]] = []

    def make(name: str, record: Path, media: bool = False, **options: Any) -> MCPToolset:
        if request.param == "stdio":
            command = [sys.executable, str(TESTS / "mcp_server.py"), "--record", str(record), "--name", name]
            toolset = MCPToolset(name, command=command + ["--media"] * media, **options)
        else:
            server, thread, url = _serve_http(record, name, media)
            servers.append((server, thread))
            toolset = MCPToolset(name, url=url, **options)
        toolsets.append(toolset)
        return toolset

    yield make
    for toolset in toolsets:
        toolset.close()
    for server, thread in servers:
        server.should_exit = True
        thread.join(timeout=10)


def test_an_mcp_tool_runs_only_once_approved_with_the_arguments_proposed(connect, tmp_path):
    calls = tmp_path / "calls.jsonl"
    k8s = connect("k8s", calls)
    model = FakeRuntime(
        [tool_calls(tool_call("delete_pod", name="web-2"), text="Approve?"), reply("Deleted web-2.")]
    )
    agent = Agent(tools=[k8s], runtime=model)

    response = agent.run("delete web-2")

    [pending] = response.pending_tool_calls
    assert pending.name == "delete_pod"
    assert pending.input == {"name": "web-2", "namespace": "default"}
    assert recorded(calls) == []  # proposed, not run

    response = agent.approve(response.conversation_id, pending.id)

    assert recorded(calls) == [{"tool": "delete_pod", "arguments": {"name": "web-2", "namespace": "default"}}]
    assert response.executed_tool_calls[0].output == 'pod "web-2" deleted'
    assert response.text == "Deleted web-2."
    offered = {spec.name: spec for spec in model.requests[0].tools}
    assert set(offered) == {"list_pods", "delete_pod"}
    assert offered["delete_pod"].input_schema["required"] == ["name"]


def test_arguments_marked_secret_are_masked_for_people_and_reach_the_server_intact(connect, tmp_path):
    calls = tmp_path / "calls.jsonl"
    k8s = connect("k8s", calls, secret=["name"])
    model = FakeRuntime([tool_calls(tool_call("delete_pod", name="web-2")), reply("Deleted.")])
    agent = Agent(tools=[k8s], runtime=model)

    proposed = agent.run("delete web-2")
    [pending] = proposed.pending_tool_calls
    done = agent.approve(proposed.conversation_id, pending.id)

    assert pending.input == {"name": "***", "namespace": "default"}
    assert recorded(calls) == [{"tool": "delete_pod", "arguments": {"name": "web-2", "namespace": "default"}}]
    assert assistant_message(done)["data"]["executed_tool_calls"][0]["input"]["name"] == "***"


def test_every_mcp_tool_needs_approval_unless_allowed_by_name_or_pattern(connect, tmp_path):
    calls = tmp_path / "calls.jsonl"
    gated = connect("k8s", calls)
    allowed = connect("k8s_read", tmp_path / "other.jsonl", allow=["list_*"])
    model = FakeRuntime([tool_calls(tool_call("list_pods", namespace="prod")), reply("api-1 runs.")])

    gated_tools = {t.name: t.requires_approval for t in gated.load()}
    allowed_tools = {t.name: t.requires_approval for t in allowed.load()}
    response = Agent(tools=[allowed], runtime=model).run("what runs in prod?")

    assert gated_tools == {"list_pods": True, "delete_pod": True}
    assert allowed_tools == {"list_pods": False, "delete_pod": True}
    assert not response.has_pending_approvals
    assert response.executed_tool_calls[0].output == '{"api-1": "Running"}'
    assert response.text == "api-1 runs."


def test_tools_whose_names_collide_are_namespaced_by_server(connect, tmp_path):
    prod = connect("prod", tmp_path / "prod.jsonl", allow="list_pods")
    staging = connect("staging", tmp_path / "staging.jsonl", allow="list_pods")

    @tool(requires_approval=False)
    def delete_pod(name: str) -> str:
        """A local tool of the same name as the servers' (a stub)."""
        return "local"

    model = FakeRuntime(
        [tool_calls(tool_call("staging__list_pods", namespace="default")), reply("Listed staging.")]
    )
    agent = Agent(tools=[delete_pod, prod, staging], runtime=model)

    response = agent.run("what runs in staging?")

    names = sorted(spec.name for spec in model.requests[0].tools)
    assert names == [
        "delete_pod",  # the agent's own tool keeps its name
        "prod__delete_pod",
        "prod__list_pods",
        "staging__delete_pod",
        "staging__list_pods",
    ]
    assert recorded(tmp_path / "staging.jsonl") == [
        {"tool": "list_pods", "arguments": {"namespace": "default"}}
    ]
    assert recorded(tmp_path / "prod.jsonl") == []
    assert response.executed_tool_calls[0].name == "staging__list_pods"
    assert "web-2" in response.executed_tool_calls[0].output


def test_an_error_result_from_the_server_is_reported_to_the_model(connect, tmp_path):
    k8s = connect("k8s", tmp_path / "calls.jsonl", allow="*")
    model = FakeRuntime([tool_calls(tool_call("delete_pod", name="ghost")), reply("There is no ghost.")])

    response = Agent(tools=[k8s], runtime=model).run("delete ghost")

    [failed] = response.executed_tool_calls
    assert failed.status == "failed"
    assert "no pod ghost in namespace default" in failed.error
    [result] = [m for m in model.requests[1].messages if getattr(m, "is_error", False)]
    assert "no pod ghost in namespace default" in result.content


# -- images and files in a tool's result ------------------------------------------------------------


def test_an_image_a_tool_returns_reaches_a_model_that_takes_images_and_stays_with_the_call(connect, tmp_path):
    k8s = connect("k8s", tmp_path / "calls.jsonl", media=True, allow="cpu_graph")
    model = FakeRuntime(
        [tool_calls(tool_call("cpu_graph", name="web-2")), reply("CPU is flat."), reply("Still flat.")],
        accepts={"image"},
    )
    agent = Agent(tools=[k8s], runtime=model)

    response = agent.run("is web-2 busy?")
    agent.run("and now?", conversation_id=response.conversation_id)

    [ran] = response.executed_tool_calls
    assert ran.output == "CPU of web-2 over the last hour"
    _, _, result, shown = model.requests[1].messages
    assert result.content.startswith("CPU of web-2 over the last hour\n[It also returned image/png image")
    assert isinstance(shown, UserTurn)
    [image] = shown.attachments
    assert (image.kind.value, image.media_type, base64.b64decode(image.data or "")) == (
        "image",
        "image/png",
        GRAPH,
    )
    assert model.requests[2].messages[:4] == model.requests[1].messages, "a later turn shows it again"
    stored = agent.conversation(response.conversation_id)
    assert stored is not None
    assert stored.tool_call(ran.id).result_attachments == (image,)


def test_the_openai_compatible_runtime_sends_a_tools_image_as_a_user_message_after_the_tool_messages(
    connect, tmp_path
):
    pytest.importorskip("openai", reason="the openai extra is not installed")
    from dcaf_like.runtimes.openai_chat import OpenAIRuntime
    from dcaf_like.testing import OpenAICompatibleServer

    k8s = connect("k8s", tmp_path / "calls.jsonl", media=True, allow="cpu_graph")
    with OpenAICompatibleServer() as model:  # it refuses what the API refuses (parts, unanswered calls)
        runtime = OpenAIRuntime("test-model", base_url=model.base_url, max_retries=0)
        model.call([("cpu_graph", {"name": "web-2"})])
        model.reply("CPU is flat.")
        response = Agent(tools=[k8s], runtime=runtime).run("is web-2 busy?")
        runtime.close()

    assert response.text == "CPU is flat."
    *_, assistant, tool_message, shown = model.requests[-1]["messages"]
    assert [m["role"] for m in (assistant, tool_message, shown)] == ["assistant", "tool", "user"]
    assert tool_message["tool_call_id"] == assistant["tool_calls"][0]["id"]
    assert tool_message["content"].startswith("CPU of web-2 over the last hour\n[It also returned image/png")
    text, image = shown["content"]
    assert text["text"].startswith("[Not from the user")
    assert image == {
        "type": "image_url",
        "image_url": {"url": f"data:image/png;base64,{base64.b64encode(GRAPH).decode()}"},
    }


def test_a_model_that_cannot_take_a_tools_image_reads_what_was_left_out_and_the_turn_goes_on(
    connect, tmp_path
):
    k8s = connect("k8s", tmp_path / "calls.jsonl", media=True, allow=["cpu_graph", "logs_archive"])
    model = FakeRuntime(
        [
            tool_calls(tool_call("cpu_graph", name="web-2"), tool_call("logs_archive", name="web-2")),
            reply("Seen."),
        ]
    )

    response = Agent(tools=[k8s], runtime=model).run("is web-2 busy?")

    assert response.text == "Seen."
    assert [c.status for c in response.executed_tool_calls] == ["executed", "executed"]
    graph, logs = model.requests[1].messages[2:]
    assert f"image/png image of {len(GRAPH)} bytes, which this model cannot read: left out." in graph.content
    assert f"file 'web-2.log.gz' (application/gzip) of {len(ARCHIVE)} bytes, which this model" in logs.content
    assert not any(isinstance(m, UserTurn) and m.attachments for m in model.requests[1].messages)


def test_an_embedded_resources_blob_is_a_file_named_by_its_uri(connect, tmp_path):
    k8s = connect("k8s", tmp_path / "calls.jsonl", media=True, allow="logs_archive")
    model = FakeRuntime(
        [tool_calls(tool_call("logs_archive", name="web-2")), reply("Read.")], accepts={"file"}
    )

    Agent(tools=[k8s], runtime=model).run("logs of web-2?")

    [archive] = model.requests[1].messages[-1].attachments
    assert (archive.kind.value, archive.name, archive.media_type) == (
        "file",
        "web-2.log.gz",
        "application/gzip",
    )
    assert base64.b64decode(archive.data or "") == ARCHIVE


def test_an_image_over_the_part_limit_is_named_in_the_result_not_sent(connect, tmp_path):
    k8s = connect("k8s", tmp_path / "calls.jsonl", media=True, allow="cpu_graph")
    model = FakeRuntime(
        [tool_calls(tool_call("cpu_graph", name="web-2", size=MAX_PART_BYTES + 1)), reply("Too big.")],
        accepts={"image"},
    )

    response = Agent(tools=[k8s], runtime=model).run("is web-2 busy?")

    assert response.text == "Too big."
    _, _, result = model.requests[1].messages  # no image after it
    why = f"image part: larger than {MAX_PART_BYTES} bytes"
    left_out = f"[image image/png of {MAX_PART_BYTES + 1} bytes left out: {why}]"
    assert result.content == f"CPU of web-2 over the last hour\n{left_out}"


def test_the_connection_is_made_on_the_first_run_and_kept_for_later_runs(connect, tmp_path):
    calls = tmp_path / "calls.jsonl"
    k8s = connect("k8s", calls, allow="list_pods")
    model = FakeRuntime([tool_calls("list_pods"), reply("one"), tool_calls("list_pods"), reply("two")])
    agent = Agent(tools=[k8s], runtime=model)
    assert k8s._connection._portal is None  # nothing started by building the agent

    first = agent.run("pods?")
    client = k8s._connection._client
    second = agent.run("pods again?")

    assert (first.text, second.text) == ("one", "two")
    assert k8s._connection._client is client  # the same session served both runs
    assert len(recorded(calls)) == 2


async def test_async_runs_use_the_same_connection_as_blocking_ones(connect, tmp_path):
    calls = tmp_path / "calls.jsonl"
    k8s = connect("k8s", calls)
    model = FakeRuntime([tool_calls(tool_call("delete_pod", name="web-1")), reply("Done.")])
    agent = Agent(tools=[k8s], runtime=model)

    response = await agent.arun("delete web-1")
    [pending] = response.pending_tool_calls
    assert recorded(calls) == []
    from dcaf_like import ToolDecision

    response = await agent.adecide(response.conversation_id, [ToolDecision.approved(pending.id)])

    assert recorded(calls) == [{"tool": "delete_pod", "arguments": {"name": "web-1", "namespace": "default"}}]
    assert response.text == "Done."


def test_a_server_that_cannot_start_stops_the_run_before_the_model_is_called(tmp_path):
    broken = MCPToolset("k8s", command=[sys.executable, str(tmp_path / "missing_server.py")])
    model = FakeRuntime(["never said"])
    agent = Agent(tools=[broken], runtime=model)

    try:
        with pytest.raises(MCPServerUnavailable, match="MCP server 'k8s' is unavailable") as raised:
            agent.run("list pods")
        [event] = list(agent.run_stream("list pods"))
    finally:
        broken.close()

    assert isinstance(raised.value, ToolsetUnavailable)
    assert raised.value.server == "k8s"
    assert model.requests == []
    assert isinstance(event, RunFailed)
    assert event.kind == "MCPServerUnavailable"
    assert model.requests == []


def test_an_unreachable_http_server_is_a_typed_error_naming_it():
    unreachable = MCPToolset("docs", url="http://127.0.0.1:9/mcp", connect_timeout=10)
    model = FakeRuntime(["never said"])

    try:
        with pytest.raises(MCPServerUnavailable, match="'docs'"):
            Agent(tools=[unreachable], runtime=model).run("search the docs")
    finally:
        unreachable.close()

    assert model.requests == []


def test_a_server_that_never_answers_times_out_with_a_typed_error(tmp_path):
    silent = tmp_path / "silent.py"
    silent.write_text("import time\ntime.sleep(60)\n")
    toolset = MCPToolset("slow", command=[sys.executable, str(silent)], connect_timeout=1)

    try:
        with pytest.raises(MCPServerUnavailable, match="within 1 s"):
            toolset.load()
    finally:
        toolset.close()


def test_a_lost_server_fails_the_call_in_flight_and_the_next_call_starts_it_again(tmp_path):
    import os
    import signal

    calls = tmp_path / "calls.jsonl"
    command = [sys.executable, str(TESTS / "mcp_server.py"), "--record", str(calls)]
    model = FakeRuntime(
        [
            tool_calls("list_pods"),
            reply("one"),
            tool_calls("list_pods"),
            reply("two"),
            tool_calls("list_pods"),
        ]
    )
    model.then(reply("three"))
    with MCPToolset("k8s", command=command, allow="*") as k8s:
        agent = Agent(tools=[k8s], runtime=model)
        agent.run("pods?")
        [pid] = _server_pids(str(calls))
        os.kill(pid, signal.SIGKILL)

        lost = agent.run("pods again?")
        again = agent.run("and now?")

    assert lost.executed_tool_calls[0].status == "failed"
    assert "connection was lost" in lost.executed_tool_calls[0].error
    assert again.executed_tool_calls[0].status == "executed"
    assert _server_pids(str(calls)) == []  # the new process exited with the toolset


def _server_pids(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line names `marker`."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state = stat.read_text().rsplit(")", 1)[1].split()[0]
            cmdline = (stat.parent / "cmdline").read_bytes().decode(errors="replace")
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != "Z":
            pids.append(int(stat.parent.name))
    return pids
