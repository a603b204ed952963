"""The tools an :class:`~dcaf_like.Agent` is given, checked once and shared by agents built from the same.

``Agent(tools=[...])`` turns plain functions into tools, adds their companions, refuses two tools or
two toolsets of one name, and reads who approves each tool's calls as rules of its policy. That is the
same work for the same tools, so :func:`checked_tools` keeps the result of the last tuples it saw
(an agent built per request, per tenant or per test from module-level tools pays for it once);
:func:`check_tools` is the plain code it stands for (docs/architecture.md, "Performance budget").
A tool list that fails is never kept: it fails again, at every construction.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from dcaf_like.domain import Rule, require_approval
from dcaf_like.tools import Tool, as_tool
from dcaf_like.toolsets import Toolset

#: Tool lists remembered: a process builds agents from a few, each kept until others push it out.
MAX_KEPT = 64


@dataclass(frozen=True, slots=True)
class CheckedTools:
    """What an agent's `tools` argument amounts to."""

    #: The plain tools in the order given, then their companions (each once).
    tools: tuple[Tool, ...]
    #: The toolsets, loaded by the agent before its first model call.
    toolsets: tuple[Toolset, ...]
    #: Who approves each tool's calls (``@tool(approvers=...)``), as rules added to the agent's policy.
    rules: tuple[Rule, ...]


def check_tools(given: Iterable[Tool | Callable[..., Any] | Toolset]) -> CheckedTools:
    """`given` checked: a function that cannot be a tool (a parameter with no JSON schema, an invalid
    name), two tools or two toolsets of one name, raise here."""
    plain: list[Tool] = []
    toolsets: list[Toolset] = []
    for each in given:
        if isinstance(each, Toolset):
            toolsets.append(each)
        else:
            plain.append(as_tool(each))
    companions = [c for t in plain if t.companions for c in t.companions if c not in plain]
    tools = (*plain, *companions)
    _refuse_shared_names("tools", [t.name for t in tools])
    _refuse_shared_names("toolsets", [t.name for t in toolsets])
    rules = tuple(
        require_approval(f"{t.name} needs {t.approvers.describe()}", tools=[t.name], approvers=t.approvers)
        for t in tools
        if t.approvers is not None
    )
    return CheckedTools(tools, tuple(toolsets), rules)


def _refuse_shared_names(what: str, names: list[str]) -> None:
    if len(set(names)) != len(names):
        shared = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"two {what} share a name: {', '.join(shared)}")


# By the ids of the objects given: each entry keeps those objects alive, so no id is reused while its
# entry is here, and nothing is compared by a user's __eq__ (two equal toolsets stay two toolsets).
_kept: OrderedDict[tuple[int, ...], tuple[tuple[object, ...], CheckedTools]] = OrderedDict()
_keeping = threading.Lock()


def checked_tools(given: Iterable[Tool | Callable[..., Any] | Toolset]) -> CheckedTools:
    """:func:`check_tools` of `given`: the same object again for the same objects in the same order,
    while they are among the last :data:`MAX_KEPT` tool lists."""
    objects = tuple(given)
    key = tuple(map(id, objects))
    with _keeping:
        entry = _kept.get(key)
        if entry is not None:
            _kept.move_to_end(key)
            return entry[1]
    checked = check_tools(objects)  # raises for tools that cannot be called: nothing is kept
    with _keeping:
        _kept[key] = (objects, checked)
        while len(_kept) > MAX_KEPT:
            _kept.popitem(last=False)
    return checked
