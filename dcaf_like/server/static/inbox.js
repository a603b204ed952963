// The Inbox view of the chat page (docs/approvals.md, "One inbox"): every call waiting for this key's
// decision across conversations (GET api/approvals), each decided where it is listed, without
// opening its conversation. A decision is the request any client sends: decisions only, for the
// call's conversation, with the platform context it was proposed in. Uses app.js's `request`, `el`
// and `errorText`.
"use strict";

const inbox = { cursor: null, open: false };

function showInbox(open) {
  inbox.open = open;
  $("inbox").hidden = !open;
  $("chat").hidden = open;
  $("show-inbox").setAttribute("aria-pressed", String(open));
  if (open) loadInbox(null);
}

async function loadInbox(cursor) {
  let page;
  try {
    page = await (await request(`api/approvals?limit=50${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`)).json();
  } catch (error) {
    $("inbox-list").replaceChildren(el("li", { class: "card-error", role: "alert" }, errorText(error)));
    return;
  }
  inbox.cursor = page.next_cursor;
  $("inbox-more").hidden = !page.next_cursor;
  const cards = page.approvals.map(inboxCard);
  if (cursor) $("inbox-list").append(...cards);
  else $("inbox-list").replaceChildren(...(cards.length ? cards : [el("li", { class: "inbox-empty" }, "Nothing waits for your decision.")]));
}

function needsText(call) {
  return call.eligible.map((e) => `stage ${e.stage}: ${e.count} more`
    + (e.groups.length ? ` from ${e.groups.join(" or ")}` : "")
    + (e.members.length ? ` (${e.members.join(", ")})` : "")).join("; ");
}

function inboxCard(call) {
  const given = call.given.map((g) => g.by).join(", ");
  const reason = el("input", { type: "text", class: "inbox-reason", placeholder: "Why reject (optional)", "aria-label": "Rejection reason" });
  const card = el("li", { class: "card pending inbox-item", "data-call-id": call.id, "data-conversation-id": call.conversation_id },
    el("div", { class: "call-title" }, call.name),
    el("pre", { class: "args" }, JSON.stringify(call.input, null, 2)),
    el("p", { class: "inbox-where" }, `in ${call.conversation_id}` + (call.requested_by ? `, asked by ${call.requested_by}` : "")),
    call.approval_reason ? el("p", { class: "reason" }, call.approval_reason) : null,
    el("p", { class: "inbox-rule" }, call.rule + (given ? ` · approved by ${given}` : "")),
    el("p", { class: "inbox-needs" }, "Needs " + (needsText(call) || "one approval")),
    el("div", { class: "actions" },
      el("button", { type: "button", class: "approve", onclick: () => decideFromInbox(card, call, true, "") }, "Approve"),
      reason,
      el("button", { type: "button", class: "reject", onclick: () => decideFromInbox(card, call, false, reason.value) }, "Reject")));
  return card;
}

async function decideFromInbox(card, call, approve, reason) {
  const decided = { id: call.id, name: call.name, input: call.input, execute: approve };
  if (!approve) decided.rejection_reason = reason || "rejected from the inbox";
  card.querySelectorAll("button").forEach((b) => { b.disabled = true; });
  card.querySelectorAll(".card-error").forEach((node) => node.remove());
  try {
    await request("api/chat", {
      method: "POST",
      body: JSON.stringify({
        conversation_id: call.conversation_id,
        platform_context: call.platform_context,
        messages: [{ role: "user", content: "", data: { tool_calls: [decided] } }],
      }),
    });
  } catch (error) {
    card.querySelector(".actions").before(el("p", { class: "card-error", role: "alert" }, errorText(error)));
    card.querySelectorAll("button").forEach((b) => { b.disabled = false; });
    return;
  }
  card.replaceWith(el("li", { class: "card inbox-done", "data-call-id": call.id },
    `${approve ? "Approved" : "Rejected"} ${call.name} in ${call.conversation_id}`));
  loadConversations();
}

$("show-inbox").addEventListener("click", () => showInbox(!inbox.open));
$("inbox-refresh").addEventListener("click", () => loadInbox(null));
$("inbox-more").addEventListener("click", () => loadInbox(inbox.cursor));
