"""Session: a conversation's key-value state, shared by its tools across turns."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any, TypeVar, overload

T = TypeVar("T")

_MISSING: Any = object()


def _to_plain(value: Any) -> Any:
    """Pydantic models and dataclasses become dicts; everything else is stored as is."""
    dump = getattr(value, "model_dump", None)
    if callable(dump) and not isinstance(value, type):
        return dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


def _from_plain(value: Any, as_type: type[T]) -> T:
    validate = getattr(as_type, "model_validate", None)
    if callable(validate):
        result: T = validate(value)
        return result
    if dataclasses.is_dataclass(as_type) and isinstance(value, Mapping):
        return as_type(**value)
    if isinstance(value, as_type):
        return value
    raise TypeError(f"session value of type {type(value).__name__} is not a {as_type.__name__}")


def json_problem(value: Any, path: str) -> str | None:
    """Where `value` stops being JSON (a key that is not text, a set, a datetime...), or None."""
    if value is None or isinstance(value, str | bool | int | float):
        return None
    if isinstance(value, list | tuple):
        return next((p for i, v in enumerate(value) if (p := json_problem(v, f"{path}[{i}]"))), None)
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{path} has a key that is not text ({key!r})"
            if problem := json_problem(item, f"{path}.{key}"):
                return problem
        return None
    return f"{path} is a {type(value).__name__}, not JSON"


class Session:
    """Typed key-value store that travels with a conversation (``data.session`` in the protocol).

    Every client may replace it (``data.session``), so it is the conversation's working state, never
    authority: who is asking is the server's :class:`~dcaf_like.domain.identity.Identity`.

    Values must be JSON-compatible once converted: pydantic models are stored with ``model_dump``
    and read back with ``get(key, as_type=Model)``; dataclasses likewise with ``asdict`` / ``cls(**d)``.
    """

    __slots__ = ("_changed", "_data")

    def __init__(self, data: Mapping[str, Any] | None = None) -> None:
        self._data: dict[str, Any] = dict(data or {})
        self._changed = False

    @overload
    def get(self, key: str) -> Any: ...
    @overload
    def get(self, key: str, default: Any) -> Any: ...
    @overload
    def get(self, key: str, default: Any = ..., *, as_type: type[T]) -> T | None: ...

    def get(self, key: str, default: Any = None, *, as_type: type[Any] | None = None) -> Any:
        if key not in self._data:
            return default
        value = self._data[key]
        return value if as_type is None else _from_plain(value, as_type)

    def set(self, key: str, value: Any) -> None:
        """Store `value` under `key`. It must be JSON once converted (it is saved with the
        conversation): anything else is a TypeError that names where, raised now rather than at save."""
        plain = _to_plain(value)
        if problem := json_problem(plain, key):
            raise TypeError(f"session value {problem}")
        self._data[key] = plain
        self._changed = True

    def delete(self, key: str) -> None:
        if self._data.pop(key, _MISSING) is not _MISSING:
            self._changed = True

    def update(self, values: Mapping[str, Any]) -> None:
        for key, value in values.items():
            self.set(key, value)

    def clear(self) -> None:
        if self._data:
            self._data.clear()
            self._changed = True

    def to_dict(self) -> dict[str, Any]:
        return dict(self._data)

    @property
    def changed(self) -> bool:
        return self._changed

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __setitem__(self, key: str, value: Any) -> None:
        self.set(key, value)

    def __delitem__(self, key: str) -> None:
        if key not in self._data:
            raise KeyError(key)
        self.delete(key)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"Session(keys={sorted(self._data)!r})"


def patched(
    current: Mapping[str, Any], before: Mapping[str, Any], after: Mapping[str, Any]
) -> dict[str, Any]:
    """`current` with the changes a writer made from `before` to `after` (the keys it set or changed,
    and those it deleted), so that what another writer changed meanwhile is kept."""
    merged = dict(current)
    for key, value in after.items():
        if key not in before or before[key] != value:
            merged[key] = value
    for key in before.keys() - after.keys():
        merged.pop(key, None)
    return merged
