"""Toolsets: tools that exist elsewhere (an MCP server) and are known only once connected.

An :class:`~dcaf_like.Agent` takes toolsets among its tools. It loads them just in time, before the model
is first called, and keeps what it loaded for every later run. A toolset that cannot load stops the run
with :class:`~dcaf_like.ToolsetUnavailable` before anything else happens.

Tool names are what models call tools by, so they must suit every provider: OpenAI, Bedrock and
Anthropic accept only ``[A-Za-z0-9_-]``, 64 characters at most (``:`` and ``.`` are refused). A name two
sources share is namespaced ``<toolset>__<tool>``.
"""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from dcaf_like.application.messages import ToolSpec
from dcaf_like.application.ports import ExecutableTool, ToolContext, ToolOutput
from dcaf_like.concurrency.bridges import run_sync

SEPARATOR = "__"
MAX_NAME = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


class Toolset(ABC):
    """A named source of tools. Implement :meth:`aload`; override :meth:`load`, :meth:`close` and
    :meth:`aclose` when the source has a better way or holds something to release."""

    #: Names the source in errors, and prefixes its tools' names when they collide with others'.
    name: str

    @abstractmethod
    async def aload(self) -> Sequence[ExecutableTool]:
        """Connect if need be and return the tools; raise ToolsetUnavailable if the source is out of reach."""

    def load(self) -> Sequence[ExecutableTool]:
        return run_sync(self.aload())

    def close(self) -> None:  # noqa: B027  (optional hook)
        """Release connections and processes."""

    async def aclose(self) -> None:
        self.close()


def safe_name(name: str) -> str:
    """`name` as every provider accepts it: unsupported characters become ``_``; a name over 64
    characters is cut and ends with a hash of the whole, so two long names stay distinct."""
    name = _UNSAFE.sub("_", name) or "_"
    if len(name) > MAX_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        name = f"{name[: MAX_NAME - 9]}_{digest}"
    return name


def combine(
    local: Sequence[ExecutableTool], loaded: Sequence[tuple[str, Sequence[ExecutableTool]]]
) -> list[ExecutableTool]:
    """The agent's own tools keep their names; a loaded tool whose name another tool also has is
    renamed ``<toolset>__<tool>``."""
    counts = Counter(t.name for t in local)
    counts.update(t.name for _, tools in loaded for t in tools)
    combined = list(local)
    for source, tools in loaded:
        for t in tools:
            unique = counts[t.name] == 1
            combined.append(t if unique else Renamed(t, safe_name(f"{source}{SEPARATOR}{t.name}")))
    return combined


class Renamed:
    """A tool offered under another name; everything else is the tool's own."""

    def __init__(self, tool: ExecutableTool, name: str) -> None:
        self.tool = tool
        self.name = name

    @property
    def description(self) -> str:
        return self.tool.description

    @property
    def requires_approval(self) -> bool:
        return self.tool.requires_approval

    @property
    def editable(self) -> bool:
        return self.tool.editable

    @property
    def secret_arguments(self) -> frozenset[str]:
        return self.tool.secret_arguments

    @property
    def is_async(self) -> bool:
        return self.tool.is_async

    @property
    def risk(self) -> str | None:
        """The tool's own risk, if it declares one (``@tool(risk=...)``)."""
        risk: str | None = getattr(self.tool, "risk", None)
        return risk

    @property
    def timeout(self) -> float | None:
        """The tool's own time limit, if it has one (``@tool(timeout=...)``)."""
        limit: float | None = getattr(self.tool, "timeout", None)
        return limit

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.tool.description, self.tool.spec().input_schema)

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return self.tool.validate(arguments)

    def invoke(self, arguments: Mapping[str, Any], context: ToolContext) -> str | ToolOutput:
        return self.tool.invoke(arguments, context)

    async def ainvoke(self, arguments: Mapping[str, Any], context: ToolContext) -> str | ToolOutput:
        return await self.tool.ainvoke(arguments, context)

    def __repr__(self) -> str:
        return f"<{self.name}: {self.tool!r}>"
