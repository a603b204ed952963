"""PlatformContext: where the agent acts (tenant, namespace) and the credentials it acts with."""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

REDACTED = "***"

# What marks a key as holding a credential. A key is compared in one normal form: camelCase split
# into words, lowercased, every run of other characters one "_" ("X-Auth-Token" -> "x_auth_token",
# "kubeConfig" -> "kube_config"). A fragment marks it wherever it appears once the "_" are dropped
# ("kube_config" -> "kubeconfig"); a word only when it is a whole word of the key ("db_pass", not
# "passenger"). The list is broad on purpose: a key taken for a credential by mistake is only not
# stored and not bound to an approval (docs/approvals.md), one missed is stored in clear.
_SECRET_FRAGMENTS = (
    "token", "secret", "passw", "passphrase", "pwd", "credential", "kubeconfig", "apikey", "accesskey",
    "privatekey", "privkey", "sshkey", "signingkey", "encryptionkey", "sessionkey", "clientkey",
    "masterkey", "authoriz", "authent", "bearer", "jwt", "cookie", "signature", "databaseurl", "dburl",
    "connectionstring", "connstr", "keystore", "keyfile",
)  # fmt: skip
_SECRET_WORDS = frozenset(
    {"auth", "key", "keys", "pass", "pin", "otp", "creds", "cred", "dsn", "session", "sid", "salt", "pem"}
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NOT_ALNUM = re.compile(r"[^a-z0-9]+")
# Values that are credentials whatever their key: a URL carrying a password, an Authorization value
# ("Bearer <token>", "Basic <base64>"; not "basic plan").
_SECRET_VALUE = re.compile(
    r"^\s*(?:[a-z][a-z0-9+.-]*://[^/@\s]*:[^/@\s]+@|(?:bearer|basic)\s+[\w.~+/=-]{8,}\s*$)", re.IGNORECASE
)


@functools.lru_cache(maxsize=4096)
def is_secret_key(key: str) -> bool:
    """True if a value under `key` is a credential (``Authorization``, ``db_password``, ``kubeConfig``...)."""
    words = _NOT_ALNUM.sub("_", _CAMEL.sub("_", key).lower()).strip("_")
    compact = words.replace("_", "")
    return any(f in compact for f in _SECRET_FRAGMENTS) or not _SECRET_WORDS.isdisjoint(words.split("_"))


def is_secret_value(value: Any) -> bool:
    """True if `value` is a credential by its form, under any key (``postgres://u:pw@db``, ``Bearer x``)."""
    return isinstance(value, str) and bool(_SECRET_VALUE.match(value))


def _is_secret(key: Any, value: Any, pair: bool = False) -> bool:
    return is_secret_key(str(key)) or is_secret_value(value) or (pair and key == "value")


#: The keys that name an entry of a list of pairs (``headers: [{"name": "X-Api-Token", "value": ...}]``).
_PAIR_NAMES = ("name", "key")


def _named_secret(mapping: Mapping[Any, Any]) -> bool:
    """True for a ``{"name": ..., "value": ...}`` pair (a header, an environment variable) whose name
    is a credential's: its ``value`` is then one, whatever it looks like."""
    if "value" not in mapping:
        return False
    return any(isinstance(mapping.get(n), str) and is_secret_key(mapping[n]) for n in _PAIR_NAMES)


def redact(value: Any) -> Any:
    """A copy of `value` with every credential (by its key or by its form) replaced by ``***``."""
    if isinstance(value, Mapping):
        pair = _named_secret(value)
        return {str(k): (REDACTED if _is_secret(k, v, pair) else redact(v)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [REDACTED if is_secret_value(v) else redact(v) for v in value]
    return value


def without_secrets(value: Any) -> Any:
    """A copy of `value` with every credential (by its key or by its form) removed."""
    if isinstance(value, Mapping):
        pair = _named_secret(value)
        return {str(k): without_secrets(v) for k, v in value.items() if not _is_secret(k, v, pair)}
    if isinstance(value, list | tuple):
        return [without_secrets(v) for v in value if not is_secret_value(v)]
    return value


def secret_values(value: Any) -> list[str]:
    """Every credential in `value` as text (the values :func:`without_secrets` removes), to find and
    remove them from an error's text."""
    found: list[str] = []
    _collect(value, False, found)
    return found


def _collect(value: Any, secret: bool, found: list[str]) -> None:
    if isinstance(value, Mapping):
        pair = _named_secret(value)
        for k, v in value.items():
            _collect(v, secret or _is_secret(k, v, pair), found)
    elif isinstance(value, list | tuple):
        for v in value:
            _collect(v, secret or is_secret_value(v), found)
    elif secret and isinstance(value, str | int) and not isinstance(value, bool):
        found.append(str(value))


#: Shorter values are not scrubbed from text: replacing every "ab" of a message would say nothing.
MIN_SCRUBBED = 4


def scrub(text: str, secrets: Iterable[str]) -> str:
    """`text` with every occurrence of each secret (of at least MIN_SCRUBBED characters) as ``***``,
    the longest first (so a secret containing another goes whole)."""
    for secret in sorted({s for s in secrets if len(s) >= MIN_SCRUBBED}, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


class PlatformContext(Mapping[str, Any]):
    """Read-only mapping of the request's platform context.

    Tools read it (credentials included) by asking for it in their signature. Its ``repr`` and
    :meth:`public` never show credentials, so logging it or returning it is safe.
    """

    __slots__ = ("_fingerprint", "_values")

    def __init__(self, values: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        merged = dict(values or {})
        merged.update(kwargs)
        self._values = merged
        self._fingerprint: str | None = None

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PlatformContext):
            return self._values == other._values
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values)))

    def __repr__(self) -> str:
        return f"PlatformContext({redact(self._values)!r})"

    __str__ = __repr__

    def public(self) -> dict[str, Any]:
        """The context without its credentials: what may be stored, logged or sent back."""
        result: dict[str, Any] = without_secrets(self._values)
        return result

    def secret_values(self) -> list[str]:
        """The credentials' values, as text: what an error's text must never show."""
        return secret_values(self._values)

    @property
    def fingerprint(self) -> str:
        """A digest of :meth:`public`: where a call acts, without the credentials it acts with. An
        approval binds to the fingerprint of the context its call was proposed in."""
        if self._fingerprint is None:
            public = self.public()
            text = json.dumps(_normalized(public), sort_keys=True, separators=(",", ":"), default=repr)
            self._fingerprint = (
                _EMPTY_FINGERPRINT if not public else hashlib.sha256(text.encode()).hexdigest()
            )
        return self._fingerprint

    def merged(self, other: Mapping[str, Any]) -> PlatformContext:
        """A new context: this one's values overridden by `other`'s."""
        return PlatformContext({**self._values, **dict(other)})


def _normalized(value: Any) -> Any:
    """Integral floats as ints, as a JSON client cannot tell ``1.0`` from ``1``."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _normalized(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalized(v) for v in value]
    return value


_EMPTY_FINGERPRINT = hashlib.sha256(b"{}").hexdigest()

#: The context of a request that sent none (shared: a PlatformContext cannot be changed).
NO_CONTEXT = PlatformContext()
