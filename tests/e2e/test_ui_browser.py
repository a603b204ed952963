"""The chat page in a real headless Chromium, against a live server: what a person sees and clicks.

Screenshots of the key states go to ``$DCAF_ARTIFACTS`` (default ``test-artifacts/``, git-ignored).
``DCAF_DOCS_SCREENSHOT=1`` also rewrites the README's picture, ``docs/images/ui.png``.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _job_threads import api_and_worker
from _server import dcaf_like_serve

from dcaf_like import (
    Agent,
    AgentRuntime,
    ModelRequest,
    ModelResponse,
    Session,
    TextDelta,
    ToolContext,
    ToolOutput,
    ToolResult,
    attachment,
    tool,
)
from dcaf_like.application.errors import ModelError
from dcaf_like.testing import (
    FakeRuntime,
    ManualClock,
    OpenAICompatibleServer,
    fail,
    reply,
    tool_call,
    tool_calls,
)

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("DCAF_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("DCAF_ARTIFACTS") or ROOT / "test-artifacts") / "ui"


def browser_missing(why: str) -> None:
    """Skip without a browser, unless CI says services are required (as tests/conftest.py does)."""
    if os.environ.get("DCAF_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{why} (DCAF_REQUIRE_SERVICES=1: the browser tests must run)")
    pytest.skip(f"the chat page's browser tests: {why}; run them with `sudo apt-get install chromium`")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).is_file():
        browser_missing(f"Chromium is not installed at {CHROMIUM}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        browser_missing("playwright is not installed: pip install -e '.[dev]'")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1100, "height": 760})
    page = context.new_page()
    page.set_default_timeout(10_000)
    scripts_failed: list[str] = []
    page.on("pageerror", lambda error: scripts_failed.append(str(error)))
    yield page
    context.close()
    assert scripts_failed == [], "the page's script threw"


def screenshot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTIFACTS / f"{name}.png")


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def send(page: Any, text: str) -> None:
    page.get_by_placeholder("Ask the agent").fill(text)
    page.get_by_role("button", name="Send", exact=True).click()


class PausingRuntime(AgentRuntime):
    """Plays a FakeRuntime script, but holds the stream after the delta `pause_after` until `go` is set:
    the test sees what the page shows while the answer is still being written."""

    name = "pausing"

    def __init__(self, script: list[Any], pause_after: str) -> None:
        self.script = FakeRuntime(script)
        self.pause_after = pause_after
        self.go = threading.Event()

    def invoke(self, request: ModelRequest) -> ModelResponse:
        return self.script.invoke(request)

    def stream(self, request: ModelRequest) -> Iterator[Any]:
        for event in self.script.stream(request):
            yield event
            if isinstance(event, TextDelta) and event.text == self.pause_after:
                self.go.wait(timeout=10)


def test_a_user_sees_the_call_waiting_approves_it_and_sees_it_run_and_the_streamed_answer(
    page, start_server, cluster
):
    @tool(requires_approval=False)
    def watch_namespace(namespace: str, session: Session) -> str:
        """Remember the namespace this conversation is about."""
        session["namespace"] = namespace
        return f"watching {namespace}"

    runtime = PausingRuntime(
        [
            tool_calls(
                tool_call("watch_namespace", namespace="default"),
                tool_call("list_pods"),
                tool_call("delete_pod", name="web-2"),
                text="web-2 is crash-looping; I'll delete it.",
            ),
            reply(
                "Deleted web-2. Its controller will recreate it.",
                chunks=["Deleted web-2. ", "Its controller will recreate it."],
            ),
        ],
        pause_after="Deleted web-2. ",
    )
    client = start_server(Agent(tools=[watch_namespace, *cluster.tools()], runtime=runtime, name="ops"))
    page.goto(str(client.base_url))
    expect(page.locator("h1")).to_have_text("ops")

    send(page, "fix the crashing pod")

    card = page.locator(".card.pending")
    expect(card.locator(".tool")).to_have_text("delete_pod")
    expect(card.locator(".description")).to_have_text("Delete a pod.")
    proposed = {"name": "web-2", "namespace": "default"}
    expect(card.locator(".args")).to_have_text(json.dumps(proposed, indent=2))
    expect(card.get_by_role("button", name="Edit", exact=True)).to_be_visible()  # delete_pod is editable
    expect(page.locator(".message.assistant").first).to_have_text("web-2 is crash-looping; I'll delete it.")
    expect(page.locator(".card.executed", has_text="list_pods")).to_contain_text(
        "CrashLoopBackOff"
    )  # ran at once
    expect(page.locator("#session")).to_have_text(json.dumps({"namespace": "default"}, indent=2))
    expect(page.locator("#conversations li")).to_have_count(1)
    expect(page.locator("#conversations .badge")).to_have_text("1")
    screenshot(page, "1-approval-card")
    if os.environ.get("DCAF_DOCS_SCREENSHOT") == "1":
        (ROOT / "docs" / "images").mkdir(exist_ok=True)
        shutil.copyfile(ARTIFACTS / "1-approval-card.png", ROOT / "docs" / "images" / "ui.png")
    assert cluster.deleted == []

    card.get_by_role("button", name="Approve", exact=True).click()

    ran = page.locator(".card.executed", has_text="delete_pod")
    expect(ran.locator(".output")).to_have_text('pod "web-2" deleted')
    answer = page.locator(".message.assistant").last
    expect(answer).to_have_text("Deleted web-2. ")  # the first piece, while the model is still writing
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_disabled()
    screenshot(page, "2-streaming")
    runtime.go.set()
    expect(answer).to_have_text("Deleted web-2. Its controller will recreate it.")
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_enabled()
    expect(page.locator(".card", has_text="delete_pod")).to_have_count(1)  # the card became the executed call
    expect(page.locator("#conversations .badge")).to_have_count(0)
    screenshot(page, "3-executed-and-answered")
    assert cluster.deleted == [("default", "web-2")]


def test_a_rejection_carries_the_users_reason_to_the_model(page, start_server, cluster):
    def answer(request: ModelRequest) -> ModelResponse:
        told = request.messages[-1].content
        return ModelResponse(text=f"Understood ({told}).")

    runtime = FakeRuntime([tool_call("delete_pod", name="web-2"), answer])
    client = start_server(Agent(tools=cluster.tools(), runtime=runtime))
    page.goto(str(client.base_url))
    send(page, "delete web-2")

    card = page.locator(".card.pending")
    card.get_by_role("button", name="Reject", exact=True).click()
    card.get_by_placeholder("Why not? (told to the agent)").fill("not during business hours")
    card.get_by_role("button", name="Send rejection", exact=True).click()

    expect(page.locator(".card.rejected")).to_contain_text("Rejected: not during business hours")
    expect(page.locator(".message.assistant").last).to_have_text(
        "Understood (Not run. Rejected: not during business hours)."
    )
    screenshot(page, "4-rejected")
    assert cluster.deleted == []


def test_a_server_error_is_shown_to_the_user(page, start_server):
    runtime = FakeRuntime([fail(ModelError("the provider answered 500", runtime="fake"))])
    client = start_server(Agent(runtime=runtime))
    page.goto(str(client.base_url))

    send(page, "hello")

    error = page.get_by_role("alert")
    expect(error).to_contain_text("502 model_error")
    expect(error).to_contain_text("the provider answered 500")
    expect(error).to_contain_text("request ")
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_enabled()
    screenshot(page, "5-server-error")


def test_edited_arguments_the_server_refuses_show_its_error_and_a_valid_edit_runs(
    page, start_server, cluster
):
    runtime = FakeRuntime([tool_call("delete_pod", name="web-2"), reply("Done.")])
    client = start_server(Agent(tools=cluster.tools(), runtime=runtime))
    page.goto(str(client.base_url))
    send(page, "delete web-2")
    card = page.locator(".card.pending")
    card.get_by_role("button", name="Edit", exact=True).click()
    arguments = card.get_by_label("Edited arguments")

    arguments.fill('{"name": 5}')
    card.get_by_role("button", name="Approve edited", exact=True).click()

    expect(card.get_by_role("alert")).to_contain_text("422 invalid_tool_arguments")  # on the card it concerns
    expect(page.locator("#error")).to_be_hidden()
    screenshot(page, "6-invalid-edit")
    assert cluster.deleted == []

    arguments.fill("{not json")
    card.get_by_role("button", name="Approve edited", exact=True).click()
    expect(card.get_by_role("alert")).to_contain_text("Not JSON")

    arguments.fill('{"name": "web-1"}')
    changes = card.get_by_label("What the edit changes")
    expect(changes.locator("li")).to_have_text(
        ['name: "web-2" -> "web-1"', 'namespace: "default" (unchanged)']
    )
    card.get_by_role("button", name="Approve edited", exact=True).click()

    ran = page.locator(".card.executed")
    expect(ran.locator(".output")).to_have_text('pod "web-1" deleted')
    expect(ran).to_contain_text('proposed: {"name":"web-2","namespace":"default"}')
    expect(page.get_by_role("alert")).to_be_hidden()
    expect(page.locator(".message.assistant").last).to_have_text("Done.")
    assert cluster.deleted == [("default", "web-1")]


def test_model_text_shows_as_text_never_as_markup(page, start_server):
    hostile = "<img src=x onerror=\"document.title='owned'\"><b>bold</b>"
    client = start_server(Agent(runtime=FakeRuntime([reply(hostile)])))
    page.goto(str(client.base_url))

    send(page, "hi")

    expect(page.locator(".message.assistant")).to_have_text(hostile)
    assert page.locator("#log img, #log b").count() == 0
    assert page.title() != "owned"


def test_a_conversation_reopened_from_the_list_can_still_be_approved(page, start_server, cluster):
    runtime = FakeRuntime([tool_calls(tool_call("delete_pod", name="web-2"), text="Approve?"), "Deleted."])
    client = start_server(Agent(tools=cluster.tools(), runtime=runtime))
    page.goto(str(client.base_url))
    send(page, "delete web-2")
    expect(page.locator(".card.pending")).to_be_visible()

    page.reload()
    expect(page.locator("#log")).to_be_empty()
    listed = page.locator("#conversations button", has_text="delete web-2")  # titled by the first message
    expect(listed.locator("time")).not_to_be_empty()  # with the time of the last turn
    listed.click()
    expect(page.locator(".message.user")).to_have_text("delete web-2")
    page.locator(".card.pending").get_by_role("button", name="Approve", exact=True).click()

    expect(page.locator(".card.executed .output")).to_have_text('pod "web-2" deleted')
    expect(page.locator(".message.assistant").last).to_have_text("Deleted.")
    assert cluster.deleted == [("default", "web-2")]


def test_with_api_keys_the_page_asks_for_one_and_decisions_are_recorded_under_its_identity(
    page, start_server, cluster
):
    key = "k" * 24
    runtime = FakeRuntime([tool_call("delete_pod", name="web-2"), "Deleted."])
    agent = Agent(tools=cluster.tools(), runtime=runtime)
    client = start_server(agent, api_keys={key: "alice"})
    page.goto(str(client.base_url))

    expect(page.get_by_label("API key")).to_be_visible()  # the list answered 401
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Use key", exact=True).click()
    send(page, "delete web-2")
    page.locator(".card.pending").get_by_role("button", name="Approve", exact=True).click()

    expect(page.locator(".message.assistant").last).to_have_text("Deleted.")
    [conversation_id] = agent.conversation_ids()
    [call] = agent.conversation(conversation_id).tool_calls.values()
    assert call.decided_by == "alice"
    assert page.evaluate("sessionStorage.getItem('dcaf_like.api_key')") == key
    assert cluster.deleted == [("default", "web-2")]


def test_on_a_keyed_server_the_first_screen_asks_for_a_key_in_words_with_its_field_focused(
    page, start_server
):
    """docs/ui.md, "The page" (API keys): the first screen asks for a key in words, its field focused,
    not a raw red `401 unauthorized: ...` (issue 36, item 4); a key the server refuses is said so."""
    key = "k" * 24
    client = start_server(Agent(runtime=FakeRuntime(["Hello."])), api_keys={key: "alice"})
    page.goto(str(client.base_url))

    prompt = page.get_by_role("form", name="This agent needs a key")
    expect(prompt).to_contain_text("This agent asks for an API key. Paste the key you were given")
    expect(page.get_by_label("API key")).to_be_focused()
    expect(page.locator("#error")).to_be_hidden()
    expect(page.get_by_text("401")).to_have_count(0)
    screenshot(page, "key-asked")

    page.keyboard.type("not-the-key-0123456789")
    page.keyboard.press("Enter")
    expect(prompt).to_contain_text("The server did not accept this API key. Check it, then paste it again.")
    expect(page.get_by_label("API key")).to_be_focused()
    expect(page.locator("#error")).to_be_hidden()

    page.keyboard.type(key)
    page.keyboard.press("Enter")
    expect(prompt).to_be_hidden()
    send(page, "hi")
    expect(page.locator(".message.assistant").last).to_have_text("Hello.")


def test_two_waiting_calls_are_decided_one_card_at_a_time(page, start_server, cluster):
    runtime = FakeRuntime(
        [
            tool_calls(tool_call("delete_pod", name="web-2"), tool_call("restart_pod", name="web-1")),
            reply("Deleted web-2, left web-1 running."),
        ]
    )
    client = start_server(Agent(tools=cluster.tools(), runtime=runtime))
    page.goto(str(client.base_url))
    send(page, "clean up")
    restart = page.locator(".card.pending", has_text="restart_pod")
    expect(restart.get_by_role("button", name="Edit", exact=True)).to_have_count(0)  # not editable

    page.locator(".card.pending", has_text="delete_pod").get_by_role(
        "button", name="Approve", exact=True
    ).click()
    expect(page.locator(".card.executed .output")).to_have_text('pod "web-2" deleted')
    expect(restart.get_by_role("button", name="Approve", exact=True)).to_be_enabled()  # still waiting
    expect(page.locator(".message.assistant")).to_have_count(0)  # the model waits for both decisions
    restart.get_by_role("button", name="Reject", exact=True).click()
    restart.get_by_placeholder("Why not? (told to the agent)").fill("users are on it")
    restart.get_by_role("button", name="Send rejection", exact=True).click()

    expect(page.locator(".card.rejected")).to_contain_text("Rejected: users are on it")
    expect(page.locator(".message.assistant").last).to_have_text("Deleted web-2, left web-1 running.")
    assert cluster.deleted == [("default", "web-2")]


def test_a_page_under_a_foreign_name_resolving_to_loopback_can_neither_list_nor_approve(
    browser, start_server, cluster
):
    """DNS rebinding: the attacker's name resolves to 127.0.0.1 (here by Chromium's resolver rules),
    so the attacker's page is same-origin with its own name yet talks to this server. Its Host gives
    it away. The chat page on 127.0.0.1, in the same browser, keeps working."""
    runtime = FakeRuntime(
        [tool_call("delete_pod", name="web-2"), tool_call("delete_pod", name="web-1"), "Done."]
    )
    client = start_server(Agent(tools=cluster.tools(), runtime=runtime, name="ops"))
    port = client.base_url.port
    proposed = client.post(
        "/api/chat", json={"messages": [{"role": "user", "content": "delete web-2"}]}
    ).json()
    [call] = proposed["data"]["tool_calls"]
    foreign = "rebind.attacker.test"
    rebinding = browser.browser_type.launch(
        executable_path=CHROMIUM, args=[f"--host-resolver-rules=MAP {foreign} 127.0.0.1"]
    )
    try:
        attacker = rebinding.new_page()
        landed = attacker.goto(f"http://{foreign}:{port}/")
        listed, approved = attacker.evaluate(
            """async ([conversationId, call]) => {
                const listed = await fetch("/api/conversations");
                const approved = await fetch("/api/chat", {
                    method: "POST",
                    headers: {"content-type": "application/json"},
                    body: JSON.stringify({messages: [{role: "user", content: "", data: {
                        conversation_id: conversationId, tool_calls: [{...call, execute: true}]}}]}),
                });
                return [
                    {status: listed.status, body: await listed.json()},
                    {status: approved.status, body: await approved.json()},
                ];
            }""",
            [proposed["data"]["conversation_id"], call],
        )
        for answer in (listed, approved):
            assert answer["status"] == 421, answer
            assert answer["body"]["error"]["code"] == "host_not_allowed"
        assert cluster.deleted == [], "the rebinding page approved a call"
        assert landed is not None
        assert landed.status == 421, "the server must not serve a foreign name"

        page = rebinding.new_page()
        page.set_default_timeout(10_000)
        page.goto(f"http://127.0.0.1:{port}/")
        send(page, "delete web-1")
        card = page.locator(".card.pending", has_text="web-1")
        card.get_by_role("button", name="Approve", exact=True).click()
        expect(page.locator(".card.executed", has_text="web-1").locator(".output")).to_have_text(
            'pod "web-1" deleted'
        )
        assert cluster.deleted == [("default", "web-1")]
    finally:
        rebinding.close()


def test_stop_ends_the_run_and_the_conversation_goes_on(page, start_server):

    class WaitingRuntime(FakeRuntime):
        """Its first answer never comes: the run waits for the model until it is stopped."""

        async def astream(self, request):
            if len(self.requests) == 0:
                self.requests.append(request)
                await asyncio.Event().wait()
            async for event in super().astream(request):
                yield event

    runtime = WaitingRuntime([reply("never read"), reply("Here is the summary.")])
    client = start_server(Agent(runtime=runtime, name="ops"))
    page.goto(str(client.base_url))

    send(page, "summarize the incident")
    stop = page.get_by_role("button", name="Stop", exact=True)
    expect(stop).to_be_visible()
    stop.click()

    expect(page.locator(".note")).to_have_text("Run stopped.")
    expect(page.locator("#stop")).to_be_hidden()
    send(page, "try again")
    expect(page.locator(".message.assistant").last).to_have_text("Here is the summary.")
    screenshot(page, "stopped-run")


def test_a_running_calls_card_shows_its_arguments_elapsed_time_and_a_progress_bar(page, start_server):
    """docs/ui.md, "The page": a running call's card shows its arguments, how long it has run, and a
    progress bar its reports fill (issue 35, item 3)."""
    reports: queue.Queue[tuple[str, float | None] | None] = queue.Queue()

    @tool(requires_approval=False)
    def snapshot_volume(volume_id: str, context: ToolContext) -> str:
        """Snapshot a volume."""
        while (report := reports.get(timeout=10)) is not None:  # each report when the test says
            context.progress(report[0], fraction=report[1])
        return "snap-1 created"

    runtime = FakeRuntime(
        [tool_calls(tool_call("snapshot_volume", volume_id="vol-7")), reply("Snapshot taken.")]
    )
    client = start_server(Agent(tools=[snapshot_volume], runtime=runtime, name="ops"))
    page.clock.install(time=1_700_000_000)
    page.goto(str(client.base_url))
    page.clock.pause_at(1_700_000_060)  # the browser's time moves only when the test moves it

    send(page, "snapshot vol-7")

    card = page.locator(".card.running")
    expect(card.locator(".tool")).to_have_text("snapshot_volume")
    expect(card.locator(".args")).to_have_text(json.dumps({"volume_id": "vol-7"}, indent=2))
    expect(card.locator(".elapsed")).to_have_text("running for 0 s")
    page.clock.run_for(65_000)
    expect(card.locator(".elapsed")).to_have_text("running for 1 min 05 s")

    reports.put(("copying blocks", 0.2))
    expect(card.locator(".progress")).to_have_text("copying blocks (20%)")
    bar = card.get_by_role("progressbar", name="snapshot_volume progress")
    expect(bar).to_have_js_property("value", 0.2)
    reports.put(("waiting for the provider", None))  # no fraction: the bar only says it goes on
    expect(card.locator(".progress")).to_have_text("waiting for the provider")
    expect(bar).not_to_have_attribute("value", re.compile(".*"))
    reports.put(("copying blocks", 0.6))
    expect(bar).to_have_js_property("value", 0.6)
    screenshot(page, "running-card")
    reports.put(None)

    done = page.locator(".card.executed")
    expect(done.locator(".output")).to_have_text("snap-1 created")
    expect(done.locator(".elapsed, progress")).to_have_count(0)  # the settled card replaced it
    expect(page.locator(".message.assistant").last).to_have_text("Snapshot taken.")


def test_an_approved_calls_running_card_shows_the_arguments_as_edited(page, start_server):
    """docs/ui.md, "The page": the running card shows the arguments the call runs with."""
    go = threading.Event()

    @tool(editable=True)
    def scale(deployment: str, replicas: int) -> str:
        """Scale a deployment."""
        go.wait(timeout=10)
        return f"{deployment} scaled to {replicas}"

    runtime = FakeRuntime([tool_call("scale", deployment="web", replicas=5), reply("Scaled.")])
    client = start_server(Agent(tools=[scale], runtime=runtime))
    page.goto(str(client.base_url))
    send(page, "scale web")
    pending = page.locator(".card.pending")
    pending.get_by_role("button", name="Edit", exact=True).click()
    pending.get_by_label("Edited arguments").fill('{"replicas": 3}')
    pending.get_by_role("button", name="Approve edited", exact=True).click()

    running = page.locator(".card.running")
    expect(running.locator(".args")).to_have_text(json.dumps({"deployment": "web", "replicas": 3}, indent=2))
    go.set()
    expect(page.locator(".card.executed .output")).to_have_text("web scaled to 3")


def test_a_background_calls_progress_and_the_answer_after_it_appear_without_a_reload(
    page, start_server, tmp_path
):
    """docs/ui.md, "The page": a call that runs on a job engine's worker shows the latest progress
    report saved on it, and the turn its end starts (the model's answer) appears in the page, which
    reads the conversation from the store while the job runs, in a conversation reopened too
    (docs/runs.md, "Tools on a job engine")."""
    reports: queue.Queue[tuple[str, float | None] | None] = queue.Queue()

    @tool(background=True)
    def snapshot_volume(volume_id: str, context: ToolContext) -> str:
        """Snapshot a volume."""
        while (report := reports.get(timeout=60)) is not None:  # each report when the test says
            context.progress(report[0], fraction=report[1])
        return "snap-1 created"

    proposing = FakeRuntime([tool_calls(tool_call("snapshot_volume", volume_id="vol-7"))])
    api, engine = api_and_worker(
        [snapshot_volume], proposing, FakeRuntime([reply("vol-7 is saved.")]), tmp_path / "store.sqlite3"
    )
    try:
        client = start_server(api)
        page.goto(str(client.base_url))
        send(page, "snapshot vol-7")
        page.locator(".card.pending").get_by_role("button", name="Approve", exact=True).click()

        card = page.locator(".card", has_text="snapshot_volume")
        reports.put(("copying blocks", 0.2))
        expect(card.locator(".progress")).to_have_text("copying blocks (20%)")
        bar = card.get_by_role("progressbar", name="snapshot_volume progress")
        expect(bar).to_have_js_property("value", 0.2)
        conversation_id = page.locator("#conversation-id").text_content()
        page.goto(f"{client.base_url}#conversation={conversation_id}")
        page.reload()  # reopened: the page watches the running call again
        card = page.locator(".card", has_text="snapshot_volume")
        expect(card.locator(".progress")).to_have_text("copying blocks (20%)")
        reports.put(("copying blocks", 0.6))
        bar = card.get_by_role("progressbar", name="snapshot_volume progress")
        expect(bar).to_have_js_property("value", 0.6)
        screenshot(page, "background-progress")
        reports.put(None)

        expect(page.locator(".card.executed .output")).to_have_text("snap-1 created")
        expect(page.locator(".message.assistant").last).to_have_text("vol-7 is saved.")
        expect(page.locator(".card", has_text="snapshot_volume")).to_have_count(1)
        expect(page.locator(".card progress")).to_have_count(0)
    finally:
        reports.put(None)
        engine.join()


def test_stop_says_stopping_on_the_running_card_until_the_stopped_call_settles_it(page, start_server):
    """docs/ui.md, "The page" (Stop): after Stop the running call's card and the button say
    "stopping" until the settled call arrives; then the card shows it failed, stopped by the cancel
    (issue 35, item 1)."""
    settle = threading.Event()
    snapshots: list[str] = []

    @tool
    def snapshot_volume(volume_id: str, context: ToolContext) -> str:
        """Snapshot a volume."""
        context.progress("copying blocks", fraction=0.2)
        context.cancel_signal.wait(timeout=10)  # until the cancel reached this call
        settle.wait(timeout=10)  # then as long as the test looks at "stopping"
        context.check_cancelled()
        snapshots.append(volume_id)
        return "snap-1 created"

    runtime = FakeRuntime([tool_call("snapshot_volume", volume_id="vol-7"), reply("Stopped, as asked.")])
    client = start_server(Agent(tools=[snapshot_volume], runtime=runtime, name="ops"))
    page.goto(str(client.base_url))
    send(page, "snapshot vol-7")
    page.locator(".card.pending").get_by_role("button", name="Approve", exact=True).click()
    card = page.locator('.card[data-call-id]:has(.tool:text-is("snapshot_volume"))')
    expect(card.locator(".status")).to_have_text("running")
    expect(card.locator(".progress")).to_have_text("copying blocks (20%)")
    stop = page.get_by_role("button", name="Stop", exact=True)

    stop.click()

    expect(card.locator(".status")).to_have_text("stopping")
    expect(card.locator(".args")).to_have_text(json.dumps({"volume_id": "vol-7"}, indent=2))
    stopping = page.get_by_role("button", name="Stopping\u2026", exact=True)
    expect(stopping).to_be_disabled()
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_disabled()
    screenshot(page, "stopping")
    settle.set()

    expect(card.locator(".status")).to_have_text("failed")
    expect(card.locator(".output")).to_contain_text("stopped: the run was cancelled while the tool ran")
    expect(page.locator(".note")).to_have_text("Run stopped.")
    expect(page.locator("#stop")).to_be_hidden()
    assert snapshots == []
    screenshot(page, "stopped-call")


def test_another_clients_cancel_makes_the_page_say_stopping_then_show_the_settled_call(page, tmp_path):
    """docs/ui.md, "The page" (Stop): a cancel another client sends over HTTP, to whichever worker of
    a real `dcaf-like serve --workers 2`, reaches the page as the stream's `cancel_requested` event:
    the running card and the button say "stopping" (once, however often the cancel is sent) until
    the stopped call's settled card replaces it (issue 35)."""
    ledger = tmp_path / "ledger.log"
    port = "0"  # the supervisor binds one and its workers listen on it
    with OpenAICompatibleServer() as model:
        model.call([("drain_node", {"node": "node-7"})])
        env = {
            **{k: v for k, v in os.environ.items() if k != "DCAF_STORE"},
            "DCAF_TEST_LEDGER": str(ledger),
            "DCAF_TEST_OPENAI_URL": model.base_url,
        }
        store = f"sqlite:///{tmp_path / 'conversations.sqlite3'}"
        options = ("--factory", "--port", port, "--workers", "2", "--store", store)
        with dcaf_like_serve("tests/e2e/long_tool_agent.py:make_agent", *options, env=env) as served:
            page.goto(served.url)
            send(page, "drain node-7")
            card = page.locator('.card[data-call-id]:has(.tool:text-is("drain_node"))')
            expect(card.locator(".status")).to_have_text("running")
            expect(card.locator(".progress")).to_have_text("evicting pods (20%)")
            [listed] = httpx.get(f"{served.url}/api/conversations", timeout=10).json()["conversations"]

            for _ in range(2):  # another operator's Stop, sent twice, each on a connection of its own
                cancel = httpx.post(f"{served.url}/api/conversations/{listed['id']}/cancel", timeout=10)
                assert cancel.status_code == 202, cancel.text

            expect(card.locator(".status")).to_have_text("stopping")
            expect(card.locator(".args")).to_have_text(json.dumps({"node": "node-7"}, indent=2))
            expect(page.get_by_role("button", name="Stopping\u2026", exact=True)).to_be_disabled()
            screenshot(page, "stopping-another-client")
            ledger.with_suffix(".release").touch()

            expect(card.locator(".status")).to_have_text("failed")
            expect(card.locator(".output")).to_contain_text(
                "stopped: the run was cancelled while the tool ran"
            )
            expect(page.locator(".note")).to_have_text("Run stopped.")
            expect(page.locator("#stop")).to_be_hidden()
            expect(page.locator(".card")).to_have_count(1)
    assert ledger.read_text() == "started node-7\n"


def test_a_partial_edit_shows_what_stays_and_what_changes_before_it_runs(page, start_server):
    ran: list[dict[str, Any]] = []

    @tool(editable=True)
    def scale(deployment: str, replicas: int, namespace: str = "default") -> str:
        """Scale a deployment."""
        ran.append({"deployment": deployment, "replicas": replicas, "namespace": namespace})
        return f"{deployment} scaled to {replicas}"

    proposal = tool_call("scale", deployment="api", replicas=5, namespace="prod")
    client = start_server(Agent(tools=[scale], runtime=FakeRuntime([proposal, reply("Scaled.")])))
    page.goto(str(client.base_url))
    send(page, "scale api")
    card = page.locator(".card.pending")
    card.get_by_role("button", name="Edit", exact=True).click()

    card.get_by_label("Edited arguments").fill('{"replicas": 3}')

    expect(card.get_by_label("What the edit changes").locator("li")).to_have_text(
        ['deployment: "api" (unchanged)', "replicas: 5 -> 3", 'namespace: "prod" (unchanged)']
    )
    screenshot(page, "7-edit-diff")
    card.get_by_role("button", name="Approve edited", exact=True).click()
    done = page.locator(".card.executed")
    expect(done.locator(".diff li.changed")).to_have_text(["replicas: 5 -> 3"])
    assert ran == [{"deployment": "api", "replicas": 3, "namespace": "prod"}]


def test_approve_all_decides_every_waiting_call_of_the_turn_each_by_its_id(page, start_server, cluster):
    runtime = FakeRuntime(
        [
            tool_calls(tool_call("delete_pod", name="web-1"), tool_call("delete_pod", name="web-2")),
            reply("Both deleted."),
        ]
    )
    client = start_server(Agent(tools=cluster.tools(), runtime=runtime))
    page.goto(str(client.base_url))
    send(page, "delete both")
    expect(page.locator(".card.pending")).to_have_count(2)

    page.get_by_role("button", name="Approve all 2", exact=True).click()

    expect(page.locator(".card.executed")).to_have_count(2)
    expect(page.locator(".message.assistant").last).to_have_text("Both deleted.")
    expect(page.get_by_role("button", name="Approve all 2")).to_have_count(0)
    assert sorted(cluster.deleted) == [("default", "web-1"), ("default", "web-2")]


def test_approve_all_never_covers_an_irreversible_call_without_its_own_confirmation(page, start_server):
    """docs/approvals.md, "What the approver sees": each card shows its tool's risk, and "Approve all"
    leaves an irreversible call waiting unless the box naming it is ticked."""
    ran: list[str] = []

    @tool(risk="reversible")
    def stop_instance(instance: str) -> str:
        """Stop an instance (it can be started again)."""
        ran.append(f"stop {instance}")
        return "stopped"

    @tool(risk="irreversible")
    def terminate_instance(instance: str) -> str:
        """Terminate an instance and its disks."""
        ran.append(f"terminate {instance}")
        return "terminated"

    runtime = FakeRuntime(
        [
            tool_calls(
                tool_call("stop_instance", instance="i-1"), tool_call("terminate_instance", instance="i-2")
            ),
            reply("Stopped i-1."),
            reply("Terminated i-2."),
        ]
    )
    client = start_server(Agent(tools=[stop_instance, terminate_instance], runtime=runtime))
    page.goto(str(client.base_url))
    send(page, "stop i-1 and terminate i-2")
    terminate = page.locator('.card.pending[data-risk="irreversible"]')
    expect(terminate.locator(".risk")).to_have_text("irreversible: cannot be undone")
    expect(page.locator('.card[data-risk="reversible"] .risk')).to_have_text("risk: reversible")
    screenshot(page, "risk-approve-all")

    page.get_by_role("button", name="Approve all 1 reversible", exact=True).click()

    expect(page.locator(".card.executed")).to_have_count(1)
    expect(terminate).to_have_count(1)  # still waiting for its own decision
    assert ran == ["stop i-1"]
    terminate.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator(".card.executed")).to_have_count(2)
    assert ran == ["stop i-1", "terminate i-2"]


def test_approve_all_covers_an_irreversible_call_once_its_box_is_ticked(page, start_server):
    """docs/approvals.md, "What the approver sees": the explicit confirmation lets one click approve all."""
    ran: list[str] = []

    @tool(risk="irreversible")
    def terminate_instance(instance: str) -> str:
        """Terminate an instance and its disks."""
        ran.append(instance)
        return "terminated"

    runtime = FakeRuntime(
        [
            tool_calls(
                tool_call("terminate_instance", instance="i-1"),
                tool_call("terminate_instance", instance="i-2"),
            ),
            reply("Both terminated."),
        ]
    )
    client = start_server(Agent(tools=[terminate_instance], runtime=runtime))
    page.goto(str(client.base_url))
    send(page, "terminate both")
    expect(page.get_by_role("button", name="Approve all 0 reversible", exact=True)).to_be_disabled()

    page.get_by_label("also approve the 2 irreversible calls (cannot be undone)").check()
    page.get_by_role("button", name="Approve all 2", exact=True).click()

    expect(page.locator(".card.executed")).to_have_count(2)
    assert sorted(ran) == ["i-1", "i-2"]


def test_a_card_shows_the_preview_as_a_diff_and_a_stale_one_comes_back_for_a_new_approval(page, start_server):
    """docs/approvals.md, "What the approver sees": the diff's + and - lines coloured; approving binds
    to the preview shown, and a call whose preview went stale waits again with the new one."""
    replicas = {"api": 2}
    ran: list[int] = []

    def plan(deployment: str, count: int) -> str:
        head = f"--- {deployment}\n+++ {deployment}\n@@ spec @@\n"
        return f"{head}-replicas: {replicas[deployment]}\n+replicas: {count}"

    @tool(preview=plan, recheck=True, risk="reversible")
    def scale(deployment: str, count: int) -> str:
        """Scale a deployment."""
        ran.append(count)
        replicas[deployment] = count
        return f"{deployment} scaled to {count}"

    runtime = FakeRuntime([tool_call("scale", deployment="api", count=5), reply("Scaled.")])
    client = start_server(Agent(tools=[scale], runtime=runtime))
    page.goto(str(client.base_url))
    send(page, "scale api to 5")
    card = page.locator(".card.pending")
    diff = card.get_by_label("What it would do")
    expect(diff.locator(".line.del")).to_have_text(["-replicas: 2"])
    expect(diff.locator(".line.add")).to_have_text(["+replicas: 5"])
    assert diff.locator(".line.add").evaluate("line => getComputedStyle(line).color") == "rgb(22, 101, 52)"
    screenshot(page, "preview-diff")

    replicas["api"] = 3  # the world changed after the approver looked
    card.get_by_role("button", name="Approve", exact=True).click()

    expect(page.locator(".card.pending").get_by_label("What it would do").locator(".line.del")).to_have_text(
        ["-replicas: 3"]
    )
    assert ran == []
    page.locator(".card.pending").get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator(".card.executed")).to_have_count(1)
    assert ran == [5]


def test_on_a_phone_the_chat_fills_the_screen_and_send_can_be_pressed(browser, start_server, cluster):
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.set_default_timeout(10_000)
    try:
        runtime = FakeRuntime([tool_call("delete_pod", name="web-2"), reply("Deleted.")])
        client = start_server(Agent(tools=cluster.tools(), runtime=runtime, name="ops"))
        page.goto(str(client.base_url))

        chat = page.locator("#chat").bounding_box()
        assert chat["width"] >= 370, f"the chat column is {chat['width']} px wide on a 390 px screen"
        assert page.evaluate("document.documentElement.scrollWidth") <= 390  # nothing sticks out sideways
        send_button = page.get_by_role("button", name="Send", exact=True)
        box = send_button.bounding_box()
        assert box["x"] + box["width"] <= 390
        on_top = page.evaluate(
            "([x, y]) => document.elementFromPoint(x, y).id", [box["x"] + box["width"] / 2, box["y"] + 5]
        )
        assert on_top == "send", f"{on_top!r} covers the Send button"

        send(page, "delete web-2")
        card = page.locator(".card.pending")
        assert card.bounding_box()["width"] <= 390
        screenshot(page, "8-phone-approval")
        card.get_by_role("button", name="Approve", exact=True).click()
        expect(page.locator(".message.assistant").last).to_have_text("Deleted.")

        page.get_by_role("button", name="Conversations").click()
        expect(page.locator("#conversations li")).to_have_count(1)
        screenshot(page, "9-phone-conversations")
        page.locator("#conversations button").click()
        expect(page.locator("#sidebar")).to_be_hidden()
        assert cluster.deleted == [("default", "web-2")]
    finally:
        context.close()


def test_a_link_to_a_conversation_opens_it_with_its_waiting_call(page, start_server, cluster):
    runtime = FakeRuntime([tool_call("delete_pod", name="web-2"), reply("Deleted.")])
    agent = Agent(tools=cluster.tools(), runtime=runtime)
    client = start_server(agent)
    proposal = agent.run("delete web-2")

    page.goto(f"{client.base_url}/#conversation={proposal.conversation_id}")

    card = page.locator(".card.pending")
    expect(card.locator(".tool")).to_have_text("delete_pod")
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator(".message.assistant").last).to_have_text("Deleted.")
    assert cluster.deleted == [("default", "web-2")]


def test_a_command_shows_as_the_argv_it_runs_and_runs_once_approved(page, start_server, tmp_path):
    from dcaf_like import LocalCommandRunner, command_tool

    kubectl = tmp_path / "kubectl"
    kubectl.write_text('#!/bin/sh\necho "deployment.apps/$3 restarted"\n')
    kubectl.chmod(0o755)
    runner = LocalCommandRunner(allow={"kubectl": str(kubectl)})
    argv = ["kubectl", "rollout", "restart", "web app", "-n", "prod"]
    runtime = FakeRuntime([tool_call("run_command", argv=argv), reply("Restarted.")])
    agent = Agent(tools=[command_tool(runner)], runtime=runtime)
    client = start_server(agent)
    page.goto(str(client.base_url))

    send(page, "restart web")

    card = page.locator(".card.pending")
    expect(card.locator(".tool")).to_have_text("command")
    expect(card.locator(".args")).to_have_text("$ kubectl rollout restart 'web app' -n prod")
    expect(card.get_by_role("button", name="Edit", exact=True)).to_have_count(0)
    screenshot(page, "5-command-card")
    card.get_by_role("button", name="Approve", exact=True).click()

    ran = page.locator(".card.executed")
    expect(ran.locator(".args")).to_have_text("$ kubectl rollout restart 'web app' -n prod")
    expect(ran.locator(".output")).to_have_text("deployment.apps/web app restarted\n")
    expect(page.locator(".message.assistant").last).to_have_text("Restarted.")

    [conversation] = client.get("/api/conversations").json()["conversations"]
    page.goto(f"{client.base_url}/#conversation={conversation['id']}")
    page.reload()
    expect(page.locator(".card.executed .args")).to_have_text("$ kubectl rollout restart 'web app' -n prod")


def test_a_command_card_shows_its_dry_run_and_the_approval_echoes_the_preview_shown(
    page, start_server, tmp_path
):
    """docs/approvals.md, "A command's dry run": the card of a command whose program declares a dry
    run shows the dry run's output, and its approval is bound to it (the ``preview_digest`` shown)."""
    import json

    from dcaf_like import LocalCommandRunner, command_tool
    from dcaf_like.commands import Program, kubectl_dry_run

    kubectl = tmp_path / "kubectl"
    kubectl.write_text('#!/bin/sh\necho "pod/$3 deleted ($*)"\n')
    kubectl.chmod(0o755)
    runner = LocalCommandRunner(allow=[Program("kubectl", str(kubectl), dry_run=kubectl_dry_run)])
    argv = ["kubectl", "delete", "pod", "web-2", "-n", "prod"]
    runtime = FakeRuntime([tool_call("run_command", argv=argv), reply("Deleted.")])
    client = start_server(Agent(tools=[command_tool(runner)], runtime=runtime))
    sent: list[dict] = []
    page.on("request", lambda r: sent.append(json.loads(r.post_data or "{}")) if r.method == "POST" else None)
    page.goto(str(client.base_url))

    send(page, "delete web-2")

    card = page.locator(".card.pending")
    expect(card.locator(".preview")).to_have_text(
        "pod/web-2 deleted (delete pod web-2 -n prod --dry-run=server -o yaml)\n"
    )
    shown = card.get_attribute("data-preview-digest")
    card.get_by_role("button", name="Approve", exact=True).click()
    expect(page.locator(".card.executed .output")).to_have_text(
        "pod/web-2 deleted (delete pod web-2 -n prod)\n"
    )
    [decision] = sent[-1]["messages"][-1]["data"]["cmds"]
    assert decision["execute"] is True
    assert shown
    assert decision["preview_digest"] == shown


WHERE_AGENT_SCRIPT = [tool_calls("where"), reply("There."), tool_calls("where"), reply("Still there.")]


def where_agent() -> Agent:
    @tool(requires_approval=False)
    def where(context: ToolContext) -> str:
        """Say where the agent acts."""
        return f"{context.platform_context.get('tenant')}/{context.session.get('namespace', 'default')}"

    return Agent(tools=[where], runtime=FakeRuntime(WHERE_AGENT_SCRIPT))


def test_in_developer_mode_the_session_and_platform_context_are_edited_and_sent(page, start_server):
    client = start_server(where_agent())
    page.goto(str(client.base_url) + "/?dev=1")

    page.get_by_label("Session (data.session)").fill('{"namespace": "prod"}')
    page.get_by_label("Platform context").fill('{"tenant": "acme"}')
    send(page, "where are you?")

    expect(page.locator(".card.executed pre.output").last).to_have_text("acme/prod")
    expect(page.locator(".message.assistant").last).to_have_text("There.")
    screenshot(page, "10-developer-mode")
    # The session shown is the server's after the turn; edited again, the next message sends it.
    expect(page.get_by_label("Session (data.session)")).to_have_value('{\n  "namespace": "prod"\n}')
    page.get_by_label("Session (data.session)").fill('{"namespace": "staging"}')
    send(page, "and now?")
    expect(page.locator(".card.executed pre.output").last).to_have_text("acme/staging")


def test_developer_mode_refuses_json_that_is_not_an_object_and_sends_nothing(page, start_server):
    agent = where_agent()
    client = start_server(agent)
    page.goto(str(client.base_url) + "/?dev=1")

    page.get_by_label("Platform context").fill("[1, 2]")
    send(page, "where are you?")

    expect(page.locator("#error")).to_have_text("Platform context must be a JSON object ({...})")
    assert agent.runtime.requests == []


def test_without_developer_mode_the_page_shows_the_session_and_offers_no_editor(page, start_server):
    client = start_server(where_agent())
    page.goto(str(client.base_url))

    expect(page.locator("#session")).to_be_visible()
    expect(page.locator("#dev")).to_be_hidden()


def test_a_conversation_opened_again_shows_an_edited_call_as_run_and_a_rejected_one_with_its_reason(
    page, start_server, cluster
):
    runtime = FakeRuntime(
        [
            tool_calls(tool_call("delete_pod", name="web-1"), tool_call("restart_pod", name="web-3")),
            reply("Deleted web-2; left web-3."),
        ]
    )
    agent = Agent(tools=cluster.tools(), runtime=runtime)
    client = start_server(agent)
    proposal = agent.run("delete web-1, restart web-3")
    delete, restart = proposal.pending_tool_calls
    agent.approve(proposal.conversation_id, delete.id, edited_arguments={"name": "web-2"})
    agent.reject(proposal.conversation_id, restart.id, "not now")

    page.goto(f"{client.base_url}/#conversation={proposal.conversation_id}")

    ran = page.locator(".card.executed")
    expect(ran.locator(".args")).to_have_text('{"name":"web-2","namespace":"default"}')  # as it ran
    expect(ran).to_contain_text('proposed: {"name":"web-1","namespace":"default"}')
    expect(ran.locator(".diff li")).to_have_text(
        ['name: "web-1" -> "web-2"', 'namespace: "default" (unchanged)']
    )
    expect(page.locator(".card.rejected")).to_contain_text("Rejected: not now")
    assert cluster.deleted == [("default", "web-2")]


def test_a_question_shows_as_a_form_and_the_model_reads_the_answer(page, start_server):
    from dcaf_like import ask_user

    def told(request: ModelRequest) -> ModelResponse:
        return ModelResponse(text=f"You said: {request.messages[-1].content}.")

    pick = tool_call("ask_user", question="Which namespace?", kind="selection", options=["prod", "staging"])
    sure = tool_call("ask_user", question="Delete every pod of staging?", kind="confirmation")
    why = tool_call("ask_user", question="Why now?")
    runtime = FakeRuntime([tool_calls(pick), tool_calls(sure), tool_calls(why), told])
    client = start_server(Agent(tools=[ask_user], runtime=runtime))
    page.goto(str(client.base_url))
    send(page, "clean up")

    selection = page.locator(".card.question")
    expect(selection.locator(".prompt")).to_have_text("Which namespace?")
    expect(selection.get_by_role("button")).to_have_text(["prod", "staging", "Decline"])
    screenshot(page, "5-question")
    selection.get_by_role("button", name="staging", exact=True).click()

    confirmation = page.locator(".card.question", has_text="Delete every pod of staging?")
    expect(confirmation.get_by_role("button")).to_have_text(["Yes", "No", "Decline"])
    confirmation.get_by_role("button", name="Yes", exact=True).click()

    text = page.locator(".card.question", has_text="Why now?")
    text.get_by_label("Answer").fill("the release is tonight")
    text.get_by_role("button", name="Answer", exact=True).click()

    expect(page.locator(".message.assistant").last).to_have_text("You said: the release is tonight.")
    results = [m.content for m in runtime.requests[-1].messages if isinstance(m, ToolResult)]
    assert results == ["staging", "yes", "the release is tonight"]
    expect(page.locator(".card.question")).to_have_count(0)


def test_a_question_reopened_from_the_list_can_still_be_answered(page, start_server):
    from dcaf_like import ask_user

    sure = tool_call("ask_user", question="Restart web?", kind="confirmation")
    client = start_server(
        Agent(tools=[ask_user], runtime=FakeRuntime([tool_calls(sure), reply("Not restarted.")]))
    )
    asked = client.post("/api/chat", json={"messages": [{"role": "user", "content": "restart web"}]}).json()
    page.goto(str(client.base_url))

    page.locator("#conversations button").first.click()
    card = page.locator(".card.question")
    expect(card.locator(".prompt")).to_have_text("Restart web?")
    card.get_by_role("button", name="No", exact=True).click()

    expect(page.locator(".message.assistant").last).to_have_text("Not restarted.")
    stored = client.get(f"/api/conversations/{asked['data']['conversation_id']}").json()
    assert [(q["status"], q["answer"]) for q in stored["questions"]] == [("answered", False)]


def test_a_questions_deadline_shows_on_its_card_live_and_reopened_and_past_it_the_card_says_it_expired(
    browser, start_server
):
    from dcaf_like import ask_user

    two_pm = 1_699_966_800.0  # 14 Nov 2023, 14:00 in Paris: the agent's clock and the browser's
    clock = ManualClock(two_pm)
    sure = tool_call("ask_user", question="Restart web?", kind="confirmation")
    runtime = FakeRuntime([tool_calls(sure)])
    client = start_server(Agent(tools=[ask_user], runtime=runtime, question_ttl=300, clock=clock))
    context = browser.new_context(
        viewport={"width": 1100, "height": 760}, locale="en-GB", timezone_id="Europe/Paris"
    )
    page = context.new_page()
    page.set_default_timeout(10_000)
    scripts_failed: list[str] = []
    page.on("pageerror", lambda error: scripts_failed.append(str(error)))
    try:
        page.clock.install(time=two_pm - 60)
        page.goto(str(client.base_url))
        page.clock.pause_at(two_pm)  # the browser's time moves only when the test moves it

        send(page, "restart web")
        live = page.locator(".card.question")
        expect(live.locator(".deadline")).to_have_text("answer by 14:05")  # local time, not UTC's 13:05
        expect(live.get_by_role("button")).to_have_text(["Yes", "No", "Decline"])
        screenshot(page, "5b-question-deadline")

        reopen(page)  # within the window
        reopened = page.locator(".card.question")
        expect(reopened.locator(".deadline")).to_have_text("answer by 14:05")

        page.clock.fast_forward("05:00")  # 14:05: the window closes, on the card left open
        clock.advance(300)
        card = page.locator(".card", has_text="Restart web?")
        expect(card.locator(".status")).to_have_text("expired")
        expect(card.locator(".deadline")).to_have_text(
            "This question expired at 14:05: it can no longer be answered."
        )
        expect(card.get_by_role("button")).to_have_count(0)
        expect(card.locator("input")).to_have_count(0)

        reopen(page)  # past the window: the card says so at once
        expect(card.locator(".status")).to_have_text("expired")
        expect(card.locator(".deadline")).to_have_text(
            "This question expired at 14:05: it can no longer be answered."
        )
        expect(card.get_by_role("button")).to_have_count(0)
        screenshot(page, "5c-question-expired")
    finally:
        context.close()
    assert scripts_failed == [], "the page's script threw"


def reopen(page: Any) -> None:
    """The conversation opened again from the list, on an empty log (no card left from before)."""
    page.get_by_role("button", name="New chat").click()
    expect(page.locator(".card")).to_have_count(0)
    page.locator("#conversations button").first.click()


def test_an_answer_the_server_refuses_as_expired_turns_the_card_to_expired(page, start_server):
    from dcaf_like import ask_user

    two_pm = 1_699_966_800.0
    clock = ManualClock(two_pm)  # the agent's clock, which the browser's lags behind once moved
    sure = tool_call("ask_user", question="Restart web?", kind="confirmation")
    runtime = FakeRuntime([tool_calls(sure)])
    client = start_server(Agent(tools=[ask_user], runtime=runtime, question_ttl=3600, clock=clock))
    page.clock.install(time=two_pm - 60)
    page.goto(str(client.base_url))
    page.clock.pause_at(two_pm)
    send(page, "restart web")
    card = page.locator(".card", has_text="Restart web?")
    expect(card.get_by_role("button")).to_have_text(["Yes", "No", "Decline"])

    clock.advance(3600)  # the server's window closed; the page's clock says an hour is left
    card.get_by_role("button", name="Yes", exact=True).click()

    expect(card.locator(".card-error")).to_contain_text("409 question_expired")
    expect(card.locator(".status")).to_have_text("expired")
    expect(card.get_by_role("button")).to_have_count(0)


# -- attachments -------------------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 64


def attach(page: Any, *files: dict[str, Any]) -> None:
    page.locator("#attach-input").set_input_files(list(files))


def test_a_user_attaches_an_image_and_a_file_and_the_model_gets_them_with_the_text(page, start_server):
    import base64

    runtime = FakeRuntime([reply("A crash loop.")], accepts={"image", "file"})
    agent = Agent(runtime=runtime)
    client = start_server(agent)
    page.goto(str(client.base_url))

    attach(
        page,
        {"name": "cpu.png", "mimeType": "image/png", "buffer": PNG},
        {"name": "events.txt", "mimeType": "text/plain", "buffer": b"BackOff restarting"},
    )
    expect(page.get_by_label("Attached files").locator("li")).to_have_count(2)
    send(page, "what is wrong here?")

    expect(page.locator(".message.assistant")).to_have_text("A crash loop.")
    sent = page.locator(".message.user")
    expect(sent).to_contain_text("what is wrong here?")
    expect(sent.locator(".attachment")).to_have_text(["cpu.png", "events.txt"])
    expect(page.get_by_label("Attached files")).to_be_hidden()
    screenshot(page, "attachments-sent")
    [turn] = runtime.requests[0].messages
    assert turn.text == "what is wrong here?"
    assert [
        (a.kind.value, a.media_type, a.name, base64.b64decode(a.data or "")) for a in turn.attachments
    ] == [
        ("image", "image/png", "cpu.png", PNG),
        ("file", "text/plain", "events.txt", b"BackOff restarting"),
    ]


def test_a_refused_attachment_shows_the_servers_error_and_is_offered_again(page, start_server):
    runtime = FakeRuntime(["never"])  # reads text only
    client = start_server(Agent(runtime=runtime))
    page.goto(str(client.base_url))

    attach(page, {"name": "cpu.png", "mimeType": "image/png", "buffer": PNG})
    send(page, "look")

    error = page.locator("#error")
    expect(error).to_contain_text("422 unsupported_part")
    expect(error).to_contain_text("takes no image parts")
    expect(page.get_by_label("Attached files").locator("li")).to_contain_text(["cpu.png"])
    assert runtime.requests == []
    page.get_by_role("button", name="Remove cpu.png").click()
    expect(page.get_by_label("Attached files")).to_be_hidden()


def test_a_file_over_the_limit_is_not_attached_and_the_page_says_why(page, start_server):
    client = start_server(Agent(runtime=FakeRuntime([], accepts={"file"})))
    page.goto(str(client.base_url))

    attach(
        page,
        {"name": "dump.bin", "mimeType": "application/octet-stream", "buffer": b"\0" * (5 * 1024 * 1024 + 1)},
    )

    expect(page.locator("#error")).to_contain_text("dump.bin is 5.0 MiB: a file may be at most 5 MiB")
    expect(page.get_by_label("Attached files")).to_be_hidden()


def test_a_tools_image_and_file_show_on_its_card_by_name_kind_and_size_live_and_reopened(page, start_server):
    import base64

    hostile = "<img src=x onerror=\"document.title='owned'\">.csv"

    @tool(requires_approval=False)
    def render_panel(panel: str) -> ToolOutput:
        """Render a Grafana panel as a PNG, with its data."""
        image = attachment("image", media_type="image/png", data=base64.b64encode(PNG).decode())
        rows = attachment(
            "file", media_type="text/csv", name=hostile, data=base64.b64encode(b"t,p99\n" * 300).decode()
        )
        return ToolOutput(f"panel {panel}", (image, rows))

    runtime = FakeRuntime(
        [tool_calls(tool_call("render_panel", panel="latency")), reply("p99 is up.")],
        accepts={"image", "file"},
    )
    client = start_server(Agent(tools=[render_panel], runtime=runtime))
    page.goto(str(client.base_url))
    shown = ["image/png · image · 72 bytes", f"{hostile} · file · 1.8 KiB"]

    send(page, "is latency up?")

    card = page.locator(".card.executed", has_text="render_panel")
    expect(card.locator(".output")).to_have_text("panel latency")
    expect(card.locator(".returned .attachment")).to_have_text(shown)
    expect(page.locator(".message.assistant")).to_have_text("p99 is up.")
    screenshot(page, "tool-attachments")
    page.reload()
    page.locator("#conversations button", has_text="is latency up?").click()
    expect(page.locator(".card.executed .returned .attachment")).to_have_text(shown)
    assert page.locator("#log img").count() == 0  # a name is text, never markup; no bytes to show
    assert page.title() != "owned"


def test_a_call_a_grant_approved_runs_and_its_card_says_by_which_grant(page, start_server):
    """docs/approvals.md, "Grants": the card of a call a standing grant approved says "approved by
    grant g_... from bob"; an irreversible call the same grant names still waits on its card."""
    ran: list[str] = []

    @tool(risk="reversible")
    def restart_pod(name: str) -> str:
        """Restart a pod."""
        ran.append(f"restart {name}")
        return "restarted"

    @tool(risk="irreversible")
    def delete_pod(name: str) -> str:
        """Delete a pod."""
        ran.append(f"delete {name}")
        return "deleted"

    runtime = FakeRuntime(
        [
            tool_calls(tool_call("restart_pod", name="web-1"), tool_call("delete_pod", name="web-2")),
            reply("Restarted web-1."),
        ]
    )
    agent = Agent(tools=[restart_pod, delete_pod], runtime=runtime)
    grant = agent.grant("restart_pod", requester="*", duration=600)
    agent.grant("delete_pod", requester="*", duration=600)
    client = start_server(agent)
    page.goto(str(client.base_url))
    send(page, "restart web-1 and delete web-2")

    restarted = page.locator(".card.executed", has_text="restart_pod")
    expect(restarted.locator(".grant")).to_have_text(f"approved by grant {grant.id} from operator")
    expect(page.locator('.card.pending[data-risk="irreversible"]')).to_have_count(1)
    screenshot(page, "grant-approved")
    assert ran == ["restart web-1"]
