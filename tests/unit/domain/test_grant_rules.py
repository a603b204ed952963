"""docs/approvals.md, "Grants": what a standing grant matches, and for how long."""

from __future__ import annotations

import pytest

from dcaf_like.domain import PlatformContext
from dcaf_like.domain.grant import ANY_REQUESTER, MAX_GRANT_SECONDS, Grant, InvalidGrant, grant_of


def dev_restarts(**overrides) -> Grant:
    made = {
        "tool": "restart_pod",
        "requester": "alice",
        "granted_by": "bob",
        "at": 1000.0,
        "duration": 1800,
        "arguments": {"namespace": "dev"},
    }
    return Grant.new(**{**made, **overrides})


def covers(grant: Grant, *, tool="restart_pod", args=None, ctx=None, by="alice", risk=None, now=1000.0):
    arguments = {"name": "web-1", "namespace": "dev"} if args is None else args
    return grant.covers(tool, arguments, PlatformContext(ctx or {}), requested_by=by, risk=risk, now=now)


def test_a_grant_covers_its_tools_calls_whose_arguments_hold_its_values_for_its_requester():
    """docs/approvals.md, "Grants": the tool, the argument conditions and the requesting identity."""
    grant = dev_restarts()
    assert covers(grant)
    assert not covers(grant, tool="delete_pod")
    assert not covers(grant, args={"name": "web-1", "namespace": "prod"})
    assert not covers(grant, args={"name": "web-1"})  # a condition's argument must be there
    assert not covers(grant, by="carol")
    assert not covers(grant, by=None)  # nobody authenticated: not alice


def test_a_condition_may_list_values_and_compares_as_json():
    grant = dev_restarts(arguments={"namespace": ["dev", "staging"], "replicas": 2})
    assert covers(grant, args={"namespace": "staging", "replicas": 2})
    assert covers(grant, args={"namespace": "dev", "replicas": 2.0})  # 2.0 is 2, as arguments are kept
    assert not covers(grant, args={"namespace": "dev", "replicas": "2"})
    flag = dev_restarts(arguments={"force": True})
    assert not covers(flag, args={"force": 1})  # true is never 1


def test_context_conditions_and_any_requester():
    grant = dev_restarts(arguments={}, context={"tenant_name": "dev"}, requester=ANY_REQUESTER)
    assert covers(grant, ctx={"tenant_name": "dev"}, by="carol")
    assert covers(grant, ctx={"tenant_name": "dev"}, by=None)
    assert not covers(grant, ctx={"tenant_name": "prod"})
    assert not covers(grant, ctx={})


def test_a_grant_expires_by_the_clock_it_is_given():
    """docs/approvals.md, "Grants": it lasts its duration, measured by the agent's clock."""
    grant = dev_restarts()
    assert grant.expires_at == 2800.0
    assert covers(grant, now=2799.9)
    assert not covers(grant, now=2800.0)
    assert not grant.is_active(2800.0)


def test_a_revoked_grant_covers_nothing_and_stays_revoked_as_first_revoked():
    grant = dev_restarts().revoked(by="carol", at=1100.0)
    assert not covers(grant, now=1200.0)
    assert grant.revoked(by="dave", at=1300.0).revoked_by == "carol"


def test_a_grant_never_covers_an_irreversible_call():
    """docs/approvals.md, "Grants": never an irreversible call, whatever its rule says."""
    assert not covers(dev_restarts(), risk="irreversible")
    assert covers(dev_restarts(), risk="reversible")


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"tool": ""}, "tool"),
        ({"requester": ""}, "requester"),
        ({"duration": 0}, "duration"),
        ({"duration": MAX_GRANT_SECONDS + 1}, "duration"),
        ({"duration": True}, "duration"),
        ({"arguments": {"namespace": {"nested": 1}}}, "arguments.namespace"),
        ({"arguments": {"namespace": []}}, "arguments.namespace"),
        ({"context": {"tenant": None}}, "context.tenant"),
    ],
)
def test_a_grant_asked_for_wrongly_is_refused_naming_what_is_wrong(overrides, field):
    with pytest.raises(InvalidGrant) as refused:
        dev_restarts(**overrides)
    assert refused.value.field == field


def test_a_grant_reads_back_as_it_was_and_names_itself_on_the_calls_it_approves():
    grant = dev_restarts(context={"tenant_name": ["a", "b"]}, reason="incident 42")
    assert Grant.from_dict(grant.to_dict()) == grant
    assert grant.id.startswith("g_")
    assert grant.approval == f"grant {grant.id} from bob"
    assert grant_of(grant.approval) == (grant.id, "bob")
    assert grant_of("alice") is None
    assert (
        grant.describe()
        == "restart_pod where namespace is dev and context tenant_name is one of a, b, for alice"
    )
