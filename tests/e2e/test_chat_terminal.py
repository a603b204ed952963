"""``dcaf-like chat``: the installed command on a real terminal (a pty), typed into as a person would."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _helpdesk import user

from dcaf_like import (
    Agent,
    ApprovalPolicy,
    Identity,
    ModelRequest,
    ModelResponse,
    PlatformContext,
    Session,
    ToolContext,
    argument_in,
    deny,
    tool,
)
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls

ROOT = Path(__file__).resolve().parents[2]
COMMAND = str(Path(sys.executable).parent / "dcaf-like")
CLEAR_LINE = "\x15"  # Ctrl-U: readline deletes the pre-filled text before the cursor

AGENT = '''
import os
import time
from pathlib import Path

from dcaf_like import Agent, tool
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls

LEDGER = Path(os.environ["DCAF_TEST_LEDGER"])
GATE = Path(os.environ["DCAF_TEST_GATE"])


@tool
def delete_pod(name: str, namespace: str = "default") -> str:
    """Delete a pod."""
    with LEDGER.open("a") as out:
        out.write(f"{namespace}/{name}\\n")
    return f'pod "{name}" deleted'


class GatedRuntime(FakeRuntime):
    """Holds its answer after the first piece until the test creates the gate file."""

    def stream(self, request):
        for event in super().stream(request):
            yield event
            if getattr(event, "text", None) == "Deleted web-2. ":
                deadline = time.monotonic() + 10
                while not GATE.exists() and time.monotonic() < deadline:
                    time.sleep(0.02)


agent = Agent(tools=[delete_pod], name="ops", runtime=GatedRuntime([
    tool_calls(tool_call("delete_pod", name="web-2"), text="web-2 is crash-looping."),
    reply("Deleted web-2. Its controller will recreate it.",
          chunks=["Deleted web-2. ", "Its controller will recreate it."]),
]))
'''


# Makes the pty the controlling terminal of a new session, then runs the command: Ctrl-C typed on it
# is then a SIGINT to the chat, as on a person's terminal.
CONTROLLING = (
    "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


class Terminal:
    """A process on a pseudo-terminal: `expect` waits for text, `type` types a line."""

    def __init__(self, *args: str, env: dict[str, str]) -> None:
        self.fd, child = pty.openpty()
        self.process = subprocess.Popen(
            [sys.executable, "-c", CONTROLLING, *args], stdin=child, stdout=child, stderr=child, cwd=ROOT,
            env=env, close_fds=True, start_new_session=True,
        )  # fmt: skip
        os.close(child)
        self.output = ""
        self.seen = 0

    def expect(self, text: str, timeout: float = 20) -> str:
        """Wait for `text` after what was already expected; return everything up to it."""
        deadline = time.monotonic() + timeout
        while text not in self.output[self.seen :]:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.read(remaining):
                raise AssertionError(f"never saw {text!r}; the terminal shows:\n{self.output}")
        end = self.output.index(text, self.seen) + len(text)
        before, self.seen = self.output[self.seen : end], end
        return before

    def read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        try:
            data = os.read(self.fd, 4096)
        except OSError:  # the process ended and the terminal closed
            return False
        self.output += data.decode(errors="replace").replace("\r\n", "\n")
        return bool(data)

    def type(self, line: str) -> None:
        os.write(self.fd, (line + "\n").encode())

    def ctrl_c(self) -> None:
        os.write(self.fd, b"\x03")

    def close(self) -> int:
        try:
            return self.process.wait(timeout=15)
        finally:
            os.close(self.fd)


@pytest.fixture
def terminals():
    opened: list[Terminal] = []

    def start(*args: str, **env: str) -> Terminal:
        terminal = Terminal(COMMAND, "chat", *args, env={**os.environ, "PYTHONPATH": str(ROOT), **env})
        opened.append(terminal)
        return terminal

    yield start
    for terminal in opened:
        if terminal.process.poll() is None:
            terminal.process.kill()
            terminal.close()


def test_a_local_agent_streams_its_answer_and_runs_a_call_only_once_approved(terminals, tmp_path):
    (tmp_path / "ops_agent.py").write_text(AGENT)
    ledger, gate = tmp_path / "ledger", tmp_path / "gate"
    chat = terminals(
        str(tmp_path / "ops_agent.py") + ":agent", DCAF_TEST_LEDGER=str(ledger), DCAF_TEST_GATE=str(gate)
    )

    chat.expect("you> ")
    chat.type("fix the crashing pod")
    chat.expect("agent> web-2 is crash-looping.")
    shown = chat.expect("approve? [y]es / [n]o: ")
    assert "The agent wants to run delete_pod: Delete a pod." in shown
    assert 'arguments: {"name": "web-2", "namespace": "default"}' in shown
    assert not ledger.exists(), "nothing runs before the human says yes"

    chat.type("y")
    chat.expect('executed: delete_pod {"name": "web-2", "namespace": "default"}')
    chat.expect('pod "web-2" deleted')
    chat.expect("agent> Deleted web-2. ")
    assert "recreate" not in chat.output, "the rest of the answer is still being written"
    gate.touch()
    chat.expect("Its controller will recreate it.")
    chat.expect("you> ")
    assert ledger.read_text() == "default/web-2\n"

    chat.type("/quit")
    assert chat.close() == 0


def test_over_http_a_rejection_sends_the_typed_reason_to_the_model(terminals, start_server, cluster):
    def answer(request: ModelRequest) -> ModelResponse:
        return ModelResponse(text=f"Understood: {request.messages[-1].content}")

    runtime = FakeRuntime([tool_call("restart_pod", name="web-1"), answer])
    client = start_server(Agent(tools=cluster.tools(), runtime=runtime))
    chat = terminals("--url", str(client.base_url))

    chat.expect("you> ")
    chat.type("restart web-1")
    chat.expect("approve? [y]es / [n]o: ")  # restart_pod is not editable: no edit offered
    chat.type("n")
    chat.expect("reason (told to the agent): ")
    chat.type("users are on it right now")

    chat.expect('rejected: restart_pod {"name": "web-1", "namespace": "default"}: users are on it right now')
    chat.expect("agent> Understood: Not run. Rejected: users are on it right now")
    chat.expect("you> ")
    os.write(chat.fd, b"\x04")  # Ctrl-D ends the chat
    assert chat.close() == 0


def test_ctrl_d_at_an_approval_prompt_leaves_the_call_waiting_and_the_chat_usable(
    terminals, start_server, cluster
):
    runtime = FakeRuntime([tool_call("restart_pod", name="web-1"), reply("Restarted.")])
    client = start_server(Agent(tools=cluster.tools(), runtime=runtime))
    chat = terminals("--url", str(client.base_url))
    chat.expect("you> ")
    chat.type("restart web-1")
    chat.expect("approve? [y]es / [n]o: ")

    os.write(chat.fd, b"\x04")  # Ctrl-D

    chat.expect("(left undecided: the calls keep waiting")
    chat.expect("you> ")
    chat.type("anything new?")
    chat.expect("1 call(s) still wait for your decision; your message was not sent")  # not a 409
    chat.expect("approve? [y]es / [n]o: ")
    chat.type("y")
    chat.expect("agent> Restarted.")
    chat.expect("you> ")
    chat.type("/quit")
    assert chat.close() == 0
    assert "error 409" not in chat.output  # no decision refused as already taken


def test_an_edit_the_server_refuses_is_shown_and_asked_again_then_the_edited_call_runs(
    terminals, start_server, cluster
):
    runtime = FakeRuntime([tool_call("delete_pod", name="web-2"), reply("Done.")])
    client = start_server(Agent(tools=cluster.tools(), runtime=runtime))
    chat = terminals("--url", str(client.base_url))
    chat.expect("you> ")
    chat.type("delete web-2")

    chat.expect("approve? [y]es / [n]o / [e]dit: ")
    chat.type("e")
    chat.expect("arguments as JSON: ")
    chat.expect('{"name": "web-2", "namespace": "default"}')  # the proposal, pre-filled to be changed
    chat.type(CLEAR_LINE + "{oops")
    chat.expect("not JSON")
    chat.expect("approve? [y]es / [n]o / [e]dit: ")
    chat.type("e")
    chat.expect("arguments as JSON: ")
    chat.type(CLEAR_LINE + '{"name": 5}')
    chat.expect('name: "web-2" -> 5')
    chat.expect("run it like this? [y]es / [n]o: ")
    chat.type("y")
    chat.expect("error 422 invalid_tool_arguments")
    chat.expect("approve? [y]es / [n]o / [e]dit: ")
    assert cluster.deleted == []
    chat.type("e")
    chat.expect("arguments as JSON: ")
    chat.type(CLEAR_LINE + '{"name": "web-1"}')
    chat.expect('namespace: "default" (unchanged)')
    chat.expect("run it like this? [y]es / [n]o: ")
    chat.type("y")

    chat.expect('executed: delete_pod {"name": "web-1", "namespace": "default"} (arguments edited)')
    chat.expect("agent> Done.")
    chat.expect("you> ")
    assert cluster.deleted == [("default", "web-1")]
    chat.type("/quit")
    assert chat.close() == 0


def test_a_server_that_is_down_is_an_error_on_the_terminal_not_a_traceback(terminals):
    chat = terminals("--url", "http://127.0.0.1:9")

    chat.expect("you> ")
    chat.type("hello")

    shown = chat.expect("you> ")
    assert "error unreachable: http://127.0.0.1:9/api/chat-stream: [Errno 111] Connection refused" in shown
    assert "Traceback" not in chat.output
    chat.type("/quit")
    assert chat.close() == 0


def test_chat_wants_an_agent_or_a_url():
    result = subprocess.run([COMMAND, "chat"], capture_output=True, text=True, timeout=30, check=False)

    assert result.returncode == 2
    assert "name an agent (FILE.py:NAME) or a server (--url)" in result.stderr


SESSION_AGENT = '''
from dcaf_like import Agent, PlatformContext, Session, tool
from dcaf_like.testing import FakeRuntime, reply, tool_calls


@tool(requires_approval=False)
def where(platform_context: PlatformContext, session: Session) -> str:
    """Say where the agent acts."""
    return f"{platform_context.get('tenant')}/{session.get('namespace', 'default')}"


agent = Agent(tools=[where], name="ops", runtime=FakeRuntime([tool_calls("where"), reply("There.")]))
'''


def test_chat_sends_the_session_and_platform_context_given_on_the_command_line(terminals, tmp_path):
    (tmp_path / "where_agent.py").write_text(SESSION_AGENT)
    chat = terminals(
        str(tmp_path / "where_agent.py") + ":agent",
        "--session",
        '{"namespace": "prod"}',
        "--platform-context",
        '{"tenant": "acme"}',
    )

    chat.expect("you> ")
    chat.type("where are you?")
    chat.expect("executed: where {}")
    chat.expect("acme/prod")
    chat.expect("agent> There.")
    chat.type("/quit")
    assert chat.close() == 0


def test_over_http_a_session_claiming_another_user_leaves_the_keys_identity(terminals, start_server):
    @tool(requires_approval=False)
    def whoami(who: Identity | None, platform_context: PlatformContext, session: Session) -> str:
        """Say who is asking, and what the client says."""
        name = who.name if who else "nobody"
        return f"{name} in {platform_context.get('tenant')}, session user {session.get('user')}"

    key = "alice-key-0123456789abcdef"
    agent = Agent(tools=[whoami], runtime=FakeRuntime([tool_calls("whoami"), reply("That is you.")]))
    client = start_server(agent, api_keys={key: "alice"})
    chat = terminals(
        "--url",
        str(client.base_url),
        "--session",
        '{"user": "ops"}',
        "--platform-context",
        '{"tenant": "acme"}',
        DCAF_API_KEY=key,
    )

    chat.expect("you> ")
    chat.type("who am I?")
    chat.expect("alice in acme, session user ops")
    chat.expect("agent> That is you.")
    chat.type("/quit")
    assert chat.close() == 0


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--session", "{namespace: prod}", "--session is not valid JSON"),
        ("--session", '["prod"]', "--session must be a JSON object ({...}), not list"),
        ("--platform-context", "acme", "--platform-context is not valid JSON"),
        ("--platform-context", "42", "--platform-context must be a JSON object ({...}), not int"),
    ],
)
def test_chat_refuses_a_session_or_platform_context_that_is_not_a_json_object(
    tmp_path, option, value, message
):
    (tmp_path / "where_agent.py").write_text(SESSION_AGENT)
    result = subprocess.run(
        [COMMAND, "chat", str(tmp_path / "where_agent.py") + ":agent", option, value],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )

    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_over_http_a_question_is_prompted_for_and_the_tool_runs_with_the_answer(terminals, start_server):
    scaled: list[str] = []

    @tool(requires_approval=False)
    def scale(name: str, context: ToolContext) -> str:
        """Scale a deployment to zero in a namespace the user picks, once they confirmed it."""
        namespace = context.ask("Which namespace?", options=["prod", "staging"])
        if not context.ask(f"Scale {name} in {namespace} to zero?", kind="confirmation"):
            return "left as it is"
        scaled.append(f"{namespace}/{name}")
        return f"{name} scaled to zero in {namespace}"

    runtime = FakeRuntime([tool_calls(tool_call("scale", name="web")), reply("Done.")])
    client = start_server(Agent(tools=[scale], runtime=runtime))
    chat = terminals("--url", str(client.base_url))
    chat.expect("you> ")
    chat.type("scale web to zero")

    shown = chat.expect("choose 1-2: ")
    assert "scale asks: Which namespace?\n  1. prod\n  2. staging\n" in shown
    chat.type("3")
    chat.expect("a number from 1 to 2")
    chat.type("2")
    chat.expect("scale asks: Scale web in staging to zero?")
    chat.expect("[y]es / [n]o: ")
    assert scaled == []
    chat.type("y")

    chat.expect("executed: scale")
    chat.expect("web scaled to zero in staging")
    chat.expect("agent> Done.")
    chat.expect("you> ")
    chat.type("/quit")
    assert chat.close() == 0
    assert scaled == ["staging/web"]
    # docs/ui.md, "The terminal: `dcaf-like chat`": a question is printed once (issue 36 item 5)
    assert chat.output.count("Which namespace?") == 1, chat.output
    assert chat.output.count("Scale web in staging to zero?") == 1


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ((), "pass --api-key KEY or set DCAF_API_KEY"),
        (("--api-key", "not-the-key-0123456789abc"), "refused the API key"),
    ],
)
def test_a_missing_or_wrong_key_is_said_at_start_naming_the_flag_and_the_variable(start_server, given, said):
    """Issue 36: the chat opened and failed at the first message with the server's curl-oriented text."""
    agent = Agent(runtime=FakeRuntime([]))
    client = start_server(agent, api_keys={"right-key-0123456789abcdef": "alice"})
    environment = {k: v for k, v in os.environ.items() if k != "DCAF_API_KEY"}

    result = subprocess.run(
        [COMMAND, "chat", "--url", str(client.base_url), *given],
        capture_output=True, text=True, timeout=60, check=False, env=environment, stdin=subprocess.DEVNULL,
    )  # fmt: skip

    assert result.returncode == 2
    assert said in result.stderr
    assert "you>" not in result.stdout


def test_the_right_key_by_flag_opens_the_chat(terminals, start_server):
    key = "right-key-0123456789abcdef"
    client = start_server(Agent(runtime=FakeRuntime([reply("Hello.")])), api_keys={key: "alice"})
    chat = terminals("--url", str(client.base_url), "--api-key", key)

    chat.expect("you> ")
    chat.type("hi")
    chat.expect("agent> Hello.")
    chat.type("/quit")
    assert chat.close() == 0


# -- the terminal as a full client of a long run (issue 35 item 4) -----------------------------------


def instances_agent(ran: list[str]) -> Agent:
    """Two gated calls proposed in one turn (one batch), and a policy that refuses one edit of them."""

    @tool
    def stop_instance(instance_id: str) -> str:
        """Stop an instance."""
        ran.append(f"stop {instance_id}")
        return f"{instance_id} stopped"

    @tool(editable=True)
    def terminate_instance(instance_id: str) -> str:
        """Terminate an instance."""
        ran.append(f"terminate {instance_id}")
        return f"{instance_id} terminated"

    policy = ApprovalPolicy(
        [deny("production instances are off limits", when=argument_in("instance_id", "i-prod"))]
    )
    runtime = FakeRuntime(
        [
            tool_calls(
                tool_call("stop_instance", instance_id="i-1"),
                tool_call("terminate_instance", instance_id="i-2"),
            ),
            reply("Stopped i-1, terminated i-2."),
        ]
    )
    return Agent(tools=[stop_instance, terminate_instance], runtime=runtime, approval_policy=policy)


def test_after_a_refused_edit_every_decision_of_the_batch_is_asked_again_saying_so(terminals, start_server):
    """docs/ui.md, "The terminal: `dcaf-like chat`": after a refusal the chat reads the conversation
    back and asks again every decision of the batch that was not applied, saying so; nothing ran."""
    ran: list[str] = []
    client = start_server(instances_agent(ran))
    chat = terminals("--url", str(client.base_url))
    chat.expect("you> ")
    chat.type("clean up i-1 and i-2")
    chat.expect("The agent wants to run stop_instance")
    chat.expect("approve? [y]es / [n]o: ")
    chat.type("y")
    chat.expect("The agent wants to run terminate_instance")
    chat.expect("approve? [y]es / [n]o / [e]dit: ")
    chat.type("e")
    chat.expect("arguments as JSON: ")
    chat.type(CLEAR_LINE + '{"instance_id": "i-prod"}')
    chat.expect("run it like this? [y]es / [n]o: ")
    chat.type("y")

    chat.expect("error 403 policy_denied")
    shown = chat.expect("approve? [y]es / [n]o: ")
    assert "not applied (policy_denied): the server took none of these decisions; asking again:" in shown
    assert "stop_instance: your approval was not applied" in shown
    assert "terminate_instance: your edited approval was not applied" in shown
    assert "The agent wants to run stop_instance" in shown
    assert ran == []
    chat.type("y")
    chat.expect("The agent wants to run terminate_instance")
    chat.expect("approve? [y]es / [n]o / [e]dit: ")
    chat.type("y")

    chat.expect('executed: stop_instance {"instance_id": "i-1"}')
    chat.expect('executed: terminate_instance {"instance_id": "i-2"}')
    chat.expect("agent> Stopped i-1, terminated i-2.")
    chat.expect("you> ")
    chat.type("/quit")
    assert chat.close() == 0
    assert ran == ["stop i-1", "terminate i-2"]
    assert "error 409" not in chat.output  # no decision refused as already taken


def test_a_conversation_is_reopened_with_its_last_messages_and_what_waits_in_it(terminals, start_server):
    """docs/ui.md, "The terminal: `dcaf-like chat`": `--conversation ID` shows the conversation's last
    messages and asks what waits in it."""
    ran: list[str] = []
    client = start_server(instances_agent(ran))
    started = client.post("/api/chat", json={"messages": [user("clean up i-1 and i-2")]})
    conversation_id = started.json()["data"]["conversation_id"]
    chat = terminals("--url", str(client.base_url), "--conversation", conversation_id)

    shown = chat.expect("approve? [y]es / [n]o: ")
    assert f"(conversation {conversation_id})" in shown
    assert "you> clean up i-1 and i-2" in shown
    assert "2 call(s) and 0 question(s) wait in it" in shown
    assert "The agent wants to run stop_instance: Stop an instance." in shown
    chat.type("/reject not today")
    chat.expect("approve? [y]es / [n]o / [e]dit: ")
    chat.type("y")

    chat.expect("rejected: stop_instance")
    chat.expect('executed: terminate_instance {"instance_id": "i-2"}')
    chat.expect("agent> Stopped i-1, terminated i-2.")
    chat.expect("you> ")
    chat.type("/quit")
    assert chat.close() == 0
    assert ran == ["terminate i-2"]


def test_reopening_a_conversation_the_server_does_not_hold_says_so_and_exits_2(start_server):
    """docs/ui.md, "The terminal: `dcaf-like chat`": an id the server does not hold ends the chat."""
    client = start_server(Agent(runtime=FakeRuntime([])))

    result = subprocess.run(
        [COMMAND, "chat", "--url", str(client.base_url), "--conversation", "conv_nowhere"],
        capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip

    assert result.returncode == 2
    assert "dcaf-like chat: 404 conversation_not_found" in result.stderr


@pytest.mark.parametrize(
    ("looks", "settled"),
    [
        (False, ('executed: snapshot_volume {"volume_id": "vol-7"}', "snap-1 created")),
        (
            True,
            (
                'failed: snapshot_volume {"volume_id": "vol-7"}',
                "stopped: the run was cancelled while the tool ran",
            ),
        ),
    ],
)
def test_ctrl_c_asks_the_server_to_stop_and_shows_the_run_to_its_end(terminals, start_server, looks, settled):
    """docs/ui.md, "The terminal: `dcaf-like chat`": Ctrl-C during a run asks the server to cancel it,
    then shows the settled call and the stop reason, never a silent `you>` (issue 35 item 3): a tool
    that does not look at the cancel ran to its end, and the terminal says it did."""
    snapshots: list[str] = []

    @tool(requires_approval=False)
    def snapshot_volume(volume_id: str, context: ToolContext) -> str:
        """Snapshot a volume."""
        context.progress("copying blocks", fraction=0.2)
        context.cancel_signal.wait(timeout=30)  # runs until the cancel reaches it (a bound)
        if looks:
            context.check_cancelled()
        snapshots.append(volume_id)
        return "snap-1 created"

    runtime = FakeRuntime([tool_calls(tool_call("snapshot_volume", volume_id="vol-7")), reply("never said")])
    client = start_server(Agent(tools=[snapshot_volume], runtime=runtime))
    chat = terminals("--url", str(client.base_url))
    chat.expect("you> ")
    chat.type("snapshot vol-7")
    chat.expect("snapshot_volume: copying blocks (20%)")

    chat.ctrl_c()

    chat.expect("(stopping the run at its next step; Ctrl-C again to leave)")
    for line in settled:
        chat.expect(line)
    chat.expect("(run cancelled)")
    chat.expect("you> ")
    assert snapshots == ([] if looks else ["vol-7"])
    chat.type("/quit")
    assert chat.close() == 0
