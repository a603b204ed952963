"""What an audit found: per attack family, each try and whether the gate held; JSON and Markdown."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Verdict(StrEnum):
    HELD = "held"
    FAILED = "failed"
    SKIPPED = "skipped"  # the server does not offer what the family needs (no A2A card, say)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One hostile request (or one batch of them) and what came of it."""

    name: str
    held: bool
    detail: str


@dataclass(slots=True)
class FamilyResult:
    """One attack family: every try, and why the family was skipped if it was."""

    key: str
    title: str
    attempts: list[Attempt] = field(default_factory=list)
    skipped: str = ""

    @property
    def verdict(self) -> Verdict:
        if any(not a.held for a in self.attempts):
            return Verdict.FAILED
        if self.skipped and not self.attempts:
            return Verdict.SKIPPED
        return Verdict.HELD

    @property
    def failures(self) -> list[Attempt]:
        return [a for a in self.attempts if not a.held]

    def record(self, name: str, held: bool, detail: str) -> Attempt:
        attempt = Attempt(name, held, detail)
        self.attempts.append(attempt)
        return attempt


@dataclass(slots=True)
class AuditReport:
    """The whole audit. `held` is true when no family failed and the audit could run at all."""

    url: str
    tool: str | None
    counting: str  # "ledger" (exact) or "protocol" (what the server reported)
    families: list[FamilyResult] = field(default_factory=list)
    error: str = ""  # the audit could not run its gate families (no gated call was proposed, say)
    proposals: int = 0
    approvals_sent: int = 0
    duration_s: float = 0.0
    agent_turns: int = 0  # requests the server answered by running the agent (a model turn or more)
    model_seconds: float = 0.0  # the model time those answers reported, where the server says
    budget_s: float | None = None  # the time budget: families not started by then are not reached
    budget_spent: bool = False  # the budget ran out (`error` says before what)
    unreached: list[str] = field(default_factory=list)  # the families it ran out before

    @property
    def held(self) -> bool:
        return not self.error and not self.failed

    @property
    def failed(self) -> list[FamilyResult]:
        return [f for f in self.families if f.verdict is Verdict.FAILED]

    def family(self, key: str) -> FamilyResult:
        for result in self.families:
            if result.key == key:
                return result
        raise KeyError(key)

    def verdicts(self) -> dict[str, str]:
        """``{family key: "held" | "failed" | "skipped"}``."""
        return {f.key: f.verdict.value for f in self.families}

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "tool": self.tool,
            "counting": self.counting,
            "held": self.held,
            "error": self.error,
            "proposals": self.proposals,
            "approvals_sent": self.approvals_sent,
            "duration_s": round(self.duration_s, 3),
            "budget_s": self.budget_s,
            "budget_spent": self.budget_spent,
            "unreached": list(self.unreached),
            "agent_turns": self.agent_turns,
            "model_seconds": round(self.model_seconds, 3),
            "families": [
                {
                    "key": f.key,
                    "title": f.title,
                    "verdict": f.verdict.value,
                    "tries": len(f.attempts),
                    "held": sum(a.held for a in f.attempts),
                    "skipped": f.skipped,
                    "attempts": [asdict(a) for a in f.attempts],
                }
                for f in self.families
            ],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"

    def to_markdown(self) -> str:
        outcome = "every family held" if self.held else "FAILED"
        if self.budget_spent and not self.failed:
            outcome = "OUT OF TIME"
        elif self.error and not self.failed:  # nothing was tried that could fail: no verdict to copy
            outcome = "COULD NOT RUN"
        lines = [
            f"# Approval-gate audit of {self.url}: {outcome}",
            "",
            f"- tool approved by the audit: `{self.tool or '-'}`",
            f"- executions counted from: {self.counting}",
            f"- proposals asked for: {self.proposals}, approvals sent: {self.approvals_sent}",
            f"- duration: {self.duration_s:.1f} s"
            + (f" (budget {self.budget_s:g} s)" if self.budget_s is not None else ""),
            f"- agent turns the audit caused: {self.agent_turns} (answers in which the agent ran, each"
            f" a model turn or more; model time the server reported: {self.model_seconds:.1f} s)",
        ]
        if self.error:
            if self.budget_spent:
                unreached = ", ".join(f"`{k}`" for k in self.unreached) or "none"
                lines += ["", f"**Out of time:** {self.error}; families not reached: {unreached}"]
            else:
                lines += ["", f"**The audit could not run:** {self.error}"]
        lines += ["", "| Family | Verdict | Tries | Held |", "|---|---|---|---|"]
        for f in self.families:
            verdict = f.verdict.value.upper() if f.verdict is Verdict.FAILED else f.verdict.value
            lines.append(f"| {f.title} | {verdict} | {len(f.attempts)} | {sum(a.held for a in f.attempts)} |")
        for f in self.families:
            lines += ["", f"## {f.title}: {f.verdict.value}"]
            if f.skipped:
                lines.append(f"_{f.skipped}_")
            for a in f.attempts:
                mark = "held" if a.held else "**FAILED**"
                lines.append(f"- {mark}: {a.name} ({_md(a.detail)})")
        return "\n".join(lines) + "\n"

    def render(self, path: str) -> str:
        """The report in the format `path`'s suffix names (``.md`` Markdown, anything else JSON)."""
        return self.to_markdown() if path.endswith((".md", ".markdown")) else self.to_json()


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
