"""ApprovalPolicy: decides, for one proposed call, whether it runs, waits for a human, or is refused."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, cast

from dcaf_like.domain.approvers import ONE_APPROVER, Approvers, frozen_groups, groups_of
from dcaf_like.domain.context import PlatformContext
from dcaf_like.domain.identity import NOBODY, Identity, Trusted


class Verdict(StrEnum):
    ALLOW = "allow"
    REQUIRE_APPROVAL = "require_approval"
    DENY = "deny"

    @property
    def strictness(self) -> int:
        return _STRICTNESS[self]


_STRICTNESS = {Verdict.ALLOW: 0, Verdict.REQUIRE_APPROVAL: 1, Verdict.DENY: 2}


def _by_strictness(verdict: Verdict) -> int:
    return verdict.strictness


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    verdict: Verdict
    reason: str
    #: Who must approve, when the verdict is REQUIRE_APPROVAL: today's one approver unless a rule asks more.
    approvers: Approvers = ONE_APPROVER


Predicate = Callable[[str, Mapping[str, Any], PlatformContext], bool]
"""A rule's condition: ``(tool_name, arguments, platform_context) -> bool``."""

TrustedPredicate = Callable[[str, Mapping[str, Any], PlatformContext, Trusted[Any]], bool]
"""A rule's condition that also sees what the server vouches for:
``(tool_name, arguments, platform_context, trusted) -> bool``, where ``trusted.identity`` is the
authenticated caller (None without API keys) and ``trusted.deps`` the agent's dependencies."""

Condition = Predicate | TrustedPredicate
"""Either form: a function with a fourth positional parameter gets :class:`Trusted`."""


def _always(_name: str, _args: Mapping[str, Any], _ctx: PlatformContext) -> bool:
    return True


def _takes_trusted(condition: Condition) -> bool:
    """True if `condition` has a fourth positional parameter (the :class:`Trusted` of the run)."""
    try:
        return _read_once(condition)
    except TypeError:  # not hashable: read each time
        return _positional_count(condition) >= 4


@functools.lru_cache(maxsize=1024)
def _read_once(condition: Condition) -> bool:
    return _positional_count(condition) >= 4


def _positional_count(condition: Condition) -> int:
    try:
        parameters = inspect.signature(condition).parameters.values()
    except (TypeError, ValueError):  # no signature to read (a builtin): the three-argument form
        return 3
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(p.kind in positional for p in parameters)


@dataclass(frozen=True, slots=True)
class Rule:
    """If `when` holds for a call to one of `tools` (any tool if None) whose tool declares one of
    `risks` (any risk, or none declared, if None), the verdict is at least `verdict`, and a call that
    waits needs the `approvers` too (None: the rule asks nothing of who approves)."""

    verdict: Verdict
    reason: str
    when: Condition = _always
    tools: frozenset[str] | None = None
    approvers: Approvers | None = None
    risks: frozenset[str] | None = None

    def evaluate(
        self,
        tool_name: str,
        arguments: Mapping[str, Any],
        context: PlatformContext,
        trusted: Trusted[Any] = NOBODY,
        risk: str | None = None,
    ) -> bool:
        if self.tools is not None and tool_name not in self.tools:
            return False
        if self.risks is not None and risk not in self.risks:
            return False
        if _takes_trusted(self.when):
            return bool(cast(TrustedPredicate, self.when)(tool_name, arguments, context, trusted))
        return bool(cast(Predicate, self.when)(tool_name, arguments, context))


def require_approval(
    reason: str,
    *,
    when: Condition = _always,
    tools: Iterable[str] | None = None,
    approvers: Approvers | None = None,
    risks: Iterable[str] | None = None,
) -> Rule:
    """The call waits for a human; with `approvers`, for those (``approvers(2, "sre")``); with
    `risks`, only a call whose tool declares one of them (``risks=["irreversible"]``)."""
    return Rule(Verdict.REQUIRE_APPROVAL, reason, when, _set(tools), approvers, _set(risks))


def deny(
    reason: str,
    *,
    when: Condition = _always,
    tools: Iterable[str] | None = None,
    risks: Iterable[str] | None = None,
) -> Rule:
    """The call is refused; with `risks`, only a call whose tool declares one of them."""
    return Rule(Verdict.DENY, reason, when, _set(tools), None, _set(risks))


def _set(names: Iterable[str] | None) -> frozenset[str] | None:
    if isinstance(names, str):  # risks="irreversible" means that one risk, not its letters
        return frozenset({names})
    return None if names is None else frozenset(names)


def argument_in(name: str, *values: Any) -> Predicate:
    """Holds when the call's argument `name` is one of `values`."""

    def predicate(_tool: str, args: Mapping[str, Any], _ctx: PlatformContext) -> bool:
        return name in args and args[name] in values

    return predicate


def context_in(key: str, *values: Any) -> Predicate:
    """Holds when the platform context's `key` is one of `values`."""

    def predicate(_tool: str, _args: Mapping[str, Any], ctx: PlatformContext) -> bool:
        return key in ctx and ctx[key] in values

    return predicate


def anyone_but(*names: str) -> TrustedPredicate:
    """Holds unless the request was authenticated as one of `names` (an API key's identity): also
    without keys, when nobody is authenticated. ``deny("only ops scales", when=anyone_but("ops"))``."""
    allowed = frozenset(names)

    def predicate(_tool: str, _args: Mapping[str, Any], _ctx: PlatformContext, trusted: Trusted[Any]) -> bool:
        return trusted.identity is None or trusted.identity.name not in allowed

    return predicate


def without_scope(scope: str) -> TrustedPredicate:
    """Holds unless the request's API key has `scope` (or ``admin``): also without keys."""

    def predicate(_tool: str, _args: Mapping[str, Any], _ctx: PlatformContext, trusted: Trusted[Any]) -> bool:
        return trusted.identity is None or not trusted.identity.can(scope)

    return predicate


class ApprovalPolicy:
    """The strictest verdict wins: the tool's own flag, then every matching rule.

    Rules only tighten. To auto-run a tool in dev but ask in prod, mark the tool as not requiring
    approval and add ``require_approval(..., when=context_in("k8s_namespace", "prod"))``.
    A rule whose condition raises applies its verdict anyway (it fails closed).

    A condition sees who is asking only through its fourth argument (:class:`Trusted`), which the
    server fills in from the request's API key: never from the session or the platform context,
    which the client writes.
    """

    def __init__(
        self, rules: Iterable[Rule] = (), *, groups: Mapping[str, Iterable[str]] | None = None
    ) -> None:
        self.rules: tuple[Rule, ...] = tuple(rules)
        #: The groups approvers' rules name, by the identities they list (an API key's
        #: ``approve:<group>`` scope makes its holder a member too).
        self.groups: dict[str, frozenset[str]] = frozen_groups(groups or {})

    def with_rules(self, *rules: Rule) -> ApprovalPolicy:
        return ApprovalPolicy((*self.rules, *rules), groups=self.groups)

    def with_groups(self, groups: Mapping[str, Iterable[str]]) -> ApprovalPolicy:
        """This policy, with `groups` added (a group named in both gets the members of both)."""
        merged = dict(self.groups)
        for name, members in frozen_groups(groups).items():
            merged[name] = merged.get(name, frozenset()) | members
        return ApprovalPolicy(self.rules, groups=merged)

    def groups_of(self, identity: Identity | None) -> frozenset[str]:
        """The groups `identity` belongs to: by name in :attr:`groups`, or by ``approve:<group>`` scope."""
        return groups_of(identity, self.groups)

    def decide(
        self,
        tool_name: str,
        arguments: Mapping[str, Any],
        *,
        tool_requires_approval: bool,
        context: PlatformContext,
        trusted: Trusted[Any] = NOBODY,
        risk: str | None = None,
    ) -> PolicyDecision:
        if tool_requires_approval:
            decision = PolicyDecision(Verdict.REQUIRE_APPROVAL, f"{tool_name} requires approval")
        else:
            decision = PolicyDecision(Verdict.ALLOW, f"{tool_name} runs without approval")
        required, reasoned = ONE_APPROVER, False
        for rule in self.rules:
            asks_approvers = rule.approvers is not None and rule.verdict is Verdict.REQUIRE_APPROVAL
            if rule.verdict.strictness <= decision.verdict.strictness and not asks_approvers:
                continue
            try:
                matched = rule.evaluate(tool_name, arguments, context, trusted, risk)
                reason = rule.reason
            except Exception as exc:
                matched = True
                reason = f"{rule.reason} (its condition failed: {type(exc).__name__}, so it applies)"
            if not matched:
                continue
            if rule.verdict.strictness > decision.verdict.strictness or (asks_approvers and not reasoned):
                decision = PolicyDecision(max(rule.verdict, decision.verdict, key=_by_strictness), reason)
                reasoned = True
            if asks_approvers and rule.approvers is not None:
                required = required.tightened(rule.approvers)
            if decision.verdict is Verdict.DENY:
                break
        if required is ONE_APPROVER or decision.verdict is not Verdict.REQUIRE_APPROVAL:
            return decision
        return PolicyDecision(decision.verdict, decision.reason, required)

    def __repr__(self) -> str:
        return f"ApprovalPolicy({len(self.rules)} rules)"
