// The chat page of a dcaf_like agent. It speaks the server's own protocol (docs/protocol.md):
// POST api/chat-stream (NDJSON events) for turns and decisions, GET api/conversations to list and
// reopen conversations. Every piece of model or tool text goes into the page as text, never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const KEY = "dcaf_like.api_key";
// `calls`: the arguments of each call this page has seen proposed (or edited), by id, for its running
// card; `stopping`: a cancel of the run under way was accepted (or the stream said it saw one).
const state = {
  conversationId: null, assistant: null, busy: false, streamed: false, attached: [], calls: new Map(), stopping: false,
};
// Developer mode (?dev=1): the session and the platform context can be edited and are sent with each
// message, as any client may send them (they are the client's, never authority).
const DEV = new URLSearchParams(location.search).get("dev") === "1";

// An element with attributes and children; strings become text nodes.
function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (value !== false && value != null) node.setAttribute(name, value === true ? "" : value);
  }
  node.append(...children.filter((child) => child != null));
  return node;
}

const pretty = (value) => JSON.stringify(value, null, 2);

// -- talking to the server ------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code || "http_error";
    this.requestId = error.request_id;
    this.preview = error.preview; // the call's current preview, when a decision echoed another
  }
}

function headers() {
  const result = { "content-type": "application/json" };
  const key = sessionStorage.getItem(KEY);
  if (key) result.authorization = `Bearer ${key}`;
  return result;
}

async function request(path, options = {}) {
  const response = await fetch(path, { ...options, headers: headers() });
  if (response.ok) return response;
  let body = null;
  try { body = await response.json(); } catch (_) { /* not JSON: the status says enough */ }
  const error = new ApiError(response.status, body);
  if (response.status === 401) askForKey();
  throw error;
}

// A new conversation's id, chosen here so that Stop can name it during its first turn.
function newConversationId() {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return "conv_" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

// One turn: the user's text, decisions (on calls, and on commands, which go in `cmds`) and/or answers
// to questions. Events are handled as each line arrives.
async function turn(content, decisions, commandDecisions, answers) {
  if (!state.conversationId) state.conversationId = newConversationId();
  const data = { conversation_id: state.conversationId };
  $("stop").hidden = false; // hidden again when the exchange ends (run)
  $("stop").disabled = false;
  if (decisions) data.tool_calls = decisions;
  if (commandDecisions) data.cmds = commandDecisions;
  if (answers) data.answers = answers;
  const message = { role: "user", content, data };
  if (DEV) {
    data.session = jsonObject("dev-session", "Session");
    const context = jsonObject("dev-context", "Platform context");
    if (Object.keys(context).length) message.platform_context = context;
  }
  const body = JSON.stringify({ messages: [message] });
  const response = await request("api/chat-stream", { method: "POST", body });
  state.streamed = false;
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
    let end;
    while ((end = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, end).trim();
      buffer = buffer.slice(end + 1);
      if (line) handle(JSON.parse(line));
    }
    if (done) break;
  }
}

// -- the stream's events --------------------------------------------------------------------------

function handle(event) {
  switch (event.type) {
    case "text_delta": assistantBubble().append(event.text); state.streamed = true; break;
    case "reasoning_delta": assistantBubble().append(el("span", { class: "reasoning" }, event.text)); break;
    case "tool_call_proposed": state.calls.set(event.tool_call.id, event.tool_call.input); break;
    case "tool_started": place(runningCard(event.id, event.name)); break;
    case "cancel_requested": stopping(); break;
    case "tool_progress": showProgress(event); break;
    case "tool_finished": place(executedCard(event.tool_call)); break;
    case "tool_rejected": place(rejectedCard(event.tool_call)); break;
    case "question_asked": place(questionCard(event.question)); break;
    case "tool_calls":
      event.tool_calls.forEach((call) => place(pendingCard(call)));
      offerApproveAll(event.tool_calls);
      break;
    case "commands": event.commands.forEach((command) => place(commandCard(command))); break;
    case "done": finished(event); break;
    case "error": showError(new ApiError(event.status, event)); break;
    // approval_required, executed_tool_calls and executed_commands repeat what the events above show.
    default: break;
  }
}

function assistantBubble() {
  if (!state.assistant) state.assistant = addToLog(el("div", { class: "message assistant" }));
  return state.assistant;
}

function addToLog(node) {
  const log = $("log");
  log.append(node);
  log.scrollTop = log.scrollHeight;
  return node;
}

// A card replaces an earlier card of the same call (running, then executed), or goes at the end;
// text after it starts a new bubble below it.
function place(card) {
  const earlier = document.querySelector(`.card[data-call-id="${CSS.escape(card.dataset.callId)}"]`);
  if (earlier) earlier.replaceWith(card);
  else addToLog(card);
  state.assistant = null;
}

function finished(event) {
  const message = event.message;
  // A runtime that does not stream still answers: its text arrives whole with `done`.
  if (!state.streamed && message.content) assistantBubble().append(message.content);
  state.conversationId = event.conversation_id;
  if (message.meta && message.meta.stop_reason === "cancelled") {
    addToLog(el("p", { class: "note" }, "Run stopped."));
  } else if (message.meta && message.meta.stop_reason === "turn_timeout") {
    addToLog(el("p", { class: "note" }, "Run stopped: it ran out of time."));
  }
  showSession(message.data.session);
  loadConversations();
  if (message.meta && message.meta.stop_reason === "running_in_background") watchJobs(null);
}

// -- cards ----------------------------------------------------------------------------------------

function callCard(id, name, status, ...body) {
  return el("div", { class: `card ${status}`, "data-call-id": id },
    el("span", { class: "status" }, status), el("div", { class: "tool" }, name), ...body);
}

// A command is a call of the command tool: shown as the argv it runs, quoted as a shell would read it
// (no shell runs it).
const COMMAND_TOOL = "run_command";
const shellQuote = (arg) => (/^[A-Za-z0-9@%+=:,./_-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, "'\"'\"'")}'`);
const commandLine = (argv) => "$ " + argv.map(shellQuote).join(" ");

function argvOf(call) {
  const argv = call.input && call.input.argv;
  return call.name === COMMAND_TOOL && Array.isArray(argv) ? argv : null;
}

// A call's arguments on its card: a command's line, any other call's JSON.
function argsOf(call, format = JSON.stringify) {
  const argv = argvOf(call);
  return argv ? el("pre", { class: "args command" }, commandLine(argv)) : el("pre", { class: "args" }, format(call.input));
}

const titleOf = (call) => (argvOf(call) ? "command" : call.name);

// Every form of a call (the chat response, the stream's events, a stored conversation) names its
// arguments alike (ADR 20): `input` as it runs, `proposed_input` as proposed, `edited`, and
// `approval_reason` / `rejection_reason`.
function executedCard(call) {
  const edited = call.edited ? el("div", { class: "why" },
    el("p", {}, "Arguments edited before approval; proposed: ", el("code", {}, JSON.stringify(call.proposed_input))),
    el("ul", { class: "diff" }, ...diffLines(call.proposed_input, call.input, false))) : null;
  const returned = call.attachments && call.attachments.length ? [
    el("p", { class: "output-label" }, "Returned"), returnedOf(call.attachments)] : [];
  // A call a standing grant approved says so: "approved by grant g_... from bob" (docs/approvals.md, "Grants").
  const granted = call.grant ? el("p", { class: "why grant" }, call.grant.approval) : null;
  return callCard(call.id, titleOf(call), call.status, argsOf(call), edited, granted,
    el("p", { class: "output-label" }, "Output"), el("pre", { class: "output" }, call.output), ...returned);
}

// The images and files a call returned, as responses list them (by what they are: never their bytes):
// one chip each, with its name (its media type, or its URL, when it has none), kind and size.
function returnedOf(parts) {
  return el("ul", { class: "attachments returned" }, ...parts.map((part) => el("li", { class: "attachment", title: part.media_type },
    el("span", { class: "name" }, part.name || part.url || part.media_type || part.type), " · ",
    el("span", { class: "kind" }, part.type), " · ",
    el("span", { class: "size" }, part.url ? "by URL" : sizeText(part.size)))));
}

function sizeText(bytes) {
  if (bytes < 1024) return `${bytes} bytes`;
  return bytes < MIB ? `${(bytes / 1024).toFixed(1)} KiB` : `${(bytes / MIB).toFixed(1)} MiB`;
}

// A call running: its arguments (as proposed, or as edited here), how long it has run (from when its
// `tool_started` arrived, ticked each second), and a progress bar its `tool_progress` reports fill.
function runningCard(id, name) {
  const input = state.calls.get(id);
  const args = input === undefined ? null : argsOf({ name, input }, pretty);
  const card = callCard(id, titleOf({ name, input }), state.stopping ? "stopping" : "running", args,
    el("p", { class: "elapsed" }, "running for 0 s"));
  card.dataset.startedAt = String(Date.now());
  return card;
}

function elapsedText(ms) {
  const seconds = Math.max(0, Math.floor(ms / 1000));
  if (seconds < 60) return `running for ${seconds} s`;
  return `running for ${Math.floor(seconds / 60)} min ${String(seconds % 60).padStart(2, "0")} s`;
}

setInterval(() => {
  document.querySelectorAll(".card[data-started-at] .elapsed").forEach((line) => {
    line.textContent = elapsedText(Date.now() - Number(line.closest(".card").dataset.startedAt));
  });
}, 1000);

// A running call's latest progress report, on its card: the tool's words, and a bar (without a
// fraction, a bar that says only that it goes on).
function showProgress(event) {
  const card = document.querySelector(`.card[data-call-id="${CSS.escape(event.id)}"]`);
  if (!card) return;
  const known = typeof event.fraction === "number";
  const share = known ? ` (${Math.round(event.fraction * 100)}%)` : "";
  let bar = card.querySelector("progress");
  if (!bar) bar = card.appendChild(el("progress", { max: "1", "aria-label": `${event.name} progress` }));
  if (known) bar.value = event.fraction;
  else bar.removeAttribute("value");
  let line = card.querySelector(".progress");
  if (!line) line = card.appendChild(el("p", { class: "progress" }));
  line.textContent = event.message + share;
}

function rejectedCard(call) {
  return callCard(call.id, titleOf(call), "rejected", argsOf(call),
    el("p", { class: "why" }, `Rejected: ${call.rejection_reason || "no reason given"}`));
}

// A call waiting for a decision: what it is and why it waits, its exact arguments, and the buttons.
// The card stays until the server accepts a decision; a refusal is shown and the card can be used again.
// A call under a team rule (docs/approvals.md, "Approvals by teams"): its rule and who approved so
// far, what it still needs, and the escalation's notices once sent ("Escalation").
function approvalsOf(call) {
  const shown = call.approvals;
  if (!shown || !shown.rule) return null;
  const given = shown.given.map((g) => g.by).join(", ");
  const needs = shown.needed.map((n) => `${n.count} more from ${n.groups.join(" or ") || "anyone who may approve"}`);
  const notices = [shown.reminded_at ? "approvers reminded" : "",
    shown.escalated_at ? `escalated to ${shown.escalated_to.join(", ")}` : ""].filter(Boolean);
  return el("div", { class: "approvals" },
    el("p", { class: "rule" }, shown.rule + (given ? ` · approved by ${given}` : "")),
    needs.length ? el("p", { class: "needs" }, `Needs ${needs.join("; ")}`) : null,
    notices.length ? el("p", { class: "notices" }, notices.join(" · ")) : null);
}

function pendingCard(call) {
  state.calls.set(call.id, call.input);
  const card = callCard(call.id, call.name, "pending",
    riskBadge(call.risk),
    el("p", { class: "description" }, call.tool_description || ""),
    el("p", { class: "why" }, call.approval_reason || ""),
    approvalsOf(call),
    el("pre", { class: "args" }, pretty(call.input)),
    previewOf(call));
  if (call.risk) card.dataset.risk = call.risk;
  const bound = boundToPreview(card, call);

  const decide = decider(card, (decision) => turn("", [{ id: call.id, ...decision }]));
  const [reason, rejectForm] = rejection(decide);

  const edited = el("textarea", { name: "arguments", "aria-label": "Edited arguments" }, pretty(call.input));
  const changes = el("ul", { class: "diff", "aria-label": "What the edit changes" });
  const showChanges = () => {
    let patch;
    try { patch = JSON.parse(edited.value); } catch (_) { return; } // shown once it parses again
    changes.replaceChildren(...diffLines(call.input, patch));
  };
  edited.addEventListener("input", showChanges);
  const editForm = el("form", { class: "edit-form", hidden: true, onsubmit: (event) => {
    event.preventDefault();
    let input;
    try {
      input = JSON.parse(edited.value);
    } catch (error) {
      showCardError(card, new Error(`Not JSON: ${error.message}`));
      return;
    }
    state.calls.set(call.id, mergePatch(call.input, input));
    decide({ execute: true, edited_input: input }, "approved (edited)");
  } }, el("div", { class: "edit-area" }, edited, changes), el("button", { type: "submit" }, "Approve edited"));

  const actions = el("div", { class: "actions" },
    el("button", { type: "button", class: "approve", onclick: () => decide({ execute: true, ...bound() }, "approved") }, "Approve"),
    el("button", { type: "button", class: "reject", onclick: () => { rejectForm.hidden = false; reason.focus(); } },
      "Reject"),
    call.editable ? el("button", { type: "button", class: "edit", onclick: () => { editForm.hidden = false; showChanges(); } },
      "Edit") : null);
  card.append(actions, rejectForm, editForm);
  return card;
}

// A card's decision is bound to the preview it shows: one sent against another is refused (409
// preview_changed); the card then shows the current preview and binds the next decision to it.
function boundToPreview(card, call) {
  if (call.preview_digest) card.dataset.previewDigest = call.preview_digest;
  let bound = call.preview_digest ? { preview_digest: call.preview_digest } : {};
  card.addEventListener("preview-changed", (event) => {
    const current = { ...call, ...event.detail };
    const shown = card.querySelector(".preview, .preview-error");
    const fresh = previewOf(current);
    if (shown && fresh) shown.replaceWith(fresh);
    bound = { preview_digest: current.preview_digest };
    card.dataset.previewDigest = current.preview_digest;
  });
  return () => bound;
}

// A command waiting for a decision: the exact argv it runs, its dry run's preview when it has one,
// and the buttons (a command is not edited: the agent proposes another). The decision goes back in
// `cmds`, with the argv the user saw and the preview it was shown.
function commandCard(command) {
  const card = callCard(command.id, "command", "pending",
    el("p", { class: "why" }, command.approval_reason || ""),
    el("pre", { class: "args command" }, commandLine(command.argv)),
    previewOf(command));
  const bound = boundToPreview(card, command);
  const decide = decider(card, (decision) => turn("", null, [{ id: command.id, argv: command.argv, ...decision }]));
  const [reason, rejectForm] = rejection(decide);
  const actions = el("div", { class: "actions" },
    el("button", { type: "button", class: "approve", onclick: () => decide({ execute: true, ...bound() }, "approved") }, "Approve"),
    el("button", { type: "button", class: "reject", onclick: () => { rejectForm.hidden = false; reason.focus(); } },
      "Reject"));
  card.append(actions, rejectForm);
  return card;
}

// How a card sends its decision: buttons off while it goes; the card marked decided once the server
// accepted it, or usable again after a refusal (shown on the card).
function decider(card, send) {
  return async (decision, label) => {
    const buttons = card.querySelectorAll("button");
    buttons.forEach((button) => { button.disabled = true; });
    if (await run(() => send(decision), card)) {
      card.querySelector(".status").textContent = label;
      card.classList.replace("pending", "decided");
      card.querySelectorAll(".actions, form").forEach((part) => part.remove());
    } else {
      buttons.forEach((button) => { button.disabled = false; });
    }
  };
}

// The reason field and form of a rejection, told to the agent.
function rejection(decide) {
  const reason = el("input", { name: "reason", placeholder: "Why not? (told to the agent)", required: true });
  const form = el("form", { class: "reject-form", hidden: true, onsubmit: (event) => {
    event.preventDefault();
    decide({ execute: false, rejection_reason: reason.value }, "rejected");
  } }, reason, el("button", { type: "submit" }, "Send rejection"));
  return [reason, form];
}

// A question a tool (or the model, through ask_user) asks: Yes/No, a button per option, or a text box;
// and Decline. It replaces the card of the call that asked, and stays until the server takes an answer.
// A question with a window says by when (its `expires_at`, shown in local time); past it, or once the
// server refuses an answer as `question_expired`, the card says the question expired instead.
function questionCard(question) {
  const deadline = question.expires_at == null ? null : el("p", { class: "deadline" }, `answer by ${timeText(question.expires_at)}`);
  const card = callCard(question.call_id, question.tool, "question", el("p", { class: "prompt" }, question.prompt), deadline);
  card.dataset.questionId = question.id;

  const reply = async (answer, label) => {
    const buttons = card.querySelectorAll("button, input");
    buttons.forEach((button) => { button.disabled = true; });
    let expired = false;
    const answering = async () => {
      try {
        await turn("", null, null, [{ id: question.id, ...answer }]);
      } catch (error) {
        expired = error.code === "question_expired"; // the server's clock says so: believe it
        throw error;
      }
    };
    if (await run(answering, card)) {
      card.querySelector(".status").textContent = label;
      card.classList.replace("question", "decided");
      card.querySelectorAll(".actions, form, .deadline").forEach((part) => part.remove());
    } else if (expired) {
      expire(card, question);
    } else {
      buttons.forEach((button) => { button.disabled = false; });
    }
  };
  const button = (label, answer, cls) =>
    el("button", { type: "button", class: cls, onclick: () => reply(answer, `answered: ${label}`) }, label);

  const actions = el("div", { class: "actions" });
  if (question.kind === "confirmation") {
    actions.append(button("Yes", { value: true }, "approve"), button("No", { value: false }, "reject"));
  } else if (question.kind === "selection") {
    actions.append(...question.options.map((option) => button(option, { value: option }, "option")));
  }
  actions.append(el("button", { type: "button", class: "decline", onclick: () => reply({ declined: true }, "declined") },
    "Decline"));
  card.append(actions);
  if (question.kind === "text") {
    const text = el("input", { name: "answer", "aria-label": "Answer", maxlength: question.max_length, required: true });
    card.append(el("form", { class: "answer-form", onsubmit: (event) => {
      event.preventDefault();
      reply({ value: text.value }, "answered");
    } }, text, el("button", { type: "submit" }, "Answer")));
  }
  if (deadline) untilExpired(card, question);
  return card;
}

// Longest a browser's timer waits (about 24.8 days); a later deadline is looked at again then.
const LONGEST_TIMER_MS = 2 ** 31 - 1;

// The card turns to expired when its question's window closes, unless it was answered before.
function untilExpired(card, question) {
  const left = question.expires_at * 1000 - Date.now();
  if (left <= 0) { expire(card, question); return; }
  setTimeout(() => {
    if (card.isConnected && card.classList.contains("question")) untilExpired(card, question);
  }, Math.min(left, LONGEST_TIMER_MS));
}

function expire(card, question) {
  card.querySelector(".status").textContent = "expired";
  card.classList.replace("question", "expired");
  card.querySelectorAll(".actions, form, .deadline").forEach((part) => part.remove());
  card.append(el("p", { class: "deadline" },
    `This question expired at ${timeText(question.expires_at)}: it can no longer be answered.`));
}

// A moment in local time: the hour and minute today, with the day otherwise.
function timeText(seconds) {
  const at = new Date(seconds * 1000);
  const clock = { hour: "2-digit", minute: "2-digit" };
  return new Date().toDateString() === at.toDateString() ? at.toLocaleTimeString([], clock)
    : at.toLocaleString([], { month: "short", day: "numeric", ...clock });
}

// An edit is a JSON merge patch onto the proposal (RFC 7396), as the server applies it: a key left out
// keeps its proposed value, null removes it. `asPatch` false compares two whole argument objects.
function mergePatch(target, patch) {
  if (patch === null || typeof patch !== "object" || Array.isArray(patch)) return patch;
  const result = target !== null && typeof target === "object" && !Array.isArray(target) ? { ...target } : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete result[key];
    else result[key] = mergePatch(result[key], value);
  }
  return result;
}

// One line per argument: unchanged, changed (old -> new), added or removed.
function diffLines(proposed, edit, asPatch = true) {
  const after = asPatch ? mergePatch(proposed, edit) : edit;
  if (after === null || typeof after !== "object" || Array.isArray(after)) {
    return [el("li", { class: "changed" }, `arguments -> ${JSON.stringify(after)} (not an object: refused)`)];
  }
  const keys = [...new Set([...Object.keys(proposed || {}), ...Object.keys(after)])];
  return keys.map((key) => {
    const [was, now] = [JSON.stringify((proposed || {})[key]), JSON.stringify(after[key])];
    if (!(key in after)) return el("li", { class: "removed" }, `${key}: ${was} (removed)`);
    if (!(key in (proposed || {}))) return el("li", { class: "added" }, `${key}: ${now} (added)`);
    if (was === now) return el("li", { class: "same" }, `${key}: ${now} (unchanged)`);
    return el("li", { class: "changed" }, `${key}: ${was} -> ${now}`);
  });
}

// What its tool's preview says the call would do (docs/approvals.md, "What the approver sees"): a
// unified diff line by line, + lines and - lines coloured; JSON or text as it is; or why there is none.
function previewOf(call) {
  if (call.preview_error) return el("p", { class: "preview-error" }, `No preview: ${call.preview_error}`);
  if (call.preview == null) return null;
  if (call.preview_kind !== "diff") return el("pre", { class: "preview" }, call.preview);
  const kindOf = (line) => (line.startsWith("+++") || line.startsWith("---") ? "file"
    : line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "same");
  return el("pre", { class: "preview diff-preview", "aria-label": "What it would do" },
    ...call.preview.split("\n").map((line) => el("span", { class: `line ${kindOf(line)}` }, line, "\n")));
}

// What a call's tool declares it may do (docs/approvals.md, "What the approver sees").
const IRREVERSIBLE = "irreversible";
function riskBadge(risk) {
  if (!risk) return null;
  const text = risk === IRREVERSIBLE ? "irreversible: cannot be undone" : `risk: ${risk}`;
  return el("span", { class: `risk risk-${risk.replace(/[^A-Za-z0-9_-]/g, "_")}` }, text);
}

// Several calls of one turn waiting: one button approves them all, in one request naming each call.
// An irreversible call is left out unless the box naming it is ticked: "Approve all" never covers one
// without its own confirmation.
function offerApproveAll(calls) {
  if (calls.length < 2) return;
  const ids = calls.map((call) => call.id);
  const irreversible = new Set(calls.filter((call) => call.risk === IRREVERSIBLE).map((call) => call.id));
  const bar = el("div", { class: "approve-all" });
  const include = el("input", { type: "checkbox", name: "include-irreversible" });
  const label = () => {
    const count = include.checked ? ids.length : ids.length - irreversible.size;
    button.textContent = irreversible.size && !include.checked ? `Approve all ${count} reversible` : `Approve all ${count}`;
    button.disabled = count === 0;
  };
  const button = el("button", { type: "button", class: "approve", onclick: async () => {
    const cards = ids.map((id) => document.querySelector(`.card[data-call-id="${CSS.escape(id)}"]`)).filter(Boolean);
    const waiting = cards.filter((card) => card.classList.contains("pending"))
      .filter((card) => include.checked || !irreversible.has(card.dataset.callId));
    if (!waiting.length) { bar.remove(); return; }
    button.disabled = true;
    const decisions = waiting.map((card) => ({ id: card.dataset.callId, execute: true,
      ...(card.dataset.previewDigest ? { preview_digest: card.dataset.previewDigest } : {}) }));
    if (await run(() => turn("", decisions))) {
      waiting.forEach((card) => {
        card.querySelector(".status").textContent = "approved";
        card.classList.replace("pending", "decided");
        card.querySelectorAll(".actions, form").forEach((part) => part.remove());
      });
      bar.remove();
    } else {
      button.disabled = false;
    }
  } }, `Approve all ${ids.length}`);
  bar.append(button);
  if (irreversible.size) {
    include.addEventListener("change", label);
    bar.append(el("label", { class: "include-irreversible" }, include,
      ` also approve the ${irreversible.size} irreversible call${irreversible.size > 1 ? "s" : ""} (cannot be undone)`));
  }
  label();
  addToLog(bar);
}

// -- attachments: images and files sent as parts of the message (docs/protocol.md) ---------------

// The server's limits (MAX_PART_BYTES, MAX_PARTS_BYTES): checked here first so that a person learns
// at once; the server checks again, and its refusal (413, 422) is shown like any other.
const MAX_PART_BYTES = 5 * 1024 * 1024;
const MAX_PARTS_BYTES = 10 * 1024 * 1024;
const MIB = 1024 * 1024;

function readBase64(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(",", 2)[1] || "");
    reader.onerror = () => reject(new Error(`${file.name}: could not be read`));
    reader.readAsDataURL(file);
  });
}

// An image is sent as an image part (the model sees it), anything else as a file part with its name.
async function partOf(file) {
  const data = await readBase64(file);
  const mediaType = file.type || "application/octet-stream";
  if (mediaType.startsWith("image/")) return { type: "image", media_type: mediaType, data, name: file.name };
  return { type: "file", name: file.name, media_type: mediaType, data };
}

async function attach(files) {
  $("error").hidden = true;
  for (const file of files) {
    const total = state.attached.reduce((sum, a) => sum + a.size, 0);
    if (file.size > MAX_PART_BYTES) {
      showError(new Error(`${file.name} is ${(file.size / MIB).toFixed(1)} MiB: a file may be at most 5 MiB`));
    } else if (total + file.size > MAX_PARTS_BYTES) {
      showError(new Error(`${file.name} not attached: a message's files may come to at most 10 MiB`));
    } else {
      try {
        state.attached.push({ name: file.name, size: file.size, part: await partOf(file) });
      } catch (error) {
        showError(error);
      }
    }
  }
  showAttached();
}

function showAttached() {
  const list = $("attached");
  list.replaceChildren(...state.attached.map((a, i) => el("li", { class: "attachment" }, a.name,
    el("button", { type: "button", "aria-label": `Remove ${a.name}`, title: "Remove",
      onclick: () => { state.attached.splice(i, 1); showAttached(); } }, "\u00d7"))));
  list.hidden = state.attached.length === 0;
}

// What a sent (or stored) message carries, under its text: each attachment's name, an image's picture.
function attachmentsOf(parts) {
  return el("ul", { class: "attachments" }, ...parts.map((part) => el("li", { class: "attachment" },
    part.data && part.type === "image"
      ? el("img", { src: `data:${part.media_type};base64,${part.data}`, alt: "" }) : null,
    part.name || `${part.media_type || part.type}${part.size ? ` (${part.size} bytes)` : ""}`)));
}

// -- errors, session, conversations ---------------------------------------------------------------

function errorText(error) {
  const where = error.requestId ? ` (request ${error.requestId})` : "";
  return error.status ? `${error.status} ${error.code}: ${error.message}${where}` : error.message;
}

function showError(error) {
  if (error.status === 401) return; // the key prompt says it, in words (askForKey)
  const box = $("error");
  box.textContent = errorText(error);
  box.hidden = false;
}

// A refused decision is shown on the card it concerns, which stays usable.
function showCardError(card, error) {
  if (error.code === "preview_changed" && error.preview) {
    card.dispatchEvent(new CustomEvent("preview-changed", { detail: error.preview }));
  }
  clearCardError(card);
  card.querySelector(".actions").before(el("p", { class: "card-error", role: "alert" }, errorText(error)));
}

function clearCardError(card) {
  card.querySelectorAll(".card-error").forEach((node) => node.remove());
}

// Runs one exchange with the server; shows its error, if any: on `card` when the exchange was a
// decision about it, above the composer otherwise. True when it went well.
async function run(exchange, card = null) {
  if (state.busy) return false; // one exchange at a time: a conversation takes one turn at a time
  $("error").hidden = true;
  if (card) clearCardError(card);
  state.busy = true;
  $("send").disabled = true;
  try {
    await exchange();
    return true;
  } catch (error) {
    if (error.status === 401) { /* the key prompt says it */ } else if (card && card.isConnected) showCardError(card, error);
    else showError(error);
    return false;
  } finally {
    state.busy = false;
    state.stopping = false;
    $("send").disabled = false;
    $("stop").hidden = true;
    $("stop").textContent = "Stop";
  }
}

// Stop asks the server to stop the run (on whichever worker runs it); the stream shows it to its end.
async function stop() {
  if (!state.busy || !state.conversationId || state.stopping) return;
  $("stop").disabled = true;
  try {
    await request(`api/conversations/${encodeURIComponent(state.conversationId)}/cancel`, { method: "POST" });
    stopping();
  } catch (error) {
    showError(error);
    $("stop").disabled = false;
  }
}

// A cancel of the run was accepted (our Stop's 202) or seen by the run (a `cancel_requested` event,
// whoever asked): Stop says so, and each running call's card says "stopping" until its settled call
// (failed, stopped; or executed, if it ended first) replaces it. Saying it twice changes nothing.
function stopping() {
  if (!state.busy) return;
  state.stopping = true;
  $("stop").disabled = true;
  $("stop").textContent = "Stopping\u2026";
  document.querySelectorAll(".card.running").forEach((card) => {
    card.classList.replace("running", "stopping");
    card.querySelector(".status").textContent = "stopping";
  });
}

// The server wants an API key (it answered 401): said in words, with the key's field focused; the
// error box shows no raw 401. `refused`: a key was sent and the server did not take it.
function askForKey() {
  const refused = Boolean(sessionStorage.getItem(KEY));
  $("key-note").textContent = refused
    ? "The server did not accept this API key. Check it, then paste it again."
    : "This agent asks for an API key. Paste the key you were given; it is kept in this tab only, until it closes.";
  $("key-form").hidden = false;
  $("error").hidden = true;
  $("api-key").focus();
}

// The JSON object typed in a developer-mode field; an Error naming the field if it is not one.
function jsonObject(id, what) {
  let value;
  try {
    value = JSON.parse($(id).value.trim() || "{}");
  } catch (error) {
    throw new Error(`${what} is not valid JSON: ${error.message}`);
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new Error(`${what} must be a JSON object ({...})`);
  }
  return value;
}

function showSession(session) {
  $("session").textContent = pretty(session || {});
  if (DEV) $("dev-session").value = pretty(session || {});
  $("conversation-id").textContent = state.conversationId || "";
}

async function loadConversations() {
  let listed;
  try {
    listed = await (await request("api/conversations?limit=50")).json();
  } catch (error) {
    // An agent function keeps no conversations: no list to show.
    if (error.status === 404) { $("sidebar").hidden = true; $("show-conversations").hidden = true; return; }
    showError(error);
    return;
  }
  $("conversations").replaceChildren(...listed.conversations.map((c) => el("li", {},
    el("button", { type: "button", class: c.id === state.conversationId ? "current" : null, title: c.id,
      onclick: () => run(() => openConversation(c.id)) },
    c.pending_tool_calls ? el("span", { class: "badge" }, String(c.pending_tool_calls)) : null,
    el("span", { class: "title" }, c.title || c.id),
    el("time", { datetime: new Date(c.updated_at * 1000).toISOString() }, whenText(c.updated_at))))));
}

// The time of a conversation's last turn: the hour today, the day otherwise.
function whenText(seconds) {
  const at = new Date(seconds * 1000);
  const today = new Date().toDateString() === at.toDateString();
  return today ? at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
    : at.toLocaleDateString([], { month: "short", day: "numeric" });
}

async function openConversation(id) {
  const conversation = await (await request(`api/conversations/${encodeURIComponent(id)}`)).json();
  newChat();
  showConversation(conversation);
  loadConversations();
  if (running(conversation)) watchJobs(conversation);
}

// A conversation as the store holds it, in place of what the log shows.
function showConversation(conversation) {
  state.assistant = null;
  state.calls.clear();
  $("log").replaceChildren();
  state.conversationId = conversation.id;
  const calls = new Map(conversation.tool_calls.map((call) => [call.id, call]));
  const asked = new Map((conversation.questions || []).filter((q) => q.status === "open").map((q) => [q.call_id, q]));
  for (const message of conversation.messages) {
    const attached = message.attachments && message.attachments.length ? attachmentsOf(message.attachments) : null;
    if (message.content || attached) addToLog(el("div", { class: `message ${message.role}` }, message.content, attached));
    for (const call of message.tool_call_ids.map((id) => calls.get(id)).filter(Boolean)) {
      if (call.status === "pending" && argvOf(call)) {
        place(commandCard({ id: call.id, argv: argvOf(call), approval_reason: call.approval_reason }));
      } else if (call.status === "pending") {
        place(pendingCard({ ...call, tool_description: call.description }));
      } else if (call.status === "asking" && asked.has(call.id)) {
        place(questionCard({ ...asked.get(call.id), tool: call.name }));
      } else if (call.status === "rejected") {
        place(rejectedCard(call));
      } else if (["executed", "failed", "interrupted"].includes(call.status)) {
        place(executedCard({ ...call, output: call.output ?? `Error: ${call.error}` }));
      } else {
        place(callCard(call.id, titleOf(call), call.status, argsOf(call, pretty)));
        if (call.progress) showProgress({ id: call.id, name: call.name, ...call.progress });
      }
    }
  }
  showSession(conversation.session);
}

// -- calls that run in the background ---------------------------------------------------------------

// A background call runs on a job engine's worker, and so does the turn its end starts (the model
// reads the results): no stream of this page carries either. While a call of the shown conversation
// runs, and until the model's answer after it is saved, the page reads the conversation again and
// again (from the store: any server answers alike, docs/runs.md, "Tools on a job engine"). A running
// call's card shows the latest progress report saved on it; once a call settles, a message arrives or
// a question is asked, the conversation is shown again as stored. An answer that does not come (a
// stopped run, a model that failed) is waited for a few minutes, then no more.
const WATCH_EVERY_MS = 1000;
const ANSWER_WAIT_MS = 5 * 60 * 1000;
// `round`: moved on by each start and end of a watch, so that a read still under way when one ends or
// another starts is dropped.
const watch = { id: null, round: 0, timer: null, shown: null, owedSince: 0 };

// What a read must change on the page besides progress: the messages, and each call's and question's status.
const shapeOf = (conversation) => JSON.stringify([conversation.messages.length,
  conversation.tool_calls.map((call) => call.status), (conversation.questions || []).map((q) => q.status)]);

const running = (conversation) => conversation.tool_calls.some((call) => call.status === "approved");

// Nothing waits or runs, and a call settled after the last message: the model is owed a turn.
function answerOwed(conversation) {
  if (conversation.tool_calls.some((call) => ["pending", "approved", "asking"].includes(call.status))) return false;
  const messages = conversation.messages;
  const last = messages.length ? messages[messages.length - 1].at : 0;
  return conversation.tool_calls.some((call) => (call.finished_at || 0) > last);
}

// Watch the shown conversation (`conversation`: as the log shows it now; null: read it to show it).
function watchJobs(conversation) {
  unwatch();
  watch.id = state.conversationId;
  watch.shown = conversation ? shapeOf(conversation) : null;
  watch.owedSince = 0;
  readLater(watch.round);
}

function unwatch() {
  clearTimeout(watch.timer);
  watch.id = null;
  watch.round += 1;
}

const readLater = (round) => { watch.timer = setTimeout(() => readJobs(round), WATCH_EVERY_MS); };

async function readJobs(round) {
  const id = watch.id;
  if (round !== watch.round || id !== state.conversationId) return;
  if (state.busy) { readLater(round); return; } // this page's own exchange streams the run meanwhile
  let conversation;
  try {
    conversation = await (await request(`api/conversations/${encodeURIComponent(id)}`)).json();
  } catch (error) {
    if (round === watch.round) { unwatch(); showError(error); }
    return;
  }
  if (round !== watch.round || id !== state.conversationId) return; // the watch ended meanwhile
  if (state.busy) { readLater(round); return; }
  const shape = shapeOf(conversation);
  if (shape !== watch.shown) {
    showConversation(conversation);
    loadConversations();
    watch.shown = shape;
  } else {
    conversation.tool_calls.filter((call) => call.status === "approved" && call.progress)
      .forEach((call) => showProgress({ id: call.id, name: call.name, ...call.progress }));
  }
  if (running(conversation)) watch.owedSince = 0;
  else if (answerOwed(conversation)) watch.owedSince = watch.owedSince || Date.now();
  else { unwatch(); return; }
  if (watch.owedSince && Date.now() - watch.owedSince > ANSWER_WAIT_MS) { unwatch(); return; }
  readLater(round);
}

function newChat() {
  unwatch();
  state.conversationId = null;
  state.assistant = null;
  state.calls.clear();
  state.attached = [];
  showAttached();
  $("log").replaceChildren();
  $("error").hidden = true;
  showSession({});
}

// -- wiring ---------------------------------------------------------------------------------------

$("composer").addEventListener("submit", async (event) => {
  event.preventDefault();
  const text = $("message").value.trim();
  const attached = state.attached;
  if ((!text && !attached.length) || state.busy) return;
  $("message").value = "";
  state.attached = [];
  showAttached();
  const parts = attached.map((a) => a.part);
  addToLog(el("div", { class: "message user" }, text, parts.length ? attachmentsOf(parts) : null));
  state.assistant = null;
  const content = parts.length ? [...(text ? [{ type: "text", text }] : []), ...parts] : text;
  const sent = await run(() => turn(content, null));
  // Refused (a file too large for the server, a kind its model cannot read): offered again, to send
  // without the one the error names.
  if (!sent && parts.length && !state.attached.length) { state.attached = attached; showAttached(); }
});
$("attach").addEventListener("click", () => $("attach-input").click());
$("attach-input").addEventListener("change", async (event) => {
  await attach(Array.from(event.target.files));
  event.target.value = "";
});
$("message").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); $("composer").requestSubmit(); }
});
$("new-chat").addEventListener("click", () => { newChat(); loadConversations(); closePanels(); });
$("show-conversations").addEventListener("click", () => togglePanel("sidebar"));
$("show-session").addEventListener("click", () => togglePanel("state"));
$("conversations").addEventListener("click", closePanels);

// Below 700 px wide the list and the session are panels over the chat, opened from the header.
function togglePanel(id) {
  const open = !$(id).classList.contains("open");
  closePanels();
  $(id).classList.toggle("open", open);
}

function closePanels() {
  $("sidebar").classList.remove("open");
  $("state").classList.remove("open");
}
$("stop").addEventListener("click", stop);
$("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(KEY, $("api-key").value);
  $("api-key").value = "";
  $("key-form").hidden = true;
  $("error").hidden = true;
  loadConversations();
});

if (DEV) {
  $("dev").hidden = false;
  $("session").hidden = true;
}

fetch("health").then((r) => r.json()).then((health) => {
  $("agent-name").textContent = health.agent;
  document.title = `${health.agent} · dcaf_like`;
}).catch(() => {});
loadConversations();

// A link to one conversation (an approval webhook's `link`): #conversation=<id> opens it.
function openLinked() {
  const linked = new URLSearchParams(location.hash.slice(1)).get("conversation");
  if (linked && linked !== state.conversationId) run(() => openConversation(linked));
}
window.addEventListener("hashchange", openLinked);
openLinked();
