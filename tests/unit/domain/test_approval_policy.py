"""ApprovalPolicy: the strictest verdict wins, rules only tighten, and a rule that fails applies."""

from __future__ import annotations

from typing import Any

import pytest

from dcaf_like.domain import PlatformContext
from dcaf_like.domain.policy import (
    ApprovalPolicy,
    Verdict,
    argument_in,
    context_in,
    deny,
    require_approval,
)

PROD = PlatformContext({"tenant_name": "production", "k8s_namespace": "prod"})
DEV = PlatformContext({"tenant_name": "dev"})


def decide(policy: ApprovalPolicy, tool: str = "delete_pod", *, gated: bool = True, ctx=DEV, **args: Any):
    return policy.decide(tool, args, tool_requires_approval=gated, context=ctx)


def test_without_rules_the_tools_own_flag_decides():
    policy = ApprovalPolicy()

    assert decide(policy, gated=True).verdict is Verdict.REQUIRE_APPROVAL
    assert decide(policy, "list_pods", gated=False).verdict is Verdict.ALLOW


def test_a_rule_tightens_an_open_tool_but_never_loosens_a_gated_one():
    policy = ApprovalPolicy(
        [require_approval("prod needs a human", when=context_in("k8s_namespace", "prod"))]
    )

    assert decide(policy, "restart_pod", gated=False, ctx=PROD).verdict is Verdict.REQUIRE_APPROVAL
    assert decide(policy, "restart_pod", gated=False, ctx=DEV).verdict is Verdict.ALLOW
    assert decide(policy, gated=True, ctx=DEV).verdict is Verdict.REQUIRE_APPROVAL


def test_deny_wins_over_everything_and_names_its_reason():
    policy = ApprovalPolicy(
        [
            require_approval("prod needs a human", when=context_in("tenant_name", "production")),
            deny("kube-system is the platform team's", when=argument_in("namespace", "kube-system")),
        ]
    )

    decision = decide(policy, gated=False, ctx=PROD, name="coredns", namespace="kube-system")

    assert decision.verdict is Verdict.DENY
    assert decision.reason == "kube-system is the platform team's"


def test_a_rule_limited_to_some_tools_leaves_the_others_alone():
    policy = ApprovalPolicy([deny("no scaling on Fridays", tools=["scale"])])

    assert decide(policy, "scale", gated=False).verdict is Verdict.DENY
    assert decide(policy, "list_pods", gated=False).verdict is Verdict.ALLOW


@pytest.mark.parametrize("rule", [require_approval, deny])
def test_a_rule_whose_condition_raises_still_applies(rule):
    def broken(_tool: str, args: Any, _ctx: PlatformContext) -> bool:
        return bool(args["missing"])  # KeyError: the rule cannot tell

    policy = ApprovalPolicy([rule("checked by a broken condition", when=broken)])

    decision = decide(policy, "restart_pod", gated=False)

    assert decision.verdict is rule("", when=broken).verdict
    assert "its condition failed: KeyError, so it applies" in decision.reason


def test_argument_in_holds_only_when_the_argument_is_there_with_one_of_the_values():
    holds = argument_in("namespace", "kube-system", "istio-system")

    assert holds("delete_pod", {"namespace": "istio-system"}, DEV)
    assert not holds("delete_pod", {"namespace": "prod"}, DEV)
    assert not holds("delete_pod", {}, DEV)


def test_with_rules_returns_a_new_policy_and_keeps_the_old_one():
    base = ApprovalPolicy()
    stricter = base.with_rules(deny("never"))

    assert decide(base, gated=False).verdict is Verdict.ALLOW
    assert decide(stricter, gated=False).verdict is Verdict.DENY


def test_a_rule_may_name_the_risks_it_covers_as_the_tools_declare_them():
    """docs/approvals.md, "What the approver sees": a rule with `risks` applies only to calls whose
    tool declares one of them; a tool that declares none is not covered."""
    from dcaf_like.domain import approvers

    policy = ApprovalPolicy(
        [
            require_approval("irreversible: two SREs", risks=["irreversible"], approvers=approvers(2, "sre")),
            deny(
                "nothing irreversible in prod", risks="irreversible", when=context_in("k8s_namespace", "prod")
            ),
        ]
    )

    def with_risk(risk: str | None, ctx: PlatformContext = DEV) -> Any:
        return policy.decide("restart", {}, tool_requires_approval=False, context=ctx, risk=risk)

    irreversible = with_risk("irreversible")
    assert (irreversible.verdict, irreversible.reason) == (Verdict.REQUIRE_APPROVAL, "irreversible: two SREs")
    assert irreversible.approvers.describe().startswith("2 approvers from sre")
    assert with_risk("reversible").verdict is Verdict.ALLOW
    assert with_risk(None).verdict is Verdict.ALLOW
    assert with_risk("irreversible", PROD).verdict is Verdict.DENY
