"""Mistakes in defining tools, stores and runtimes raise this framework's typed errors, naming the
tool, parameter, URL option or runtime string at fault and what to do, never an SDK's internal error."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from dcaf_like import RuntimeNotConfigured, StoreConfigError, ToolDefinitionError, open_store, tool
from dcaf_like.runtimes import resolve_runtime


@pytest.fixture
def no_aws_region(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))


def test_a_tool_parameter_of_an_unsupported_type_names_the_tool_and_the_parameter():
    def send(host: str, connection: socket.socket) -> str:
        """Send something."""
        return host

    with pytest.raises(ToolDefinitionError) as raised:
        tool(send)

    assert raised.value.tool_name == "send"
    assert raised.value.parameter == "connection"
    message = str(raised.value)
    assert message.startswith("tool 'send', parameter 'connection': type socket.socket cannot be described")
    assert "Use str, int" in message
    assert "arbitrary_types_allowed" not in message, "not pydantic's advice about a model we built"


def test_an_unsupported_type_inside_a_generic_is_named_as_written():
    def run(callbacks: list[Callable[[int], int]]) -> str:
        """Run callbacks."""
        return ""

    with pytest.raises(
        ToolDefinitionError, match=r"parameter 'callbacks': type list\[collections.abc.Callable"
    ):
        tool(run)


def test_star_arguments_are_a_tool_definition_error_that_is_still_a_type_error():
    def anything(*names: str) -> str:
        """Take anything."""
        return ""

    with pytest.raises(
        TypeError, match="tool 'anything', parameter 'names': \\*args and \\*\\*kwargs"
    ) as raised:
        tool(anything)
    assert isinstance(raised.value, ToolDefinitionError)


def test_a_bedrock_runtime_without_a_region_says_where_to_give_one(no_aws_region):
    with pytest.raises(RuntimeNotConfigured) as raised:
        resolve_runtime("bedrock:anthropic.claude-3-haiku")

    message = str(raised.value)
    assert message.startswith("bedrock:anthropic.claude-3-haiku: no AWS region")
    assert "region=" in message
    assert "AWS_REGION" in message


def test_a_dynamodb_store_without_a_region_says_where_to_give_one(no_aws_region):
    with pytest.raises(StoreConfigError) as raised:
        open_store("dynamodb://conversations?namespace=ops")

    assert str(raised.value) == (
        "store 'dynamodb://conversations?namespace=ops' names no AWS region: add ?region=REGION to the URL "
        "(dynamodb://TABLE?region=eu-west-1) or set AWS_REGION"
    )


def test_a_misspelt_redis_option_is_refused_when_the_store_is_opened():
    with pytest.raises(StoreConfigError) as raised:
        open_store("redis://:hunter2@127.0.0.1:1/0?tll=60")

    message = str(raised.value)
    assert message.startswith("'tll' is not an option of a Redis store URL or of redis-py")
    assert "namespace, ttl, audit_ttl and prefix" in message
    assert "hunter2" not in message


def test_a_redis_connection_option_of_redis_py_is_still_accepted():
    store = open_store("redis://127.0.0.1:1/0?health_check_interval=30&socket_keepalive=true")

    assert type(store).__name__ == "RedisConversationRepository"
    store.close()  # type: ignore[attr-defined]
