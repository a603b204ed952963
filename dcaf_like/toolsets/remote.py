"""RemoteAgent: an agent served with ``a2a=True`` (or any A2A agent), called through the official
``a2a-sdk`` client, which it imports when first used (``pip install "dcaf-like[a2a]"``).

A remote agent's approval requests are never answered here on anyone's behalf: :meth:`RemoteAgent.send`
returns them as :attr:`RemoteResult.pending`, and the tool of :meth:`RemoteAgent.as_tool` brings an
approval-gated companion, so an orchestrator's own user approves the remote call, shown with the
remote tool and its exact arguments, before the decision is forwarded.
"""

from __future__ import annotations

import math
import re
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dcaf_like.concurrency.bridges import iterate_sync, run_sync
from dcaf_like.extras import missing
from dcaf_like.tools import Tool

if TYPE_CHECKING:
    import httpx
    from a2a.types.a2a_pb2 import AgentCard, Task


def _sdk() -> None:
    try:
        import a2a.client  # noqa: F401
    except ImportError as exc:
        raise missing(f"RemoteAgent needs the A2A SDK ({exc.name} is missing)", "a2a", exc) from exc


@dataclass(frozen=True, slots=True)
class RemoteCall:
    """A call the remote agent proposed and waits to have decided."""

    call_id: str
    tool: str
    arguments: dict[str, Any]
    approval_reason: str = ""  # why it waits for a human (the remote policy's reason)

    @property
    def reason(self) -> str:
        """Deprecated: :attr:`approval_reason`."""
        warnings.warn(
            "RemoteCall.reason is deprecated and goes in the next release; use RemoteCall.approval_reason",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.approval_reason


@dataclass(frozen=True, slots=True)
class RemoteText:
    """A piece of a remote agent's answer, as its model writes it (from :meth:`RemoteAgent.stream`)."""

    text: str


@dataclass(frozen=True, slots=True)
class RemoteResult:
    """A remote task as it stands: ``status`` is the A2A state (``completed``, ``input-required``,
    ``working``, ``failed``, ``canceled``, ``submitted``)."""

    text: str
    status: str
    task_id: str
    context_id: str
    pending: tuple[RemoteCall, ...] = ()
    #: The calls that ran, as the remote lists them (``data.executed_tool_calls``): each with its
    #: ``output``, and the images and files it returned as ``attachments``, by what they are
    #: (``{type, media_type, size, name, url}``), never their bytes.
    executed: tuple[dict[str, Any], ...] = ()
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def needs_approval(self) -> bool:
        return self.status == "input-required" and bool(self.pending)


class RemoteAgent:
    """An A2A agent at `url` (the base URL: its card is at ``/.well-known/agent-card.json``).

    >>> k8s = RemoteAgent("http://k8s-agent:8000")
    >>> result = k8s.send("delete the crashing pod")
    >>> result.pending             # the remote waits for a human: RemoteCall(call_id, tool, arguments)
    >>> k8s.approve(result, result.pending[0].call_id)
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._transport = transport
        self._card: AgentCard | None = None

    # -- the card -------------------------------------------------------------------------------

    @property
    def card(self) -> AgentCard:
        """The remote's agent card (fetched once): ``.name``, ``.description``, ``.skills``, ..."""
        if self._card is None:
            self._card = run_sync(self.acard())
        return self._card

    async def acard(self) -> AgentCard:
        if self._card is None:
            _sdk()
            from a2a.client import A2ACardResolver

            async with self._http() as http:
                self._card = await A2ACardResolver(http, self.url).get_agent_card()
        return self._card

    # -- talking --------------------------------------------------------------------------------

    def send(self, text: str, *, context_id: str | None = None) -> RemoteResult:
        """Send `text` as a new task (in `context_id`, to go on with an earlier conversation) and wait
        for it to complete or to need input."""
        return run_sync(self.asend(text, context_id=context_id))

    async def asend(self, text: str, *, context_id: str | None = None) -> RemoteResult:
        return await self._message(text=text, context_id=context_id)

    def stream(self, text: str, *, context_id: str | None = None) -> Iterator[RemoteText | RemoteResult]:
        """Send `text` as a new task and yield its answer as the remote's model writes it
        (:class:`RemoteText` pieces), then the task as it ended (a :class:`RemoteResult`: completed,
        input-required with its pending calls, or failed)."""
        return iterate_sync(self.astream(text, context_id=context_id))

    async def astream(
        self, text: str, *, context_id: str | None = None
    ) -> AsyncIterator[RemoteText | RemoteResult]:
        from a2a.types.a2a_pb2 import GetTaskRequest, SendMessageRequest

        request = SendMessageRequest(message=self._new_message(text=text, context_id=context_id))
        async with self._http() as http:
            client = await self._client(http, streaming=True)
            task_id = ""
            async for event in client.send_message(request):
                kind = event.WhichOneof("payload")
                if kind == "task":
                    task_id = event.task.id
                elif kind == "artifact_update" and event.artifact_update.append:
                    # Pieces are appended to the answer; the whole answer that replaces them at the
                    # end is in the final task.
                    for part in event.artifact_update.artifact.parts:
                        if part.text:
                            yield RemoteText(part.text)
            if not task_id:
                raise RuntimeError(f"{self.url} streamed no task")
            yield _result(await client.get_task(GetTaskRequest(id=task_id)))

    def approve(
        self,
        task: RemoteResult | str,
        call_id: str,
        *,
        tool: str | None = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> RemoteResult:
        """Approve a pending remote call. `tool` and `arguments` (what the approver was shown) are
        checked by the remote against its proposal; from a RemoteResult they are taken from it."""
        return run_sync(self.aapprove(task, call_id, tool=tool, arguments=arguments))

    async def aapprove(
        self,
        task: RemoteResult | str,
        call_id: str,
        *,
        tool: str | None = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> RemoteResult:
        if isinstance(task, RemoteResult):
            shown = next((c for c in task.pending if c.call_id == call_id), None)
            if shown is not None:
                tool = tool if tool is not None else shown.tool
                arguments = arguments if arguments is not None else shown.arguments
        decision: dict[str, Any] = {"id": call_id, "execute": True}
        if tool is not None:
            decision["name"] = tool
        if arguments is not None:
            decision["input"] = dict(arguments)
        return await self._message(task_id=_task_id(task), decisions=[decision])

    def reject(self, task: RemoteResult | str, call_id: str, reason: str = "rejected") -> RemoteResult:
        """Reject a pending remote call; the reason goes to the remote's model."""
        return run_sync(self.areject(task, call_id, reason))

    async def areject(self, task: RemoteResult | str, call_id: str, reason: str = "rejected") -> RemoteResult:
        decision = {"id": call_id, "execute": False, "rejection_reason": reason or "rejected"}
        return await self._message(task_id=_task_id(task), decisions=[decision])

    def get_task(self, task_id: str) -> RemoteResult:
        return run_sync(self.aget_task(task_id))

    async def aget_task(self, task_id: str) -> RemoteResult:
        from a2a.types.a2a_pb2 import GetTaskRequest

        async with self._http() as http:
            client = await self._client(http)
            return _result(await client.get_task(GetTaskRequest(id=task_id)))

    # -- as a tool of another agent -------------------------------------------------------------

    def as_tool(self, name: str | None = None) -> Tool:
        """A tool an orchestrator's model calls to ask this agent, with its companion
        ``decide_<name>_call``, which needs the orchestrator's user's approval: when the remote waits
        for approval, the model proposes that call with the remote tool and its exact arguments, the
        user sees and decides it, and only then is the decision forwarded (the remote checks it
        against its proposal again)."""
        base = _slug(name or self.card.name)
        remote = self

        async def ask(message: str, context_id: str = "") -> dict[str, Any]:
            result = await remote.asend(message, context_id=context_id or None)
            return _for_model(result, base)

        async def decide(
            task_id: str,
            call_id: str,
            tool: str,
            arguments: dict[str, Any],
            approve: bool = True,
            reason: str = "",
        ) -> dict[str, Any]:
            if approve:
                result = await remote.aapprove(task_id, call_id, tool=tool, arguments=arguments)
            else:
                result = await remote.areject(task_id, call_id, reason or "rejected by the user")
            return _for_model(result, base)

        card = self.card
        skills = ", ".join(s.name for s in card.skills)
        ask_tool = Tool(
            ask,
            name=f"ask_{base}",
            description=f"Ask the agent {card.name}: {card.description} (skills: {skills}). "
            "Pass context_id from an earlier answer to go on with the same conversation.",
            requires_approval=False,
        )
        ask_tool.companions = (
            Tool(
                decide,
                name=f"decide_{base}_call",
                description=f"Approve (or reject) a call the agent {card.name} waits on: pass its task_id, "
                "call_id, tool and arguments exactly as it reported them. Your user approves this first.",
                requires_approval=True,
            ),
        )
        return ask_tool

    # -- internals ------------------------------------------------------------------------------

    def _http(self) -> httpx.AsyncClient:
        import httpx

        return httpx.AsyncClient(timeout=self.timeout, headers=self._headers, transport=self._transport)

    async def _client(self, http: httpx.AsyncClient, *, streaming: bool = False) -> Any:
        _sdk()
        from a2a.client import ClientConfig, ClientFactory

        card = await self.acard()
        return ClientFactory(ClientConfig(streaming=streaming, httpx_client=http)).create(card)

    def _new_message(
        self,
        *,
        text: str = "",
        task_id: str | None = None,
        context_id: str | None = None,
        decisions: list[dict[str, Any]] | None = None,
    ) -> Any:
        _sdk()
        from a2a.types.a2a_pb2 import Message, Part, Role
        from google.protobuf.json_format import ParseDict
        from google.protobuf.struct_pb2 import Value

        parts = [Part(text=text)] if text else []
        if decisions:
            parts.append(Part(data=ParseDict({"tool_calls": decisions}, Value())))
        return Message(
            message_id=uuid.uuid4().hex,
            role=Role.ROLE_USER,
            parts=parts,
            task_id=task_id or "",
            context_id=context_id or "",
        )

    async def _message(
        self,
        *,
        text: str = "",
        task_id: str | None = None,
        context_id: str | None = None,
        decisions: list[dict[str, Any]] | None = None,
    ) -> RemoteResult:
        message = self._new_message(text=text, task_id=task_id, context_id=context_id, decisions=decisions)
        from a2a.types.a2a_pb2 import SendMessageRequest

        async with self._http() as http:
            client = await self._client(http)
            last = None
            async for event in client.send_message(SendMessageRequest(message=message)):
                last = event
        if last is None or not last.HasField("task"):
            raise RuntimeError(f"{self.url} answered without a task")
        return _result(last.task)

    def __repr__(self) -> str:
        return f"RemoteAgent({self.url!r})"


_STATES = {
    "TASK_STATE_SUBMITTED": "submitted",
    "TASK_STATE_WORKING": "working",
    "TASK_STATE_INPUT_REQUIRED": "input-required",
    "TASK_STATE_COMPLETED": "completed",
    "TASK_STATE_FAILED": "failed",
    "TASK_STATE_CANCELED": "canceled",
    "TASK_STATE_REJECTED": "rejected",
    "TASK_STATE_AUTH_REQUIRED": "auth-required",
}


def _result(task: Task) -> RemoteResult:
    from google.protobuf.json_format import MessageToDict

    body = MessageToDict(task)
    status = body.get("status", {})
    texts: list[str] = []
    data: dict[str, Any] = {}
    for part in status.get("message", {}).get("parts", []):
        if "text" in part:
            texts.append(part["text"])
        elif isinstance(part.get("data"), dict):
            data.update(part["data"])
    pending = tuple(
        # `reason`: the name of `approval_reason` on a remote agent from before ADR 20.
        RemoteCall(
            c["id"], c["name"], dict(c.get("input") or {}), c.get("approval_reason", c.get("reason")) or ""
        )
        for c in data.get("tool_calls", [])
        if isinstance(c, dict) and "id" in c and "name" in c
    )
    executed = [_executed(c) for c in data.get("executed_tool_calls", []) if isinstance(c, dict)]
    if "executed_tool_calls" in data:
        data["executed_tool_calls"] = executed
    return RemoteResult(
        text="\n".join(t for t in texts if t),
        status=_STATES.get(status.get("state", ""), status.get("state", "unknown")),
        task_id=body.get("id", ""),
        context_id=body.get("contextId", ""),
        pending=pending,
        executed=tuple(executed),
        data=data,
    )


def _executed(call: dict[str, Any]) -> dict[str, Any]:
    """A call that ran, as the remote listed it, its attachments by what they are only: a number read
    from the data part (a protobuf ``Struct``, whose numbers are all floats) is an integer again, and
    a remote that sent a part's bytes has them left out here, as a HelpDesk response leaves them."""
    parts = call.get("attachments")
    if not isinstance(parts, list):
        return call
    return {**call, "attachments": [_described(p) for p in parts if isinstance(p, dict)]}


def _described(part: dict[str, Any]) -> dict[str, Any]:
    size = part.get("size")
    if not isinstance(size, int | float) or isinstance(size, bool) or not math.isfinite(size):
        size = 0
    return {
        "type": part.get("type"),
        "media_type": part.get("media_type"),
        "size": int(size),
        "name": part.get("name"),
        "url": part.get("url"),
    }


def _task_id(task: RemoteResult | str) -> str:
    return task.task_id if isinstance(task, RemoteResult) else task


def _slug(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]+", "_", name).strip("_").lower() or "remote"


def _for_model(result: RemoteResult, base: str) -> dict[str, Any]:
    """What the orchestrator's model reads of a remote task."""
    answer: dict[str, Any] = {
        "status": result.status,
        "text": result.text,
        "task_id": result.task_id,
        "context_id": result.context_id,
    }
    if result.executed:
        answer["executed_tool_calls"] = list(result.executed)
    if result.pending:
        answer["pending"] = [
            {
                "call_id": c.call_id,
                "tool": c.tool,
                "arguments": c.arguments,
                "approval_reason": c.approval_reason,
            }
            for c in result.pending
        ]
        answer["next"] = (
            f"The agent waits for approval. For each pending call, call decide_{base}_call with this "
            "task_id and the call's call_id, tool and arguments unchanged; the user approves it first."
        )
    return answer
