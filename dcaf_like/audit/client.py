"""The audit's side of the wire: one target, requests of every shape (raw bodies, raw sockets for
conflicting length headers), and what each answer says ran."""

from __future__ import annotations

import json
import socket
import ssl
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from dcaf_like.audit.target import TargetRefused, check_target, is_loopback

__all__ = [
    "AuditClient",
    "Ledger",
    "Outcome",
    "TargetRefused",
    "check_target",
    "executed_calls",
    "is_loopback",
]


@dataclass
class Outcome:
    """One answer: its status (None when the server closed the connection without one), its body
    (JSON, or the list of events of a stream), and the calls it says ran."""

    status: int | None
    body: Any = None
    executed: list[dict[str, Any]] = field(default_factory=list)
    text: str = ""
    timed_out: bool = False
    own: int = 0  # calls the agent ran on its own (reads it made while going on): not counted

    @property
    def refused(self) -> bool:
        """A 4xx, a JSON-RPC error, a stream that ended on an error event, or a closed connection
        (a server that never answers did not refuse)."""
        if self.status is None:
            return not self.timed_out
        if 400 <= self.status < 500:
            return True
        if self.status == 200 and isinstance(self.body, dict) and "jsonrpc" in self.body:
            # A2A: a JSON-RPC error, or a task the server failed or rejected rather than run
            return "error" in self.body or _task_state(self.body.get("result")) in _REFUSED_TASK
        if self.status == 200 and isinstance(self.body, list):
            return bool(self.body) and self.body[-1].get("type") == "error"
        return False

    @property
    def code(self) -> str:
        error = self.body.get("error") if isinstance(self.body, dict) else None
        if isinstance(self.body, list) and self.body and self.body[-1].get("type") == "error":
            error = self.body[-1].get("error")
        if isinstance(error, dict):
            data = error.get("data")
            if isinstance(data, dict) and "code" in data:
                return str(data["code"])
            return str(error.get("code", ""))
        return ""

    def describe(self) -> str:
        status = str(self.status)
        if self.status is None:
            status = "no answer in time" if self.timed_out else "connection closed"
        code = self.code
        ran = f", {len(self.executed)} reported run" if self.executed else ""
        if self.own:
            ran += f", {self.own} of the agent's own calls ran (not counted)"
        return f"{status}{' ' + code if code else ''}{ran}"


def executed_calls(body: Any) -> list[dict[str, Any]]:
    """Every call a body says ran (``executed_tool_calls``, ``executed_cmds``, stream events), once
    per id within this one answer: a server that runs a call twice reports it in two answers."""
    seen: dict[str, dict[str, Any]] = {}
    anonymous: list[dict[str, Any]] = []
    for call in _walk_executed(body):
        call_id = call.get("id")
        if isinstance(call_id, str):
            seen.setdefault(call_id, call)
        else:
            anonymous.append(call)
    return [*seen.values(), *anonymous]


def _walk_executed(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("executed_tool_calls", "executed_cmds", "executed_commands") and isinstance(
                item, list
            ):
                yield from (c for c in item if isinstance(c, dict))
            elif key == "tool_call" and value.get("type") == "tool_finished" and isinstance(item, dict):
                yield item
            else:
                yield from _walk_executed(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk_executed(item)


class Ledger:
    """A file the served tool appends one line to per execution: the exact count."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def lines(self) -> int:
        try:
            with self.path.open("rb") as f:
                return sum(1 for line in f if line.strip())
        except FileNotFoundError:
            return 0


class AuditClient:
    """Requests to the one target URL. Never follows redirects; every request has a timeout."""

    def __init__(
        self, url: str, *, api_key: str | None = None, timeout: float = 120, transport: Any = None
    ) -> None:
        self.url = url
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = timeout
        # A fresh connection per request: a connection the server closed after one answer must not
        # make the next request look refused.
        self.http = httpx.Client(
            base_url=url,
            headers={**self.headers, "Connection": "close"},
            timeout=timeout,
            follow_redirects=False,
            transport=transport,
            limits=httpx.Limits(max_connections=32),
        )
        # The agent turns the audit's requests made the server run (a POST it answered 200 without
        # refusing: the agent ran, and asked its model at least once), and the model time the
        # answers report (``meta.timings_ms.model``, where the server says).
        self.turns = 0
        self.model_seconds = 0.0
        self._count = threading.Lock()
        # Every call id the audit sent, and the audited tool once known: what an answer reports
        # ran is the audit's doing unless it has an id the audit never sent and another tool's name
        # (the agent's own read, made while it went on after a decision).
        self.sent_ids: set[str] = set()
        self.tool: str | None = None

    def close(self) -> None:
        self.http.close()

    def post_json(self, path: str, body: Any, *, headers: Mapping[str, str] | None = None) -> Outcome:
        return self.post_raw(path, json.dumps(body).encode(), headers=headers)

    def post_raw(
        self,
        path: str,
        content: bytes,
        *,
        headers: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Outcome:
        sent = {"Content-Type": content_type, **(headers or {})}
        self._note_ids(content)
        try:
            response = self.http.post(path, content=content, headers=sent)
        except httpx.TransportError as exc:
            return _no_answer(exc)
        return self._counted(_outcome(response.status_code, response.text))

    def get(self, path: str, *, headers: Mapping[str, str] | None = None) -> Outcome:
        try:
            response = self.http.get(path, headers=dict(headers or {}))
        except httpx.TransportError as exc:
            return _no_answer(exc)
        return _outcome(response.status_code, response.text)

    def stream(self, path: str, body: Any) -> Outcome:
        """An NDJSON stream read whole: its events as the body, or the JSON error before any event."""
        content = json.dumps(body).encode()
        self._note_ids(content)
        headers = {"Content-Type": "application/json", "Accept": "application/x-ndjson"}
        try:
            with self.http.stream("POST", path, content=content, headers=headers) as response:
                text = response.read().decode("utf-8", "replace")
                status = response.status_code
                kind = response.headers.get("content-type", "")
        except httpx.TransportError as exc:
            return _no_answer(exc)
        if status != 200 or "ndjson" not in kind:
            return _outcome(status, text)
        events = []
        for line in text.splitlines():
            if line.strip():
                try:
                    events.append(json.loads(line))
                except ValueError:
                    events.append({"type": "unparsable", "line": line[:200]})
        return self._counted(Outcome(status, events, executed_calls(events), text[:500]))

    def _note_ids(self, content: bytes) -> None:
        try:
            sent = json.loads(content)
        except (ValueError, RecursionError):  # the bad input the audit sends on purpose
            return
        with self._count:
            self.sent_ids.update(_call_ids(sent))

    def _counted(self, outcome: Outcome) -> Outcome:
        with self._count:
            if outcome.status == 200 and not outcome.refused:
                self.turns += 1
                self.model_seconds += _model_ms(outcome.body) / 1000
            ours = [c for c in outcome.executed if self._sent(c)]
        outcome.own = len(outcome.executed) - len(ours)
        outcome.executed = ours
        return outcome

    def _sent(self, call: dict[str, Any]) -> bool:
        call_id, name = call.get("id"), call.get("name")
        never_sent = isinstance(call_id, str) and call_id not in self.sent_ids
        return not (never_sent and isinstance(name, str) and self.tool is not None and name != self.tool)

    def raw_exchange(self, request: bytes, *, read_timeout: float = 10) -> Outcome:
        """`request` written as is on a fresh connection (for headers httpx will not send, such as a
        Content-Length next to Transfer-Encoding); the answer's status line and body."""
        parts = urlsplit(self.url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        host = parts.hostname or ""
        try:
            with socket.create_connection((host, port), timeout=read_timeout) as raw:
                conn: socket.socket = raw
                if parts.scheme == "https":
                    conn = ssl.create_default_context().wrap_socket(raw, server_hostname=host)
                conn.sendall(request)
                received = b""
                while len(received) < 1 << 20:
                    try:
                        chunk = conn.recv(65536)
                    except TimeoutError:
                        return Outcome(None, timed_out=True)
                    except ConnectionResetError:
                        break
                    if not chunk:
                        break
                    received += chunk
                    if _complete(received):
                        break
        except OSError:
            return Outcome(None)
        head, _, payload = received.partition(b"\r\n\r\n")
        status_line = head.split(b"\r\n", 1)[0].split()
        if len(status_line) < 2 or not status_line[1].isdigit():
            return Outcome(None)
        return _outcome(int(status_line[1]), payload.decode("utf-8", "replace"))

    def request_head(self, method: str, path: str, headers: list[tuple[str, str]]) -> bytes:
        """The start of a raw request to the target: request line, Host, the client's key, `headers`."""
        parts = urlsplit(self.url)
        lines = [f"{method} {parts.path.rstrip('/')}{path} HTTP/1.1", f"Host: {parts.netloc}"]
        lines += [f"{k}: {v}" for k, v in self.headers.items()]
        lines += [f"{k}: {v}" for k, v in headers]
        lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


_REFUSED_TASK = frozenset({"failed", "rejected", "TASK_STATE_FAILED", "TASK_STATE_REJECTED"})


def _task_state(result: Any) -> Any:
    """An A2A task's state in a JSON-RPC result (0.3: ``result.status.state``; 1.0 nests ``task``)."""
    task = result.get("task", result) if isinstance(result, dict) else None
    status = task.get("status") if isinstance(task, dict) else None
    return status.get("state") if isinstance(status, dict) else None


def _call_ids(value: Any) -> Iterator[str]:
    """The ids of the calls in a request body (in any ``tool_calls`` list, at any depth)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "tool_calls" and isinstance(item, list):
                yield from (c["id"] for c in item if isinstance(c, dict) and isinstance(c.get("id"), str))
            else:
                yield from _call_ids(item)
    elif isinstance(value, list):
        for item in value:
            yield from _call_ids(item)


def _model_ms(body: Any) -> float:
    """The model time an answer reports (``meta.timings_ms.model``, in a chat answer or a stream's
    ``done`` event), 0 when it says none."""
    if isinstance(body, list):
        return sum(_model_ms(event.get("message")) for event in body if isinstance(event, dict))
    meta = body.get("meta") if isinstance(body, dict) else None
    timings = meta.get("timings_ms") if isinstance(meta, dict) else None
    model = timings.get("model") if isinstance(timings, dict) else None
    return float(model) if isinstance(model, int | float) else 0.0


def _no_answer(exc: httpx.TransportError) -> Outcome:
    if isinstance(exc, httpx.ConnectError):
        raise exc  # the server is not there: not something a try can be judged on
    return Outcome(None, text=type(exc).__name__, timed_out=isinstance(exc, httpx.TimeoutException))


def _complete(received: bytes) -> bool:
    head, sep, payload = received.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and value.strip().isdigit():
            return len(payload) >= int(value.strip())
    return False


def _outcome(status: int, text: str) -> Outcome:
    try:
        body: Any = json.loads(text) if text else None
    except ValueError:
        body = None
    return Outcome(status, body, executed_calls(body) if status < 400 else [], text[:500])
