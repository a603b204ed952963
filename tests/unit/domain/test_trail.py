"""The tamper-evident trail (ADR 34): a chain over the decision records and signed digests, and what
:func:`verify` names when either is tampered with."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dcaf_like.domain import DecisionRecord
from dcaf_like.domain.trail import AuditDigest, AuditKey, ChainHead, Trail, record_hash, verify

KEY = AuditKey(b"a key of at least sixteen bytes")


def records(n: int, *, after: ChainHead | None = None) -> tuple[list[DecisionRecord], ChainHead]:
    made = [
        DecisionRecord.refused(f"c{i}", "no scope", by="mallory", entrance="http", at=float(i))
        for i in range(n)
    ]
    return (after or ChainHead()).link(made)


def signed_trail(n: int = 6) -> Trail:
    """`n` records, a digest after the third and one after the last."""
    first, middle = records(3)
    rest, head = records(n - 3, after=middle)
    one = AuditDigest.after(None, middle, at=10.0, key=KEY)
    two = AuditDigest.after(one, head, at=20.0, key=KEY)
    return Trail([*first, *rest], [one, two], head)


def test_each_record_names_the_hash_of_the_one_before() -> None:
    linked, head = records(3)
    assert [r.seq for r in linked] == [1, 2, 3]
    assert linked[0].previous == ""
    assert [r.previous for r in linked[1:]] == [record_hash(r) for r in linked[:2]]
    assert head == ChainHead(3, record_hash(linked[2]))


def test_an_untouched_trail_verifies_with_its_key_and_without() -> None:
    trail = signed_trail()
    assert verify(trail, KEY).summary() == "intact: 6 records chained, 2 digests signed"
    assert (
        verify(trail).summary()
        == "intact: 6 records chained, 2 digests not checked (no key): chained but unsigned"
    )
    assert verify(Trail(trail.records, [], trail.head), KEY).summary() == (
        "intact: 6 records chained, no digest: chained but unsigned"
    )


def test_records_written_before_the_chain_are_a_prefix_not_a_failure() -> None:
    old = [DecisionRecord.refused("c", "no scope", by="m", entrance="http", at=0.0) for _ in range(2)]
    trail = signed_trail()
    verdict = verify(Trail([*old, *trail.records], trail.digests, trail.head), KEY)
    assert verdict.intact
    assert verdict.summary() == "intact: 6 records chained, 2 before the chain, 2 digests signed"


def tampered(trail: Trail, **changes: object) -> str:
    verdict = verify(replace(trail, **changes), KEY)  # type: ignore[arg-type]
    assert verdict.problem is not None
    return verdict.problem


def test_a_deleted_record_is_named() -> None:
    trail = signed_trail()
    rs = trail.records
    assert (
        tampered(trail, records=rs[:2] + rs[3:]) == f"record #3 deleted: record #4 (id {rs[3].id}) follows #2"
    )


def test_an_altered_record_is_named_by_the_record_after_it_by_the_head_or_by_a_digest() -> None:
    trail = signed_trail()
    rs = trail.records
    changed = replace(rs[1], decided_by="alice")
    assert tampered(trail, records=[rs[0], changed, *rs[2:]]) == (
        f"record #2 (id {rs[1].id}) altered: its hash is not the one #3 holds"
    )
    last = replace(rs[5], reason="approved by policy")
    assert tampered(trail, records=[*rs[:5], last]) == (
        f"record #6 (id {rs[5].id}) altered: its hash is not the chain's head"
    )


def test_an_inserted_record_is_named() -> None:
    trail = signed_trail()
    rs = trail.records
    forged = replace(rs[2], id="forged", decided_by="alice")  # claims #3, chained after #2
    assert tampered(trail, records=[*rs[:2], forged, *rs[2:]]) == (
        f"record forged inserted: it claims #3, as record {rs[2].id} does"
    )
    unlinked = DecisionRecord.refused("c", "x", by="m", entrance="http", at=3.5, call_id="")
    assert tampered(trail, records=[*rs[:3], unlinked, *rs[3:]]).startswith(
        f"record {unlinked.id} inserted: it has no link"
    )
    appended, _ = records(1, after=trail.head)
    assert tampered(trail, records=[*rs, replace(appended[0], seq=7)]) == (
        f"record #7 (id {appended[0].id}) inserted: the chain's head is #6"
    )


def test_two_swapped_records_are_named() -> None:
    trail = signed_trail()
    rs = trail.records
    assert (
        tampered(trail, records=[rs[0], rs[2], rs[1], *rs[3:]]) == "record #2 reordered: #3 comes before it"
    )


def test_a_removed_or_forged_digest_is_named() -> None:
    trail = signed_trail()
    one, two = trail.digests
    assert tampered(trail, digests=[two]) == "digest #1 removed: digest #2 follows #0"
    assert tampered(trail, digests=[one, replace(two, head_seq=5)]) == (
        "digest #2 forged: its signature is not the key's"
    )
    other = AuditKey(b"another key, sixteen bytes or more")
    rewritten = AuditDigest.after(one, ChainHead(5, record_hash(trail.records[4])), at=20.0, key=other)
    assert tampered(trail, digests=[one, rewritten]) == "digest #2 forged: its signature is not the key's"


def test_a_truncated_tail_is_named_by_the_digest_that_counted_it() -> None:
    trail = signed_trail()
    rs = trail.records
    head = ChainHead(5, record_hash(rs[4]))  # the head moved back too, as an attacker would
    assert tampered(trail, records=rs[:5], head=head) == "record #6 deleted: digest #2 counted it"


def test_a_chain_may_start_late_only_where_records_expire() -> None:
    trail = signed_trail()
    rs = trail.records
    late = Trail(rs[2:], [], trail.head)
    assert (
        verify(late, KEY).problem == f"record #1 to #2 deleted: the chain starts at record #3 (id {rs[2].id})"
    )
    verdict = verify(late, KEY, may_expire=True)
    assert verdict.intact
    assert verdict.notes == ("the trail starts at #3: the records before it expired",)


def test_the_key_is_never_shown_and_must_be_long_enough() -> None:
    assert "sixteen" not in repr(KEY) + str(KEY)
    assert repr(KEY) == "AuditKey(<hidden>)"
    with pytest.raises(ValueError, match="at least 16 bytes"):
        AuditKey(b"short")
    digest = AuditDigest.after(None, ChainHead(1, "ab"), at=1.0, key=KEY)
    assert "sixteen" not in digest.to_json()
