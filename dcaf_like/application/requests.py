"""The rules of a request, applied before any tool runs: who may use the conversation, which parts the
runtime takes, calls whose worker is gone, the context and session the turn runs in, the decisions
and answers it carries, and the user's new message.

A pure step: it reads and changes the conversation it is given and nothing else (no store, no
model), so a test drives it without a driver. The driver (:mod:`dcaf_like.application.service`)
loads the conversation, calls :meth:`RequestRules.prepare`, saves the claim, then runs the turn.
Every change happens in the order below; the order is itself a rule (a decision is checked in the
context the request carries; a message is added after the calls it does not decide).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dcaf_like.application.decisions import apply_decision
from dcaf_like.application.dto import AgentRequest, QuestionAnswer, ToolDecision
from dcaf_like.application.errors import ConversationNotFound, InvalidRequest, UnsupportedPart
from dcaf_like.application.ports import AgentRuntime
from dcaf_like.application.tracing import NoTracer, Span, Tracer
from dcaf_like.application.turn_settings import TurnSettings
from dcaf_like.application.workers import worker_gone
from dcaf_like.domain import (
    NO_CONTEXT,
    Attachment,
    Conversation,
    DecisionRecord,
    DomainError,
    InvalidAnswer,
    PlatformContext,
    Role,
    ToolCallStatus,
    Trusted,
)

#: The reason an answer a question does not take is refused with, in the audit trail.
REFUSED_ANSWER = "the question does not take this answer"


@dataclass(slots=True)
class Prepared:
    """What a request changed, and what its turn begins with."""

    conversation: Conversation
    #: The version the next save expects (0: a new conversation).
    expected: int
    #: Who the server authenticated, and the agent's dependencies, for instructions, tools, policy.
    trusted: Trusted[Any]
    #: Calls this request approved (claimed by this worker), rejected, found interrupted, and whose
    #: question it declined.
    approved: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    interrupted: list[str] = field(default_factory=list)
    declined: list[str] = field(default_factory=list)
    #: Calls whose approval this request gave was counted, the call still waiting for others.
    counted: list[str] = field(default_factory=list)
    #: The request's message was queued: calls wait for a decision.
    queued: bool = False
    #: The request sends no message and decides calls someone else asked for: the model is not
    #: asked again until their requester's next request (docs/approvals.md, "Approvals by teams").
    waits_for_requester: bool = False


class RequestRules:
    """The rules of one agent's requests: its turn settings (tools, policy), its runtime (which parts it
    takes), the worker that claims what a request approves, and the agent's dependencies."""

    def __init__(
        self,
        settings: TurnSettings,
        runtime: AgentRuntime,
        *,
        worker: str,
        lease_ttl: float,
        deps: Any = None,
        tracer: Tracer | None = None,
    ) -> None:
        self.settings, self.runtime = settings, runtime
        self.worker, self.lease_ttl, self.deps = worker, lease_ttl, deps
        self.tracer: Tracer = tracer or NoTracer()
        #: What a request that names no caller and no deps of its own runs as (a value: shared).
        self._anonymous: Trusted[Any] = Trusted(None, deps)

    def prepare(
        self,
        request: AgentRequest,
        conversation_id: str,
        stored: Conversation | None,
        *,
        now: float,
        span: Span,
        refused: list[DecisionRecord],
    ) -> Prepared:
        """Everything `request` changes before any tool runs, on `stored` (None: a new conversation,
        started with the request's history). It raises before anything is saved; the records of the
        decisions it refused are appended to `refused` (the audit trail keeps them)."""
        if stored is not None and not _may_use(request, stored) and not self._approves_in(request, stored):
            raise ConversationNotFound(stored.id)  # another owner's: as if it did not exist
        if stored is None:
            conversation = Conversation.start(conversation_id, at=now, owner=request.owner)
            for role, text in request.history:
                if role == Role.USER.value:
                    conversation.add_user_message(text, at=now)
                else:
                    conversation.add_assistant_message(text, at=now)
        else:
            conversation = stored
        check_parts(conversation, request.attachments, self.runtime)
        prepared = Prepared(
            conversation, conversation.version if stored is not None else 0, self._trusted(request)
        )
        # Calls whose run ended without a result (their lease ran out, or their worker is known to
        # have exited) are settled, never run again.
        if stored is not None:
            abandoned = conversation.settle_abandoned_calls(at=now, gone=worker_gone)
            prepared.interrupted = [c.id.value for c in abandoned]
        context = request.platform_context
        conversation.use_platform_context(PlatformContext(context) if context else NO_CONTEXT)
        if request.session is not None:
            conversation.replace_session(dict(request.session))
        for decision in request.decisions:
            status = self._decide(conversation, decision, request, prepared.trusted, now, span, refused)
            if status is ToolCallStatus.APPROVED:
                prepared.approved.append(decision.call_id)
            elif status is ToolCallStatus.REJECTED:
                prepared.rejected.append(decision.call_id)
            else:  # an approval counted: the call waits for the others its rule needs
                prepared.counted.append(decision.call_id)
        for answer in request.answers:  # an answered question claims its call to run again
            asked_by = self._answer(conversation, answer, request, now, refused)
            (prepared.declined if answer.declined else prepared.approved).append(asked_by)
        if request.text and not request.attachments and _waits_for_decisions(conversation, now):
            # Calls still wait after this request's decisions: the message is kept for the model step
            # after they are decided (docs/runs.md, "A message into a running run"); it decides nothing.
            conversation.queue_user_message(request.text, at=now)
            prepared.queued = True
        elif request.text or request.attachments:
            if conversation.queued and not conversation.pending_tool_calls:
                conversation.read_queued()  # what was queued came first
            received = conversation.receive_user_message(
                request.text, attachments=request.attachments, at=now, entrance=request.entrance
            )
            prepared.rejected.extend(received.rejected)
            prepared.declined.extend(received.failed)
        elif not request.decisions and not request.answers and not _awaits_model(conversation):
            raise InvalidRequest("messages", "nothing to do: send a message or decide a pending tool call")
        if not (request.text or request.attachments):
            asker = None if request.identity is None else request.identity.name
            decided = [*(d.call_id for d in request.decisions), *prepared.approved]
            askers = {conversation.tool_call(c).requested_by for c in decided}
            prepared.waits_for_requester = any(r != asker for r in askers)
        for call_id in prepared.approved:  # this worker runs them: the claim's save carries its lease
            conversation.lease_tool_call(call_id, self.worker, until=now + self.lease_ttl)
        return prepared

    def _approves_in(self, request: AgentRequest, stored: Conversation) -> bool:
        """Whether `request`, which does not own `stored`, only decides calls of it that wait under a
        rule naming their approvers, sent by an identity that may approve: approvers of a team decide
        in the requester's conversation (docs/approvals.md, "Approvals by teams"). It may send nothing
        else (no message, answer or other session); the call's rule says whether its decision counts,
        and a refusal is audited. A call under today's rule stays its owner's to decide."""
        identity = request.identity
        if identity is None or not identity.can("approve") or not request.decisions:
            return False
        if request.text or request.attachments or request.answers:
            return False
        if request.session is not None and dict(request.session) != stored.session:
            return False
        for decision in request.decisions:
            call = stored.tool_calls.get(decision.call_id)
            if call is None or call.approvers.is_default:  # decided since: it is told so, and audited
                return False
        return True

    def _trusted(self, request: AgentRequest) -> Trusted[Any]:
        if request.identity is None and request.deps is None:
            return self._anonymous
        return Trusted(request.identity, self.deps if request.deps is None else request.deps)

    def _answer(
        self,
        conversation: Conversation,
        answer: QuestionAnswer,
        request: AgentRequest,
        now: float,
        refused: list[DecisionRecord],
    ) -> str:
        """Apply an answer (or a refusal to answer) to an open question: the id of the call that asked.
        It raises, changing nothing stored, for a question this conversation never asked, one already
        answered, one whose window closed, or a value the question does not take (its record, never
        the value, in `refused`)."""
        user, entrance = request.user, request.entrance
        try:
            if answer.declined:
                declined = conversation.decline_question(
                    answer.question_id, by=user, at=now, entrance=entrance
                )
                return declined.id.value
            call = conversation.answer_question(
                answer.question_id,
                answer.value,
                by=user,
                worker=self.worker,
                until=now + self.lease_ttl,
                at=now,
                entrance=entrance,
            )
        except DomainError as exc:
            # An InvalidAnswer's detail may quote the value: the trail keeps only that it was refused.
            reason = REFUSED_ANSWER if isinstance(exc, InvalidAnswer) else str(exc)
            refusal = conversation.answer_refusal(
                answer.question_id, reason, by=user, at=now, entrance=entrance
            )
            refused.append(refusal)
            raise
        return call.id.value

    def _decide(
        self,
        conversation: Conversation,
        decision: ToolDecision,
        request: AgentRequest,
        trusted: Trusted[Any],
        now: float,
        parent: Span,
        refused: list[DecisionRecord],
    ) -> ToolCallStatus:
        user, entrance = request.user, request.entrance
        attributes = {
            "dcaf.call_id": decision.call_id,
            "dcaf.decision": "approve" if decision.approve else "reject",
            "dcaf.decided_by": user,
            "dcaf.edited": decision.edited_arguments is not None,
        }
        span = self.tracer.start("dcaf.decision", attributes, parent)
        try:
            status = apply_decision(
                conversation, self.settings, decision, by=user, at=now, trusted=trusted, entrance=entrance
            )
            call = conversation.tool_call(decision.call_id)
            span.set("dcaf.tool", call.name)
            span.set("dcaf.waited_seconds", max(0.0, now - call.proposed_at))
            return status
        except Exception as exc:
            span.fail(exc)  # refused: nothing ran; the request fails with this error
            refused.append(
                conversation.refusal(decision.call_id, str(exc), by=user, at=now, entrance=entrance)
            )
            raise
        finally:
            span.end()


def _may_use(request: AgentRequest, conversation: Conversation) -> bool:
    """Ownership: a request with an owner uses only that owner's conversations, unless it sees all."""
    return request.owner is None or request.sees_all or conversation.owner == request.owner


def _waits_for_decisions(conversation: Conversation, now: float) -> bool:
    """Whether calls wait for a decision that a message now would find waiting (one past its approval
    window is rejected by the message, as before, and does not count)."""
    return any(not call.is_expired(now) for call in conversation.pending_tool_calls)


def _awaits_model(conversation: Conversation) -> bool:
    """True when the model owes an answer: after a user message, or after its calls all finished."""
    if not conversation.messages:
        return False
    last = conversation.messages[-1]
    return last.role is Role.USER or bool(last.tool_call_ids)


def refuse_unaccepted(attachments: Sequence[Attachment], runtime: AgentRuntime) -> None:
    """Raise :class:`UnsupportedPart` naming the first of a message's `attachments` `runtime` cannot
    take, and why (before anything is saved: A2A opens no task for it)."""
    refused = runtime.refused_part(list(attachments))
    if refused is not None:
        index, reason = refused
        part = attachments[index]
        raise UnsupportedPart(index, part.describe(), part.kind.value, runtime.name, reason)


def check_parts(conversation: Conversation, new: tuple[Attachment, ...], runtime: AgentRuntime) -> None:
    """Refuse the turn when `runtime` cannot take a part its model requests would carry: one of this
    turn's (`new`), or an earlier message's (the runtime changed since, or the request would hold
    more of a kind than the provider takes). The model would not see it, and must not be asked as if
    it had; and a conversation the provider refuses could not go on."""
    if not new and not any(message.attachments for message in conversation.messages):
        return  # the usual turn: no parts anywhere
    earlier = [(i, part) for message in conversation.messages for i, part in enumerate(message.attachments)]
    refused = runtime.refused_part([part for _, part in earlier] + list(new))
    if refused is None:
        return
    at, reason = refused
    if at < len(earlier):
        index, part = earlier[at]
        raise UnsupportedPart(
            index, f"in an earlier message: {part.describe()}", part.kind.value, runtime.name, reason
        )
    index = at - len(earlier)
    raise UnsupportedPart(index, new[index].describe(), new[index].kind.value, runtime.name, reason)
