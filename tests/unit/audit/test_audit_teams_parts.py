"""docs/audit.md, "Teams": who plays which part in the teams family, from the options and the command
line, and that no key is ever shown."""

from __future__ import annotations

import pytest

from dcaf_like.audit.options import AuditOptions, Identity
from dcaf_like.audit.teams import Cast, cast_of
from dcaf_like.cli.main import _identities, main

KEYS = {"carol": "carol-secret-key-000", "alice": "alice-secret-key-000", "bob": "bob-secret-key-0000"}


def options(**chosen: object) -> AuditOptions:
    given = chosen.pop("identities", KEYS)
    assert isinstance(given, dict)
    return AuditOptions(identities=tuple(Identity(n, k) for n, k in given.items()), **chosen)  # type: ignore[arg-type]


def test_the_first_identity_requests_and_the_others_approve_unless_told_otherwise():
    cast = cast_of(options())
    assert isinstance(cast, Cast)
    assert (cast.requester.name, [a.name for a in cast.approvers], cast.outsiders) == (
        "carol",
        ["alice", "bob"],
        (),
    )

    chosen = cast_of(
        options(identities={**KEYS, "dave": "d" * 20}, requester="bob", outsiders=frozenset({"dave"}))
    )
    assert isinstance(chosen, Cast)
    assert chosen.requester.name == "bob"
    assert [a.name for a in chosen.approvers] == ["carol", "alice"]
    assert [o.name for o in chosen.outsiders] == ["dave"]


@pytest.mark.parametrize(
    ("chosen", "why"),
    [
        ({"identities": {}}, "no identities given"),
        ({"identities": {"carol": "k" * 20, "alice": "a" * 20}}, "1 approver identities"),
        ({"outsiders": frozenset({"bob"})}, "1 approver identities"),
        ({"requester": "mallory"}, "the requester 'mallory' is not one of the identities given"),
        ({"outsiders": frozenset({"mallory"})}, "--outsider names no identity given: mallory"),
    ],
)
def test_too_few_identities_say_why_the_family_is_not_applicable(chosen, why):
    assert why in str(cast_of(options(**chosen)))


def test_a_key_is_never_in_a_repr():
    shown = repr(options()) + repr(cast_of(options()))
    assert all(key not in shown for key in KEYS.values())


def test_identities_come_as_name_equals_key_or_from_a_file(tmp_path):
    (tmp_path / "bob.key").write_text("bob-secret-key-0000\n")

    assert _identities(["carol=carol-secret-key-000", f"bob=@{tmp_path / 'bob.key'}"]) == {
        "carol": "carol-secret-key-000",
        "bob": "bob-secret-key-0000",
    }


def test_a_malformed_identity_is_refused_without_showing_its_key(capsys):
    status = main(["audit", "http://127.0.0.1:9", "--identity", "carol=carol-secret-key-000", "--identity",
                   "carol=alice-secret-key-000"])  # fmt: skip
    err = capsys.readouterr().err

    assert status == 2
    assert "--identity 'carol' is given twice" in err
    assert "secret" not in err
    for malformed in ["=carol-secret-key-000", "carol-secret-key-000", "carol="]:
        with pytest.raises(ValueError, match="NAME=KEY") as refused:
            _identities([malformed])
        assert "secret" not in str(refused.value)
