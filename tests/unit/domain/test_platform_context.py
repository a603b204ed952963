"""Which platform-context values are credentials: never stored, never shown, not bound to an approval,
and removed from any error's text."""

from __future__ import annotations

import pytest

from dcaf_like.domain import PlatformContext
from dcaf_like.domain.context import is_secret_key, redact, scrub, secret_values, without_secrets

CREDENTIAL_KEYS = [
    "Authorization", "authorization", "proxy_authorization", "X-Auth-Token", "auth", "auth_header",
    "authentication", "password", "db_password", "passwd", "pwd", "db_pass", "passphrase",
    "ssh_passphrase", "kube_config", "kubeconfig", "kubeConfig", "KUBECONFIG", "ssh_key", "sshKey",
    "private_key", "privateKeyPem", "api_key", "apiKey", "X-Api-Key", "access_key", "aws_access_key_id",
    "aws_secret_access_key", "secret", "client_secret", "token", "duplo_token", "access_token",
    "refreshToken", "jwt", "id_jwt", "bearer", "bearer_token", "database_url", "DATABASE_URL",
    "db_url", "dsn", "connection_string", "credentials", "gcp_credentials_json", "creds", "cookie",
    "session_id", "sessionKey", "signature", "signing_key", "encryption_key", "key", "otp", "pin",
    "keystore", "tls_key_file",
]  # fmt: skip
PLAIN_KEYS = [
    "tenant_name", "tenant", "tenant_id", "duplo_tenant_id", "k8s_namespace", "namespace", "account",
    "account_id", "aws_account", "aws_region", "region", "cluster", "cluster_name", "project",
    "environment", "user", "user_name", "email", "author", "authority", "keyspace", "monkey_business",
    "passenger_count", "tokyo_zone", "url", "endpoint", "host", "port",
]  # fmt: skip


@pytest.mark.parametrize("key", CREDENTIAL_KEYS)
def test_a_credential_key_is_secret(key):
    assert is_secret_key(key)


@pytest.mark.parametrize("key", PLAIN_KEYS)
def test_a_key_that_says_where_the_agent_acts_is_not(key):
    assert not is_secret_key(key)


@pytest.mark.parametrize(
    "value",
    [
        "postgres://ops:s3cret@db.internal/ops",
        "redis://:pw@cache:6379/0",
        "Bearer abc.def.ghi",
        "basic dXNlcjpw",
    ],
)
def test_a_credential_is_secret_by_its_form_under_any_key(value):
    context = PlatformContext({"tenant_name": "dev", "endpoint": value})

    assert context.public() == {"tenant_name": "dev"}
    assert value not in repr(context)
    assert secret_values(dict(context)) == [value]


@pytest.mark.parametrize("value", ["basic plan", "Bearer", "https://example.com/a:b", "eu-west-1"])
def test_a_plain_value_is_kept(value):
    assert PlatformContext({"tier": value}).public() == {"tier": value}


def test_the_stored_form_keeps_the_rest_nested_included():
    context = {
        "tenant_name": "dev",
        "Authorization": "Bearer x",
        "X-Forwarded-Auth": "Basic dXNlcjpwYXNz",
        "cluster": {"name": "eks-1", "kubeConfig": "apiVersion: v1", "url": "https://eks"},
        "accounts": [{"id": "1", "password": "p"}],
    }

    assert without_secrets(context) == {
        "tenant_name": "dev",
        "cluster": {"name": "eks-1", "url": "https://eks"},
        "accounts": [{"id": "1"}],
    }
    assert redact(context)["cluster"]["kubeConfig"] == "***"
    assert sorted(secret_values(context)) == ["Basic dXNlcjpwYXNz", "Bearer x", "apiVersion: v1", "p"]


def test_a_credential_given_as_a_name_value_pair_is_secret_by_its_name():
    """Issue 34: ``headers``/``env`` as lists of pairs were stored in clear (docs/protocol.md promises
    credentials are never stored)."""
    context = {
        "headers": [{"name": "X-Api-Token", "value": "abc123def"}, {"name": "Accept", "value": "json"}],
        "env": [{"name": "DB_PASSWORD", "value": "hunter2hunter2"}, {"name": "REGION", "value": "eu-west-1"}],
    }

    assert without_secrets(context) == {
        "headers": [{"name": "X-Api-Token"}, {"name": "Accept", "value": "json"}],
        "env": [{"name": "DB_PASSWORD"}, {"name": "REGION", "value": "eu-west-1"}],
    }
    assert redact(context)["env"][0] == {"name": "DB_PASSWORD", "value": "***"}
    assert sorted(secret_values(context)) == ["abc123def", "hunter2hunter2"]
    assert "hunter2" not in PlatformContext(context).public().__repr__()


def test_scrub_removes_every_secret_longest_first_and_leaves_short_values():
    text = "key sk-abc-123 and sk-abc-123-long; pin 42"

    assert scrub(text, ["sk-abc-123", "sk-abc-123-long", "42"]) == "key *** and ***; pin 42"
