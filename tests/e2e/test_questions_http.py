"""Questions a run asks the user, over real HTTP: asked in ``data.questions`` and a ``question_asked``
event, answered in ``data.answers`` (on any worker, after a restart), refused like a forged approval."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from _helpdesk import user
from _server import dcaf_like_serve

from dcaf_like import Agent, ToolContext, ask_user, tool
from dcaf_like.testing import FakeRuntime, ManualClock, reply, tool_call, tool_calls

ASKING = "tests/e2e/asking_agent.py:make_agent"


def scaling_agent(ran: list[str], *script: Any, **settings: Any) -> Agent:
    @tool(requires_approval=False)
    def scale(name: str, context: ToolContext) -> str:
        """Scale a deployment to zero, once the user confirmed it."""
        if not context.ask(f"Scale {name} to zero?", kind="confirmation"):
            return f"{name} left as it is"
        ran.append(name)
        return f"{name} scaled to zero"

    return Agent(tools=[scale, ask_user], runtime=FakeRuntime(list(script)), **settings)


def chat(client: httpx.Client, content: str = "", **data: Any) -> httpx.Response:
    return client.post("/api/chat", json={"messages": [user(content, **data)]})


def answer(client: httpx.Client, conversation_id: str, *answers: dict[str, Any]) -> httpx.Response:
    return chat(client, conversation_id=conversation_id, answers=list(answers))


def test_a_question_is_asked_in_the_response_and_its_answer_resumes_the_run(start_server):
    ran: list[str] = []
    client = start_server(
        scaling_agent(ran, tool_calls(tool_call("scale", name="web")), reply("web is at zero."))
    )

    asked = chat(client, "scale web to zero")

    assert asked.status_code == 200, asked.text
    body = asked.json()
    assert body["meta"]["stop_reason"] == "awaiting_input"
    [question] = body["data"]["questions"]
    assert question == {
        "id": question["id"],
        "call_id": question["call_id"],
        "tool": "scale",
        "kind": "confirmation",
        "prompt": "Scale web to zero?",
        "options": [],
        "max_length": 4000,
        "expires_at": None,  # this agent gives questions no window
    }
    assert question["id"].startswith("q_")
    assert ran == []

    answered = answer(client, body["data"]["conversation_id"], {"id": question["id"], "value": True})

    assert answered.status_code == 200, answered.text
    assert answered.json()["content"] == "web is at zero."
    assert answered.json()["data"]["questions"] == []
    [executed] = answered.json()["data"]["executed_tool_calls"]
    assert (executed["status"], executed["output"]) == ("executed", "web scaled to zero")
    assert ran == ["web"]


def test_the_stream_sends_question_asked_and_the_model_reads_the_selection(start_server):
    ask = tool_call("ask_user", question="Which namespace?", kind="selection", options=["prod", "staging"])
    runtime = FakeRuntime([tool_calls(ask), reply("Cleaning up staging.")])
    client = start_server(Agent(tools=[ask_user], runtime=runtime))

    with client.stream("POST", "/api/chat-stream", json={"messages": [user("clean up")]}) as response:
        events = [json.loads(line) for line in response.iter_lines() if line]

    kinds = [e["type"] for e in events]
    assert kinds == ["run_started", "tool_call_proposed", "tool_started", "question_asked", "done"]
    asked = events[3]["question"]
    assert (asked["kind"], asked["prompt"], asked["options"]) == (
        "selection",
        "Which namespace?",
        ["prod", "staging"],
    )
    assert events[-1]["message"]["data"]["questions"] == [asked]
    assert events[-1]["message"]["meta"]["stop_reason"] == "awaiting_input"

    answered = answer(client, events[-1]["conversation_id"], {"id": asked["id"], "value": "staging"})

    assert answered.json()["content"] == "Cleaning up staging."
    assert answered.json()["data"]["executed_tool_calls"][0]["output"] == "staging"


def test_a_questions_window_is_in_the_response_the_stream_and_the_stored_conversation(start_server):
    clock = ManualClock(1_700_000_000.0)
    ask = tool_call("ask_user", question="Which namespace?", kind="selection", options=["prod", "staging"])
    runtime = FakeRuntime([tool_calls(ask), tool_calls(ask)])
    agent = Agent(tools=[ask_user], runtime=runtime, approval_ttl=3600, question_ttl=600, clock=clock)
    client = start_server(agent)

    asked = chat(client, "clean up").json()["data"]
    clock.advance(100)
    with client.stream("POST", "/api/chat-stream", json={"messages": [user("clean up again")]}) as response:
        events = [json.loads(line) for line in response.iter_lines() if line]

    [question] = asked["questions"]
    assert question["expires_at"] == 1_700_000_600.0  # when it was asked, plus question_ttl
    [streamed] = [e["question"] for e in events if e["type"] == "question_asked"]
    assert streamed["expires_at"] == 1_700_000_700.0
    assert events[-1]["message"]["data"]["questions"] == [streamed]
    stored = client.get(f"/api/conversations/{asked['conversation_id']}").json()
    assert [q["expires_at"] for q in stored["questions"]] == [question["expires_at"]]
    schema = client.get("/openapi.json").json()["components"]["schemas"]["QuestionOut"]
    assert schema["properties"]["expires_at"]["anyOf"] == [{"type": "number"}, {"type": "null"}]


@pytest.mark.parametrize(
    ("sent", "status", "code"),
    [
        ({"id": "q_0123456789abcdef01234567", "value": True}, 404, "unknown_question"),  # forged
        ({"id": "QUESTION", "value": "yes"}, 422, "invalid_answer"),  # a string for a confirmation
        ({"id": "QUESTION"}, 422, "invalid_answer"),  # no value
        ({"id": "QUESTION", "value": 1}, 422, "invalid_request"),  # not a string nor a boolean: the body
    ],
)
def test_a_forged_or_ill_typed_answer_is_refused_and_the_conversation_is_unchanged(
    start_server, sent, status, code
):
    ran: list[str] = []
    client = start_server(scaling_agent(ran, tool_calls(tool_call("scale", name="web"))))
    body = chat(client, "scale web to zero").json()
    conversation_id, [question] = body["data"]["conversation_id"], body["data"]["questions"]
    before = client.get(f"/api/conversations/{conversation_id}").json()
    if sent["id"] == "QUESTION":
        sent = {**sent, "id": question["id"]}

    refused = answer(client, conversation_id, sent)

    assert refused.status_code == status, refused.text
    assert refused.json()["error"]["code"] == code
    if code != "invalid_request":
        assert refused.json()["error"]["question_id"] == sent["id"]
    assert client.get(f"/api/conversations/{conversation_id}").json() == before
    assert ran == []


def test_an_answer_outside_the_options_a_replay_and_another_conversations_question_are_refused(start_server):
    ask = tool_call("ask_user", question="Which namespace?", kind="selection", options=["prod", "staging"])
    client = start_server(
        Agent(tools=[ask_user], runtime=FakeRuntime([tool_calls(ask), reply("Ok."), tool_calls(ask)]))
    )
    mine = chat(client, "clean up").json()["data"]
    conversation_id, [question] = mine["conversation_id"], mine["questions"]

    outside = answer(client, conversation_id, {"id": question["id"], "value": "dev"})
    assert (outside.status_code, outside.json()["error"]["code"]) == (422, "invalid_answer")
    assert "'dev' is not one of the options ['prod', 'staging']" in outside.json()["error"]["message"]

    assert answer(client, conversation_id, {"id": question["id"], "value": "prod"}).status_code == 200
    replayed = answer(client, conversation_id, {"id": question["id"], "value": "prod"})
    assert (replayed.status_code, replayed.json()["error"]["code"]) == (409, "question_already_answered")

    theirs = chat(client, "clean up").json()["data"]
    crossed = answer(client, conversation_id, {"id": theirs["questions"][0]["id"], "value": "prod"})
    assert (crossed.status_code, crossed.json()["error"]["code"]) == (404, "unknown_question")
    still = client.get(f"/api/conversations/{theirs['conversation_id']}").json()
    assert [q["status"] for q in still["questions"]] == ["open"]


def test_a_new_message_is_refused_while_a_question_waits(start_server):
    client = start_server(scaling_agent([], tool_calls(tool_call("scale", name="web"))))
    body = chat(client, "scale web to zero").json()

    refused = chat(client, "something else", conversation_id=body["data"]["conversation_id"])

    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "questions_open")
    assert refused.json()["error"]["question_id"] == body["data"]["questions"][0]["id"]


def test_a_plain_reply_answers_no_question_while_two_wait(start_server):
    # A plain reply could answer either; it answers none (one question alone: see below).
    ran: list[str] = []
    script = tool_calls(tool_call("scale", name="web"), tool_call("scale", name="api"))
    client = start_server(scaling_agent(ran, script))
    body = chat(client, "scale web and api to zero").json()
    assert len(body["data"]["questions"]) == 2

    refused = chat(client, "yes", conversation_id=body["data"]["conversation_id"])

    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "questions_open")
    assert ran == []


@pytest.mark.parametrize("path", ["/api/chat", "/api/chat-stream"])
@pytest.mark.parametrize(
    ("asked", "reply_text", "read"),
    [
        ({"kind": "confirmation"}, "Yes", "yes"),
        ({"kind": "selection", "options": ["prod", "staging"]}, " staging ", "staging"),
        ({"kind": "text"}, "the eu-west one, please", "the eu-west one, please"),
    ],
)
def test_a_plain_reply_answers_the_one_open_question_as_a2a_takes_it(
    start_server, path, asked, reply_text, read
):
    ask = tool_call("ask_user", question="Which one?", **asked)
    runtime = FakeRuntime([tool_calls(ask), reply("On it.")])
    client = start_server(Agent(tools=[ask_user], runtime=runtime))
    first = user("clean up")
    body = client.post("/api/chat", json={"messages": [first]}).json()
    [question] = body["data"]["questions"]

    # The HelpDesk resends the history, the user's reply last: text and nothing else.
    replied = client.post(path, json={"messages": [first, body, user(reply_text)]})

    assert replied.status_code == 200, replied.text
    if path == "/api/chat-stream":
        events = [json.loads(line) for line in replied.text.splitlines()]
        assert events[-1]["type"] == "done", events[-1]
        message = events[-1]["message"]
    else:
        message = replied.json()
    assert message["content"] == "On it."
    assert message["data"]["executed_tool_calls"][0]["output"] == read
    conversation = client.get(f"/api/conversations/{body['data']['conversation_id']}").json()
    [stored] = conversation["questions"]
    assert (stored["id"], stored["status"]) == (question["id"], "answered")
    assert [m["content"] for m in conversation["messages"] if m["role"] == "user"] == ["clean up"]


@pytest.mark.parametrize("path", ["/api/chat", "/api/chat-stream"])
@pytest.mark.parametrize(
    ("asked", "reply_text"),
    [
        ({"kind": "confirmation"}, "maybe later"),
        ({"kind": "selection", "options": ["prod", "staging"]}, "both"),
    ],
)
def test_a_plain_reply_that_is_no_answer_is_a_new_message_refused_while_the_question_waits(
    start_server, path, asked, reply_text
):
    ask = tool_call("ask_user", question="Which one?", **asked)
    runtime = FakeRuntime([tool_calls(ask), reply("On it.")])
    client = start_server(Agent(tools=[ask_user], runtime=runtime))
    body = chat(client, "clean up").json()
    conversation_id = body["data"]["conversation_id"]

    refused = client.post(path, json={"messages": [user(reply_text, conversation_id=conversation_id)]})

    assert refused.status_code == 409, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["question_id"]) == ("questions_open", body["data"]["questions"][0]["id"])
    still = client.get(f"/api/conversations/{conversation_id}").json()
    assert [q["status"] for q in still["questions"]] == ["open"]
    assert runtime.remaining == 1, "the model was not called"


def test_a_stale_question_no_longer_blocks_a_new_message_once_its_window_closed(start_server):
    now = [1_700_000_000.0]  # the agent's clock: the test moves it, nothing waits
    ran: list[str] = []
    script = (tool_calls(tool_call("scale", name="web")), reply("Not scaled, then."))
    client = start_server(scaling_agent(ran, *script, approval_ttl=60.0, clock=lambda: now[0]))
    asked = chat(client, "scale web to zero").json()["data"]
    conversation_id, [question] = asked["conversation_id"], asked["questions"]

    now[0] += 30.0
    waiting = chat(client, "something else", conversation_id=conversation_id)
    assert (waiting.status_code, waiting.json()["error"]["code"]) == (409, "questions_open")

    now[0] += 30.0
    went_on = chat(client, "something else", conversation_id=conversation_id)

    assert went_on.status_code == 200, went_on.text
    assert went_on.json()["content"] == "Not scaled, then."
    [failed] = went_on.json()["data"]["executed_tool_calls"]
    assert failed["status"] == "failed"
    assert "expired" in failed["error"]
    assert ran == []
    stored = client.get(f"/api/conversations/{conversation_id}").json()
    [closed] = stored["questions"]
    assert (closed["status"], closed["answered_by"], closed["expires_at"]) == (
        "expired",
        "system",
        1_700_000_060.0,
    )

    late = answer(client, conversation_id, {"id": question["id"], "value": True})

    assert late.status_code == 409, late.text
    error = late.json()["error"]
    assert (error["code"], error["question_id"], error["conversation_id"]) == (
        "question_expired",
        question["id"],
        conversation_id,
    )
    assert "expired" in error["message"]
    assert client.get(f"/api/conversations/{conversation_id}").json() == stored
    trail = client.get("/api/audit", params={"conversation_id": conversation_id}).json()["records"]
    assert [(r["outcome"], r["question_id"], r["decided_by"]) for r in trail] == [
        ("refused", question["id"], "user"),
        ("expired", question["id"], "system"),
    ]


def test_answering_needs_the_chat_scope_not_approve(start_server):
    chatter, approver = "k" * 32, "a" * 32
    agent = scaling_agent([], tool_calls(tool_call("scale", name="web")), reply("Scaled."))
    client = start_server(agent, api_keys={chatter: "alice:chat+read", approver: "alice:approve"})
    asked = client.post(
        "/api/chat",
        json={"messages": [user("scale web to zero")]},
        headers={"Authorization": f"Bearer {chatter}"},
    ).json()["data"]
    turn = {
        "messages": [
            user(
                conversation_id=asked["conversation_id"],
                answers=[{"id": asked["questions"][0]["id"], "value": True}],
            )
        ]
    }

    refused = client.post("/api/chat", json=turn, headers={"Authorization": f"Bearer {approver}"})
    taken = client.post("/api/chat", json=turn, headers={"Authorization": f"Bearer {chatter}"})

    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "missing_scope")
    assert taken.status_code == 200, taken.text
    assert taken.json()["content"] == "Scaled."


# -- real server processes on one store ---------------------------------------------------------------


def ask(url: str) -> tuple[str, dict[str, Any]]:
    response = httpx.post(f"{url}/api/chat", json={"messages": [user("scale web to zero")]}, timeout=10)
    assert response.status_code == 200, response.text
    body = response.json()
    [question] = body["data"]["questions"]
    return body["data"]["conversation_id"], question


def answered_on(url: str, conversation_id: str, question: dict[str, Any]) -> httpx.Response:
    turn = {
        "messages": [user(conversation_id=conversation_id, answers=[{"id": question["id"], "value": True}])]
    }
    return httpx.post(f"{url}/api/chat", json=turn, timeout=10)


def environment(ledger: Path) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k != "DCAF_STORE"}, "DCAF_TEST_LEDGER": str(ledger)}


def test_a_question_asked_on_worker_a_is_answered_on_worker_b(redis_url, redis_prefix, tmp_path):
    ledger = tmp_path / "ledger.log"
    ledger.touch()
    serve = (ASKING, "--factory", "--port", "0", "--store", f"{redis_url}?prefix={redis_prefix}")
    with (
        dcaf_like_serve(*serve, env=environment(ledger)) as worker_a,
        dcaf_like_serve(*serve, env=environment(ledger)) as worker_b,
    ):
        conversation_id, question = ask(worker_a.url)
        assert ledger.read_text() == ""  # asked before it acted

        taken = answered_on(worker_b.url, conversation_id, question)
        replayed = answered_on(worker_a.url, conversation_id, question)

    assert taken.status_code == 200, taken.text
    assert taken.json()["content"] == "Done: web scaled to zero"
    assert (replayed.status_code, replayed.json()["error"]["code"]) == (409, "question_already_answered")
    [line] = ledger.read_text().splitlines()  # ran once, on worker B
    assert line.endswith(" web")
    assert worker_b.process is not None
    assert line.split()[0] == str(worker_b.process.pid)


def test_a_question_survives_a_restart_between_ask_and_answer(tmp_path):
    ledger = tmp_path / "ledger.log"
    ledger.touch()
    serve = (ASKING, "--factory", "--port", "0", "--store", f"sqlite:///{tmp_path / 'conversations.sqlite3'}")
    with dcaf_like_serve(*serve, env=environment(ledger)) as before:
        conversation_id, question = ask(before.url)
    with dcaf_like_serve(*serve, env=environment(ledger)) as after:
        stored = httpx.get(f"{after.url}/api/conversations/{conversation_id}", timeout=10).json()
        taken = answered_on(after.url, conversation_id, question)

    assert [(q["id"], q["status"]) for q in stored["questions"]] == [(question["id"], "open")]
    assert [c["status"] for c in stored["tool_calls"]] == ["asking"]
    assert taken.status_code == 200, taken.text
    assert taken.json()["content"] == "Done: web scaled to zero"
    assert len(ledger.read_text().splitlines()) == 1


# -- A2A -------------------------------------------------------------------------------------------------


def test_an_a2a_task_waiting_on_a_question_is_input_required_and_the_next_message_answers_it(start_server):
    pytest.importorskip("a2a.types", reason="the a2a extra is not installed: pip install -e '.[a2a]'")
    ran: list[str] = []
    http = start_server(
        scaling_agent(ran, tool_calls(tool_call("scale", name="web")), reply("Scaled.")), a2a=True
    )

    def send(text: str, **ids: str) -> dict[str, Any]:
        message = {
            "kind": "message",
            "messageId": os.urandom(4).hex(),
            "role": "user",
            "parts": [{"kind": "text", "text": text}],
            **ids,
        }
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": message}}
        result: dict[str, Any] = http.post("/a2a", json=rpc).json()["result"]
        return result

    waiting = send("scale web to zero")
    done = send("yes", taskId=waiting["id"], contextId=waiting["contextId"])

    assert waiting["status"]["state"] == "input-required"
    status = waiting["status"]["message"]["parts"]
    assert status[0]["text"] == "Scale web to zero?"
    [question] = next(p["data"] for p in status if p["kind"] == "data")["questions"]
    assert question["kind"] == "confirmation"
    assert done["status"]["state"] == "completed"
    assert ran == ["web"]


def test_an_a2a_stream_that_stops_on_a_question_ends_input_required_with_it_and_the_next_message_answers_it(
    start_server,
):
    pytest.importorskip("a2a.types", reason="the a2a extra is not installed: pip install -e '.[a2a]'")
    ran: list[str] = []
    agent = scaling_agent(
        ran, tool_calls(tool_call("scale", name="web"), text="Scaling web down."), reply("Scaled.")
    )
    http = start_server(agent, a2a=True)

    def rpc(method: str, text: str, **ids: str) -> dict[str, Any]:
        message = {
            "kind": "message",
            "messageId": os.urandom(4).hex(),
            "role": "user",
            "parts": [{"kind": "text", "text": text}],
            **ids,
        }
        return {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"message": message}}

    def stream(text: str, **ids: str) -> list[dict[str, Any]]:
        with http.stream("POST", "/a2a", json=rpc("message/stream", text, **ids)) as response:
            return [
                json.loads(line[5:])["result"] for line in response.iter_lines() if line.startswith("data:")
            ]

    events = stream("scale web to zero")

    started, last = events[0], events[-1]
    assert (started["kind"], started["status"]["state"]) == ("task", "working")
    assert (last["kind"], last["status"]["state"], last["final"]) == ("status-update", "input-required", True)
    status = last["status"]["message"]["parts"]
    assert status[0]["text"] == "Scale web to zero?"  # the question, not the model's text before it
    [question] = next(p["data"] for p in status if p["kind"] == "data")["questions"]
    assert (question["kind"], question["prompt"], question["tool"]) == (
        "confirmation",
        "Scale web to zero?",
        "scale",
    )
    got = http.post(
        "/a2a", json={"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": last["taskId"]}}
    ).json()["result"]
    assert got["status"]["state"] == "input-required"
    assert got["status"]["message"] == last["status"]["message"]  # what tasks/get and message/send say
    assert ran == []

    [answered] = stream("yes", taskId=last["taskId"], contextId=last["contextId"])

    assert (answered["kind"], answered["id"], answered["status"]["state"]) == (
        "task",
        last["taskId"],
        "completed",
    )
    assert answered["artifacts"][0]["parts"][0]["text"] == "Scaled."
    [executed] = next(p["data"] for p in answered["status"]["message"]["parts"] if p["kind"] == "data")[
        "executed_tool_calls"
    ]
    assert executed["output"] == "web scaled to zero"
    assert ran == ["web"]


def test_canceling_an_a2a_task_closes_a_question_past_its_window_as_expired_and_one_within_it_as_declined(
    start_server,
):
    pytest.importorskip("a2a.types", reason="the a2a extra is not installed: pip install -e '.[a2a]'")
    clock = ManualClock(1_700_000_000.0)  # the agent's clock: the test moves it, nothing waits
    ran: list[str] = []
    asks = [tool_calls(tool_call("scale", name=name)) for name in ("web", "db")]
    http = start_server(scaling_agent(ran, *asks, question_ttl=60, clock=clock), a2a=True)

    def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = http.post("/a2a", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).json()
        result: dict[str, Any] = body["result"]
        return result

    def start(text: str) -> dict[str, Any]:
        parts = [{"kind": "text", "text": text}]
        message = {"kind": "message", "messageId": os.urandom(4).hex(), "role": "user", "parts": parts}
        return rpc("message/send", {"message": message})

    stale = start("scale web to zero")  # its window closes at +60
    clock.advance(40)
    fresh = start("scale db to zero")  # its window closes at +100
    clock.advance(30)  # +70: the first one's window closed, the second one's is open

    canceled = [rpc("tasks/cancel", {"id": task["id"]}) for task in (stale, fresh)]

    [asked_stale] = next(p["data"] for p in stale["status"]["message"]["parts"] if p["kind"] == "data")[
        "questions"
    ]
    assert asked_stale["expires_at"] == 1_700_000_060.0  # the status message carries the window too
    assert [task["status"]["state"] for task in canceled] == ["canceled", "canceled"]
    closed = []
    for task in (stale, fresh):
        conversation_id = task["contextId"]
        [question] = http.get(f"/api/conversations/{conversation_id}").json()["questions"]
        trail = http.get("/api/audit", params={"conversation_id": conversation_id}).json()["records"]
        closed.append(
            (question["status"], question["answered_by"], [(r["outcome"], r["decided_by"]) for r in trail])
        )
        assert [r["question_id"] for r in trail] == [question["id"]]
    assert closed == [
        ("expired", "system", [("expired", "system")]),  # its window closed: not the canceler's decline
        ("declined", "user", [("declined", "user")]),  # the caller (no API keys: "user")
    ]
    failed = [
        http.get(f"/api/conversations/{task['contextId']}").json()["tool_calls"][0]["error"]
        for task in (stale, fresh)
    ]
    assert "expired" in failed[0]
    assert "declined" in failed[1]
    assert ran == []
