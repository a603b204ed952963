"""A newcomer's mistakes are found when ``dcaf-like serve`` starts: a clear message and a non-zero exit
before the server binds, never a server that answers /health and then fails every turn."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

COMMAND = str(Path(sys.executable).parent / "dcaf-like")

AGENT = """
from dcaf_like import Agent
from dcaf_like.testing import FakeRuntime

agent = Agent(runtime=FakeRuntime(["hello"]))
"""


def serve(tmp_path: Path, source: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "my_agent.py").write_text(source)
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "DCAF_"))}
    environment["AWS_CONFIG_FILE"] = str(tmp_path / "no-aws-config")  # no region from a profile either
    environment["AWS_SHARED_CREDENTIALS_FILE"] = str(tmp_path / "no-aws-credentials")
    environment.update(env)
    return subprocess.run(
        [COMMAND, "serve", "my_agent.py:agent", "--port", "0", *args],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def assert_refused_at_start_up(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr
    assert "Traceback" not in result.stderr
    assert "Uvicorn running" not in result.stderr, "the server must not have bound"


def test_a_factory_served_as_an_agent_function_asks_for_factory(tmp_path):
    factory = "from dcaf_like import Agent\nfrom dcaf_like.testing import FakeRuntime\n\n" + (
        "def agent():\n    return Agent(runtime=FakeRuntime(['hello']))\n"
    )

    result = serve(tmp_path, factory, "--store", "memory://")

    assert_refused_at_start_up(
        result, "my_agent.py:agent is not an agent function", "did you mean --factory?"
    )


def test_a_function_with_the_wrong_arguments_says_what_an_agent_function_takes(tmp_path):
    result = serve(tmp_path, "def agent(messages):\n    return 'hi'\n")

    assert_refused_at_start_up(result, "takes (messages, context)")
    assert "--factory" not in result.stderr


def test_a_misspelt_redis_option_names_the_option(tmp_path):
    result = serve(tmp_path, AGENT, "--store", "redis://:hunter2@127.0.0.1:6379/15?tll=60")

    assert_refused_at_start_up(result, "'tll' is not an option", "ttl")
    assert "hunter2" not in result.stderr


def test_an_unreachable_store_is_refused_before_binding(tmp_path):
    result = serve(tmp_path, AGENT, "--store", "redis://127.0.0.1:1/0")

    assert_refused_at_start_up(result, "the store cannot be read at start-up", "127.0.0.1:1", "--store")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_an_unreachable_store_is_refused_with_workers_too(tmp_path, workers):
    result = serve(tmp_path, AGENT, "--store", "redis://127.0.0.1:1/0", "--workers", workers)

    assert_refused_at_start_up(result, "the store cannot be read at start-up")


def test_a_misspelt_runtime_provider_lists_the_real_ones(tmp_path):
    result = serve(tmp_path, "from dcaf_like import Agent\n\nagent = Agent(runtime='opneai:gpt-4o')\n")

    assert_refused_at_start_up(result, "no runtime provider named 'opneai'", "openai", "bedrock")


def test_a_dynamodb_store_without_a_region_says_where_to_give_one(tmp_path):
    result = serve(tmp_path, AGENT, "--store", "dynamodb://conversations")

    assert_refused_at_start_up(result, "names no AWS region", "?region=", "AWS_REGION")


def test_a_bedrock_runtime_without_a_region_says_where_to_give_one(tmp_path):
    bedrock = "from dcaf_like import Agent\n\nagent = Agent(runtime='bedrock:anthropic.claude-3-haiku')\n"

    result = serve(tmp_path, bedrock, "--store", "memory://")

    assert_refused_at_start_up(
        result, "bedrock:anthropic.claude-3-haiku: no AWS region", "region=", "AWS_REGION"
    )


def test_a_misspelt_postgres_option_is_named_with_the_options_taken_not_the_url(tmp_path):
    typed = "postgresql://ops:hunter2@127.0.0.1:5432/ops?sslmdoe=require"

    result = serve(tmp_path, AGENT, "--store", typed)

    assert_refused_at_start_up(
        result,
        "'sslmdoe' is not an option of a PostgreSQL store URL (did you mean 'sslmode'?)",
        "the store takes namespace, ttl, audit_ttl, table, pool_min, pool_max",
    )
    assert "postgresql://" not in result.stderr, "no URL, and surely not one with a ttl the user never typed"
    assert "hunter2" not in result.stderr


def test_a_sqlite_store_in_a_folder_that_does_not_exist_is_refused_not_created(tmp_path):
    result = serve(tmp_path, AGENT, "--store", "sqlite:///nonexistent/dir/x.db")

    assert_refused_at_start_up(
        result, "the SQLite store's folder nonexistent/dir does not exist", "mkdir -p nonexistent/dir"
    )
    assert not (tmp_path / "nonexistent").exists()


def test_a_misspelt_runtime_is_asked_about_the_closest_provider(tmp_path):
    result = serve(tmp_path, "from dcaf_like import Agent\n\nagent = Agent(runtime='loacl')\n")

    assert_refused_at_start_up(result, "no runtime provider named 'loacl' (did you mean 'local'?)")


def test_bedrock_without_a_model_says_one_is_needed(tmp_path):
    result = serve(tmp_path, "from dcaf_like import Agent\n\nagent = Agent(runtime='bedrock')\n")

    assert_refused_at_start_up(
        result, "runtime 'bedrock' names no model", "'bedrock:anthropic.claude-3-haiku-20240307-v1:0'"
    )
    assert "no AWS region" not in result.stderr


def test_a_local_model_file_that_does_not_exist_is_refused_at_start_up(tmp_path):
    result = serve(
        tmp_path, "from dcaf_like import Agent\n\nagent = Agent(runtime='local:/nope/model.gguf')\n"
    )

    assert_refused_at_start_up(result, "local:/nope/model.gguf: no model file at /nope/model.gguf")
