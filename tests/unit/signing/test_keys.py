"""The keys that sign the audit trail's digests (docs/operations.md, "Proving the trail"): a shared
secret or an Ed25519 key, read from a file only its owner reads (a public key: anyone), and a verifier
that holds only the public key can check digests but never sign one."""

from __future__ import annotations

from pathlib import Path

import pytest

from dcaf_like import InMemoryConversationRepository
from dcaf_like.application.trail import DigestWriter
from dcaf_like.cli.main import main
from dcaf_like.domain import DecisionRecord
from dcaf_like.domain.trail import AuditDigest, AuditKey, ChainHead, verify
from dcaf_like.signing import AuditKeyError, Ed25519Key, audit_key, generate_ed25519


def refusals(store: InMemoryConversationRepository, n: int) -> None:
    store.record_decisions(
        [DecisionRecord.refused("c", "no", by="mallory", entrance="http", at=float(i)) for i in range(n)]
    )


def test_the_key_comes_from_a_file_only_its_owner_reads_else_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "audit.key"
    path.write_bytes(b"sixteen bytes or more of key\n")
    path.chmod(0o600)
    assert repr(audit_key(path)) == "AuditKey(<hidden>)"
    assert audit_key(None, {}) is None
    assert audit_key(None, {"DCAF_AUDIT_KEY": "from the environment, long enough"}) is not None

    path.chmod(0o644)
    with pytest.raises(AuditKeyError, match="open to other users") as refused:
        audit_key(path)
    assert "sixteen" not in str(refused.value)
    with pytest.raises(AuditKeyError, match="at least 16 bytes"):
        audit_key(None, {"DCAF_AUDIT_KEY": "short"})
    with pytest.raises(AuditKeyError, match="cannot be read"):
        audit_key(tmp_path / "missing.key")


def test_keygen_writes_a_private_key_for_its_owner_and_a_public_key_anyone_may_read(tmp_path: Path) -> None:
    private = tmp_path / "audit.pem"
    assert main(["audit", "keygen", str(private)]) == 0
    public = tmp_path / "audit.pem.pub"
    assert private.stat().st_mode & 0o777 == 0o600
    public.chmod(0o644)  # a public key is not a secret: read by anyone, it is still accepted

    signer, checker = audit_key(private), audit_key(public)
    assert isinstance(signer, Ed25519Key)
    assert signer.can_sign
    assert isinstance(checker, Ed25519Key)
    assert not checker.can_sign
    assert "PRIVATE" not in repr(signer)
    assert private.read_text() not in repr(signer)
    assert main(["audit", "keygen", str(private)]) == 2  # never overwritten
    private.chmod(0o640)
    with pytest.raises(AuditKeyError, match="open to other users"):
        audit_key(private)


def test_a_verifier_with_the_public_key_checks_digests_and_cannot_sign_one(tmp_path: Path) -> None:
    public = generate_ed25519(tmp_path / "k.pem")
    signer, checker = audit_key(tmp_path / "k.pem"), audit_key(public)
    assert signer is not None
    assert checker is not None
    store = InMemoryConversationRepository()
    writer = DigestWriter(store, signer, every_records=2)
    refusals(store, 2)
    assert writer.tick() is not None
    refusals(store, 2)
    assert writer.tick() is not None

    verdict = verify(store.audit_trail(), checker)
    assert verdict.summary() == "intact: 4 records chained, 2 digests signed"
    with pytest.raises(ValueError, match="private key"):
        AuditDigest.after(None, ChainHead(4, "x"), at=0.0, key=checker)


def test_a_digest_signed_with_another_key_or_altered_is_named_forged(tmp_path: Path) -> None:
    generate_ed25519(tmp_path / "ours.pem")
    theirs_public = generate_ed25519(tmp_path / "theirs.pem")
    ours = audit_key(tmp_path / "ours.pem")
    theirs = audit_key(theirs_public)
    assert ours is not None
    assert theirs is not None
    store = InMemoryConversationRepository()
    refusals(store, 3)
    assert DigestWriter(store, ours).tick(force=True) is not None

    assert verify(store.audit_trail(), theirs).problem == "digest #1 forged: its signature is not the key's"
    trail = store.audit_trail()
    digest = trail.digests[0]
    flipped = digest.signature[:-1] + ("0" if digest.signature[-1] != "0" else "1")
    trail.digests[0] = AuditDigest(digest.number, digest.head_seq, digest.head_hash, digest.at, "", flipped)
    ours_public = audit_key(tmp_path / "ours.pem.pub")
    assert verify(trail, ours_public).problem == "digest #1 forged: its signature is not the key's"


def test_a_digest_of_one_kind_checked_with_a_key_of_the_other_is_named_not_forged(tmp_path: Path) -> None:
    """Digests signed with a shared secret before a move to Ed25519 are told apart, not called forged."""
    store = InMemoryConversationRepository()
    refusals(store, 1)
    assert DigestWriter(store, AuditKey(b"the unit tests' audit key")).tick(force=True) is not None
    public = audit_key(generate_ed25519(tmp_path / "k.pem"))

    problem = verify(store.audit_trail(), public).problem
    assert problem == "digest #1 not checked: it is signed with hmac-sha256, the key given is ed25519"


def test_verify_checks_a_served_trail_with_the_public_key_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`dcaf-like audit verify --key-file FILE.pub` on a SQLite store signed with the private key."""
    from dcaf_like.stores import open_store

    url = f"sqlite:///{tmp_path / 'agent.db'}"
    store = open_store(url, namespace="agent")
    refusals(store, 5)  # type: ignore[arg-type]
    signer = audit_key(tmp_path / "k.pem") if generate_ed25519(tmp_path / "k.pem") else None
    assert signer is not None
    assert DigestWriter(store, signer).tick(force=True) is not None
    store.close()  # type: ignore[attr-defined]

    assert main(["audit", "verify", "--store", url, "--key-file", str(tmp_path / "k.pem.pub")]) == 0
    assert capsys.readouterr().out.endswith("intact: 5 records chained, 1 digest signed\n")
