"""The page's Inbox view in a real headless Chromium (docs/approvals.md, "One inbox"): an approver
approves calls from two conversations without opening either."""

from __future__ import annotations

from typing import Any

import test_ui_browser as ui

from dcaf_like import Agent, ApprovalPolicy, InMemoryConversationRepository, approvers, require_approval, tool
from dcaf_like.application.messages import ModelRequest, ModelResponse, UserTurn
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls

# The chat page's browser and page fixtures, and its helpers.
browser, page, expect, screenshot = ui.browser, ui.page, ui.expect, ui.screenshot
CAROL = "carol-key-0123456789abcdef0"
ALICE = "alice-key-0123456789abcdef0"
KEYS = {CAROL: "carol:chat+approve+read", ALICE: "alice:approve+approve:sre"}


def test_one_inbox_an_approver_approves_calls_of_two_conversations_without_opening_them(page, start_server):
    deleted: list[str] = []

    @tool
    def delete_pod(name: str) -> str:
        """Delete a pod."""
        deleted.append(name)
        return f"deleted {name}"

    def deleting(request: ModelRequest) -> ModelResponse:
        last = request.messages[-1]
        if isinstance(last, UserTurn):
            return tool_calls(tool_call("delete_pod", name=last.text.split()[-1]))
        return reply("Done.")

    agent = Agent(
        tools=[delete_pod],
        runtime=FakeRuntime([deleting] * 8),
        repository=InMemoryConversationRepository(),
        approval_policy=ApprovalPolicy([require_approval("an SRE decides", approvers=approvers(1, "sre"))]),
    )
    client = start_server(agent, api_keys=KEYS)
    for pod in ("web-1", "web-2"):  # carol asks, in two conversations
        asked: Any = client.post(
            "/api/chat",
            headers={"X-API-Key": CAROL},
            json={"messages": [{"role": "user", "content": f"delete {pod}"}]},
        )
        assert asked.status_code == 200, asked.text

    page.goto(str(client.base_url))
    page.get_by_label("API key").fill(ALICE)
    page.get_by_role("button", name="Use key", exact=True).click()
    page.get_by_role("button", name="Inbox", exact=True).click()

    items = page.locator("#inbox-list .inbox-item")
    expect(items).to_have_count(2)
    expect(items.first).to_contain_text("web-2")  # newest first
    expect(items.first.locator(".inbox-where")).to_contain_text("asked by carol")
    expect(items.first.locator(".inbox-needs")).to_contain_text("stage 1: 1 more from sre")
    screenshot(page, "inbox-two-conversations")
    for _ in range(2):
        page.locator("#inbox-list .inbox-item").first.get_by_role(
            "button", name="Approve", exact=True
        ).click()
        expect(page.locator("#inbox-list .inbox-done").last).to_contain_text("Approved delete_pod")

    expect(page.locator("#inbox-list .inbox-done")).to_have_count(2)
    assert sorted(deleted) == ["web-1", "web-2"]
    expect(page.locator("#chat")).to_be_hidden()  # neither conversation was opened
    page.get_by_role("button", name="Refresh", exact=True).click()
    expect(page.locator("#inbox-list")).to_have_text("Nothing waits for your decision.")


def test_the_chat_page_shows_a_team_calls_approvals_so_far_and_what_it_still_needs(page, start_server):
    """docs/approvals.md, "Approvals by teams": a partial approval is shown on the page's card of the
    call, beside its rule, with what the call still needs."""
    bob = "bob-key-0123456789abcdef0123"

    @tool(approvers=approvers(2, "sre"))
    def delete_pod(name: str) -> str:
        """Delete a pod."""
        return f"deleted {name}"

    agent = Agent(
        tools=[delete_pod],
        runtime=FakeRuntime([tool_calls(tool_call("delete_pod", name="web-1"))]),
        repository=InMemoryConversationRepository(),
    )
    client = start_server(agent, api_keys={**KEYS, bob: "bob:approve+approve:sre"})
    asked: Any = client.post(
        "/api/chat",
        headers={"X-API-Key": CAROL},
        json={"messages": [{"role": "user", "content": "delete web-1"}]},
    ).json()
    [pending] = asked["data"]["tool_calls"]
    counted = client.post(
        "/api/chat",
        headers={"X-API-Key": ALICE},
        json={
            "conversation_id": asked["data"]["conversation_id"],
            "messages": [
                {"role": "user", "content": "", "data": {"tool_calls": [{**pending, "execute": True}]}}
            ],
        },
    )
    assert counted.status_code == 200, counted.text

    page.goto(str(client.base_url))
    page.get_by_label("API key").fill(CAROL)
    page.get_by_role("button", name="Use key", exact=True).click()
    page.locator("#conversations button").first.click()

    card = page.locator(".card.pending", has_text="delete_pod")
    expect(card.locator(".approvals .rule")).to_contain_text("2 approvers from sre")
    expect(card.locator(".approvals .rule")).to_contain_text("approved by alice")
    expect(card.locator(".approvals .needs")).to_have_text("Needs 1 more from sre")
    screenshot(page, "team-call-partly-approved")
