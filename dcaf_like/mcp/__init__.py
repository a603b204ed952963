"""Deprecated: MCP toolsets moved to :mod:`dcaf_like.toolsets.mcp`
(``from dcaf_like.toolsets.mcp import MCPToolset``, with the ``mcp`` extra installed).

This alias stays for one release; importing a name from it warns with ``DeprecationWarning``.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

__all__ = ["MCPServerUnavailable", "MCPTool", "MCPToolError", "MCPToolset"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"dcaf_like.mcp.{name} moved to dcaf_like.toolsets.mcp.{name}; the old path goes in the next release",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module("dcaf_like.toolsets.mcp"), name)
