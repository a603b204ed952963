"""An approver's edit is a JSON merge patch (RFC 7396) onto the proposal, not a replacement."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dcaf_like.domain.context import REDACTED
from dcaf_like.domain.merge_patch import merge_patch
from dcaf_like.domain.tool_call import ToolCall, ToolCallId, ToolInput

PROPOSED = {"deployment": "api", "replicas": 5, "namespace": "prod"}


def test_a_key_the_patch_leaves_out_keeps_its_proposed_value():
    assert merge_patch(PROPOSED, {"replicas": 3}) == {"deployment": "api", "replicas": 3, "namespace": "prod"}


def test_null_removes_a_key_and_a_missing_key_to_remove_is_no_error():
    assert merge_patch(PROPOSED, {"namespace": None, "absent": None}) == {"deployment": "api", "replicas": 5}


def test_a_full_set_of_arguments_gives_exactly_those_arguments():
    full = {"deployment": "web", "replicas": 1, "namespace": "staging"}
    assert merge_patch(PROPOSED, full) == full


def test_objects_merge_key_by_key_and_lists_are_replaced_whole():
    proposed = {"labels": {"app": "api", "tier": "web"}, "ports": [80, 443]}
    patch = {"labels": {"tier": None, "team": "ops"}, "ports": [8080]}

    assert merge_patch(proposed, patch) == {"labels": {"app": "api", "team": "ops"}, "ports": [8080]}


def test_an_object_replacing_a_scalar_is_taken_without_its_nulls():
    assert merge_patch({"limits": "none"}, {"limits": {"cpu": "1", "memory": None}}) == {
        "limits": {"cpu": "1"}
    }


def test_neither_the_proposal_nor_the_patch_is_changed():
    proposed = {"labels": {"app": "api"}, "replicas": 5}
    patch = {"labels": {"app": None}, "replicas": 3}

    merge_patch(proposed, patch)

    assert proposed == {"labels": {"app": "api"}, "replicas": 5}
    assert patch == {"labels": {"app": None}, "replicas": 3}


def test_a_tool_call_patches_its_proposal_and_keeps_a_secret_left_masked():
    call = ToolCall(
        ToolCallId("tc_1"),
        "connect",
        ToolInput.of({"host": "db", "password": "s3cret", "port": 5432}),
        editable=True,
        secret_arguments=frozenset({"password"}),
    )

    assert call.patched({"port": 5433, "password": REDACTED}) == {
        "host": "db",
        "password": "s3cret",
        "port": 5433,
    }


_keys = st.text(min_size=1, max_size=8)
_values: st.SearchStrategy[Any] = st.recursive(
    st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3),
    max_leaves=8,
)


@given(proposal=st.dictionaries(_keys, _values, max_size=6), data=st.data())
def test_a_patch_of_some_keys_keeps_every_other_key_as_proposed(
    proposal: dict[str, Any], data: st.DataObject
):
    edited = data.draw(st.lists(st.sampled_from(sorted(proposal)), unique=True) if proposal else st.just([]))
    patch = {key: data.draw(_values | st.none()) for key in edited}

    merged = merge_patch(proposal, patch)

    assert {key: merged[key] for key in proposal if key not in patch} == {
        key: value for key, value in proposal.items() if key not in patch
    }
    assert all(merged[key] == value for key, value in patch.items() if not isinstance(value, dict | None))
    assert not any(key in merged for key, value in patch.items() if value is None)


@given(
    proposal=st.dictionaries(_keys, _values, max_size=6),
    patch=st.dictionaries(_keys, _values | st.none(), max_size=6),
)
def test_merging_the_same_patch_twice_changes_nothing_more(proposal: dict[str, Any], patch: dict[str, Any]):
    once = merge_patch(proposal, patch)
    assert merge_patch(once, patch) == once
