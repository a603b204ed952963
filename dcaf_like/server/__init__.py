"""Inbound side: the agent served over HTTP (HelpDesk protocol, A2A, MCP, the chat page).

``serving`` holds :func:`~dcaf_like.serve` and ``create_app``; ``app`` the FastAPI application and its
routes. Nothing is imported here, so ``import dcaf_like`` does not load FastAPI.
"""
