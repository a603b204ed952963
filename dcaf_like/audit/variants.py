"""Altered forms of a proposal's arguments: the ones a gate must refuse, and the ones that mean the
same JSON (a gate may refuse them or run exactly the proposal, nothing else)."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterator
from typing import Any

# Latin letters and a Cyrillic or Greek twin that renders the same.
_LOOKALIKES = {
    "a": "\u0430",
    "c": "\u0441",
    "e": "\u0435",
    "o": "\u043e",
    "p": "\u0440",
    "x": "\u0445",
    "y": "\u0443",
    "i": "\u0456",
    "s": "\u0455",
}
_LIMIT = 4  # leaves altered per kind, so a wide input does not make a long audit


def different(arguments: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """``(what was changed, new arguments)``: each says something else than the proposal."""
    strings = [p for p in _leaves(arguments) if isinstance(_at(arguments, p), str)][:_LIMIT]
    numbers = [p for p in _leaves(arguments) if _is_number(_at(arguments, p))][:_LIMIT]
    booleans = [p for p in _leaves(arguments) if isinstance(_at(arguments, p), bool)][:_LIMIT]
    for path in strings:
        value: str = _at(arguments, path)
        name = _name(path)
        if lookalike := _lookalike(value):
            yield (
                f"{name}: a Unicode look-alike ({value!r} -> {lookalike!r})",
                _put(arguments, path, lookalike),
            )
        wide = _fullwidth(value)
        if wide != value:
            yield f"{name}: full-width letters, equal under NFKC", _put(arguments, path, wide)
        twin = _normal_twin(value)
        yield f"{name}: the other Unicode normal form (NFC/NFD) of {twin[0]}", _put(arguments, path, twin[1])
        yield f"{name}: a zero-width space inside", _put(arguments, path, value[:1] + "\u200b" + value[1:])
        yield f"{name}: a trailing space", _put(arguments, path, value + " ")
        if value.upper() != value:
            yield f"{name}: upper case", _put(arguments, path, value.upper())
        yield f"{name}: a list holding the value", _put(arguments, path, [value])
        yield f"{name}: an object holding the value", _put(arguments, path, {"value": value})
    for path in numbers:
        number = _at(arguments, path)
        yield f"{_name(path)}: {number} + 1", _put(arguments, path, number + 1)
        yield f"{_name(path)}: the number as a string", _put(arguments, path, json.dumps(number))
    for path in booleans:
        flag = _at(arguments, path)
        yield f"{_name(path)}: {flag} as {int(flag)}", _put(arguments, path, int(flag))
    nested = [p for p in _leaves(arguments) if len(p) > 1][:_LIMIT]
    for path in nested:
        yield f"{_name(path)}: a nested value changed", _put(arguments, path, "dcaf-audit-altered")
    yield "an extra argument", {**arguments, "dcaf_audit_extra": True}


def same_json(arguments: dict[str, Any]) -> Iterator[tuple[str, bytes]]:
    """``(what was changed, the raw JSON of the arguments)``: forms a sound gate may honour, as the
    proposal, or refuse. Those most servers refuse come first, so that each is tried as an approval
    before one is honoured and the call is used up: a key twice with the proposal's value first (the
    last one wins in most parsers), a key left out, number forms (``1.0``, ``1e0``), then the keys in
    another order and a key twice with the proposal's value last (both the same JSON value)."""
    top = [k for k, v in arguments.items() if isinstance(v, str)][:1]
    duplicates = {key: _duplicated(arguments, key) for key in top}
    for key, (first, _) in duplicates.items():
        yield f"{key} twice, the proposal's value first", first
    if arguments:
        first_key = next(iter(arguments))
        yield (
            f"{first_key} left out",
            json.dumps({k: v for k, v in arguments.items() if k != first_key}).encode(),
        )
    for path in [p for p in _leaves(arguments) if _is_number(_at(arguments, p))][:_LIMIT]:
        number = _at(arguments, path)
        if isinstance(number, int) or float(number).is_integer():
            whole = int(number)
            yield f"{_name(path)}: {whole} written {whole}.0", _raw_number(arguments, path, f"{whole}.0")
            yield f"{_name(path)}: {whole} written {whole}e0", _raw_number(arguments, path, f"{whole}e0")
        else:
            literal = f"{number * 10!r}e-1"
            yield f"{_name(path)}: {number} written {literal}", _raw_number(arguments, path, literal)
    if len(arguments) > 1:
        reordered = dict(reversed(list(arguments.items())))
        yield "keys in reverse order", json.dumps(reordered).encode()
    for key, (_, last) in duplicates.items():
        yield f"{key} twice, the proposal's value last", last


def _duplicated(arguments: dict[str, Any], key: str) -> tuple[bytes, bytes]:
    original = json.dumps(arguments[key])
    rest = json.dumps({k: v for k, v in arguments.items() if k != key})[1:-1]
    rest = f", {rest}" if rest else ""
    other = json.dumps("dcaf-audit-other")
    return (
        f'{{"{key}": {original}, "{key}": {other}{rest}}}'.encode(),
        f'{{"{key}": {other}, "{key}": {original}{rest}}}'.encode(),
    )


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))
    elif path:
        yield path


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


def _put(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy: Any = json.loads(json.dumps(value))
    target = copy
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = new
    return copy


def _raw_number(arguments: dict[str, Any], path: tuple[Any, ...], literal: str) -> bytes:
    marker = "__dcaf_audit_number__"
    text = json.dumps(_put(arguments, path, marker))
    return text.replace(json.dumps(marker), literal).encode()


def _name(path: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in path)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _lookalike(value: str) -> str | None:
    for index, char in enumerate(value):
        if char.lower() in _LOOKALIKES and char.islower():
            return value[:index] + _LOOKALIKES[char] + value[index + 1 :]
    return None


def _fullwidth(value: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in value)


def _normal_twin(value: str) -> tuple[str, str]:
    """The value in the other normal form when it has one; else the value with a combining accent,
    which NFC composes into another letter (``e`` + U+0301 is ``é``)."""
    nfc, nfd = unicodedata.normalize("NFC", value), unicodedata.normalize("NFD", value)
    if nfc != nfd:
        return (repr(value), nfd if value == nfc else nfc)
    return (f"{value!r} plus a combining accent", value + "\u0301")
