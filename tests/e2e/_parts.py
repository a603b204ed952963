"""A tool that returns an image, for the tests of what tools' attachments look like over HTTP and A2A."""

from __future__ import annotations

import base64

from dcaf_like import ToolOutput, attachment, tool

PANEL = b"\x89PNG\r\n\x1a\n a latency panel"
PANEL_B64 = base64.b64encode(PANEL).decode()
PANEL_SHOWN = {"type": "image", "media_type": "image/png", "size": len(PANEL), "name": None, "url": None}


@tool(requires_approval=False)
def render_panel(panel: str) -> ToolOutput:
    """Render a Grafana panel as a PNG."""
    return ToolOutput(f"panel {panel}", (attachment("image", media_type="image/png", data=PANEL_B64),))
