"""Runtimes named by strings: the shipped providers, and third-party ones through entry points."""

from __future__ import annotations

import re
import sys

import pytest

from dcaf_like import Agent, ModelSettings, RuntimeNotConfigured, resolve_runtime
from dcaf_like.runtimes import available_providers
from dcaf_like.testing import FakeRuntime, reply


@pytest.fixture
def acme_package(tmp_path, monkeypatch):
    """An installed distribution 'acme-runtimes' registering the provider 'acme'."""
    (tmp_path / "acme_runtime.py").write_text(
        "from dcaf_like.testing import FakeRuntime\n"
        "def factory(model):\n"
        "    runtime = FakeRuntime([f'acme {model} says hi'])\n"
        "    runtime.name = f'acme:{model}'\n"
        "    return runtime\n"
    )
    info = tmp_path / "acme_runtimes-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-runtimes\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[dcaf_like.runtimes]\nacme = acme_runtime:factory\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("acme_runtime", None)


def test_a_third_party_provider_registers_through_an_entry_point(acme_package):
    from dcaf_like import ModelRequest, UserTurn

    runtime = resolve_runtime("acme:rocket-1")

    assert "acme" in available_providers()
    assert runtime.name == "acme:rocket-1"
    assert runtime.invoke(ModelRequest("", (UserTurn("hi"),))).text == "acme rocket-1 says hi"


def test_the_shipped_providers_are_listed():
    assert {"openai", "bedrock", "langchain", "local"} <= set(available_providers())


def test_an_unknown_provider_lists_what_exists():
    with pytest.raises(RuntimeNotConfigured) as raised:
        resolve_runtime("nope:model")

    assert "no runtime provider named 'nope'" in str(raised.value)
    assert "openai" in str(raised.value)


def test_a_misspelt_provider_is_asked_about_the_closest_one():
    with pytest.raises(RuntimeNotConfigured) as raised:
        Agent(runtime="loacl")

    assert str(raised.value).startswith(
        "no runtime provider named 'loacl' (did you mean 'local'?). Providers"
    )


@pytest.mark.parametrize(
    ("runtime", "example"),
    [
        ("bedrock", "'bedrock:anthropic.claude-3-haiku-20240307-v1:0'"),
        ("bedrock:", "'bedrock:anthropic.claude-3-haiku-20240307-v1:0'"),
        ("openai", "'openai:gpt-4o-mini'"),
    ],
)
def test_a_provider_named_without_a_model_says_one_is_needed_with_an_example(runtime, example):
    with pytest.raises(RuntimeNotConfigured) as raised:
        Agent(runtime=runtime)

    provider = runtime.rstrip(":")
    assert str(raised.value) == (
        f"runtime {runtime!r} names no model: {provider} needs one, as '{provider}:<model>' "
        f"(for instance {example})"
    )


def test_a_local_model_file_that_does_not_exist_is_refused_when_the_agent_is_built(tmp_path):
    missing = tmp_path / "nope" / "model.gguf"

    with pytest.raises(RuntimeNotConfigured) as raised:
        Agent(runtime=f"local:{missing}")

    assert str(raised.value) == (
        f"local:{missing}: no model file at {missing}; name a GGUF file that exists, or use 'local' for the "
        "default model (downloaded on first use)"
    )


def test_a_local_model_file_that_exists_is_taken_and_loaded_only_when_used(tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")

    agent = Agent(runtime=f"local:{model}")

    assert agent.runtime.name == "local:model.gguf"
    assert not agent.runtime.loaded


# -- model settings that travel (docs/runtimes.md, "Model settings") --------------------------------


def test_a_runtime_string_carries_its_model_settings(tmp_path):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")

    runtime = resolve_runtime(f"local:{model}?temperature=0.2&max_tokens=256")

    assert runtime.settings == ModelSettings(temperature=0.2, max_tokens=256)
    assert runtime.name == "local:model.gguf"


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("temprature=0", "unknown setting 'temprature=0'; it takes max_tokens, temperature"),
        ("temperature", "unknown setting 'temperature'"),
        ("temperature=warm", "temperature='warm' is not a number"),
        ("max_tokens=0", "max_tokens must be a whole number from 1"),
        ("temperature=-1", "temperature must be a number from 0"),
    ],
)
def test_a_setting_in_a_runtime_string_that_cannot_be_taken_is_refused_naming_it(query, said):
    with pytest.raises(RuntimeNotConfigured, match=re.escape(said)):
        Agent(runtime=f"openai:gpt-4o-mini?{query}")


def test_the_agents_model_settings_go_with_each_of_its_model_requests():
    runtime = FakeRuntime([reply("Hello.")])
    agent = Agent(runtime=runtime, model_settings=ModelSettings(temperature=0, max_tokens=100))

    agent.run("hello")

    assert runtime.requests[0].settings == ModelSettings(temperature=0, max_tokens=100)
