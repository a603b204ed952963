"""Signed digests of the audit trail (ADR 34): the writer a server runs to sign the chain's head every
so many records or seconds (the keys are read by :mod:`dcaf_like.signing`).

Several workers may run a writer on one store: each digest is written only if its number is free,
so of two workers signing at once one writes and the other's attempt is dropped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from dcaf_like.application.ports import AuditTrail
from dcaf_like.domain.trail import AuditDigest, DigestKey

logger = logging.getLogger("dcaf_like.audit")

#: A digest is written once this many records were chained since the last one...
DIGEST_EVERY_RECORDS = 100
#: ...or this many seconds after the last one, if a record was chained since.
DIGEST_EVERY_SECONDS = 300.0


class DigestWriter:
    """Signs the head of `store`'s chain with `key` when `every_records` records were chained since
    the last digest, or `every_seconds` passed since it (or since the writer started) and one was."""

    def __init__(
        self,
        store: AuditTrail,
        key: DigestKey,
        *,
        every_records: int = DIGEST_EVERY_RECORDS,
        every_seconds: float = DIGEST_EVERY_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if every_records < 1 or every_seconds <= 0:
            raise ValueError("a digest is written every 1 or more records and a positive number of seconds")
        self.store = store
        self.key = key
        self.every_records = every_records
        self.every_seconds = every_seconds
        self.clock = clock
        self.started = clock()

    def tick(self, *, force: bool = False) -> AuditDigest | None:
        """Write the next digest if one is due (with `force`: if any record is unsigned); the digest
        written, or None (none due, or another worker wrote that number first)."""
        head, last = self.store.audit_tip()
        signed = 0 if last is None else last.head_seq
        if head.seq <= signed:
            return None
        now = self.clock()
        since = self.started if last is None else max(last.at, self.started)
        if not (force or head.seq - signed >= self.every_records or now - since >= self.every_seconds):
            return None
        digest = AuditDigest.after(last, head, at=now, key=self.key)
        if not self.store.append_digest(digest):
            return None
        logger.info("audit digest #%d signed the trail through record #%d", digest.number, digest.head_seq)
        return digest
