"""The audit trail made tamper-evident (ADR 34): a hash chain over the decision records, and digests
signed with a key the store never holds.

Each record a store appends carries its place in the chain (:attr:`DecisionRecord.seq`, 1 on) and the
SHA-256 of the record before it (:attr:`DecisionRecord.previous`): deleting, altering, inserting or
reordering a record breaks a link. A chain alone proves the order and integrity of what is there, not
that nothing was cut from its end; a digest (the head's place and hash, the time, the previous digest's
signature) signed with a key the attacker lacks (HMAC-SHA256, or an Ed25519 private key whose public
half is all a verifier needs) proves the trail held at least that much.
:func:`verify` walks a trail and names the first thing that does not hold.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from dcaf_like.domain.audit import DecisionRecord

MIN_KEY_BYTES = 16
_DIGEST_LABEL = b"dcaf-like audit digest v1\n"


def record_hash(record: DecisionRecord) -> str:
    """The SHA-256 (hex) of a record as stored: every field, its link included."""
    return hashlib.sha256(record.to_json().encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class ChainHead:
    """Where a chain ends: the place of its last record and that record's hash (0 and "": empty)."""

    seq: int = 0
    hash: str = ""

    def link(self, records: Sequence[DecisionRecord]) -> tuple[list[DecisionRecord], ChainHead]:
        """`records` linked after this head, in order, and the head after them."""
        linked, seq, last = [], self.seq, self.hash
        for record in records:
            seq += 1
            chained = replace(record, seq=seq, previous=last)
            last = record_hash(chained)
            linked.append(chained)
        return linked, ChainHead(seq, last)


class DigestKey(Protocol):
    """What signs digests, or checks their signatures: :class:`AuditKey` (a shared secret, HMAC-SHA256)
    or an Ed25519 key (:mod:`dcaf_like.signing`: the private key signs, the public key only checks)."""

    #: How its signatures are written: "hmac-sha256" or "ed25519".
    algorithm: str

    @property
    def can_sign(self) -> bool: ...

    def sign(self, message: bytes) -> str: ...

    def verify(self, message: bytes, signature: str) -> bool: ...


class AuditKey:
    """The shared secret that signs digests (HMAC-SHA256). Its repr and str never show it."""

    algorithm = "hmac-sha256"

    __slots__ = ("_secret",)

    def __init__(self, secret: bytes) -> None:
        secret = secret.strip()
        if len(secret) < MIN_KEY_BYTES:
            raise ValueError(f"an audit key is at least {MIN_KEY_BYTES} bytes")
        self._secret = secret

    @property
    def can_sign(self) -> bool:
        return True

    def sign(self, message: bytes) -> str:
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def verify(self, message: bytes, signature: str) -> bool:
        return hmac.compare_digest(signature, self.sign(message))

    def __repr__(self) -> str:
        return "AuditKey(<hidden>)"

    __str__ = __repr__


@dataclass(frozen=True, slots=True)
class AuditDigest:
    """The chain's head at a moment, signed: `number` (1 on), how many records the chain held
    (`head_seq`) and the last one's hash, when, and the previous digest's signature ("" for the first)."""

    number: int
    head_seq: int
    head_hash: str
    at: float
    previous: str = ""
    signature: str = ""

    @classmethod
    def after(cls, last: AuditDigest | None, head: ChainHead, *, at: float, key: DigestKey) -> AuditDigest:
        """The digest that follows `last` (None: the first), of `head`, signed with `key`."""
        if not key.can_sign:
            raise ValueError("a public key checks digests; signing them takes the private key")
        number, previous = (1, "") if last is None else (last.number + 1, last.signature)
        unsigned = cls(number, head.seq, head.hash, at, previous)
        return replace(unsigned, signature=key.sign(unsigned.message()))

    def message(self) -> bytes:
        """What the signature covers: every field but the signature."""
        fields = self.to_dict()
        del fields["signature"]
        return _DIGEST_LABEL + json.dumps(fields, separators=(",", ":"), sort_keys=True).encode()

    @property
    def algorithm(self) -> str:
        """How it was signed, read from its signature: Ed25519's start with "ed25519:"."""
        return "ed25519" if self.signature.startswith("ed25519:") else "hmac-sha256"

    def signed_with(self, key: DigestKey) -> bool:
        return self.algorithm == key.algorithm and key.verify(self.message(), self.signature)

    def to_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "head_seq": self.head_seq,
            "head_hash": self.head_hash,
            "at": self.at,
            "previous": self.previous,
            "signature": self.signature,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AuditDigest:
        return cls(
            number=int(data["number"]),
            head_seq=int(data["head_seq"]),
            head_hash=str(data["head_hash"]),
            at=float(data["at"]),
            previous=str(data["previous"]),
            signature=str(data["signature"]),
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> AuditDigest:
        return cls.from_dict(json.loads(text))


@dataclass(frozen=True, slots=True)
class Trail:
    """A store's whole trail as stored: its records in the order they were appended (records written
    before the chain first), its digests by number, and the head the store keeps (None: none kept)."""

    records: list[DecisionRecord]
    digests: list[AuditDigest] = field(default_factory=list)
    head: ChainHead | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """What :func:`verify` found: the first problem (None: intact) and what it could check."""

    problem: str | None
    chained: int  # records in the chain
    before_chain: int  # records written before the chain existed
    digests: int
    signed: bool  # digests were checked against a key
    notes: tuple[str, ...] = ()

    @property
    def intact(self) -> bool:
        return self.problem is None

    def summary(self) -> str:
        if self.problem is not None:
            return f"tampered: {self.problem}"
        what = f"intact: {_count(self.chained, 'record')} chained"
        if self.before_chain:
            what += f", {self.before_chain} before the chain"
        if self.signed and self.digests:
            what += f", {_count(self.digests, 'digest')} signed"
        elif self.digests:
            what += f", {_count(self.digests, 'digest')} not checked (no key): chained but unsigned"
        else:
            what += ", no digest: chained but unsigned"
        return what


def _count(n: int, thing: str) -> str:
    return f"{n} {thing}" if n == 1 else f"{n} {thing}s"


def verify(trail: Trail, key: DigestKey | None = None, *, may_expire: bool = False) -> Verdict:
    """Check every link of `trail`, its head and its digests (their signatures with `key`); name the
    first record deleted, altered, inserted or reordered, or digest removed or forged. `may_expire`:
    the store forgets old records (`audit_ttl`), so a chain may start after #1."""
    records = trail.records
    before = 0
    while before < len(records) and records[before].seq == 0:
        before += 1
    chained = records[before:]
    notes: list[str] = []
    problem = _walk(chained, may_expire, notes)
    if problem is None:
        problem = _check_head(chained, trail.head)
    if problem is None:
        problem = _check_digests(chained, trail.digests, key, may_expire)
    return Verdict(problem, len(chained), before, len(trail.digests), key is not None, tuple(notes))


def _name(record: DecisionRecord) -> str:
    return f"record #{record.seq} (id {record.id})"


def _walk(chained: list[DecisionRecord], may_expire: bool, notes: list[str]) -> str | None:
    seen: dict[int, int] = {}
    for i, record in enumerate(chained):
        if record.seq == 0:
            return f"record {record.id} inserted: it has no link, after {_name(chained[i - 1])}"
        if i == 0:
            if record.seq != 1 and not may_expire:
                return f"record #1 to #{record.seq - 1} deleted: the chain starts at {_name(record)}"
            if record.seq != 1:
                notes.append(f"the trail starts at #{record.seq}: the records before it expired")
            elif record.previous:
                return f"{_name(record)} altered: the first record names one before it"
            seen[record.seq] = i
            continue
        last = chained[i - 1]
        expected = last.seq + 1
        if record.seq in seen:
            return _duplicate(chained, seen[record.seq], i)
        if record.seq < expected:
            return f"{_name(record)} reordered: found after #{last.seq}"
        if record.seq > expected:
            if any(r.seq == expected for r in chained[i + 1 :]):
                return f"record #{expected} reordered: #{record.seq} comes before it"
            gone = f"#{expected}" if record.seq == expected + 1 else f"#{expected} to #{record.seq - 1}"
            return f"record {gone} deleted: {_name(record)} follows #{last.seq}"
        if record.previous != record_hash(last):
            return f"{_name(last)} altered: its hash is not the one #{record.seq} holds"
        seen[record.seq] = i
    return None


def _duplicate(chained: list[DecisionRecord], first: int, second: int) -> str:
    """Two records claim one place: the intruder is the one the record after them does not follow."""
    seq = chained[second].seq
    after = next((r for r in chained if r.seq == seq + 1), None)
    intruder = chained[first]
    if after is not None and after.previous == record_hash(chained[first]):
        intruder = chained[second]
    return (
        f"record {intruder.id} inserted: it claims #{seq}, as {_other(chained, first, second, intruder)} does"
    )


def _other(chained: list[DecisionRecord], first: int, second: int, intruder: DecisionRecord) -> str:
    other = chained[second] if intruder is chained[first] else chained[first]
    return f"record {other.id}"


def _check_head(chained: list[DecisionRecord], head: ChainHead | None) -> str | None:
    if head is None:
        return None
    last = chained[-1] if chained else None
    count = 0 if last is None else last.seq
    if head.seq > count:
        gone = f"#{count + 1}" if head.seq == count + 1 else f"#{count + 1} to #{head.seq}"
        return f"record {gone} deleted: the chain's head is #{head.seq}"
    if last is None:
        return None
    if head.seq < count:
        return f"{_name(last)} inserted: the chain's head is #{head.seq}"
    if record_hash(last) != head.hash:
        return f"{_name(last)} altered: its hash is not the chain's head"
    return None


def _check_digests(
    chained: list[DecisionRecord], digests: list[AuditDigest], key: DigestKey | None, may_expire: bool
) -> str | None:
    by_seq = {r.seq: r for r in chained}
    first = chained[0].seq if chained else 1
    previous: AuditDigest | None = None
    for digest in digests:
        expected = 1 if previous is None else previous.number + 1
        if previous is None and digest.number != 1 and may_expire:
            expected = digest.number  # the earliest ones expired with their records
        if digest.number > expected:
            gone = f"#{expected}" if digest.number == expected + 1 else f"#{expected} to #{digest.number - 1}"
            return f"digest {gone} removed: digest #{digest.number} follows #{expected - 1}"
        if digest.number < expected:
            return f"digest #{digest.number} forged: a second digest #{digest.number}"
        if key is not None and digest.algorithm != key.algorithm:
            return (
                f"digest #{digest.number} not checked: it is signed with {digest.algorithm}, "
                f"the key given is {key.algorithm}"
            )
        if key is not None and not digest.signed_with(key):
            return f"digest #{digest.number} forged: its signature is not the key's"
        if previous is not None and digest.previous != previous.signature:
            return f"digest #{digest.number} forged: it does not follow digest #{previous.number}"
        record = by_seq.get(digest.head_seq)
        if record is None and digest.head_seq and not (may_expire and digest.head_seq < first):
            return f"record #{digest.head_seq} deleted: digest #{digest.number} counted it"
        if record is not None and record_hash(record) != digest.head_hash:
            return f"{_name(record)} altered: its hash is not the one digest #{digest.number} signed"
        previous = digest
    return None
