"""The package's version, in a module of its own so the server can report it without importing the facade.

Read from the installed package's metadata (``pyproject.toml`` is the one place it is written); a tree
that is not installed reports ``0+unknown``."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dcaf-like")
except PackageNotFoundError:  # a source tree on sys.path, never installed
    __version__ = "0+unknown"
