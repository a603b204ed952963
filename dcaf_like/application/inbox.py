"""One inbox: every call waiting for the caller's decision, across conversations (docs/approvals.md,
"One inbox"). The use case behind ``GET /api/approvals``, ``Agent.waiting_approvals`` and
``dcaf-like approvals``.

It reads the store's index of waiting calls
(:meth:`~dcaf_like.application.ports.WaitingIndex.list_waiting`), never the conversations, so its
cost grows with the calls that wait, not with the conversations kept.
A caller sees a call it could decide now:

- under today's rule (one approver, anyone who may approve), a call of a conversation it may decide
  in: its own (`owner`, an API key's identity; every one for ``admin``), or any when no owner is
  asked for (the Python API, which decides in any conversation);
- under a team rule, a call whose stage due admits one of the caller's groups, unless the caller is
  the requester the rule keeps out or is counted already (it would be refused: ``not_an_approver``,
  ``already_approved``); once its rule's escalation is due, a member of a group it escalates to too.

A call past its approval window is not listed (an approval would be refused as expired). Deciding
one is the decision every entrance takes (a request carrying decisions only; ``Agent.approve``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dcaf_like.application.cursors import InvalidCursor, make_cursor, read_cursor
from dcaf_like.application.errors import InvalidRequest, MissingScope
from dcaf_like.application.ports import ConversationStore, WaitingIndex, require
from dcaf_like.application.waiting import WaitingEntry
from dcaf_like.concurrency.bridges import at_once
from dcaf_like.domain import Identity
from dcaf_like.domain.approvers import groups_of

#: The most a page of the inbox holds.
MAX_PAGE = 200


_INBOX = "this inbox"


@dataclass(frozen=True, slots=True)
class Eligible:
    """Who may still count for a stage the call lacks approvals in: `count` more, from `groups` (none:
    anyone who may approve); `members`, the people those groups list who would count (the requester
    the rule keeps out and those counted already left out; a key with an ``approve:<group>`` scope
    counts too)."""

    stage: int
    count: int
    groups: frozenset[str]
    members: frozenset[str]


@dataclass(frozen=True, slots=True)
class InboxItem:
    """A call waiting for the caller's decision and what it needs: the stage due (from 0), the
    approvals counted so far (`call.approvals`) and who may still count."""

    call: WaitingEntry
    stage: int
    eligible: tuple[Eligible, ...]

    @property
    def rule(self) -> str:
        return self.call.approvers.describe()


@dataclass(frozen=True, slots=True)
class InboxPage:
    """A page of the inbox, newest first; `next_cursor` reads the next one (None: this is the last)."""

    items: list[InboxItem]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class ListWaitingApprovals:
    """The calls waiting for the caller's decision."""

    repository: ConversationStore
    groups: Mapping[str, frozenset[str]]
    clock: Callable[[], float]

    async def __call__(
        self,
        *,
        identity: Identity | None,
        owner: str | None = None,
        cursor: str | None = None,
        limit: int = 50,
        blocking: bool = False,
    ) -> InboxPage:
        """At most `limit` of them, after `cursor`; `owner` is who the caller's conversations belong to
        (an API key's identity: a call under today's rule is listed from those only). Raises
        MissingScope (``approve``), InvalidCursor, InvalidRequest for a `limit` out of 1..MAX_PAGE,
        and MissingCapability for a store without the index. `blocking` reads the store with its
        blocking method (:meth:`blocking`)."""
        if identity is not None and not identity.can("approve"):
            raise MissingScope("approve", "list the calls waiting for approval")
        if not 1 <= limit <= MAX_PAGE:
            raise InvalidRequest("limit", f"a page holds 1 to {MAX_PAGE} calls, not {limit}")
        after = None if cursor is None else _read_cursor(cursor)
        store = require(self.repository, WaitingIndex)
        entries = store.list_waiting() if blocking else await store.alist_waiting()
        now = self.clock()
        member_of = groups_of(identity, self.groups)
        found = sorted(
            (
                e
                for e in entries
                if (after is None or e.key < after)
                and not _expired(e, now)
                and _decides(e, identity, owner, member_of, now)
            ),
            key=lambda e: e.key,
            reverse=True,
        )
        page = found[:limit]
        items = [self._item(e, now) for e in page]
        more = len(found) > limit
        return InboxPage(items, _cursor(page[-1]) if more else None)

    def blocking(
        self,
        *,
        identity: Identity | None,
        owner: str | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> InboxPage:
        """The same, from blocking code (``Agent.waiting_approvals``)."""
        return at_once(self(identity=identity, owner=owner, cursor=cursor, limit=limit, blocking=True))

    def _item(self, entry: WaitingEntry, now: float) -> InboxItem:
        rule = entry.approvers
        needed = rule.still_needed(entry.approvals, _fingerprint(entry))
        escalated = rule.escalated(entry.proposed_at, now)  # the groups escalation added to each stage
        counted = {a.by for a in entry.approvals}
        kept_out = set() if rule.requester_may_approve or entry.requested_by is None else {entry.requested_by}
        eligible = tuple(
            Eligible(
                n.stage,
                n.count,
                n.groups | escalated if n.groups else n.groups,
                frozenset().union(*(self.groups.get(g, frozenset()) for g in n.groups | escalated))
                - counted
                - kept_out,
            )
            for n in needed
        )
        return InboxItem(entry, needed[0].stage if needed else 0, eligible)


def _fingerprint(entry: WaitingEntry) -> str:
    """The fingerprint the entry's approvals were counted for (they all count: the index keeps no other)."""
    return entry.approvals[0].fingerprint if entry.approvals else ""


def _expired(entry: WaitingEntry, now: float) -> bool:
    return entry.expires_at is not None and now >= entry.expires_at


def _decides(
    entry: WaitingEntry, identity: Identity | None, owner: str | None, member_of: frozenset[str], now: float
) -> bool:
    """Whether `identity` may decide `entry` now, as the decision itself would judge it."""
    if identity is None:
        return True
    rule = entry.approvers
    if rule.is_default:
        return owner is None or identity.can("admin") or entry.owner == owner
    if not rule.requester_may_approve and identity.name == entry.requested_by:
        return False
    if any(a.by == identity.name for a in entry.approvals):
        return False
    due = rule.due(entry.approvals, _fingerprint(entry))
    escalated = rule.escalated(entry.proposed_at, now)
    return due is not None and (rule.stages[due].admits(member_of) or not escalated.isdisjoint(member_of))


def _cursor(entry: WaitingEntry) -> str:
    return make_cursor([entry.proposed_at, entry.conversation_id, entry.call_id])


def _read_cursor(cursor: str) -> tuple[float, str, str]:
    at, rest = read_cursor(cursor, of=_INBOX)
    match rest:
        case [str() as conversation_id, str() as call_id]:
            return at, conversation_id, call_id
    raise InvalidCursor("it does not name a place in the inbox", of=_INBOX)
