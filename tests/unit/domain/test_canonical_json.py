"""The domain's fast canonical JSON writes exactly what its plain definition writes, and fails alike."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcaf_like.domain._canonical_json import canonical_json, plain_canonical_json
from dcaf_like.domain.tool_call import InvalidToolInput, ToolInput

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and infinities included: both refuse them
    | st.text()
)
KEYS = st.text() | st.integers() | st.floats(allow_nan=False) | st.booleans() | st.none()
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.dictionaries(KEYS, inner, max_size=4)
    ),
    max_leaves=16,
)


def outcome(write, value):
    try:
        return write(value)
    except (TypeError, ValueError) as exc:
        return type(exc)


@given(VALUES)
@settings(max_examples=500, deadline=None)
def test_the_fast_form_is_the_plain_form_for_any_value(value):
    assert outcome(canonical_json, value) == outcome(plain_canonical_json, value)


@pytest.mark.parametrize(
    "value",
    [
        {"b": 1, "a": [1.5, -0.0, 1e300, None, True], "é": 'ü\u2028\x00"\\'},
        {"nested": {"z": {}, "y": []}, "": ""},
        {10: "int keys sort as numbers", 2: "", 1: ""},
        {2.5: "float key", 1: "int key"},
        "top-level text",
        [],
    ],
)
def test_the_fast_form_is_the_plain_form_for_awkward_values(value):
    assert canonical_json(value) == plain_canonical_json(value)


@pytest.mark.parametrize(
    "value", [{"x": math.nan}, {"x": math.inf}, {"x": {1, 2}}, {"x": b"b"}, {1: 1, "a": 2}]
)
def test_what_the_plain_form_refuses_the_fast_form_refuses_alike(value):
    assert outcome(canonical_json, value) is outcome(plain_canonical_json, value)
    assert isinstance(outcome(canonical_json, value), type)


JSON_OBJECTS = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=16,
)


@given(st.dictionaries(st.text(), JSON_OBJECTS, max_size=5))
@settings(max_examples=200, deadline=None)
def test_a_tool_input_reads_back_as_parsing_its_text_would(arguments):
    try:
        made = ToolInput.of(arguments)
    except InvalidToolInput:  # not JSON (NaN, infinities): nothing to read back
        return
    for tool_input in (made, ToolInput(made.canonical_json)):  # the parsed form known, and read lazily
        assert tool_input.as_dict() == json.loads(made.canonical_json)
        # Types included: JSON tells 1 from 1.0, and so must the arguments a tool gets.
        assert canonical_json(tool_input.as_dict()) == made.canonical_json
