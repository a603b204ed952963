"""PlatformContext: where the agent acts (tenant, namespace) and the credentials it acts with."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

# Keys whose values are credentials. Matched on the whole key, case-insensitively, and on any nested key.
_SECRET_KEY = re.compile(
    r"(token|secret|password|passwd|credential|kubeconfig|api[_-]?key|access[_-]?key|private[_-]?key|"
    r"session[_-]?key|auth(?!or)|cookie|signature)",
    re.IGNORECASE,
)

REDACTED = "***"


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


def redact(value: Any) -> Any:
    """A copy of `value` with every credential-looking key's value replaced by ``***``."""
    if isinstance(value, Mapping):
        return {str(k): (REDACTED if is_secret_key(str(k)) else redact(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


def without_secrets(value: Any) -> Any:
    """A copy of `value` with every credential-looking key removed."""
    if isinstance(value, Mapping):
        return {str(k): without_secrets(v) for k, v in value.items() if not is_secret_key(str(k))}
    if isinstance(value, list | tuple):
        return [without_secrets(v) for v in value]
    return value


class PlatformContext(Mapping[str, Any]):
    """Read-only mapping of the request's platform context.

    Tools read it (credentials included) by asking for it in their signature. Its ``repr`` and
    :meth:`public` never show credentials, so logging it or returning it is safe.
    """

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        merged = dict(values or {})
        merged.update(kwargs)
        self._values = merged

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PlatformContext):
            return self._values == other._values
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values)))

    def __repr__(self) -> str:
        return f"PlatformContext({redact(self._values)!r})"

    __str__ = __repr__

    def public(self) -> dict[str, Any]:
        """The context without its credentials: what may be stored, logged or sent back."""
        result: dict[str, Any] = without_secrets(self._values)
        return result

    def merged(self, other: Mapping[str, Any]) -> PlatformContext:
        """A new context: this one's values overridden by `other`'s."""
        return PlatformContext({**self._values, **dict(other)})


#: The context of a request that sent none (shared: a PlatformContext cannot be changed).
NO_CONTEXT = PlatformContext()
