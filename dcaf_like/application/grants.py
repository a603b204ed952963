"""Standing grants as use cases (docs/approvals.md, "Grants"): make one, list them, revoke one; each
checks the ``approve`` scope, and making and revoking are recorded in the audit trail. The use case
behind ``/api/grants`` and ``Agent.grant``, ``Agent.grants``, ``Agent.revoke_grant``.

A turn reads the grants in force as it begins (:func:`~dcaf_like.application.ports.grants_in_force`)
and :func:`~dcaf_like.application.decisions.propose` approves by one the calls it covers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from dcaf_like.application.errors import MissingScope
from dcaf_like.application.ports import AuditTrail, ConversationStore, GrantStore, require
from dcaf_like.domain import DeciderKind, DecisionOutcome, DecisionRecord, Identity
from dcaf_like.domain.grant import Grant, GrantNotFound

#: Who made or revoked a grant through the Python API when it names no identity.
OPERATOR = "operator"


@dataclass(frozen=True, slots=True)
class Grants:
    """The grants of one store, by the agent's clock."""

    repository: ConversationStore
    clock: Callable[[], float]

    def grant(
        self,
        *,
        identity: Identity | None,
        tool: str,
        requester: str,
        duration: float,
        arguments: Mapping[str, Any] | None = None,
        context: Mapping[str, Any] | None = None,
        reason: str = "",
        entrance: str = "python",
        anonymous: str = OPERATOR,
    ) -> Grant:
        """A new grant by `identity` (None: `anonymous`, the operator of the Python API or the caller
        of a server without keys), kept and audited. Raises MissingScope (``approve``; ``admin`` for
        a grant covering another identity's calls), InvalidGrant, MissingCapability (a store that
        keeps no grants)."""
        try:
            by = _granter(identity, "make a standing grant", anonymous)
            if identity is not None and requester != identity.name and not identity.can("admin"):
                # Under today's rule only a conversation's owner (or an admin) decides its calls: a
                # grant gives no one more than that (docs/approvals.md, "Grants").
                raise MissingScope("admin", "grant approvals of another identity's calls (or anyone's)")
        except MissingScope as refused:
            self._refused(identity, tool, str(refused), entrance)
            raise
        store = require(self.repository, GrantStore)
        now = self.clock()
        grant = Grant.new(
            tool=tool,
            requester=requester,
            granted_by=by,
            at=now,
            duration=duration,
            arguments=arguments,
            context=context,
            reason=reason,
        )
        # Its record first: a grant is never in force without one (a failure between the two writes
        # leaves a record of a grant that was never kept, which approves nothing).
        self._audit(grant, DecisionOutcome.GRANTED, by, entrance, now)
        store.add_grant(grant)
        return grant

    def list_grants(self, *, identity: Identity | None, everything: bool = False) -> list[Grant]:
        """The grants in force, newest first; with `everything`, the expired and revoked ones too."""
        _granter(identity, "list standing grants", OPERATOR)
        now = self.clock()
        grants = require(self.repository, GrantStore).list_grants()
        kept = [g for g in grants if everything or g.is_active(now)]
        return sorted(kept, key=lambda g: (g.created_at, g.id), reverse=True)

    def revoke(
        self,
        grant_id: str,
        *,
        identity: Identity | None,
        entrance: str = "python",
        anonymous: str = OPERATOR,
    ) -> Grant:
        """Revoke the grant at once: no turn that begins after approves by it. One revoked already is
        answered as it is (recorded once). Raises GrantNotFound, MissingScope, MissingCapability."""
        by = _granter(identity, "revoke a standing grant", anonymous)
        store = require(self.repository, GrantStore)
        known = {g.id: g for g in store.list_grants()}.get(grant_id)
        if known is None:
            raise GrantNotFound(grant_id)
        if known.revoked_at is not None:
            return known
        now = self.clock()
        revoked = store.revoke_grant(grant_id, by=by, at=now)
        if revoked is None:
            raise GrantNotFound(grant_id)
        self._audit(revoked, DecisionOutcome.REVOKED, by, entrance, now)
        return revoked

    def _refused(self, identity: Identity | None, tool: str, reason: str, entrance: str) -> None:
        """A grant refused for a missing scope joins the trail, as every refused decision does."""
        if identity is None or not isinstance(self.repository, AuditTrail):
            return
        record = DecisionRecord.refused("", reason, by=identity.name, entrance=entrance, at=self.clock())
        self.repository.record_decisions([replace(record, tool_name=tool if isinstance(tool, str) else "")])

    def _audit(self, grant: Grant, outcome: DecisionOutcome, by: str, entrance: str, at: float) -> None:
        if not isinstance(self.repository, AuditTrail):
            return
        until = f", until {grant.expires_at:.0f}" if outcome is DecisionOutcome.GRANTED else ""
        record = DecisionRecord(
            conversation_id="",
            call_id="",
            tool_name=grant.tool,
            fingerprint="",
            outcome=outcome,
            decided_by=by,
            decider=DeciderKind.HUMAN,
            entrance=entrance,
            at=at,
            reason=f"{grant.id}: {grant.describe()}{until}",
        )
        self.repository.record_decisions([record])


def _granter(identity: Identity | None, doing: str, anonymous: str) -> str:
    if identity is None:
        return anonymous
    if not identity.can("approve"):
        raise MissingScope("approve", doing)
    return identity.name
