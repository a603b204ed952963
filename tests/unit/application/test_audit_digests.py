"""The digests a server signs (ADR 34): when one is due, that two workers never write one number
twice, and ``dcaf-like audit verify``'s exit statuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dcaf_like import InMemoryConversationRepository
from dcaf_like.application.trail import DigestWriter
from dcaf_like.cli.main import main
from dcaf_like.domain import DecisionRecord
from dcaf_like.domain.trail import AuditKey, verify

KEY = AuditKey(b"the unit tests' audit key")


def refusals(store: InMemoryConversationRepository, n: int) -> None:
    store.record_decisions(
        [
            DecisionRecord.refused("c", "no scope", by="mallory", entrance="http", at=float(i))
            for i in range(n)
        ]
    )


def test_a_digest_is_due_every_so_many_records_or_seconds_and_never_for_nothing() -> None:
    now = [1000.0]
    store = InMemoryConversationRepository()
    writer = DigestWriter(store, KEY, every_records=5, every_seconds=60, clock=lambda: now[0])
    assert writer.tick(force=True) is None  # no record: nothing to sign

    refusals(store, 4)
    assert writer.tick() is None  # 4 records, 0 seconds: not yet
    refusals(store, 1)
    first = writer.tick()
    assert first is not None
    assert (first.number, first.head_seq, first.previous) == (1, 5, "")

    refusals(store, 1)
    now[0] += 59
    assert writer.tick() is None
    now[0] += 1
    second = writer.tick()
    assert second is not None
    assert (second.number, second.head_seq, second.previous) == (2, 6, first.signature)
    assert writer.tick(force=True) is None  # nothing unsigned since
    assert verify(store.audit_trail(), KEY).summary() == "intact: 6 records chained, 2 digests signed"


def test_a_second_worker_finds_the_head_signed_and_writes_nothing() -> None:
    """(Two that sign at once both write the same number; the store keeps the first: the contract's
    test_appended_records_form_one_chain_and_a_digest_signs_its_head.)"""
    store = InMemoryConversationRepository()
    refusals(store, 3)
    a, b = DigestWriter(store, KEY), DigestWriter(store, KEY)

    written = [w.tick(force=True) for w in (a, b)]

    assert [d is not None for d in written] == [True, False]
    assert len(store.audit_trail().digests) == 1


def test_verify_says_2_when_it_cannot_run_and_0_on_a_store_without_a_chain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["audit", "verify", "--store", "nosuch://x"]) == 2
    assert main(["audit", "verify", "--store", "memory://", "--key-file", str(tmp_path / "none")]) == 2
    assert "cannot be read" in capsys.readouterr().err

    assert main(["audit", "verify", "--store", f"sqlite:///{tmp_path / 'new.db'}"]) == 0
    assert capsys.readouterr().out.endswith("intact: 0 records chained, no digest: chained but unsigned\n")


def test_the_export_puts_each_digest_after_the_record_it_signs() -> None:
    from dcaf_like.server.audit import json_lines

    store = InMemoryConversationRepository()
    writer = DigestWriter(store, KEY, every_records=2)
    for _ in range(2):
        refusals(store, 2)
        writer.tick()
    refusals(store, 1)

    lines = [json.loads(line) for line in json_lines(store.audit_trail())]

    assert [(line["type"], line.get("seq", line.get("number"))) for line in lines] == [
        ("record", 1), ("record", 2), ("digest", 1), ("record", 3), ("record", 4), ("digest", 2),
        ("record", 5), ("head", 5),
    ]  # fmt: skip
    assert lines[2]["head_hash"] == lines[1]["hash"]
    assert "unit tests' audit key" not in json.dumps(lines)


def test_a_server_asked_to_sign_refuses_at_start_a_store_that_keeps_no_digests():
    """docs/operations.md, "Proving the trail": a capability a store lacks is refused where it is
    needed, naming the store and the capability, not left to fail (or to sign nothing) later."""
    import asyncio

    from dcaf_like import MissingCapability
    from dcaf_like.application.ports import ConversationRepository
    from dcaf_like.server.audit import signing

    class PlainStore(ConversationRepository):
        def get(self, conversation_id):
            return None

        def save(self, conversation, expected_version):
            pass

        def delete(self, conversation_id):
            return False

        def list_ids(self, limit=100):
            return []

        def record_decisions(self, records):
            pass

        def decision_records(self, conversation_id=None, limit=100):
            return []

    store = PlainStore()

    async def start():
        async with signing(lambda: store, KEY):
            pass

    assert not store.keeps_digests
    with pytest.raises(MissingCapability, match="PlainStore cannot keep signed audit digests"):
        asyncio.run(start())
    with pytest.raises(MissingCapability):
        store.append_digest(None)
