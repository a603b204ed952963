"""``dcaf-like audit verify`` over stores tampered with directly, behind the application's back: a
record deleted, a field altered, a record inserted, two swapped, a digest removed (ADR 34). Each
store keeps six records (appended two at a time) and three digests (after #2, #4 and #6)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import pytest

from dcaf_like.application.trail import DigestWriter
from dcaf_like.cli.main import main
from dcaf_like.domain import DecisionRecord
from dcaf_like.domain.trail import AuditKey
from dcaf_like.stores import open_store

SECRET = b"the tamper test's audit key, 32b"
NAMESPACE = "ops"


class Tamper(Protocol):
    """Changes a store's trail as someone with write access to the store itself could."""

    def delete(self, record: DecisionRecord) -> None: ...
    def replace(self, record: DecisionRecord, text: str) -> None: ...
    def append(self, text: str) -> None: ...
    def swap(self, a: DecisionRecord, b: DecisionRecord) -> None: ...
    def remove_digest(self, number: int) -> None: ...
    def close(self) -> None: ...


def fill(url: str, key: AuditKey) -> list[DecisionRecord]:
    store = open_store(url, namespace=NAMESPACE)
    writer = DigestWriter(store, key, every_records=2)
    for n in range(3):
        pair = [
            DecisionRecord.refused(f"c{n}", "no scope", by=f"user-{n}", entrance="http", at=float(10 * n + i))
            for i in range(2)
        ]
        store.record_decisions(pair)
        writer.tick()
    records = store.audit_trail().records
    getattr(store, "close", lambda: None)()
    return records


class SqliteTamper:
    def __init__(self, path: Path) -> None:
        import sqlite3

        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("DROP TRIGGER dcaf_decisions_append_only")

    def delete(self, record: DecisionRecord) -> None:
        self.db.execute("DELETE FROM dcaf_decisions WHERE json_extract(record, '$.id') = ?", (record.id,))

    def replace(self, record: DecisionRecord, text: str) -> None:
        self.db.execute(
            "UPDATE dcaf_decisions SET record = ? WHERE json_extract(record, '$.id') = ?", (text, record.id)
        )

    def append(self, text: str) -> None:
        self.db.execute(
            "INSERT INTO dcaf_decisions (namespace, conversation_id, at, record) VALUES (?, 'c', 1.0, ?)",
            (NAMESPACE, text),
        )

    def remove_digest(self, number: int) -> None:
        self.db.execute("DELETE FROM dcaf_audit_digests WHERE number = ?", (number,))

    def swap(self, a: DecisionRecord, b: DecisionRecord) -> None:
        where = "SELECT seq FROM dcaf_decisions WHERE json_extract(record, '$.id') = ?"
        (row_a,), (row_b,) = (self.db.execute(where, (r.id,)).fetchone() for r in (a, b))
        self.db.execute("UPDATE dcaf_decisions SET record = ? WHERE seq = ?", (b.to_json(), row_a))
        self.db.execute("UPDATE dcaf_decisions SET record = ? WHERE seq = ?", (a.to_json(), row_b))

    def close(self) -> None:
        self.db.close()


class PostgresTamper:
    def __init__(self, url: str, table: str) -> None:
        self.url = url
        self.table = table
        self._run(f"ALTER TABLE {table}_decisions DISABLE TRIGGER USER")

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as db:
            cursor = db.execute(sql, params)
            return cursor.fetchone() if sql.startswith("SELECT") else None

    def delete(self, record: DecisionRecord) -> None:
        self._run(f"DELETE FROM {self.table}_decisions WHERE record::json->>'id' = %s", (record.id,))

    def replace(self, record: DecisionRecord, text: str) -> None:
        self._run(
            f"UPDATE {self.table}_decisions SET record = %s WHERE record::json->>'id' = %s", (text, record.id)
        )

    def append(self, text: str) -> None:
        self._run(
            f"INSERT INTO {self.table}_decisions (namespace, conversation_id, at, record) "
            "VALUES (%s, 'c', 1.0, %s)",
            (NAMESPACE, text),
        )

    def swap(self, a: DecisionRecord, b: DecisionRecord) -> None:
        where = f"SELECT seq FROM {self.table}_decisions WHERE record::json->>'id' = %s"
        (row_a,), (row_b,) = self._run(where, (a.id,)), self._run(where, (b.id,))
        update = f"UPDATE {self.table}_decisions SET record = %s WHERE seq = %s"
        self._run(update, (b.to_json(), row_a))
        self._run(update, (a.to_json(), row_b))

    def remove_digest(self, number: int) -> None:
        self._run(f"DELETE FROM {self.table}_audit_digests WHERE number = %s", (number,))

    def close(self) -> None:
        return None


class RedisTamper:
    def __init__(self, url: str, prefix: str) -> None:
        import redis

        self.client = redis.Redis.from_url(url)
        self.tag = f"{prefix}{{{NAMESPACE}}}:audit"

    def _at(self, record: DecisionRecord) -> int:
        chain = [DecisionRecord.from_json(item) for item in self.client.lrange(f"{self.tag}:chain", 0, -1)]
        return next(i for i, r in enumerate(chain) if r.id == record.id)

    def delete(self, record: DecisionRecord) -> None:
        self.client.lrem(f"{self.tag}:chain", 1, self.client.lindex(f"{self.tag}:chain", self._at(record)))

    def replace(self, record: DecisionRecord, text: str) -> None:
        self.client.lset(f"{self.tag}:chain", self._at(record), text)

    def append(self, text: str) -> None:
        if '"seq"' in text:
            self.client.rpush(f"{self.tag}:chain", text)
        else:  # as the code from before the chain wrote a record: in the namespace's set only
            self.client.zadd(self.tag, {text: json.loads(text)["at"]})

    def remove_digest(self, number: int) -> None:
        self.client.hdel(f"{self.tag}:digests", str(number))

    def swap(self, a: DecisionRecord, b: DecisionRecord) -> None:
        at_a, at_b = self._at(a), self._at(b)
        self.client.lset(f"{self.tag}:chain", at_a, b.to_json())
        self.client.lset(f"{self.tag}:chain", at_b, a.to_json())

    def close(self) -> None:
        self.client.close()


class DynamoDBTamper:
    def __init__(self, endpoint: str, table: str) -> None:
        import boto3

        self.client = boto3.client("dynamodb", region_name="eu-west-1", endpoint_url=endpoint)
        self.table = table

    def _key(self, record: DecisionRecord) -> dict[str, Any]:
        return {"pk": {"S": f"audit#{NAMESPACE}#{record.conversation_id}#{record.id}"}}

    def delete(self, record: DecisionRecord) -> None:
        self.client.delete_item(TableName=self.table, Key=self._key(record))

    def replace(self, record: DecisionRecord, text: str) -> None:
        self.client.update_item(
            TableName=self.table,
            Key=self._key(record),
            UpdateExpression="SET #r = :r",
            ExpressionAttributeNames={"#r": "record"},
            ExpressionAttributeValues={":r": {"S": text}},
        )

    def swap(self, a: DecisionRecord, b: DecisionRecord) -> None:
        self.replace(a, b.to_json())  # the items keep their keys and places; their records change
        self.replace(b, a.to_json())

    def append(self, text: str) -> None:
        record = DecisionRecord.from_json(text)
        item = {
            "pk": {"S": f"audit#{NAMESPACE}#c#{record.id}"},
            "ns": {"S": f"audit#{NAMESPACE}"},
            "conversation_id": {"S": "c"},
            "updated_at": {"N": "1"},
            "record": {"S": text},
        }
        if record.seq:
            item["chain"] = {"N": "7"}  # appended after the last (a record from before the chain has none)
        self.client.put_item(TableName=self.table, Item=item)

    def remove_digest(self, number: int) -> None:
        self.client.delete_item(
            TableName=self.table, Key={"pk": {"S": f"#audit-digest#{NAMESPACE}#{number}"}}
        )


Store = tuple[str, Callable[[], Tamper]]
"""A store's URL, and how to make its tamperer once it holds the trail."""


@pytest.fixture(params=["sqlite", "postgres", "redis", "dynamodb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "sqlite":
        path = tmp_path / "trail.db"
        return f"sqlite:///{path}", lambda: SqliteTamper(path)
    if request.param == "postgres":
        base, table = request.getfixturevalue("postgres_url"), request.getfixturevalue("postgres_table")
        return f"{base}?table={table}", lambda: PostgresTamper(base, table)
    if request.param == "redis":
        base, prefix = request.getfixturevalue("redis_url"), request.getfixturevalue("redis_prefix")
        return f"{base}?prefix={prefix}", lambda: RedisTamper(base, prefix)
    endpoint = request.getfixturevalue("dynamodb_endpoint")
    table = f"trail-{uuid.uuid4().hex[:8]}"
    return f"dynamodb://{table}?region=eu-west-1&endpoint={endpoint}&create=1", lambda: DynamoDBTamper(
        endpoint, table
    )


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "audit.key"
    path.write_bytes(SECRET)
    path.chmod(0o600)
    return path


def verify(url: str, key_file: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    status = main(["audit", "verify", "--store", url, "--namespace", NAMESPACE, "--key-file", str(key_file)])
    out = capsys.readouterr()
    return status, out.out + out.err


def forged(record: DecisionRecord, **changes: Any) -> str:
    return json.dumps({**record.to_dict(), **changes}, separators=(",", ":"))


def test_an_untouched_trail_verifies(store: Store, key_file: Path, capsys: Any) -> None:
    url, _ = store
    fill(url, AuditKey(SECRET))

    status, said = verify(url, key_file, capsys)

    assert status == 0
    assert said.endswith(f"(namespace {NAMESPACE}): intact: 6 records chained, 3 digests signed\n")
    assert SECRET.decode() not in said


def test_a_deleted_record_is_named(store: Store, key_file: Path, capsys: Any) -> None:
    url, tamperer = store
    records = fill(url, AuditKey(SECRET))
    tamper = tamperer()
    tamper.delete(records[2])

    status, said = verify(url, key_file, capsys)

    assert status == 1
    assert f"tampered: record #3 deleted: record #4 (id {records[3].id}) follows #2" in said


def test_an_altered_field_is_named(store: Store, key_file: Path, capsys: Any) -> None:
    url, tamperer = store
    records = fill(url, AuditKey(SECRET))
    tamper = tamperer()
    tamper.replace(records[1], forged(records[1], outcome="approved", decided_by="alice"))

    status, said = verify(url, key_file, capsys)

    assert status == 1
    assert f"tampered: record #2 (id {records[1].id}) altered: its hash is not the one #3 holds" in said


def test_an_inserted_record_is_named(store: Store, key_file: Path, capsys: Any) -> None:
    url, tamperer = store
    records = fill(url, AuditKey(SECRET))
    tamper = tamperer()
    tamper.append(forged(records[2], id="forged0000000000", decided_by="alice"))  # claims #3, linked after #2

    status, said = verify(url, key_file, capsys)

    assert status == 1
    assert f"tampered: record forged0000000000 inserted: it claims #3, as record {records[2].id} does" in said


def test_two_swapped_records_are_named(store: Store, key_file: Path, capsys: Any) -> None:
    url, tamperer = store
    records = fill(url, AuditKey(SECRET))
    tamper = tamperer()
    tamper.swap(records[3], records[4])

    status, said = verify(url, key_file, capsys)

    assert status == 1
    assert "tampered: record #4 reordered: #5 comes before it" in said


def test_a_removed_digest_is_named(store: Store, key_file: Path, capsys: Any) -> None:
    url, tamperer = store
    fill(url, AuditKey(SECRET))
    tamper = tamperer()
    tamper.remove_digest(1)

    status, said = verify(url, key_file, capsys)

    assert status == 1
    assert "tampered: digest #1 removed: digest #2 follows #0" in said


def test_a_digest_checked_with_another_key_is_named_forged(store: Store, tmp_path: Path, capsys: Any) -> None:
    url, _ = store
    fill(url, AuditKey(SECRET))
    other = tmp_path / "other.key"
    other.write_bytes(b"not the key the server signed with")
    other.chmod(0o600)

    status, said = verify(url, other, capsys)

    assert status == 1
    assert "tampered: digest #1 forged: its signature is not the key's" in said


def test_records_written_before_the_chain_verify_as_its_prefix(
    store: Store, key_file: Path, capsys: Any
) -> None:
    url, tamperer = store
    opened = open_store(url, namespace=NAMESPACE)
    opened.audit_trail()  # the schema, as the code from before the chain made it
    getattr(opened, "close", lambda: None)()
    tamper = tamperer()
    for n in range(2):  # records as that code wrote them: no seq, no previous
        old = DecisionRecord.refused(f"old{n}", "no scope", by="bob", entrance="http", at=float(n)).to_dict()
        tamper.append(json.dumps({k: v for k, v in old.items() if k not in ("seq", "previous")}))
    fill(url, AuditKey(SECRET))

    status, said = verify(url, key_file, capsys)

    assert status == 0
    assert said.endswith("intact: 6 records chained, 2 before the chain, 3 digests signed\n")
