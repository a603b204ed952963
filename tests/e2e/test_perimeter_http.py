"""The server's perimeter, attacked over real HTTP: a foreign Host (DNS rebinding), cross-origin and
non-JSON changes (CSRF), bodies whose framing lies about their size, control characters in logged
values, client-chosen conversation ids, a damaged stored conversation and clients that hang up
half-way. Each refusal is a JSON error, and nothing behind it runs."""

from __future__ import annotations

import json
import os
import select
import socket
import sqlite3
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from _helpdesk import approve, user
from _server import dcaf_like_serve

from dcaf_like import Agent
from dcaf_like.testing import FakeRuntime, tool_call

JSON = {"content-type": "application/json"}
FOREIGN = "rebind.attacker.test"


@dataclass
class Pending:
    """A served agent that proposed ``delete_pod(web-2)`` and waits for a decision."""

    client: httpx.Client
    agent: Agent
    cluster: Any
    call: dict[str, Any]
    conversation_id: str

    @property
    def port(self) -> int:
        return self.client.base_url.port or 80

    def approval(self) -> dict[str, Any]:
        message = user("", tool_calls=[approve(self.call)], conversation_id=self.conversation_id)
        return {"messages": [message]}

    def status(self) -> str:
        stored = self.agent.repository.get(self.conversation_id)
        assert stored is not None
        return stored.tool_call(self.call["id"]).status.value


@pytest.fixture
def pending(start_server, cluster) -> Pending:
    runtime = FakeRuntime([tool_call("delete_pod", name="web-2"), "Done."])
    agent = Agent(tools=cluster.tools(), runtime=runtime)
    client = start_server(agent, a2a=True, mcp=True)
    body = client.post("/api/chat", json={"messages": [user("delete web-2")]}).json()
    [call] = body["data"]["tool_calls"]
    return Pending(client, agent, cluster, call, body["data"]["conversation_id"])


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code
    assert error["message"]
    assert error["request_id"] == response.headers["x-request-id"]
    return error


# -- 1. DNS rebinding: the Host header ------------------------------------------------------------


def test_a_foreign_host_is_refused_on_every_route_before_it_runs(pending):
    """A page on an attacker's name that resolves to 127.0.0.1 is the same socket to the server: it
    could list, read and approve. Its Host gives it away, on every route and entrance."""
    host = {"Host": f"{FOREIGN}:{pending.port}"}
    a2a_send = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {"message": {"role": "user", "messageId": "m1", "parts": [{"kind": "text", "text": "hi"}]}},
    }
    mcp_call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    attacks = [
        ("GET", "/health", None),
        ("GET", "/", None),
        ("GET", "/openapi.json", None),
        ("GET", "/api/conversations", None),
        ("GET", f"/api/conversations/{pending.conversation_id}", None),
        ("POST", "/api/chat", pending.approval()),
        ("POST", "/api/chat-stream", pending.approval()),
        ("DELETE", f"/api/conversations/{pending.conversation_id}", None),
        ("GET", "/.well-known/agent-card.json", None),
        ("POST", "/a2a", a2a_send),
        ("POST", "/a2a/tasks/send", {"message": "hi"}),
        ("POST", "/mcp", mcp_call),
    ]
    for method, path, body in attacks:
        headers = {**host, **JSON, "Accept": "application/json, text/event-stream"}
        response = pending.client.request(method, path, json=body, headers=headers)
        error = assert_error(response, 421, "host_not_allowed")
        assert FOREIGN in error["message"], path

    assert pending.cluster.deleted == [], "a foreign Host must run nothing"
    assert pending.status() == "pending"
    assert len(pending.agent.repository.list_ids(10)) == 1, "nor start a conversation"


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "127.0.0.1:{port}", "localhost", "localhost:{port}", "LOCALHOST:{port}", "[::1]:{port}"],
)
def test_loopback_names_are_answered_with_or_without_a_port(start_server, host):
    client = start_server(lambda messages, context: "hello")
    port = client.base_url.port

    response = client.get("/health", headers={"Host": host.format(port=port)})

    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1.rebind.attacker.test",
        "localhost.attacker.test",
        "127.0.0.2",
        "localhost:80@attacker.test",
        "localhost:port",
        "",
        "[::1",
    ],
)
def test_hosts_that_only_look_local_are_refused(start_server, host):
    client = start_server(lambda messages, context: "hello")

    response = client.get("/health", headers={"Host": host})

    assert_error(response, 421, "host_not_allowed")


def test_configured_hosts_are_answered_and_star_answers_any(start_server):
    def agent(messages: Any, context: Any) -> str:
        return "hello"

    named = start_server(agent, allowed_hosts=["ops.example.com", "*.agents.example.com", "pinned.example:9"])
    anything = start_server(agent, allowed_hosts=["*"])

    assert named.get("/health", headers={"Host": "ops.example.com"}).status_code == 200
    assert named.get("/health", headers={"Host": "ops.example.com:8443"}).status_code == 200
    assert named.get("/health", headers={"Host": "eu.agents.example.com"}).status_code == 200
    assert named.get("/health", headers={"Host": "pinned.example:9"}).status_code == 200
    assert named.get("/health", headers={"Host": "pinned.example:10"}).status_code == 421
    assert named.get("/health", headers={"Host": "agents.example.com"}).status_code == 421
    assert named.get("/health", headers={"Host": FOREIGN}).status_code == 421
    assert anything.get("/health", headers={"Host": FOREIGN}).status_code == 200


def test_dcaf_like_serve_takes_allowed_hosts_and_origins_from_flags_and_the_environment(tmp_path):
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DCAF_ALLOWED")},
        "DCAF_TEST_LEDGER": str(tmp_path / "ledger.log"),
        "DCAF_ALLOWED_ORIGINS": "https://ops.example.com",
    }
    serving = dcaf_like_serve(
        "tests/e2e/process_agent.py:make_agent", "--factory", "--port", "0",
        "--store", f"sqlite:///{tmp_path / 'c.db'}", "--allowed-host", "ops.example.com",
        "--allowed-host", "dcaf.internal", env=env,
    )  # fmt: skip
    with serving as served, httpx.Client(base_url=served.url, timeout=10) as client:
        for name in ("ops.example.com", "dcaf.internal:8000"):
            assert client.get("/health", headers={"Host": name}).status_code == 200
        refused = client.get("/health", headers={"Host": FOREIGN})
        chat = {"messages": [user("hello")]}
        from_ops = client.post("/api/chat", json=chat, headers={"Origin": "https://ops.example.com"})
        from_elsewhere = client.post("/api/chat", json=chat, headers={"Origin": "https://evil.example"})

    assert_error(refused, 421, "host_not_allowed")
    assert from_ops.status_code == 200, from_ops.text
    assert_error(from_elsewhere, 403, "cross_origin_request")


# -- 2. CSRF: content types and origins -----------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    [
        "text/plain",
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/json; charset=latin-1",
        "application/jsonx",
        None,
    ],
)
def test_an_approval_not_sent_as_json_is_refused_and_runs_nothing(pending, content_type):
    """A cross-origin ``fetch`` with text/plain, or a ``<form enctype="text/plain">``, needs no CORS
    preflight: the content type is what stops it."""
    headers = {} if content_type is None else {"content-type": content_type}
    body = json.dumps(pending.approval()).encode()

    for path in ("/api/chat", "/api/chat-stream"):
        response = pending.client.post(path, content=body, headers=headers)
        error = assert_error(response, 415, "unsupported_media_type")
        assert error["field"] == "Content-Type"

    assert pending.cluster.deleted == []
    assert pending.status() == "pending"


def test_the_a2a_routes_take_json_only(pending):
    message = {"role": "user", "messageId": "m1", "parts": [{"kind": "text", "text": "delete web-1"}]}
    rpc = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}})
    simple = json.dumps({"message": "delete web-1"})
    before = pending.agent.repository.list_ids(10)

    for path, body in (("/a2a", rpc), ("/a2a/tasks/send", simple)):
        response = pending.client.post(path, content=body, headers={"content-type": "text/plain"})
        assert_error(response, 415, "unsupported_media_type")

    assert pending.agent.repository.list_ids(10) == before, "no task was started"
    a2a_json = pending.client.post("/a2a", content=rpc, headers={"content-type": "application/a2a+json"})
    assert a2a_json.status_code == 200, a2a_json.text
    assert "result" in a2a_json.json()


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "http://127.0.0.1"},  # another port of this machine is another origin
        {"Origin": "https://127.0.0.1:{port}"},  # another scheme too
        {"Origin": "null"},  # a sandboxed frame, a file:// page
        {"Sec-Fetch-Site": "cross-site"},
    ],
)
def test_a_cross_origin_change_is_refused_and_runs_nothing(pending, headers):
    headers = {k: v.format(port=pending.port) for k, v in headers.items()}
    conversation = f"/api/conversations/{pending.conversation_id}"

    approving = pending.client.post("/api/chat", json=pending.approval(), headers=headers)
    streaming = pending.client.post("/api/chat-stream", json=pending.approval(), headers=headers)
    deleting = pending.client.delete(conversation, headers=headers)
    a2a = pending.client.post("/a2a/tasks/send", json={"message": "delete web-1"}, headers=headers)

    for response in (approving, streaming, deleting, a2a):
        error = assert_error(response, 403, "cross_origin_request")
        assert error["field"] in ("Origin", "Sec-Fetch-Site")
    assert pending.cluster.deleted == []
    assert pending.status() == "pending"
    assert pending.client.get(conversation, headers=headers).status_code == 200, "reading is not a change"


def test_the_servers_own_page_and_clients_without_an_origin_may_change(pending):
    own = {"Origin": f"http://127.0.0.1:{pending.port}", "Sec-Fetch-Site": "same-origin"}

    approved = pending.client.post(
        "/api/chat",
        content=json.dumps(pending.approval()),
        headers={**own, "content-type": "application/json; charset=utf-8"},
    )

    assert approved.status_code == 200, approved.text
    assert pending.cluster.deleted == [("default", "web-2")]
    no_origin = pending.client.delete(f"/api/conversations/{pending.conversation_id}")  # curl, SDKs
    assert no_origin.status_code == 204


def test_configured_origins_may_change(start_server):
    client = start_server(lambda messages, context: "hello", allowed_origins=["https://ops.example.com"])
    chat = {"messages": [user("hi")]}

    allowed = client.post(
        "/api/chat",
        json=chat,
        headers={"Origin": "https://ops.example.com:443", "Sec-Fetch-Site": "cross-site"},
    )
    other = client.post("/api/chat", json=chat, headers={"Origin": "https://ops.example.com.evil.example"})

    assert allowed.status_code == 200, allowed.text
    assert_error(other, 403, "cross_origin_request")


# -- 3. Body framing and size ---------------------------------------------------------------------


def raw_request(port: int, head: bytes, body_chunks: Any = ()) -> tuple[int, bytes]:
    """Send `head` then the chunks of the body on a raw socket, stopping as soon as the server
    answers; the status and body of its answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        for chunk in body_chunks:
            if select.select([sock], [], [], 0)[0]:
                break  # the server answered: it reads no more
            try:
                sock.sendall(chunk)
            except (BrokenPipeError, ConnectionResetError):
                break
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer) < _expected_length(answer):
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            answer += data
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def _expected_length(answer: bytes) -> int:
    head, _, _ = answer.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(head) + 4 + int(value)
    return len(answer) + 1


def chunked(total: int, size: int = 64 * 1024) -> Any:
    """A chunked body of about `total` bytes that is a valid turn (one long user message), one chunk
    at a time (generated, never held)."""
    piece = b"x" * size

    def chunk(data: bytes) -> bytes:
        return b"%x\r\n%s\r\n" % (len(data), data)

    yield chunk(b'{"messages": [{"role": "user", "content": "')
    for _ in range(total // size):
        yield chunk(piece)
    yield chunk(b'"}]}')
    yield b"0\r\n\r\n"


@pytest.fixture
def counted(start_server):
    """A served agent function that records every turn it is given; the cap is 64 KiB."""
    turns: list[Any] = []

    def agent(messages: Any, context: Any) -> str:
        turns.append(messages)
        return "ran"

    client = start_server(agent, max_body_bytes=64 * 1024)
    return client.base_url.port, turns


@pytest.mark.parametrize("path", ["/api/chat", "/api/chat-stream"])
def test_chunked_with_a_small_content_length_is_refused_before_its_body_is_read(counted, path):
    """The issue's attack: ``Transfer-Encoding: chunked`` and ``Content-Length: 10``, then 8 MiB."""
    port, turns = counted
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\nContent-Length: 10\r\n\r\n"
    ).encode()

    status, body = raw_request(port, head, chunked(8 * 1024 * 1024))

    assert 400 <= status < 500, body
    if body.startswith(b"{"):  # our answer (the HTTP parser may refuse first, in plain text)
        assert json.loads(body)["error"]["code"] == "ambiguous_body_length"
    assert turns == [], "the request must not be processed"


def test_a_chunked_body_is_counted_and_cut_at_the_cap(counted):
    port, turns = counted
    head = (
        f"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode()

    status, body = raw_request(port, head, chunked(8 * 1024 * 1024))

    assert status == 413, body
    assert json.loads(body)["error"]["code"] == "body_too_large"
    assert turns == []


@pytest.mark.parametrize("declared", [b"+10", b"1e1", b"0x0a", b"ten", b"-1", b"\xd9\xa1\xd9\xa0"])
def test_a_content_length_that_is_not_a_plain_number_is_refused(counted, declared):
    port, turns = counted
    body = json.dumps({"messages": [user("hi")]}).encode()
    head = (
        b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
        b"Content-Length: %s\r\n\r\n" % (port, declared)
    )

    status, answer = raw_request(port, head, [body])

    assert status == 400, answer
    assert turns == []


@pytest.mark.parametrize("declared", [b" 10", b"10,10", b"10 , 10"])
def test_a_content_length_the_grammar_allows_frames_exactly_that_many_bytes(counted, declared):
    """Leading blanks are optional whitespace, and a list of one same value is that value (RFC 9110
    8.6): the server reads 10 bytes of the body, never more, and they are not a whole request. (A
    parser that passes such a value through as it is gets a 400 from the middleware; see
    tests/unit/server/test_request_middleware.py.)"""
    port, turns = counted
    body = json.dumps({"messages": [user("x" * 100_000)]}).encode()
    head = (
        b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
        b"Content-Length: %s\r\nConnection: close\r\n\r\n" % (port, declared)
    )

    status, answer = raw_request(port, head, [body])

    assert status in (400, 422), answer
    if status == 422:
        assert b"EOF while parsing" in answer, "only the 10 declared bytes were read"
    assert turns == []


def test_two_content_lengths_are_refused(counted):
    port, turns = counted
    body = json.dumps({"messages": [user("hi")]}).encode()
    head = (
        b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nContent-Length: 5\r\n\r\n" % (port, len(body))
    )

    status, answer = raw_request(port, head, [body])

    assert status == 400, answer
    assert turns == []


# -- 4. Log forging -------------------------------------------------------------------------------

FORGED = "INFO:     forged line: approved by admin"


def test_control_characters_in_logged_values_cannot_forge_a_log_line(tmp_path):
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("DCAF_STORE", "DCAF_LOG_FORMAT")},
        "DCAF_TEST_LEDGER": str(tmp_path / "ledger.log"),
    }
    serving = dcaf_like_serve(
        "tests/e2e/process_agent.py:make_agent", "--factory", "--port", "0",
        "--store", f"sqlite:///{tmp_path / 'c.db'}", "--log-format", "text", env=env,
    )  # fmt: skip
    with serving as served, httpx.Client(base_url=served.url, timeout=10) as client:
        first = client.post("/api/chat", json={"messages": [user("delete pod web-1")]}).json()
        conversation_id = first["data"]["conversation_id"]
        forged_call = {"id": f"tc_1\n{FORGED}", "name": "delete_pod", "execute": True}
        refused = client.post(
            "/api/chat", json={"messages": [user(conversation_id=conversation_id, tool_calls=[forged_call])]}
        )
        path = client.get(f"/api/x%0A{FORGED.replace(' ', '%20')}%0D%1B[2J")
    log = served.log

    assert refused.status_code == 404
    assert path.status_code == 404
    lines = log.splitlines()
    assert not any(line.startswith("INFO:     forged") for line in lines), log
    assert "\x1b" not in log, "an escape sequence reached the terminal"
    assert f"tc_1\\x0a{FORGED}" in log, "the call id is logged, escaped"
    assert "/api/x\\x0aINFO:" in log, "the path is logged, escaped"
    assert "\\x0d\\x1b[2J" in log


# -- 5. Client-chosen conversation ids ------------------------------------------------------------

BAD_IDS = ["x" * 129, "a\x00b", "<img src=x onerror=alert(1)>", "line\nbreak", "conv~1", "ü", "a b", "a/b"]


@pytest.mark.parametrize(
    "bad", BAD_IDS, ids=["long", "nul", "html", "newline", "tilde", "unicode", "space", "slash"]
)
def test_a_conversation_id_outside_the_rule_is_refused_naming_the_field(served, bad):
    client = served.client
    bodies = {
        "conversation_id": {"messages": [user("hi")], "conversation_id": bad},
        "messages[0].data.conversation_id": {"messages": [user("hi", conversation_id=bad)]},
        "messages[0].data.thread_id": {"messages": [user("hi", thread_id=bad)]},
    }
    for field, body in bodies.items():
        for path in ("/api/chat", "/api/chat-stream"):
            error = assert_error(client.post(path, json=body), 422, "invalid_request")
            assert error["field"] == field
    a2a = client.post("/a2a/tasks/send", json={"message": "hi", "context_id": bad})
    assert assert_error(a2a, 422, "invalid_request")["field"] == "context_id"

    assert served.runtime.requests == [], "the model must not be called"
    assert served.agent.repository.list_ids(10) == []


@pytest.mark.parametrize("bad", ["x" * 129, "a%00b", "%3Cscript%3E", "a%0Ab", "a~1"])
def test_a_conversation_id_outside_the_rule_in_a_path_is_refused(served, bad):
    client = served.client
    for method in ("GET", "DELETE"):
        error = assert_error(client.request(method, f"/api/conversations/{bad}"), 422, "invalid_request")
        assert error["field"] == "conversation_id"
    task = client.get(f"/a2a/tasks/{bad}~1")
    assert assert_error(task, 422, "invalid_request")["field"] == "task_id"


def test_an_a2a_json_rpc_context_id_outside_the_rule_is_refused(served):
    client = served.client
    message = {
        "role": "user",
        "messageId": "m1",
        "contextId": "a\nb",
        "parts": [{"kind": "text", "text": "hi"}],
    }

    response = client.post(
        "/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
    )

    error = response.json()["error"]
    assert error["code"] == -32602, error  # invalid params
    assert "context_id" in error["message"]
    assert served.runtime.requests == []
    assert served.agent.repository.list_ids(10) == []


def test_a_conversation_id_inside_the_rule_is_taken(served):
    client = served.client
    chosen = "team-a:incident_42.v1"

    response = client.post("/api/chat", json={"messages": [user("hi")], "conversation_id": chosen})

    assert response.status_code == 200, response.text
    assert response.json()["data"]["conversation_id"] == chosen
    assert client.get(f"/api/conversations/{chosen}").status_code == 200


@dataclass
class Served:
    client: httpx.Client
    agent: Agent
    runtime: FakeRuntime


@pytest.fixture
def served(start_server) -> Served:
    """An Agent that answers "ok" and keeps its model's requests (``runtime.requests``)."""
    runtime = FakeRuntime(["ok"] * 20)
    agent = Agent(runtime=runtime)
    return Served(start_server(agent, a2a=True), agent, runtime)


# -- 6. A damaged stored conversation ---------------------------------------------------------------


def test_one_unreadable_conversation_is_reported_and_the_others_listed(start_server, tmp_path):
    store = f"sqlite:///{tmp_path / 'c.db'}"
    agent = Agent(runtime=FakeRuntime(["one", "two", "three"]))
    client = start_server(agent, store=store)
    ids = [
        client.post("/api/chat", json={"messages": [user(f"q{i}")]}).json()["data"]["conversation_id"]
        for i in range(3)
    ]
    with sqlite3.connect(tmp_path / "c.db") as db:
        changed = db.execute(
            "UPDATE dcaf_conversations SET body = ? WHERE id = ?", (b"\x00not zlib", ids[1])
        ).rowcount
    assert changed == 1

    listed = client.get("/api/conversations")

    assert listed.status_code == 200, listed.text
    body = listed.json()
    assert sorted(c["id"] for c in body["conversations"]) == sorted([ids[0], ids[2]])
    [broken] = body["errors"]
    assert broken["id"] == ids[1]
    assert broken["code"] == "conversation_unreadable"
    assert "cannot be read" in broken["message"]
    assert client.get(f"/api/conversations/{ids[0]}").status_code == 200


# -- 7. Clients that hang up half-way through their body ------------------------------------------


def test_half_sent_bodies_are_one_warning_line_each(tmp_path):
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("DCAF_STORE", "DCAF_LOG_FORMAT")},
        "DCAF_TEST_LEDGER": str(tmp_path / "ledger.log"),
    }
    serving = dcaf_like_serve(
        "tests/e2e/process_agent.py:make_agent", "--factory", "--port", "0",
        "--store", f"sqlite:///{tmp_path / 'c.db'}", "--log-format", "text", env=env,
    )  # fmt: skip
    with serving as served:
        port = urlsplit(served.url).port
        for i in range(20):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(
                    b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    b'X-Request-ID: half-%d\r\nContent-Length: 1000\r\n\r\n{"messages": [' % i
                )
        assert httpx.get(f"{served.url}/health", timeout=10).status_code == 200
    log = served.log

    about = [line for line in log.splitlines() if "half-" in line]
    assert len(about) == 20, "\n".join(about)
    assert all(line.startswith("WARNING:") and "closed the connection" in line for line in about), about
    assert "Traceback" not in log, log
    assert "ERROR" not in log, log


def test_an_http_1_0_request_without_host_claims_no_name_and_is_answered(counted):
    """Some load balancers' health checks send HTTP/1.0 without Host; a browser never does."""
    port, _ = counted

    status, answer = raw_request(port, b"GET /health HTTP/1.0\r\n\r\n")

    assert status == 200, answer
