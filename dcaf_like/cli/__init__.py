"""Inbound side: the ``dcaf-like`` command line (serve, chat, audit, prune) and the terminal chat."""

from dcaf_like.cli.main import main

__all__ = ["main"]
