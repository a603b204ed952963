"""``dcaf-like audit verify --store URL [--key-file F]``: check a store's audit trail (ADR 34); and
``dcaf-like audit keygen FILE``: an Ed25519 key pair to sign it with.

Exit 0: intact; 1: tampered (the first record or digest that does not hold is named); 2: it could
not run (no store, an unreadable key, the store down).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from urllib.parse import parse_qsl, urlsplit

from dcaf_like.application.errors import ApplicationError
from dcaf_like.domain.trail import verify
from dcaf_like.signing import KEY_ENV, AuditKeyError, audit_key, generate_ed25519
from dcaf_like.stores import StoreConfigError, open_store, redact, store_from_environment

DEFAULT_STORE = "sqlite:///dcaf_like.sqlite3"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dcaf-like audit verify",
        description="Check every decision record and signed digest of a store's audit trail. Exit 0: "
        "intact; 1: tampered (names the first record deleted, altered, inserted or reordered, or the "
        "digest removed or forged); 2: could not run.",
    )
    parser.add_argument(
        "--store", default=None, help="the store, as serve's --store (default: $DCAF_STORE, else SQLite)"
    )
    parser.add_argument(
        "--namespace",
        default=None,
        help="the agent's name, its namespace in the store (default: the URL's namespace=, else 'agent')",
    )
    parser.add_argument(
        "--key-file",
        default=None,
        help="the key the server signed digests with, or the public half of its Ed25519 key "
        f"(default: ${KEY_ENV})",
    )
    return parser


def main(argv: Sequence[str]) -> int:
    args = _parser().parse_args(argv)
    url = args.store or store_from_environment() or DEFAULT_STORE
    namespace = args.namespace or dict(parse_qsl(urlsplit(url).query)).get("namespace") or "agent"
    try:
        key = audit_key(args.key_file)
        store = open_store(url, namespace=namespace)
    except (AuditKeyError, StoreConfigError) as exc:
        print(f"dcaf-like audit verify: {exc}", file=sys.stderr)
        return 2
    try:
        trail = store.audit_trail()
    except (ApplicationError, OSError) as exc:
        print(f"dcaf-like audit verify: {exc}", file=sys.stderr)
        return 2
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()
    verdict = verify(trail, key, may_expire=getattr(store, "audit_ttl", None) is not None)
    print(f"{redact(url)} (namespace {namespace}): {verdict.summary()}")
    for note in verdict.notes:
        print(f"  note: {note}")
    return 0 if verdict.intact else 1


def keygen(argv: Sequence[str]) -> int:
    """Write an Ed25519 private key (mode 600) and its public key (``FILE.pub``); 2 if it cannot."""
    parser = argparse.ArgumentParser(
        prog="dcaf-like audit keygen",
        description="Write an Ed25519 key pair for the audit trail's digests: FILE (the private key, for "
        "the server's --audit-key-file) and FILE.pub (the public key, for `dcaf-like audit verify`).",
    )
    parser.add_argument("file", help="where the private key goes (never overwritten)")
    args = parser.parse_args(argv)
    try:
        public = generate_ed25519(args.file)
    except (AuditKeyError, OSError) as exc:
        print(f"dcaf-like audit keygen: {exc}", file=sys.stderr)
        return 2
    print(f"private key: {args.file} (give it to the server: --audit-key-file)")
    print(f"public key: {public} (give it to whoever verifies: dcaf-like audit verify --key-file)")
    return 0
