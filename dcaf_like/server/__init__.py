"""Inbound side: the agent served over HTTP (HelpDesk protocol, A2A, MCP, the chat page).

``app`` holds ``create_app`` (the FastAPI application; its routes are in their own modules),
``serving`` :func:`~dcaf_like.serve`. Nothing is imported here, so ``import dcaf_like`` does not load
FastAPI. The agent is reached through the application's ports (``ServedAgent``, ``ToolProvider``),
never through the ``Agent`` facade.
"""
