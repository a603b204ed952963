"""``dcaf-like chat``: a terminal chat with an agent that streams its answer and asks, for each call
waiting for approval, y (approve), n (reject, with a reason) or e (edit the arguments, then approve).

The chat speaks the HTTP protocol's events (docs/protocol.md) whichever way it reaches the agent: in
this process (:class:`InProcessTransport`, the agent loaded from ``FILE.py:NAME``) or over HTTP
(:class:`HttpTransport`, ``--url``, with the standard library's client). Either way the approvals are
checked where the agent runs, exactly as for any other client.

Ctrl-C during a turn asks the agent to stop it (``agent.acancel``, or ``POST
/api/conversations/{id}/cancel``) and shows the turn to its end: the settled calls and the final
answer or stop reason; a second Ctrl-C leaves the chat. Calls left undecided (Ctrl-D at the approval
prompt) are asked about again before the next message is sent, since the agent takes no message while
calls wait.

The server is the truth: after any refused or failed turn the chat reads the conversation back and
asks again every decision it still waits for (a batch of decisions is applied whole or not at all),
and ``--conversation ID`` reopens a conversation where it stands.

A question the run asks (docs/runs.md, "Questions") is prompted for in its kind: a line of text, y or
n for a confirmation, an option's number (or text) for a selection; "/decline" declines it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import shlex
import signal
import threading
import unicodedata
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Protocol, TextIO

from dcaf_like.application.command_runner import command_argv
from dcaf_like.application.errors import ConversationNotFound
from dcaf_like.domain.conversation import new_conversation_id
from dcaf_like.domain.merge_patch import merge_patch

Event = dict[str, Any]

# Refusals of what the user typed in an edit or an answer: nothing was applied, so the same calls and
# questions are asked again.
EDIT_REFUSALS = frozenset({"invalid_tool_arguments", "edit_not_allowed", "invalid_answer"})

HELP = """commands:
  /pending         decide the calls still waiting for approval, answer the questions waiting
  /reject REASON   reject every waiting call, telling the agent REASON
  /help            this list
  /quit, Ctrl-D    leave (undecided calls keep waiting in the store)
  Ctrl-C           stop the running turn at its next step; twice leaves
at an approval prompt: y approves, n asks for a reason, "/reject REASON" rejects with it, e edits
(editable tools: the proposal is pre-filled; what you leave out keeps its proposed value)
at a question: type the answer (y or n; an option's number); "/decline" declines to answer"""


# How many of a reopened conversation's last messages are shown.
LAST_MESSAGES = 6


class ChatError(Exception):
    """What the chat could not do (read a conversation back), in words to print."""


class Transport(Protocol):
    def turn(self, message: dict[str, Any]) -> Iterator[Event]:
        """The events of one turn (a HelpDesk user message), as ``/api/chat-stream`` sends them; a
        refused request or a failed run is one ``error`` event. On Ctrl-C it asks the agent to stop the
        turn, yields a ``cancelling`` event and goes on with the turn's events to its end."""

    def conversation(self, conversation_id: str) -> dict[str, Any]:
        """The conversation as ``GET /api/conversations/{id}`` answers; :class:`ChatError` if it
        cannot be read."""


CANCELLING: Event = {"type": "cancelling"}
INTERRUPTED = object()  # Ctrl-C, as the SIGINT handler of a remote turn puts it in the line queue


class InProcessTransport:
    """An agent in this process, driven on one event loop for the whole chat (async store clients
    stay bound to it)."""

    def __init__(self, agent: Any, *, user: str = "user") -> None:
        from dcaf_like.helpdesk.function_agent import as_served

        self.agent = as_served(agent)
        self.user = user
        self.loop = asyncio.new_event_loop()

    def turn(self, message: dict[str, Any]) -> Iterator[Event]:
        from dcaf_like.application.events import RunFailed
        from dcaf_like.helpdesk.protocol import event_lines, read_messages
        from dcaf_like.server.errors import http_error

        conversation_id = str(message.get("data", {}).get("conversation_id") or "")
        cancelled = False
        try:
            events = aiter(self.agent.ahandle_stream(read_messages([message], user=self.user)))
            while True:
                step: asyncio.Task[Any] = self.loop.create_task(_next(events))
                while True:
                    try:
                        event = self.loop.run_until_complete(step)
                        break
                    except StopAsyncIteration:
                        return
                    except KeyboardInterrupt:
                        # An agent function keeps no conversation: its turn is one call, nothing to stop.
                        if cancelled or step.done() or not conversation_id or self.agent.repository is None:
                            raise
                        cancelled = True
                        yield CANCELLING
                        # Not saved yet (interrupted before its turn began): nothing runs to stop.
                        with contextlib.suppress(ConversationNotFound):
                            self.loop.run_until_complete(self.agent.acancel(conversation_id))
                if isinstance(event, RunFailed):
                    raise event.exception or RuntimeError(event.error)
                yield from event_lines(event, "")
        except Exception as exc:
            error = http_error(exc)
            yield {"type": "error", "status": error.status, **error.body("")}

    def conversation(self, conversation_id: str) -> dict[str, Any]:
        from dcaf_like.server.conversations import conversation_record

        if self.agent.repository is None:
            raise ChatError("this agent keeps no conversations")
        found = self.loop.run_until_complete(self.agent.repository.aget(conversation_id))
        if found is None:
            raise ChatError(f"404 conversation_not_found: no conversation {conversation_id}")
        return conversation_record(found)

    def close(self) -> None:
        self.loop.run_until_complete(self.agent.aclose())  # the clients bound to this loop
        self.loop.close()


async def _next(events: AsyncIterator[Any]) -> Any:
    return await anext(events)


class HttpTransport:
    """A served agent at `url`; `api_key` if its server wants one."""

    def __init__(self, url: str, *, api_key: str | None = None, timeout: float = 300) -> None:
        self.base = url.rstrip("/")
        self.url = self.base + "/api/chat-stream"
        self.headers = {"Content-Type": "application/json", "Accept": "application/x-ndjson"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self.timeout = timeout

    def check(self) -> str | None:
        """Why the chat cannot start (None: it can): the server wants a key this client lacks, or
        refuses the one it has. An empty body is sent, which a server refuses after it read the key
        (422), so nothing is run or stored."""
        request = urllib.request.Request(self.url, data=b"{}", headers=self.headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=min(self.timeout, 10)):
                return None
        except urllib.error.HTTPError as exc:
            if exc.code != 401:
                return None
            if "Authorization" in self.headers:
                return f"the server at {self.url} refused the API key (401): check --api-key or DCAF_API_KEY"
            return f"the server at {self.url} wants an API key (401): pass --api-key KEY or set DCAF_API_KEY"
        except (urllib.error.URLError, OSError):
            return None  # not up yet: the chat opens, and a message sent says the server is unreachable

    def turn(self, message: dict[str, Any]) -> Iterator[Event]:
        """The turn's events. The stream is read by a thread of its own and Ctrl-C only puts a mark
        among its lines, so that no interrupt lands inside a read (which would lose the rest of the
        stream: the settled calls and ``done``)."""
        body = json.dumps({"messages": [message]}).encode()
        request = urllib.request.Request(self.url, data=body, headers=self.headers, method="POST")
        conversation_id = str(message.get("data", {}).get("conversation_id") or "")
        try:
            response = urllib.request.urlopen(request, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            yield {"type": "error", "status": exc.code, **_refusal(exc)}
            return
        except (urllib.error.URLError, OSError) as exc:
            yield _unreachable(self.url, exc)
            return
        lines: queue.SimpleQueue[Any] = queue.SimpleQueue()  # its put may be called from a signal handler

        def read() -> None:
            try:
                for line in response:  # each line as the server flushes it
                    lines.put(line)
                lines.put(None)
            except Exception as exc:  # a cut stream, or one closed once `done` was read
                lines.put(exc)

        threading.Thread(target=read, name="dcaf-chat-stream", daemon=True).start()
        on_main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, lambda *_: lines.put(INTERRUPTED)) if on_main_thread else None
        cancelled = False
        try:
            with response:
                while (line := lines.get()) is not None:
                    if line is INTERRUPTED:
                        if cancelled or not conversation_id:
                            raise KeyboardInterrupt
                        cancelled = True
                        yield CANCELLING
                        if (refused := self.cancel(conversation_id)) is not None:
                            yield refused
                    elif isinstance(line, Exception):
                        yield _unreachable(self.url, line)
                        return
                    elif line.strip():
                        yield json.loads(line)
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)

    def cancel(self, conversation_id: str) -> Event | None:
        """``POST /api/conversations/{id}/cancel``: the server stops the turn at its next step. None
        once accepted, else the refusal as an ``error`` event."""
        url = f"{self.base}/api/conversations/{urllib.parse.quote(conversation_id)}/cancel"
        request = urllib.request.Request(url, data=b"", headers=self.headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout):
                return None
        except urllib.error.HTTPError as exc:
            return {"type": "error", "status": exc.code, **_refusal(exc)}
        except (urllib.error.URLError, OSError) as exc:
            return _unreachable(url, exc)

    def conversation(self, conversation_id: str) -> dict[str, Any]:
        url = f"{self.base}/api/conversations/{urllib.parse.quote(conversation_id)}"
        request = urllib.request.Request(url, headers=self.headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                record: dict[str, Any] = json.loads(response.read())
                return record
        except urllib.error.HTTPError as exc:
            error = _refusal(exc)["error"]
            raise ChatError(f"{exc.code} {error.get('code')}: {error.get('message')}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise ChatError(_unreachable(url, exc)["error"]["message"]) from None

    def close(self) -> None:
        pass


def _refusal(exc: urllib.error.HTTPError) -> dict[str, Any]:
    try:
        refused: dict[str, Any] = json.loads(exc.read())
    except ValueError:
        refused = {"error": {"code": "http_error", "message": exc.reason}}
    return refused


def _unreachable(url: str, exc: BaseException) -> Event:
    reason = getattr(exc, "reason", exc)
    return {"type": "error", "error": {"code": "unreachable", "message": f"{url}: {reason}"}}


class TerminalChat:
    """The conversation loop: read a line, stream the turn, decide what waits, repeat until EOF."""

    def __init__(
        self,
        transport: Transport,
        *,
        ask: Callable[[str], str] = input,
        out: TextIO,
        session: dict[str, Any] | None = None,
        platform_context: dict[str, Any] | None = None,
        conversation_id: str | None = None,
    ) -> None:
        self.transport = transport
        self.ask = ask
        self.out = out
        #: Sent with the first message only: it seeds the conversation's session, which its tools
        #: then change (sending it again would undo their changes).
        self.session = session
        #: Sent with every message: a decision is checked against the context its call was proposed in.
        self.platform_context = platform_context
        self.conversation_id = conversation_id
        self.pending: list[Event] = []  # calls waiting for a decision after the last turn
        self.questions: list[Event] = []  # questions waiting for an answer after the last turn

    def reopen(self) -> None:
        """Show the conversation named at start where it stands: its last messages, with their calls,
        then ask what waits in it. :class:`ChatError` if it cannot be read."""
        assert self.conversation_id is not None
        record = self.transport.conversation(self.conversation_id)
        messages = record["messages"]
        calls = {call["id"]: call for call in record["tool_calls"]}
        earlier = len(messages) - LAST_MESSAGES
        self.say(
            f"(conversation {record['id']}"
            + (f"; {earlier} earlier message(s) not shown)" if earlier > 0 else ")")
        )
        for message in messages[-LAST_MESSAGES:]:
            if message["content"]:
                speaker = "you> " if message["role"] == "user" else "agent> "
                self.say(speaker + message["content"])
            for call in (calls[i] for i in message["tool_call_ids"] if i in calls):
                self.show_call(call)
        self.pending, self.questions = _waiting_in(record)
        if self.pending or self.questions:
            self.say(f"  {len(self.pending)} call(s) and {len(self.questions)} question(s) wait in it")
        self.settle()

    def show_call(self, call: Event) -> None:
        """A stored call as the stream's events print it; a call waiting is asked about after."""
        shown = _shown(call["name"], call["input"])
        if call["status"] in ("executed", "failed", "interrupted"):
            edited = " (arguments edited)" if call.get("edited") else ""
            self.say(f"  {call['status']}: {shown}{edited}{_granted(call)}")
            self.say(_indent(call["output"] if call.get("output") is not None else f"Error: {call['error']}"))
        elif call["status"] == "rejected":
            self.say(f"  rejected: {shown}: {call.get('rejection_reason')}")
        elif call["status"] == "approved":
            self.say(f"  running: {shown}")

    def run(self) -> None:
        while True:
            try:
                text = self.ask("you> ").strip()
            except EOFError:
                self.say("")
                return
            if text in ("/quit", "/exit"):
                return
            if text == "/help":
                self.say(HELP)
            elif text == "/pending":
                if not self.pending and not self.questions:
                    self.say("  nothing waits for a decision")
                self.settle()
            elif text == "/reject" or text.startswith("/reject "):
                self.reject_all(text.removeprefix("/reject").strip())
            elif text.startswith("/"):
                self.say(f"  unknown command {text.split()[0]}; /help lists them")
            elif text and (self.pending or self.questions):
                # The agent takes no message while calls or questions wait (it would answer 409).
                waiting = (
                    f"{len(self.pending)} call(s) still wait for your decision"
                    if self.pending
                    else f"{len(self.questions)} question(s) still wait for your answer"
                )
                self.say(f"  {waiting}; your message was not sent")
                self.settle()
            elif text:
                self.exchange(text)

    def exchange(self, text: str) -> None:
        """One user message, then decisions until nothing waits (or the server fails)."""
        self.pending, refused = self.turn(text, [])
        if refused is not None:
            self.reread(refused, [], [])  # refused because something waits (another client's)?
        self.settle()

    def settle(self) -> None:
        """Ask about every waiting call, send the decisions, repeat while calls wait. Ctrl-D leaves them
        waiting: the chat goes on and asks again before the next message."""
        while self.pending or self.questions:
            try:
                decisions = [self.decide(call) for call in self.pending]
                answers = [self.reply(question) for question in self.questions]
            except EOFError:
                what = "the calls keep" if self.pending else "the questions keep"
                self.say(f"\n(left undecided: {what} waiting; /pending decides them, /quit leaves)")
                return
            self.send_decisions(decisions, answers)

    def reject_all(self, reason: str) -> None:
        if not self.pending:
            self.say("  nothing waits for a decision")
            return
        reason = reason or "rejected on the terminal"
        self.send_decisions([_rejection(call, reason) for call in self.pending])
        self.settle()

    def send_decisions(
        self, decisions: list[dict[str, Any]], answers: list[dict[str, Any]] | None = None
    ) -> None:
        asked = self.questions
        waiting, refused = self.turn("", decisions, answers or [])
        if refused is None:
            self.pending = waiting
        elif not self.reread(refused, decisions, answers or []):
            # Not readable: a refused edit or answer changed nothing, so the same are asked again.
            if refused in EDIT_REFUSALS:
                self.questions = asked
            else:
                self.pending = []

    def reread(self, refused: str, decisions: list[dict[str, Any]], answers: list[dict[str, Any]]) -> bool:
        """After a refused or failed turn, what waits is what the server holds: read the conversation
        back, say which of the decisions just sent were not applied, and leave every call and question
        still waiting to be asked again. False if it could not be read."""
        if self.conversation_id is None:
            return False
        try:
            record = self.transport.conversation(self.conversation_id)
        except ChatError as exc:
            if decisions or answers:
                self.say(f"  could not read the conversation back ({exc}); /pending asks what you know of")
            return False
        self.pending, self.questions = _waiting_in(record)
        sent = {d["id"]: d for d in [*decisions, *answers]}
        not_applied = [w for w in [*self.pending, *self.questions] if w["id"] in sent]
        if not_applied:
            self.say(f"  not applied ({refused}): the server took none of these decisions; asking again:")
            for waiting in not_applied:
                self.say(f"    {_what(waiting)}: your {_decision_word(sent[waiting['id']])} was not applied")
        elif self.pending or self.questions:
            self.say(f"  {len(self.pending)} call(s) and {len(self.questions)} question(s) still wait")
        return True

    def turn(
        self, text: str, decisions: list[dict[str, Any]], answers: list[dict[str, Any]] | None = None
    ) -> tuple[list[Event], str | None]:
        """Stream one turn; the calls left waiting, and the error code if it failed. The questions
        left waiting are in :attr:`questions` after it."""
        if self.conversation_id is None:  # chosen here, so that Ctrl-C can name it in its first turn
            self.conversation_id = new_conversation_id()
        data: dict[str, Any] = {
            "tool_calls": [d for d in decisions if "argv" not in d],
            "conversation_id": self.conversation_id,
        }
        if commands := [d for d in decisions if "argv" in d]:  # a command's decision, with its argv
            data["cmds"] = commands
        if answers:
            data["answers"] = answers
        self.questions = []
        message: dict[str, Any] = {"role": "user", "content": text, "data": data}
        if self.session is not None:
            data["session"], self.session = self.session, None
        if self.platform_context is not None:
            message["platform_context"] = self.platform_context
        at_line_start = True
        stopping = False  # said once per turn, whoever asked
        for event in self.transport.turn(message):
            kind = event.get("type")
            if kind == "text_delta":
                self.out.write(("agent> " if at_line_start else "") + _printable(event["text"]))
                self.out.flush()
                at_line_start = event["text"].endswith("\n")
                continue
            if not at_line_start:
                self.say("")
                at_line_start = True
            if kind == "cancelling" and not stopping:
                stopping = True
                self.say("  (stopping the run at its next step; Ctrl-C again to leave)")
            elif kind == "cancel_requested" and not stopping:
                stopping = True
                self.say("  (a cancel was asked for: the run stops at its next step)")
            elif kind == "tool_started":
                self.say(f"  running {event['name']} ...")
            elif kind == "tool_queued":
                self.say(f"  {event['name']} runs in the background: send an empty line later for its result")
            elif kind == "tool_progress":
                share = (
                    f" ({event['fraction']:.0%})" if isinstance(event.get("fraction"), int | float) else ""
                )
                self.say(f"  {event['name']}: {_printable(str(event['message']))}{share}")
            elif kind == "tool_finished":
                call = event["tool_call"]
                edited = " (arguments edited)" if call.get("edited") else ""
                self.say(f"  {call['status']}: {_shown(call['name'], call['input'])}{edited}{_granted(call)}")
                self.say(_indent(call["output"]))
            elif kind == "tool_rejected":
                call = event["tool_call"]
                why = call.get("rejection_reason", call.get("reason"))  # `reason`: a server before ADR 20
                self.say(f"  rejected: {_shown(call['name'], call['input'])}: {why}")
            elif kind == "done":
                self.conversation_id = event["conversation_id"]
                message = event["message"]
                self.questions = list(message["data"].get("questions", []))
                meta = message.get("meta", {})
                if meta.get("stop_reason") == "cancelled":
                    self.say("  (run cancelled)")
                elif meta.get("stop_reason") == "running_in_background":
                    self.say("  (a tool runs in the background)")
                if meta.get("answered_by") and meta["answered_by"] != meta.get("runtime"):
                    # a fallback or a router chose: which model answered is worth a line
                    self.say(f"  (answered by {_printable(str(meta['answered_by']))})")
                data = message["data"]
                return [*data["tool_calls"], *data.get("cmds", [])], None
            # question_asked: the question is asked once the turn ends (reply), said there once
            elif kind == "error":
                error = event.get("error", {})
                request_id = f" (request {error['request_id']})" if error.get("request_id") else ""
                code = error.get("code")
                status = f"{event['status']} " if event.get("status") else ""
                self.say(f"error {status}{code}: {error.get('message')}{request_id}")
                return [], str(code)
        if not at_line_start:
            self.say("")
        self.say("  (the stream ended before the run did)")
        return [], "stream_ended"

    def decide(self, call: Event) -> dict[str, Any]:
        """Ask about one waiting call (or command) until the answer is a decision."""
        if "argv" in call:
            return self.decide_command(call)
        self.say(f"\nThe agent wants to run {call['name']}: {call.get('tool_description', '')}")
        if why := call.get("approval_reason", call.get("reason")):  # `reason`: a server before ADR 20
            self.say(f"  why it waits: {why}")
        if risk := call.get("risk"):
            self.say(f"  risk: {risk}" + (" (cannot be undone)" if risk == "irreversible" else ""))
        self.say(f"  arguments: {_args(call['input'])}")
        if approvals := call.get("approvals"):  # a team rule: who approved so far, what it still needs
            self.say(f"  approvals: {_approvals_text(approvals)}")
        if call.get("preview_error"):
            self.say(f"  no preview: {call['preview_error']}")
        elif call.get("preview") is not None:
            self.say("  what it would do:")
            for line in str(call["preview"]).splitlines():
                self.say(f"    {line}")
        bound = {"preview_digest": call["preview_digest"]} if call.get("preview_digest") else {}
        choices = "[y]es / [n]o / [e]dit" if call.get("editable") else "[y]es / [n]o"
        while True:
            answer = self.ask(f"approve? {choices}: ").strip().lower()
            if answer in ("y", "yes"):
                return {"id": call["id"], "execute": True, **bound}
            if answer in ("n", "no"):
                reason = self.ask("reason (told to the agent): ").strip() or "rejected on the terminal"
                return _rejection(call, reason)
            if answer == "/reject" or answer.startswith("/reject "):
                return _rejection(call, answer.removeprefix("/reject").strip() or "rejected on the terminal")
            if answer == "/help":
                self.say(HELP)
            elif answer in ("e", "edit"):
                if not call.get("editable"):
                    self.say(f"  {call['name']} does not allow editing its arguments")
                    continue
                edited = self.edit(call.get("proposed_input") or call["input"])
                if edited is not None:
                    return {"id": call["id"], "execute": True, "edited_input": edited}

    def decide_command(self, command: Event) -> dict[str, Any]:
        """Ask about one waiting command, shown as the argv it runs (no shell reads it)."""
        self.say("\nThe agent wants to run a command:")
        self.say(f"  $ {shlex.join(command['argv'])}")
        if why := command.get("approval_reason", command.get("reason")):  # `reason`: before ADR 20
            self.say(f"  why it waits: {why}")
        while True:
            answer = self.ask("run it? [y]es / [n]o: ").strip().lower()
            if answer in ("y", "yes"):
                return {"id": command["id"], "argv": command["argv"], "execute": True}
            if answer in ("n", "no") or answer == "/reject" or answer.startswith("/reject "):
                reason = answer.removeprefix("/reject").strip() if answer.startswith("/reject") else ""
                reason = reason or self.ask("reason (told to the agent): ").strip()
                return _rejection(command, reason or "rejected on the terminal")
            if answer == "/help":
                self.say(HELP)

    def reply(self, question: Event) -> dict[str, Any]:
        """Ask one question until the answer is one it takes (or "/decline")."""
        kind, options = question["kind"], question.get("options") or []
        who = question.get("tool")
        who = f"{who} asks" if who and who != "ask_user" else "The agent asks"
        self.say(f"\n{who}: {question['prompt']}")
        for number, option in enumerate(options, start=1):
            self.say(f"  {number}. {option}")
        prompt = {"confirmation": "[y]es / [n]o: ", "selection": f"choose 1-{len(options)}: "}.get(
            kind, "answer: "
        )
        while True:
            typed = self.ask(prompt)
            said = typed.strip()
            if said == "/decline":
                return {"id": question["id"], "declined": True}
            if said == "/help":
                self.say(HELP)
            elif kind == "confirmation":
                if said.lower() in ("y", "yes", "n", "no"):
                    return {"id": question["id"], "value": said.lower() in ("y", "yes")}
                self.say("  y or n")
            elif kind == "selection":
                if said.isdigit() and 1 <= int(said) <= len(options):
                    return {"id": question["id"], "value": options[int(said) - 1]}
                if said in options:
                    return {"id": question["id"], "value": said}
                self.say(f"  a number from 1 to {len(options)}")
            else:
                return {"id": question["id"], "value": typed}

    def edit(self, proposed: dict[str, Any]) -> dict[str, Any] | None:
        """The approver's patch onto the proposal, once they have seen what it changes; None to ask again."""
        raw = self.ask_prefilled("arguments as JSON: ", _args(proposed))
        try:
            edited = json.loads(raw)
        except ValueError as exc:
            self.say(f"  not JSON: {exc}")
            return None
        if not isinstance(edited, dict):
            self.say("  the arguments are a JSON object")
            return None
        self.say("  with this edit the call runs with:")
        for line in diff_lines(proposed, merge_patch(proposed, edited)):
            self.say(f"    {line}")
        if self.ask("run it like this? [y]es / [n]o: ").strip().lower() not in ("y", "yes"):
            return None
        return edited

    def ask_prefilled(self, prompt: str, text: str) -> str:
        """Ask with `text` already typed, to be changed in place (readline, on a real terminal)."""
        readline = _readline() if self.ask is input else None
        if readline is None:
            return self.ask(prompt)
        readline.set_startup_hook(lambda: readline.insert_text(text))
        try:
            return self.ask(prompt)
        finally:
            readline.set_startup_hook(None)

    def say(self, line: str) -> None:
        """Print a line; control characters from the model or a tool are shown, never obeyed."""
        self.out.write(_printable(line) + "\n")
        self.out.flush()


def diff_lines(proposed: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """One line per argument: unchanged, changed (old -> new), added or removed."""
    lines = []
    for key in dict.fromkeys([*proposed, *after]):
        if key not in after:
            lines.append(f"{key}: {_args(proposed[key])} (removed)")
        elif key not in proposed:
            lines.append(f"{key}: {_args(after[key])} (added)")
        elif proposed[key] == after[key]:
            lines.append(f"{key}: {_args(after[key])} (unchanged)")
        else:
            lines.append(f"{key}: {_args(proposed[key])} -> {_args(after[key])}")
    return lines


def _waiting_in(record: dict[str, Any]) -> tuple[list[Event], list[Event]]:
    """The calls (as ``data.tool_calls`` lists them; a command with its argv) and the open questions
    (as ``data.questions``) that wait in a conversation read back."""
    calls, pending = {c["id"]: c for c in record["tool_calls"]}, []
    for call in calls.values():
        if call["status"] != "pending":
            continue
        argv = command_argv(call["name"], call["input"])
        if argv is not None:
            pending.append({"id": call["id"], "argv": argv, "approval_reason": call.get("approval_reason")})
        else:
            pending.append({**call, "tool_description": call.get("description", "")})
    questions = [
        {**q, "tool": calls[q["call_id"]]["name"] if q["call_id"] in calls else None}
        for q in record.get("questions", [])
        if q["status"] == "open"
    ]
    return pending, questions


def _what(waiting: Event) -> str:
    """A waiting call, command or question, in a few words."""
    if "argv" in waiting:
        return f"$ {shlex.join(waiting['argv'])}"
    return str(waiting["name"]) if "name" in waiting else f"the question {waiting['prompt']!r}"


def _decision_word(decision: dict[str, Any]) -> str:
    if "value" in decision or "declined" in decision:
        return "answer"
    if not decision.get("execute"):
        return "rejection"
    return "edited approval" if "edited_input" in decision else "approval"


def _rejection(call: Event, reason: str) -> dict[str, Any]:
    """The rejection of a call, or of a command (sent back with its argv, in ``cmds``)."""
    rejection = {"id": call["id"], "execute": False, "rejection_reason": reason}
    return {**rejection, "argv": call["argv"]} if "argv" in call else rejection


def _readline() -> Any:
    import sys

    if not sys.stdin.isatty():
        return None
    try:
        import readline
    except ImportError:  # Windows without pyreadline: no pre-filled line, the proposal is printed above
        return None
    return readline


def _printable(text: str) -> str:
    return "".join(
        c if c in "\n\t" or not unicodedata.category(c).startswith("C") else "\ufffd" for c in text
    )


def _shown(name: str, arguments: Any) -> str:
    """A call as one line: a command as the argv it runs, any other call as its name and arguments."""
    argv = command_argv(name, arguments) if isinstance(arguments, dict) else None
    return f"$ {shlex.join(argv)}" if argv is not None else f"{name} {_args(arguments)}"


def _args(arguments: Any) -> str:
    return json.dumps(arguments, ensure_ascii=False)


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in str(text).splitlines() or [""])


def _granted(call: Event) -> str:
    """`` (approved by grant g_... from bob)`` for a call a standing grant approved (docs/approvals.md,
    "Grants"): a response's and the stream's ``grant``, a stored call's ``approved_by_grant``."""
    grant = call.get("grant")
    if isinstance(grant, dict) and grant.get("approval"):
        return f" ({_printable(str(grant['approval']))})"
    by = call.get("approved_by_grant")
    return f" (approved by {_printable(str(by))})" if by else ""


def _approvals_text(approvals: dict[str, Any]) -> str:
    """``2 approvers from sre, not the requester; approved by alice; needs 1 more from sre``, then the
    escalation's notices once sent: ``approvers reminded; escalated to oncall``."""
    given = ", ".join(str(g.get("by")) for g in approvals.get("given", []))
    needed = "; ".join(
        f"{n.get('count')} more" + (f" from {' or '.join(n['groups'])}" if n.get("groups") else "")
        for n in approvals.get("needed", [])
    )
    escalated_to = ", ".join(str(g) for g in approvals.get("escalated_to", []))
    parts = [
        str(approvals.get("rule", "")),
        f"approved by {given}" if given else "",
        f"needs {needed}" if needed else "",
        "approvers reminded" if approvals.get("reminded_at") is not None else "",
        f"escalated to {escalated_to}" if approvals.get("escalated_at") is not None else "",
    ]
    return "; ".join(p for p in parts if p)
