"""The package's version, in a module of its own so the server can report it without importing the facade."""

__version__ = "0.1.0"
