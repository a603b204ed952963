"""Who must approve a call: how many distinct people, from which groups, in which stages, and whether
the person who asked for it may be one of them (docs/approvals.md, "Approvals by teams").

A call records its :class:`Approvers` when it is proposed, and each approval as an :class:`Approval`
bound to the fingerprint of the name and arguments it approved: an edit changes that fingerprint, so
the approvals given before it no longer count and the count starts again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dcaf_like.domain.errors import DomainError
from dcaf_like.domain.identity import Identity


class NotAnApprover(DomainError):
    """An approval (or a rejection) by someone the call's rule does not count: the requester when the
    rule keeps them out, someone outside the groups the stage due asks for, or the agent's approver
    callback for a call that needs people (HTTP 403 ``not_an_approver``). Nothing changes."""

    def __init__(self, call_id: str, by: str, detail: str) -> None:
        self.call_id = call_id
        self.by = by
        self.detail = detail
        super().__init__(f"{by} may not decide tool call {call_id}: {detail}")


class AlreadyApproved(DomainError):
    """A second approval by an identity already counted for the call as it stands (HTTP 409
    ``already_approved``): an identity counts once, however often it approves. Nothing changes."""

    def __init__(self, call_id: str, by: str) -> None:
        self.call_id = call_id
        self.by = by
        super().__init__(f"{by} already approved tool call {call_id}: it needs the approval of someone else")


@dataclass(frozen=True, slots=True)
class Stage:
    """`count` distinct approvers, each a member of one of `groups` (none named: anyone who may approve)."""

    count: int = 1
    groups: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"a stage needs one approver or more, not {self.count!r}")

    def admits(self, member_of: frozenset[str]) -> bool:
        return not self.groups or not self.groups.isdisjoint(member_of)

    def describe(self) -> str:
        people = "approver" if self.count == 1 else "approvers"
        if not self.groups:
            return f"{self.count} {people}"
        return f"{self.count} {people} from {' or '.join(sorted(self.groups))}"


#: Today's stage: one approval, by anyone who may approve.
ANYONE = Stage()
#: The stages of today's rule: that one stage and no other.
ONLY_ANYONE = (ANYONE,)

#: What a call does when its approval window closes: it is rejected (today's), or it keeps waiting.
AT_WINDOW_END = ("reject", "wait")


@dataclass(frozen=True, slots=True)
class Escalation:
    """What happens to a call while it waits (docs/approvals.md, "Escalation"), in seconds after it
    was proposed, by the agent's clock: the approvers are reminded after `remind_after`; after
    `escalate_after` the members of `escalate_to` may approve any stage still due (and are told);
    at the approval window's end the call is rejected, or with `at_window_end="wait"` keeps waiting."""

    remind_after: float | None = None
    escalate_after: float | None = None
    escalate_to: frozenset[str] = frozenset()
    at_window_end: str = "reject"

    def __post_init__(self) -> None:
        for name in ("remind_after", "escalate_after"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not value > 0):
                raise ValueError(f"{name} is a number of seconds above 0, not {value!r}")
        if (self.escalate_after is None) != (not self.escalate_to):
            raise ValueError("an escalation names both when (escalate_after) and to whom (escalate_to)")
        if self.at_window_end not in AT_WINDOW_END:
            raise ValueError(f"at_window_end is 'reject' or 'wait', not {self.at_window_end!r}")

    @property
    def keeps_waiting(self) -> bool:
        """Whether a call under it outlives the agent's approval window."""
        return self.at_window_end == "wait"

    def escalated(self, proposed_at: float, now: float) -> frozenset[str]:
        """The groups it adds to every stage due at `now`, for a call proposed at `proposed_at`."""
        if self.escalate_after is None or now < proposed_at + self.escalate_after:
            return frozenset()
        return self.escalate_to

    def due(self, proposed_at: float, now: float, *, reminded: bool, escalated: bool) -> str | None:
        """The notice due at `now` that was not sent yet: ``"escalation"`` (which stands for the
        reminder too when both are due), ``"reminder"``, or None."""
        if not escalated and self.escalated(proposed_at, now):
            return "escalation"
        if not reminded and not escalated and self.remind_after is not None:
            return "reminder" if now >= proposed_at + self.remind_after else None
        return None

    def tightened(self, other: Escalation | None) -> Escalation | None:
        """Both at once, `other` None for a rule that escalates nothing. Rules only tighten who may
        approve: a group is escalated to only if both rules name it, at the later of their times,
        and not at all when one rule does not escalate; the call keeps waiting past its window only
        if both say so. Reminders tell people and approve nothing: the earlier one is kept. None
        when nothing is left."""
        remind_after = self.remind_after if other is None else _earlier(self.remind_after, other.remind_after)
        to: frozenset[str] = frozenset()
        escalate_after = None
        if other is not None and self.escalate_after is not None and other.escalate_after is not None:
            to = self.escalate_to & other.escalate_to
            escalate_after = max(self.escalate_after, other.escalate_after) if to else None
        wait = other is not None and self.keeps_waiting and other.keeps_waiting
        if remind_after is None and escalate_after is None and not wait:
            return None
        return Escalation(remind_after, escalate_after, to, "wait" if wait else "reject")

    def describe(self) -> str:
        parts = []
        if self.remind_after is not None:
            parts.append(f"reminded after {_seconds(self.remind_after)}")
        if self.escalate_after is not None:
            parts.append(
                f"escalated to {' and '.join(sorted(self.escalate_to))} after {_seconds(self.escalate_after)}"
            )
        if self.keeps_waiting:
            parts.append("waits past its window")
        return ", ".join(parts)


def escalation_to_dict(escalation: Escalation) -> dict[str, Any]:
    """An escalation as the stores and the index of waiting calls keep it."""
    return {
        "remind_after": escalation.remind_after,
        "escalate_after": escalation.escalate_after,
        "escalate_to": sorted(escalation.escalate_to),
        "at_window_end": escalation.at_window_end,
    }


def escalation_from(stored: Mapping[str, Any] | None) -> Escalation | None:
    if stored is None:
        return None
    return Escalation(
        stored["remind_after"],
        stored["escalate_after"],
        frozenset(stored["escalate_to"]),
        stored["at_window_end"],
    )


def _earlier(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def _seconds(value: float) -> str:
    return f"{value:g}s"


@dataclass(frozen=True, slots=True)
class Approval:
    """One approval of a call that needs more than one: who gave it, when, for which stage (from 0),
    and the fingerprint of the name and arguments it approved (:func:`fingerprint`)."""

    by: str
    at: float
    stage: int
    fingerprint: str


@dataclass(frozen=True, slots=True)
class Needed:
    """The approvals a stage (from 0) still lacks: `count` more, from any of `groups` (none: anyone)."""

    stage: int
    count: int
    groups: frozenset[str]


@dataclass(frozen=True, slots=True)
class Approvers:
    """The approvals a call needs: its `stages` in order, each complete before the next counts, and
    whether the requester (whose message led to the proposal) may be one of the approvers.

    The default is the rule every call had before teams: one approval, by anyone who may approve,
    the requester included."""

    stages: tuple[Stage, ...] = ONLY_ANYONE
    requester_may_approve: bool = True
    #: Reminders, escalation and the window's end (None: none, and rejected when the window closes).
    escalation: Escalation | None = None

    def __post_init__(self) -> None:
        if not self.stages:
            raise ValueError("approvers need one stage or more")

    @property
    def is_default(self) -> bool:
        return self is ONE_APPROVER or self == ONE_APPROVER

    def tightened(self, other: Approvers) -> Approvers:
        """Both rules at once, the requester kept out if either keeps them out: this rule's stages, in
        order and all of them, then each stage of `other` this rule does not already have as often
        (``2 from sre`` twice is met once; ``1 from sre, then 1 from sre`` stays two people). A rule
        that is only today's single approval by anyone is met by the other's stages, and adds none.
        Their escalations combine as :meth:`Escalation.tightened` says (today's rule has none to add).

        This rule's stages keep their places, so an approval already counted for one of them
        counts for the same stage after (:meth:`carried`)."""
        if other.stages == ONLY_ANYONE:
            stages = self.stages
        elif self.stages == ONLY_ANYONE:
            stages = other.stages
        else:
            unmatched, added = list(self.stages), []
            for stage in other.stages:
                if stage in unmatched:
                    unmatched.remove(stage)
                else:
                    added.append(stage)
            stages = (*self.stages, *added)
        if self.is_default or other.is_default:  # today's rule has no say on escalation either
            escalation = other.escalation if self.is_default else self.escalation
        elif self.escalation is None:
            escalation = None if other.escalation is None else other.escalation.tightened(None)
        else:
            escalation = self.escalation.tightened(other.escalation)
        return Approvers(stages, self.requester_may_approve and other.requester_may_approve, escalation)

    def escalated(self, proposed_at: float, now: float) -> frozenset[str]:
        """The groups an escalation due at `now` adds to every stage (none before it, or without one)."""
        return frozenset() if self.escalation is None else self.escalation.escalated(proposed_at, now)

    def carried(self, approvals: Sequence[Approval], before: Approvers) -> tuple[Approval, ...]:
        """The `approvals` counted under the rule `before` that count under this one: those whose
        stage this rule has at the same place. An approval is never moved to a stage it was not
        given for (a stage by anyone that a tighter rule replaced takes its approvals with it)."""
        return tuple(
            a
            for a in approvals
            if a.stage < min(len(self.stages), len(before.stages))
            and self.stages[a.stage] == before.stages[a.stage]
        )

    def counted(self, approvals: Sequence[Approval], fingerprint: str) -> tuple[Approval, ...]:
        """The approvals that count: those of the call as it stands (its `fingerprint`)."""
        return tuple(a for a in approvals if a.fingerprint == fingerprint)

    def due(self, approvals: Sequence[Approval], fingerprint: str) -> int | None:
        """The first stage still short of approvals (None: every stage is complete)."""
        counted = self.counted(approvals, fingerprint)
        for index, stage in enumerate(self.stages):
            if sum(a.stage == index for a in counted) < stage.count:
                return index
        return None

    def still_needed(self, approvals: Sequence[Approval], fingerprint: str) -> tuple[Needed, ...]:
        """What the call waits for, stage by stage: the approvals each stage still lacks."""
        counted = self.counted(approvals, fingerprint)
        needed = []
        for index, stage in enumerate(self.stages):
            missing = stage.count - sum(a.stage == index for a in counted)
            if missing > 0:
                needed.append(Needed(index, missing, stage.groups))
        return tuple(needed)

    def admit(
        self,
        call_id: str,
        by: str,
        member_of: frozenset[str],
        *,
        requester: str | None,
        approvals: Sequence[Approval],
        fingerprint: str,
        escalated: frozenset[str] = frozenset(),
    ) -> int:
        """The stage an approval by `by` (a member of `member_of`) counts for; refused, changing
        nothing, for the requester the rule keeps out (:class:`NotAnApprover`), an identity already
        counted (:class:`AlreadyApproved`), or one outside the groups of the stage due and those the
        call was `escalated` to."""
        if requester is not None and by == requester and not self.requester_may_approve:
            raise NotAnApprover(call_id, by, "the requester of a call may not approve it under its rule")
        counted = self.counted(approvals, fingerprint)
        if any(a.by == by for a in counted):
            raise AlreadyApproved(call_id, by)
        index = self.due(counted, fingerprint)
        if index is None:  # complete: the call is approved already, and the caller checks that first
            raise DomainError(f"tool call {call_id} has every approval it needs")
        stage = self.stages[index]
        if not stage.admits(member_of) and escalated.isdisjoint(member_of):
            raise NotAnApprover(call_id, by, f"stage {index + 1} of its approval needs {stage.describe()}")
        return index

    def may_reject(
        self,
        by: str,
        member_of: frozenset[str],
        *,
        requester: str | None,
        escalated: frozenset[str] = frozenset(),
    ) -> bool:
        """A rejection counts from anyone a stage admits or the call was `escalated` to, and from the
        requester (who withdraws it)."""
        if requester is not None and by == requester:
            return True
        return any(s.admits(member_of) for s in self.stages) or not escalated.isdisjoint(member_of)

    def describe(self) -> str:
        text = ", then ".join(s.describe() for s in self.stages)
        text = text if self.requester_may_approve else f"{text}, not the requester"
        return text if self.escalation is None else f"{text}; {self.escalation.describe()}"


#: Today's rule, every call's unless a tool or a policy says otherwise.
ONE_APPROVER = Approvers()


def approvers(
    count: int = 1,
    *groups: str,
    then: Approvers | None = None,
    requester_may_approve: bool = False,
    remind_after: float | None = None,
    escalate_after: float | None = None,
    escalate_to: str | Iterable[str] = (),
    at_window_end: str = "reject",
) -> Approvers:
    """`count` distinct approvers from any of `groups` (none: anyone who may approve), then the stages
    of `then`; the requester is not one of them unless `requester_may_approve` (and `then` allows it).

    A call waiting under it reminds its approvers after `remind_after` seconds, is escalated to the
    group(s) `escalate_to` after `escalate_after` seconds, and at the approval window's end is
    rejected (``at_window_end="reject"``) or keeps waiting (``"wait"``): docs/approvals.md,
    "Escalation".

    ``approvers(2, "sre")``; ``approvers(1, "leads", then=approvers(2, "sre"))``;
    ``approvers(2, "sre", remind_after=600, escalate_after=3600, escalate_to="sre-oncall")``."""
    stage = Stage(count, frozenset(groups))
    escalation = None
    if remind_after is not None or escalate_after is not None or escalate_to or at_window_end != "reject":
        to = frozenset([escalate_to] if isinstance(escalate_to, str) else escalate_to)
        escalation = Escalation(remind_after, escalate_after, to, at_window_end)
    if then is None:
        return Approvers((stage,), requester_may_approve, escalation)
    if escalation is not None and then.escalation is not None:  # combined as two rules' are
        escalation = escalation.tightened(then.escalation)
    return Approvers(
        (stage, *then.stages),
        requester_may_approve and then.requester_may_approve,
        escalation if escalation is not None else then.escalation,
    )


def groups_of(identity: Identity | None, groups: Mapping[str, frozenset[str]]) -> frozenset[str]:
    """The groups `identity` belongs to: those that list its name, and ``<group>`` for each
    ``approve:<group>`` scope of its API key. Nobody (None) belongs to none."""
    if identity is None:
        return frozenset()
    named = {group for group, members in groups.items() if identity.name in members}
    scoped = {scope.partition(":")[2] for scope in identity.scopes if scope.startswith(GROUP_SCOPE)}
    return frozenset(named | scoped)


#: The prefix of an API key's scope that makes its holder a member of a group (``approve:sre``).
GROUP_SCOPE = "approve:"


def frozen_groups(groups: Mapping[str, Iterable[str]]) -> dict[str, frozenset[str]]:
    """``{"sre": {"alice", "bob"}}`` as the policy keeps it (a name given as one string is one member)."""
    return {g: frozenset([m] if isinstance(m, str) else m) for g, m in groups.items()}
