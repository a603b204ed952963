"""The keys that sign the audit trail's digests (docs/operations.md, "Proving the trail").

Two kinds, told apart by the key file's content:

- a shared secret (any text of 16 bytes or more): HMAC-SHA256. Whoever verifies holds the secret, and
  so could sign a forged trail too.
- an Ed25519 key in PEM: the server signs with the private key (``-----BEGIN PRIVATE KEY-----``);
  ``dcaf-like audit verify`` needs only the public key (``-----BEGIN PUBLIC KEY-----``), so an auditor
  checks the trail without being able to sign one. ``dcaf-like audit keygen`` writes a pair. It needs
  the ``cryptography`` package (``pip install "dcaf-like[audit]"``).

A secret or a private key file must be readable by its owner only; a public key may be read by anyone.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dcaf_like.domain.trail import AuditKey, DigestKey
from dcaf_like.extras import install

KEY_ENV = "DCAF_AUDIT_KEY"
_PEM = b"-----BEGIN "
_PUBLIC_PEM = b"-----BEGIN PUBLIC KEY-----"
_PREFIX = "ed25519:"

__all__ = [
    "KEY_ENV",
    "AuditKeyError",
    "Ed25519Key",
    "audit_key",
    "checked_signing_key",
    "generate_ed25519",
    "signing_key",
]


class AuditKeyError(ValueError):
    """An audit key that cannot be used (its content is never shown)."""


class Ed25519Key:
    """An Ed25519 key that signs digests (the private key) or only checks them (the public key). Its
    repr and str never show the private key."""

    algorithm = "ed25519"
    __slots__ = ("_private", "_public")

    def __init__(self, private: Any | None, public: Any) -> None:
        self._private = private
        self._public = public

    @classmethod
    def from_pem(cls, pem: bytes) -> Ed25519Key:
        """The key in `pem`: a PKCS#8 private key, or a SubjectPublicKeyInfo public key."""
        serialization, ed25519 = _crypto()
        try:
            if pem.lstrip().startswith(_PUBLIC_PEM):
                public = serialization.load_pem_public_key(pem)
                if not isinstance(public, ed25519.Ed25519PublicKey):
                    raise AuditKeyError("the public key is not an Ed25519 key")
                return cls(None, public)
            private = serialization.load_pem_private_key(pem, password=None)
        except (ValueError, TypeError) as exc:
            if isinstance(exc, AuditKeyError):
                raise
            expected = "an unencrypted Ed25519 key is expected"
            raise AuditKeyError(f"the PEM key cannot be read ({expected})") from None
        if not isinstance(private, ed25519.Ed25519PrivateKey):
            raise AuditKeyError("the private key is not an Ed25519 key")
        return cls(private, private.public_key())

    @property
    def can_sign(self) -> bool:
        return self._private is not None

    def sign(self, message: bytes) -> str:
        if self._private is None:
            raise AuditKeyError("a public key checks digests; signing them takes the private key")
        signature: bytes = self._private.sign(message)
        return _PREFIX + signature.hex()

    def verify(self, message: bytes, signature: str) -> bool:
        from cryptography.exceptions import InvalidSignature

        if not signature.startswith(_PREFIX):
            return False
        try:
            self._public.verify(bytes.fromhex(signature[len(_PREFIX) :]), message)
        except (InvalidSignature, ValueError):
            return False
        return True

    def public_pem(self) -> bytes:
        serialization, _ = _crypto()
        encoded: bytes = self._public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return encoded

    def __repr__(self) -> str:
        return "Ed25519Key(private, <hidden>)" if self.can_sign else "Ed25519Key(public)"

    __str__ = __repr__


def audit_key(file: str | Path | None = None, environ: Mapping[str, str] = os.environ) -> DigestKey | None:
    """The key in `file`, else in ``DCAF_AUDIT_KEY``, else None: an Ed25519 key when it is PEM, else a
    shared secret. A secret or private key file open to other users is refused."""
    if file is None:
        text = environ.get(KEY_ENV, "")
        if not text.strip():
            return None
        return _key(text.encode(), KEY_ENV)
    path = Path(file)
    try:
        mode = path.stat().st_mode
        content = path.read_bytes()
    except OSError as exc:
        raise AuditKeyError(f"the audit key file {path} cannot be read: {exc.strerror or 'error'}") from None
    public = content.lstrip().startswith(_PUBLIC_PEM)
    if os.name == "posix" and not public and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise AuditKeyError(
            f"the audit key file {path} is open to other users (mode {stat.S_IMODE(mode):04o}): make it "
            f"readable by its owner only: chmod 600 {path}"
        )
    return _key(content, f"the audit key file {path}")


def signing_key(file: str | Path | None = None, environ: Mapping[str, str] = os.environ) -> DigestKey | None:
    """:func:`audit_key` for a server, which signs: a public key alone is refused."""
    key = audit_key(file, environ)
    return None if key is None else checked_signing_key(key)


def checked_signing_key(key: DigestKey) -> DigestKey:
    """`key`, if it can sign digests; AuditKeyError for a public key."""
    if not key.can_sign:
        raise AuditKeyError(
            "the audit key is a public key, which only checks digests: give the server the private key"
        )
    return key


def generate_ed25519(private_file: str | Path) -> Path:
    """Write a new Ed25519 private key to `private_file` (mode 600, refused if it exists) and its public
    key beside it (``<file>.pub``); the public key's path."""
    serialization, ed25519 = _crypto()
    private = ed25519.Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    path = Path(private_file)
    public_path = path.with_name(path.name + ".pub")
    for existing in (path, public_path):
        if existing.exists():
            raise AuditKeyError(f"{existing} exists: a key is never overwritten")
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as out:
        out.write(pem)
    public_path.write_bytes(Ed25519Key(private, private.public_key()).public_pem())
    return public_path


def _key(content: bytes, where: str) -> DigestKey:
    if content.lstrip().startswith(_PEM):
        try:
            return Ed25519Key.from_pem(content.strip())
        except AuditKeyError as exc:
            raise AuditKeyError(f"{where}: {exc}") from None
    try:
        return AuditKey(content)
    except ValueError as exc:
        raise AuditKeyError(f"{where}: {exc}") from None


def _crypto() -> tuple[Any, Any]:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise AuditKeyError(
            f"an Ed25519 audit key needs the cryptography package: {install('audit')}"
        ) from None
    return serialization, ed25519
