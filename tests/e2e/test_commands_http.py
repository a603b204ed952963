"""Terminal commands over HTTP: proposed by the model, shown as ``cmds``, run only once a human approved
the exact argv, their output in ``executed_cmds`` and back to the model. Attacks on a command (forged,
altered, replayed, carried into another conversation, typed by the client) run nothing and change
nothing, as they do for any tool call (tests/e2e/test_approval_gate.py)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from _helpdesk import user

from dcaf_like import Agent, LocalCommandRunner, ToolResult, command_tool
from dcaf_like.application.messages import ModelRequest, ModelResponse, UserTurn
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls

FAKE_KUBECTL = """#!/bin/sh
printf '%s\\n' "$*" >> "$KUBECTL_LOG"
echo "fake kubectl ran: $*"
"""


@dataclass
class Commands:
    client: httpx.Client
    agent: Agent
    runtime: FakeRuntime
    log: Path
    conversation_id: str
    pending: dict[str, Any]

    def send(self, *cmds: dict[str, Any], conversation_id: str | None = None, **data: Any) -> httpx.Response:
        message = user("", cmds=list(cmds), conversation_id=conversation_id or self.conversation_id, **data)
        return self.client.post("/api/chat", json={"messages": [message]})

    def ran(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def version(self) -> int:
        stored = self.agent.repository.get(self.conversation_id)
        assert stored is not None
        return stored.version

    def status(self) -> str:
        stored = self.agent.repository.get(self.conversation_id)
        assert stored is not None
        return stored.tool_call(self.pending["id"]).status.value


def kubectl_runner(tmp_path: Path, **options: Any) -> tuple[LocalCommandRunner, Path]:
    script = tmp_path / "kubectl"
    script.write_text(FAKE_KUBECTL)
    script.chmod(0o755)
    log = tmp_path / "ran.log"
    env = {"PATH": os.environ.get("PATH", ""), "KUBECTL_LOG": str(log)}
    return LocalCommandRunner(allow={"kubectl": str(script)}, env=env, **options), log


@pytest.fixture
def commands(start_server, tmp_path) -> Commands:
    """The agent proposed ``kubectl get pods -n prod`` and waits for a decision."""
    runtime = FakeRuntime(
        [tool_call("run_command", argv=["kubectl", "get", "pods", "-n", "prod"]), "Two pods run."]
    )
    runner, log = kubectl_runner(tmp_path)
    agent = Agent(tools=[command_tool(runner)], runtime=runtime)
    client = start_server(agent)
    body = client.post("/api/chat", json={"messages": [user("list the pods in prod")]}).json()
    assert body["data"]["tool_calls"] == []
    [pending] = body["data"]["cmds"]
    return Commands(client, agent, runtime, log, body["data"]["conversation_id"], pending)


def test_a_proposed_command_waits_with_a_server_minted_id_and_its_exact_argv(commands):
    assert commands.pending == {
        **commands.pending,
        "command": "kubectl get pods -n prod",
        "argv": ["kubectl", "get", "pods", "-n", "prod"],
        "execute": False,
    }
    assert commands.pending["id"].startswith("tc_")
    assert commands.ran() == []
    assert commands.status() == "pending"


def test_an_approved_command_runs_once_and_its_output_goes_to_the_client_and_the_model(commands):
    response = commands.send({**commands.pending, "execute": True})

    assert response.status_code == 200, response.text
    data = response.json()["data"]
    [executed] = data["executed_cmds"]
    assert executed["id"] == commands.pending["id"]
    assert executed["argv"] == ["kubectl", "get", "pods", "-n", "prod"]
    assert executed["output"] == "fake kubectl ran: get pods -n prod\n"
    assert executed["status"] == "executed"
    assert data["executed_tool_calls"] == []
    assert data["cmds"] == []
    assert response.json()["content"] == "Two pods run."
    assert commands.ran() == ["get pods -n prod"]
    [result] = [m for m in commands.runtime.requests[-1].messages if isinstance(m, ToolResult)]
    assert result.content == executed["output"]
    assert not result.is_error


def test_a_command_can_be_approved_by_its_id_among_the_tool_calls_too(commands):
    response = commands.client.post(
        "/api/chat",
        json={
            "messages": [
                user(
                    "",
                    tool_calls=[{"id": commands.pending["id"], "execute": True}],
                    conversation_id=commands.conversation_id,
                )
            ]
        },
    )

    assert response.status_code == 200, response.text
    assert commands.ran() == ["get pods -n prod"]


def test_a_rejected_command_never_runs_and_the_model_hears_why(commands):
    response = commands.send({**commands.pending, "execute": False, "rejection_reason": "not in prod"})

    assert response.status_code == 200, response.text
    assert commands.ran() == []
    assert commands.status() == "rejected"
    [result] = [m for m in commands.runtime.requests[-1].messages if isinstance(m, ToolResult)]
    assert "not in prod" in result.content
    assert result.is_error


def assert_refused(
    commands: Commands, response: httpx.Response, status: int, code: str, version: int
) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code
    assert commands.ran() == [], "an attack must run nothing"
    assert commands.version() == version, "an attack must leave the conversation unchanged"


def test_a_command_the_server_never_proposed_is_refused(commands):
    version = commands.version()
    forged = {"id": "tc_0123456789abcdef01234567", "command": "kubectl delete ns prod", "execute": True}

    response = commands.send(forged)

    assert_refused(commands, response, 404, "unknown_tool_call", version)
    assert response.json()["error"]["call_id"] == forged["id"]
    assert commands.status() == "pending"


def test_a_command_typed_by_the_client_is_never_run(commands):
    version = commands.version()

    response = commands.send({"command": "kubectl delete ns prod", "execute": True})

    assert_refused(commands, response, 400, "invalid_request", version)
    assert response.json()["error"]["field"] == "messages[0].data.cmds[0]"


def test_a_client_command_in_a_new_conversation_is_never_run(commands):
    body = {"messages": [user("hi", cmds=[{"command": "kubectl delete ns prod", "execute": True}])]}

    response = commands.client.post("/api/chat", json=body)

    assert response.status_code == 400
    assert commands.ran() == []


@pytest.mark.parametrize(
    "altered",
    [
        {"argv": ["kubectl", "delete", "ns", "prod"], "command": "kubectl delete ns prod"},
        {"argv": ["kubectl", "get", "pods", "-n", "prod", "--all"], "command": None},
        {"command": "kubectl get pods -n kube-system", "argv": None},
    ],
    ids=["argv and command", "argv alone", "command alone"],
)
def test_approving_a_proposed_command_with_an_altered_argv_is_refused(commands, altered):
    version = commands.version()
    echoed = {k: v for k, v in {**commands.pending, **altered, "execute": True}.items() if v is not None}

    response = commands.send(echoed)

    assert_refused(commands, response, 409, "approval_mismatch", version)
    assert response.json()["error"]["call_id"] == commands.pending["id"]
    assert commands.status() == "pending"


def test_a_command_line_that_disagrees_with_its_argv_is_refused(commands):
    version = commands.version()
    echoed = {**commands.pending, "command": "kubectl delete ns prod", "execute": True}

    response = commands.send(echoed)

    assert_refused(commands, response, 400, "invalid_request", version)
    assert response.json()["error"]["field"] == "messages[0].data.cmds[0].command"


def test_replaying_an_executed_command_runs_it_once(commands):
    assert commands.send({**commands.pending, "execute": True}).status_code == 200
    assert commands.ran() == ["get pods -n prod"]
    commands.log.unlink()
    version = commands.version()

    replay = commands.send({**commands.pending, "execute": True})

    assert_refused(commands, replay, 409, "tool_call_already_decided", version)


def test_a_command_approval_carried_into_another_conversation_is_refused(commands):
    commands.runtime.then(tool_call("run_command", argv=["kubectl", "get", "nodes"]))
    other = commands.client.post("/api/chat", json={"messages": [user("list nodes")]}).json()
    other_id = other["data"]["conversation_id"]
    version = commands.version()

    response = commands.send({**commands.pending, "execute": True}, conversation_id=other_id)

    assert_refused(commands, response, 404, "unknown_tool_call", version)
    assert response.json()["error"]["conversation_id"] == other_id
    assert commands.status() == "pending"


def test_a_tool_calls_id_cannot_be_approved_as_a_command(start_server, cluster, tmp_path):
    runtime = FakeRuntime([tool_call("delete_pod", name="web-2")])
    runner, log = kubectl_runner(tmp_path)
    client = start_server(Agent(tools=[*cluster.tools(), command_tool(runner)], runtime=runtime))
    body = client.post("/api/chat", json={"messages": [user("delete web-2")]}).json()
    [pending] = body["data"]["tool_calls"]
    echoed = {"id": pending["id"], "argv": ["kubectl", "delete", "pod", "web-2"], "execute": True}

    response = client.post(
        "/api/chat",
        json={"messages": [user("", cmds=[echoed], conversation_id=body["data"]["conversation_id"])]},
    )

    assert response.status_code == 409
    assert response.json()["error"]["code"] == "approval_mismatch"
    assert cluster.deleted == []
    assert not log.exists()


def test_a_program_off_the_allow_list_is_refused_before_anyone_is_asked(start_server, tmp_path):
    runtime = FakeRuntime([tool_call("run_command", argv=["rm", "-rf", "/"]), "I may not."])
    runner, log = kubectl_runner(tmp_path)
    client = start_server(Agent(tools=[command_tool(runner)], runtime=runtime))

    body = client.post("/api/chat", json={"messages": [user("wipe it")]}).json()

    assert body["data"]["cmds"] == []
    [failed] = body["data"]["executed_cmds"]
    assert failed["status"] == "failed"
    assert "'rm' is not allowed" in failed["error"]
    [result] = [m for m in runtime.requests[-1].messages if isinstance(m, ToolResult)]
    assert "'rm' is not allowed" in result.content
    assert result.is_error
    assert not log.exists()


def test_commands_are_off_until_programs_are_allowed(start_server):
    runtime = FakeRuntime([tool_call("run_command", argv=["kubectl", "get", "pods"]), "Off."])
    client = start_server(Agent(tools=[command_tool(LocalCommandRunner())], runtime=runtime))

    body = client.post("/api/chat", json={"messages": [user("list pods")]}).json()

    [failed] = body["data"]["executed_cmds"]
    assert "commands are off" in failed["error"]


def stream(client: httpx.Client, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    with client.stream("POST", "/api/chat-stream", json={"messages": messages}) as response:
        assert response.status_code == 200
        return [json.loads(line) for line in response.iter_lines() if line]


def test_a_streamed_turn_sends_the_seeds_commands_and_executed_commands_events(start_server, tmp_path):
    runtime = FakeRuntime([tool_call("run_command", argv=["kubectl", "get", "pods"]), "Listed."])
    runner, log = kubectl_runner(tmp_path)
    client = start_server(Agent(tools=[command_tool(runner)], runtime=runtime))

    proposal = stream(client, [user("list pods")])
    types = [e["type"] for e in proposal]
    assert types == ["run_started", "tool_call_proposed", "approval_required", "commands", "done"]
    [command] = proposal[3]["commands"]
    assert command["argv"] == ["kubectl", "get", "pods"]
    conversation_id = proposal[-1]["conversation_id"]

    run = stream(client, [user("", cmds=[{**command, "execute": True}], conversation_id=conversation_id)])
    types = [e["type"] for e in run]
    assert types[:4] == ["run_started", "tool_started", "tool_finished", "executed_commands"]
    [executed] = run[3]["executed_commands"]
    assert executed == {**executed, "id": command["id"], "output": "fake kubectl ran: get pods\n"}
    assert run[-1]["message"]["data"]["executed_cmds"] == [executed]
    assert log.read_text() == "get pods\n"


def test_the_terminal_chat_shows_a_command_as_its_argv_and_sends_the_decision_in_cmds(start_server, tmp_path):
    import io

    from dcaf_like.cli.terminal import HttpTransport, TerminalChat

    runtime = FakeRuntime(
        [
            tool_call("run_command", argv=["kubectl", "get", "pods", "-n", "prod x"]),
            "Listed.",
            tool_call("run_command", argv=["kubectl", "delete", "ns", "prod"]),
            "Left alone.",
        ]
    )
    runner, log = kubectl_runner(tmp_path)
    client = start_server(Agent(tools=[command_tool(runner)], runtime=runtime))
    typed = iter(["list pods", "y", "delete prod", "n", "not today"])
    out = io.StringIO()

    def ask(prompt: str) -> str:
        out.write(prompt)
        answer = next(typed, None)
        if answer is None:
            raise EOFError
        return answer

    TerminalChat(HttpTransport(str(client.base_url)), ask=ask, out=out).run()

    shown = out.getvalue()
    assert "The agent wants to run a command:\n  $ kubectl get pods -n 'prod x'\n" in shown
    assert "executed: $ kubectl get pods -n 'prod x'\n    fake kubectl ran: get pods -n prod x" in shown
    assert "rejected: $ kubectl delete ns prod: not today" in shown
    assert "agent> Left alone." in shown
    assert log.read_text() == "get pods -n prod x\n"


# -- key scopes and conversation ownership: as for a tool call (tests/e2e/test_ownership_http.py) ---------

ALICE = "alice-key-0123456789abcdef"
BOB = "bob-key-0123456789abcdef00"
OPS = "ops-key-0123456789abcdef000"
CAROL = "carol-key-0123456789abcdef0"  # may chat and read, not approve
KEYS = {ALICE: "alice", BOB: "bob", OPS: "ops:admin", CAROL: "carol:chat+read"}


@dataclass
class Keyed:
    """A command agent served behind API keys, and the command one key's conversation waits on."""

    client: httpx.Client
    log: Path

    def propose(self, api_key: str) -> tuple[str, dict[str, Any]]:
        body = self.post("/api/chat", api_key, {"messages": [user("list the pods")]}).json()
        [command] = body["data"]["cmds"]
        return body["data"]["conversation_id"], command

    def post(self, path: str, api_key: str, body: dict[str, Any]) -> httpx.Response:
        response = self.client.post(path, headers={"X-API-Key": api_key}, json=body)
        response.read()
        return response

    def stored(self, api_key: str, conversation_id: str) -> dict[str, Any]:
        response = self.client.get(f"/api/conversations/{conversation_id}", headers={"X-API-Key": api_key})
        assert response.status_code == 200, response.text
        stored: dict[str, Any] = response.json()
        return stored


@pytest.fixture
def keyed(start_server, tmp_path) -> Keyed:
    def listing(request: ModelRequest) -> ModelResponse:
        if isinstance(request.messages[-1], UserTurn):
            return tool_calls(tool_call("run_command", argv=["kubectl", "get", "pods"]))
        return reply("Listed.")

    runner, log = kubectl_runner(tmp_path)
    agent = Agent(tools=[command_tool(runner)], runtime=FakeRuntime([listing] * 20))
    return Keyed(start_server(agent, api_keys=KEYS, a2a=True), log)


def decisions_on(
    command: dict[str, Any], conversation_id: str, *, approve: bool
) -> dict[str, dict[str, Any]]:
    """The same decision on `command` as each entrance takes it: the chat routes and A2A."""
    decided = {**command, "execute": True} if approve else {**command, "rejection_reason": "mine now"}
    chat = {"messages": [user("", cmds=[decided], conversation_id=conversation_id)]}
    a2a = {"context_id": conversation_id, "data": {"cmds": [decided]}}
    return {"/api/chat": chat, "/api/chat-stream": chat, "/a2a/tasks/send": a2a}


@pytest.mark.parametrize("approve", [True, False], ids=["approve", "reject"])
def test_a_key_without_the_approve_scope_cannot_decide_its_own_command_on_any_entrance(keyed, approve):
    conversation_id, command = keyed.propose(CAROL)

    for path, body in decisions_on(command, conversation_id, approve=approve).items():
        answer = keyed.post(path, CAROL, body)

        assert answer.status_code == 403, (path, answer.text)
        assert answer.json()["error"]["code"] == "missing_scope"
        assert "approve" in answer.json()["error"]["message"]
    assert not keyed.log.exists(), "nothing ran"
    assert keyed.stored(CAROL, conversation_id)["tool_calls"][0]["status"] == "pending"


@pytest.mark.parametrize("approve", [True, False], ids=["approve", "reject"])
def test_a_key_cannot_decide_a_command_in_a_conversation_another_key_owns(keyed, approve):
    conversation_id, command = keyed.propose(BOB)

    for path, body in decisions_on(command, conversation_id, approve=approve).items():
        answer = keyed.post(path, ALICE, body)

        assert answer.status_code == 404, (path, answer.text)  # told what an unknown conversation is told
        assert answer.json()["error"]["code"] in ("conversation_not_found", "task_not_found")
    assert not keyed.log.exists(), "nothing ran"
    stored = keyed.stored(BOB, conversation_id)
    assert stored["tool_calls"][0]["status"] == "pending"
    assert [m["role"] for m in stored["messages"]] == ["user", "assistant"]
    assert keyed.client.get("/api/audit", headers={"X-API-Key": OPS}).json()["records"] == []


def test_the_owner_with_the_approve_scope_runs_its_command_and_is_recorded_as_its_approver(keyed):
    conversation_id, command = keyed.propose(BOB)

    answer = keyed.post("/api/chat", BOB, decisions_on(command, conversation_id, approve=True)["/api/chat"])

    assert answer.status_code == 200, answer.text
    assert keyed.log.read_text() == "get pods\n"
    assert keyed.stored(BOB, conversation_id)["tool_calls"][0]["decided_by"] == "bob"


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({"Origin": "http://evil.example"}, 403, "cross_origin_request"),
        ({"Sec-Fetch-Site": "cross-site"}, 403, "cross_origin_request"),
        ({"Host": "rebind.attacker.test"}, 421, "host_not_allowed"),
        ({"content-type": "text/plain"}, 415, "unsupported_media_type"),
    ],
    ids=["foreign origin", "cross-site fetch", "foreign host", "not json"],
)
def test_a_command_approval_from_outside_the_perimeter_runs_nothing(commands, headers, status, code):
    """As for a tool call (tests/e2e/test_perimeter_http.py): a page elsewhere cannot approve a command."""
    version = commands.version()
    body = {
        "messages": [
            user("", cmds=[{**commands.pending, "execute": True}], conversation_id=commands.conversation_id)
        ]
    }

    for path in ("/api/chat", "/api/chat-stream"):
        response = commands.client.post(
            path, content=json.dumps(body), headers={"content-type": "application/json", **headers}
        )
        response.read()
        assert_refused(commands, response, status, code, version)
    assert commands.status() == "pending"


def test_a_command_waits_with_its_programs_dry_run_and_the_approval_binds_to_it(start_server, tmp_path):
    """docs/approvals.md, "A command's dry run"; docs/protocol.md, "Terminal commands": a command
    whose program declares a dry run on the runner's allow-list shows it in ``cmds``; an approval
    echoing another ``preview_digest`` is refused (409 ``preview_changed``) and runs nothing."""
    from dcaf_like.commands import Program, kubectl_dry_run

    script = tmp_path / "kubectl"
    script.write_text(FAKE_KUBECTL)
    script.chmod(0o755)
    log = tmp_path / "ran.log"
    env = {"PATH": os.environ.get("PATH", ""), "KUBECTL_LOG": str(log)}
    runner = LocalCommandRunner(allow=[Program("kubectl", str(script), dry_run=kubectl_dry_run)], env=env)
    argv = ["kubectl", "delete", "pod", "web-1", "-n", "prod"]
    runtime = FakeRuntime([tool_call("run_command", argv=argv), "Deleted."])
    client = start_server(Agent(tools=[command_tool(runner)], runtime=runtime))

    body = client.post("/api/chat", json={"messages": [user("delete web-1 in prod")]}).json()
    [pending] = body["data"]["cmds"]
    conversation_id = body["data"]["conversation_id"]

    assert pending["preview"] == "fake kubectl ran: delete pod web-1 -n prod --dry-run=server -o yaml\n"
    assert (pending["preview_kind"], pending["preview_error"]) == ("text", None)
    assert log.read_text().splitlines() == ["delete pod web-1 -n prod --dry-run=server -o yaml"]

    def send(command: dict[str, Any]) -> httpx.Response:
        message = user("", cmds=[command], conversation_id=conversation_id)
        return client.post("/api/chat", json={"messages": [message]})

    other = send({**pending, "execute": True, "preview_digest": "sha256:" + "0" * 64})
    assert other.status_code == 409, other.text
    assert other.json()["error"]["code"] == "preview_changed"
    assert other.json()["error"]["preview"]["preview_digest"] == pending["preview_digest"]
    assert len(log.read_text().splitlines()) == 1  # the dry run only

    taken = send({**pending, "execute": True})  # echoes the preview_digest it was shown
    assert taken.status_code == 200, taken.text
    assert taken.json()["data"]["executed_cmds"][0]["status"] == "executed"
    assert log.read_text().splitlines()[-1] == "delete pod web-1 -n prod"
