"""Signed digests of the audit trail (ADR 34): the key they are signed with, and the writer a server
runs to sign the chain's head every so many records or seconds.

Several workers may run a writer on one store: each digest is written only if its number is free,
so of two workers signing at once one writes and the other's attempt is dropped.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from dcaf_like.application.ports import ConversationRepository
from dcaf_like.domain.trail import AuditDigest, AuditKey

logger = logging.getLogger("dcaf_like.audit")

KEY_ENV = "DCAF_AUDIT_KEY"
#: A digest is written once this many records were chained since the last one...
DIGEST_EVERY_RECORDS = 100
#: ...or this many seconds after the last one, if a record was chained since.
DIGEST_EVERY_SECONDS = 300.0


class AuditKeyError(ValueError):
    """An audit key file that cannot be used (its content is never shown)."""


def audit_key(file: str | Path | None = None, environ: Mapping[str, str] = os.environ) -> AuditKey | None:
    """The key in `file` (readable by its owner only), else in ``DCAF_AUDIT_KEY``, else None."""
    if file is None:
        text = environ.get(KEY_ENV, "")
        if not text.strip():
            return None
        try:
            return AuditKey(text.encode())
        except ValueError as exc:
            raise AuditKeyError(f"{KEY_ENV}: {exc}") from None
    path = Path(file)
    try:
        mode = path.stat().st_mode
        secret = path.read_bytes()
    except OSError as exc:
        raise AuditKeyError(f"the audit key file {path} cannot be read: {exc.strerror or 'error'}") from None
    if os.name == "posix" and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise AuditKeyError(
            f"the audit key file {path} is open to other users (mode {stat.S_IMODE(mode):04o}): make it "
            f"readable by its owner only: chmod 600 {path}"
        )
    try:
        return AuditKey(secret)
    except ValueError as exc:
        raise AuditKeyError(f"the audit key file {path}: {exc}") from None


class DigestWriter:
    """Signs the head of `store`'s chain with `key` when `every_records` records were chained since
    the last digest, or `every_seconds` passed since it (or since the writer started) and one was."""

    def __init__(
        self,
        store: ConversationRepository,
        key: AuditKey,
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
