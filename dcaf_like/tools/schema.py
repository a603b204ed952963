"""How a tool's arguments are described and checked: from its signature, a pydantic model, or a dict.

The one module that imports pydantic; :mod:`dcaf_like.tools` loads it when the first tool is defined.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import pydantic

from dcaf_like.application.errors import InvalidToolArguments, ToolDefinitionError
from dcaf_like.tools import _jsonschema
from dcaf_like.tools._injected import injected_kind


class ArgumentSchema:
    """A tool's input: its JSON schema, a validator that returns JSON-ready arguments, and a binder
    that turns validated arguments into the function's keyword arguments."""

    def __init__(
        self,
        tool_name: str,
        json_schema: dict[str, Any],
        check: Callable[[Mapping[str, Any]], dict[str, Any]],
        bind: Callable[[Mapping[str, Any]], dict[str, Any]],
    ) -> None:
        self.tool_name = tool_name
        self.json_schema = json_schema
        self._check = check
        self._bind = bind

    def validate(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(arguments, Mapping):
            raise InvalidToolArguments(self.tool_name, "arguments must be an object")
        return self._check(arguments)

    def bind(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        return self._bind(arguments)


def _pydantic_errors(tool_name: str, error: pydantic.ValidationError) -> InvalidToolArguments:
    parts = []
    for item in error.errors(include_url=False):
        where = ".".join(str(p) for p in item["loc"]) or "arguments"
        parts.append(f"{where}: {item['msg']}")
    return InvalidToolArguments(tool_name, "; ".join(parts))


def _model_schema(tool_name: str, model: type[pydantic.BaseModel], takes_model: str | None) -> ArgumentSchema:
    def check(arguments: Mapping[str, Any]) -> dict[str, Any]:
        try:
            return model.model_validate(dict(arguments)).model_dump(mode="json")
        except pydantic.ValidationError as exc:
            raise _pydantic_errors(tool_name, exc) from None

    fields = tuple(model.model_fields)
    plain = _plain_fields(model) if takes_model is None else None

    def bind(arguments: Mapping[str, Any]) -> dict[str, Any]:
        if plain is not None and _already_valid(arguments, plain):
            return dict(arguments)
        try:
            instance = model.model_validate(dict(arguments))
        except pydantic.ValidationError as exc:
            raise _pydantic_errors(tool_name, exc) from None
        if takes_model is not None:
            return {takes_model: instance}
        return {name: getattr(instance, name) for name in fields}

    schema = _clean(model.model_json_schema())
    return ArgumentSchema(tool_name, schema, check, bind)


_PLAIN_TYPES = frozenset({str, int, bool, type(None)})


def _plain_fields(model: type[pydantic.BaseModel]) -> dict[str, tuple[type, ...]] | None:
    """Each field's accepted types when every field is a bare str, int or bool (or None): for such a
    model, arguments its validator produced are already what the function takes. None otherwise (a
    float, a date, a nested model, a constraint or validator in the field's metadata)."""
    plain: dict[str, tuple[type, ...]] = {}
    for name, info in model.model_fields.items():
        annotation = info.annotation
        union = isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union
        options = typing.get_args(annotation) if union else (annotation,)
        if info.metadata or not options or not all(option in _PLAIN_TYPES for option in options):
            return None
        plain[name] = tuple(typing.cast("type", option) for option in options)
    return plain


def _already_valid(arguments: Mapping[str, Any], plain: dict[str, tuple[type, ...]]) -> bool:
    """True when `arguments` has exactly the model's fields, each of exactly an accepted type (as the
    stored arguments of a call validated at proposal have); anything else is validated again."""
    return len(arguments) == len(plain) and all(
        type(arguments.get(name)) in accepted and name in arguments for name, accepted in plain.items()
    )


def _clean(schema: dict[str, Any]) -> dict[str, Any]:
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        if isinstance(prop, dict):
            prop.pop("title", None)
    return schema


def from_dict(tool_name: str, schema: Mapping[str, Any]) -> ArgumentSchema:
    schema = {"type": "object", **dict(schema)}

    def check(arguments: Mapping[str, Any]) -> dict[str, Any]:
        value = _jsonschema.with_defaults(dict(arguments), schema)
        problems = _jsonschema.errors(value, schema)
        if problems:
            raise InvalidToolArguments(tool_name, "; ".join(problems))
        return value

    return ArgumentSchema(tool_name, schema, check, check)


def from_model(tool_name: str, model: type[pydantic.BaseModel], func: Callable[..., Any]) -> ArgumentSchema:
    params = visible_parameters(func)
    hints = typing.get_type_hints(func)
    takes_model = next((p.name for p in params if hints.get(p.name) is model), None)
    return _model_schema(tool_name, model, takes_model)


# A function's schema depends only on the function and the tool's name, and building it (a pydantic
# model and its JSON schema) is most of what defining a tool costs: build it once per function.
_BY_FUNCTION: weakref.WeakKeyDictionary[Callable[..., Any], dict[str, ArgumentSchema]] = (
    weakref.WeakKeyDictionary()
)


def from_signature(tool_name: str, func: Callable[..., Any]) -> ArgumentSchema:
    try:
        known = _BY_FUNCTION.setdefault(func, {})
    except TypeError:  # not weakly referenceable (a builtin, a callable instance with __slots__)
        return _from_signature(tool_name, func)
    if tool_name not in known:
        known[tool_name] = _from_signature(tool_name, func)
    return known[tool_name]


def _from_signature(tool_name: str, func: Callable[..., Any]) -> ArgumentSchema:
    hints = typing.get_type_hints(func, include_extras=True)
    described = _documented_parameters(func)
    fields: dict[str, Any] = {}
    for param in visible_parameters(func):
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise ToolDefinitionError(
                tool_name, param.name, "*args and **kwargs cannot be described to a model"
            )
        if param.name not in hints:
            raise ToolDefinitionError(tool_name, param.name, _unannotated(param.name))
        annotation = hints[param.name]
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, pydantic.Field(default, description=described.get(param.name)))
    try:
        model = pydantic.create_model(
            f"{tool_name}_arguments",
            __config__=pydantic.ConfigDict(extra="forbid"),
            **fields,
        )
        return _model_schema(tool_name, model, None)
    except pydantic.PydanticUserError:
        raise _unsupported(tool_name, fields) from None


#: Parameter names an author gives a forgotten ToolContext (the framework fills one only when annotated).
_CONTEXT_NAMES = frozenset({"context", "ctx", "tool_context", "run_context"})


def _unannotated(name: str) -> str:
    """Why a parameter without a type is refused: the model would be told "anything" for it, so a
    gated call's id could be a list, and nothing would check it before a human approves it."""
    if name in _CONTEXT_NAMES:
        return (
            "has no type annotation, so the model would be asked to fill it in: did you mean "
            f"`{name}: ToolContext`?"
        )
    return (
        f"has no type annotation, so the model may send anything for it and nothing checks it: annotate "
        f"it (`{name}: str`), or `{name}: Any` to take any JSON value on purpose"
    )


_SUPPORTED = (
    "str, int, float, bool, None, a Literal or Enum, a list, dict, tuple or set of these, "
    "date/datetime, a TypedDict, dataclass or pydantic model, or an Optional/Union of them"
)


def _unsupported(tool_name: str, fields: Mapping[str, tuple[Any, Any]]) -> ToolDefinitionError:
    """The error naming the first parameter whose type has no JSON schema (pydantic's own error names
    only a type, somewhere in a model the user never wrote)."""
    for name, (annotation, _) in fields.items():
        try:
            pydantic.TypeAdapter(annotation).json_schema()
        except pydantic.PydanticUserError:
            plain_class = isinstance(annotation, type) and not typing.get_args(annotation)
            shown = f"{annotation.__module__}.{annotation.__qualname__}" if plain_class else repr(annotation)
            return ToolDefinitionError(
                tool_name,
                name,
                f"type {shown} cannot be described to a model as JSON. Use {_SUPPORTED}; "
                "or give the value to the tool another way (a ToolContext, a closure)",
            )
    return ToolDefinitionError(tool_name, None, "its parameters cannot be described to a model as JSON")


def visible_parameters(func: Callable[..., Any]) -> list[inspect.Parameter]:
    """The parameters a model fills: all but those the framework injects."""

    hints = typing.get_type_hints(func)
    return [
        p for p in inspect.signature(func).parameters.values() if injected_kind(hints.get(p.name)) is None
    ]


_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters):\s*$")
_ARG_LINE = re.compile(r"^\s+(\w+)\s*(?:\([^)]*\))?:\s*(.+)$")


def _documented_parameters(func: Callable[..., Any]) -> dict[str, str]:
    """Descriptions from a Google-style ``Args:`` section of the docstring."""
    found: dict[str, str] = {}
    in_args = False
    for line in (inspect.getdoc(func) or "").splitlines():
        if _ARGS_HEADER.match(line):
            in_args = True
            continue
        if in_args:
            if line and not line[0].isspace():
                break
            match = _ARG_LINE.match(line)
            if match:
                found[match.group(1)] = match.group(2).strip()
    return found
