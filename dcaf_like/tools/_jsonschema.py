"""Validation of tool arguments against an explicit dict schema.

Covers the JSON Schema keywords tool schemas use: type, properties, required, additionalProperties,
items, enum, const, minimum/maximum, minLength/maxLength, minItems/maxItems, pattern; top-level
``default`` values are filled in. Unknown keywords are ignored, as JSON Schema says.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def _is_type(value: Any, name: str) -> bool:
    if name in ("integer", "number") and isinstance(value, bool):
        return False
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES.get(name, (object,)))


def errors(value: Any, schema: Mapping[str, Any], path: str = "") -> list[str]:
    """Every way `value` fails `schema`, each as ``"path: what is wrong"``."""
    where = path or "arguments"
    found: list[str] = []
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        if not any(_is_type(value, n) for n in names):
            return [f"{where}: expected {' or '.join(names)}, got {_json_type(value)}"]
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{where}: {value!r} is not one of {schema['enum']!r}")
    if "const" in schema and value != schema["const"]:
        found.append(f"{where}: must be {schema['const']!r}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            found.append(f"{where}: {value} is below the minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            found.append(f"{where}: {value} is above the maximum {schema['maximum']}")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            found.append(f"{where}: shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            found.append(f"{where}: longer than {schema['maxLength']} characters")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            found.append(f"{where}: does not match {schema['pattern']!r}")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            found.append(f"{where}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            found.append(f"{where}: more than {schema['maxItems']} items")
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                found.extend(errors(item, items, f"{path}[{i}]" if path else f"[{i}]"))
    if isinstance(value, dict):
        found.extend(_object_errors(value, schema, path))
    return found


def _object_errors(value: dict[str, Any], schema: Mapping[str, Any], path: str) -> list[str]:
    found: list[str] = []
    properties: Mapping[str, Any] = schema.get("properties", {})
    for name in schema.get("required", []):
        if name not in value:
            found.append(f"{_join(path, name)}: required")
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            found.extend(errors(item, properties[name], _join(path, name)))
        elif extra is False:
            found.append(f"{_join(path, name)}: not a parameter of this tool")
        elif isinstance(extra, Mapping):
            found.extend(errors(item, extra, _join(path, name)))
    return found


def with_defaults(value: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """`value` with the schema's top-level property defaults filled in where absent."""
    result = dict(value)
    for name, prop in schema.get("properties", {}).items():
        if name not in result and isinstance(prop, Mapping) and "default" in prop:
            result[name] = prop["default"]
    return result


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _json_type(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _is_type(value, name):
            return name
    return type(value).__name__
