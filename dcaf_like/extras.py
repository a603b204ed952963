"""The one way a missing optional dependency is reported: what needs it, and the one command that
installs the extra bringing it (``pip install "dcaf-like[agno]"``), on every path that imports one."""

from __future__ import annotations


def install(extra: str) -> str:
    """The command that installs the extra `extra`."""
    return f'pip install "dcaf-like[{extra}]"'


def missing(needs: str, extra: str, cause: ImportError | None = None) -> ImportError:
    """The error for `needs` (``"AgnoRuntime needs agno"``) when its extra is not installed, naming the
    module that was missing (`cause`'s), so a caller can tell which one."""
    return ImportError(f"{needs}: {install(extra)}", name=None if cause is None else cause.name)
