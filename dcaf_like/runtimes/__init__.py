"""Model runtimes, and how a runtime named by a string is found.

A string names a provider and a model, ``"provider:model"``. Providers shipped with dcaf_like are
listed in ``_PROVIDERS`` and imported only when named; third-party packages add theirs through the
``dcaf_like.runtimes`` entry point group (the entry point loads a callable taking the model string).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dcaf_like.application.errors import RuntimeNotConfigured
from dcaf_like.application.messages import NO_SETTINGS, ModelSettings
from dcaf_like.application.ports import AgentRuntime
from dcaf_like.extras import install

RuntimeFactory = Callable[[str], AgentRuntime]


def _openai() -> RuntimeFactory:
    import openai  # noqa: F401  (a missing SDK is reported with the extra to install)

    from dcaf_like.runtimes.openai_chat import OpenAIRuntime

    return OpenAIRuntime


def _local() -> RuntimeFactory:
    import llama_cpp  # noqa: F401

    from dcaf_like.runtimes.local import LocalRuntime

    def local(model: str) -> AgentRuntime:
        if model and not Path(model).expanduser().is_file():  # said now, not at the first turn
            raise RuntimeNotConfigured(
                f"local:{model}: no model file at {Path(model).expanduser()}; name a GGUF file that exists, "
                "or use 'local' for the default model (downloaded on first use)"
            )
        return LocalRuntime(model or None)

    return local


def _bedrock() -> RuntimeFactory:
    import boto3  # noqa: F401

    from dcaf_like.runtimes.bedrock import BedrockRuntime

    return BedrockRuntime


def _langchain() -> RuntimeFactory:
    import langchain_core  # noqa: F401

    from dcaf_like.runtimes.langchain import LangChainRuntime

    return LangChainRuntime.from_string


def _agno() -> RuntimeFactory:
    import agno  # noqa: F401

    from dcaf_like.runtimes.agno import AgnoRuntime

    return AgnoRuntime.from_string


def _adk() -> RuntimeFactory:
    import google.adk  # noqa: F401

    from dcaf_like.runtimes.adk import AdkRuntime

    return AdkRuntime


# provider name -> (factory loader, the extra that installs its SDK, an example of its name string when
# it needs a model: None when the provider has a default one).
_PROVIDERS: dict[str, tuple[Callable[[], RuntimeFactory], str, str | None]] = {
    "openai": (_openai, "openai", "openai:gpt-4o-mini"),
    "local": (_local, "local", None),
    "bedrock": (_bedrock, "bedrock", "bedrock:anthropic.claude-3-haiku-20240307-v1:0"),
    "langchain": (_langchain, "langchain", "langchain:openai:gpt-4o-mini"),
    "agno": (_agno, "agno", "agno:openai:gpt-4o-mini"),
    "adk": (_adk, "adk", "adk:gemini-2.0-flash"),
}

ENTRY_POINT_GROUP = "dcaf_like.runtimes"


def available_providers() -> list[str]:
    from importlib.metadata import entry_points  # not at import: it loads email, zipfile, csv...

    third_party = [ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)]
    return sorted({*_PROVIDERS, *third_party})


def resolve_runtime(runtime: AgentRuntime | str | None) -> AgentRuntime:
    """An AgentRuntime as is; a ``"provider:model"`` string through the provider chain."""
    if isinstance(runtime, AgentRuntime):
        return runtime
    if runtime is None:
        raise RuntimeNotConfigured(
            "this agent has no model runtime: pass runtime=<an AgentRuntime> or runtime='provider:model'. "
            + _what_exists()
        )
    if not isinstance(runtime, str):
        raise TypeError(f"runtime must be an AgentRuntime or a 'provider:model' string, not {runtime!r}")
    spec, _, query = runtime.partition("?")
    provider, _, model = spec.partition(":")
    settings = _settings_of(runtime, query)
    resolved = _resolved(runtime, provider, model)
    if settings is not NO_SETTINGS:
        resolved.settings = settings
    return resolved


def _settings_of(runtime: str, query: str) -> ModelSettings:
    """The model settings a runtime string carries after its ``?`` (``temperature=0&max_tokens=512``)."""
    if not query:
        return NO_SETTINGS
    values: dict[str, Any] = {}
    for pair in query.split("&"):
        key, sep, value = pair.partition("=")
        if not sep or key not in _SETTINGS:
            accepted = ", ".join(sorted(_SETTINGS))
            raise RuntimeNotConfigured(f"runtime {runtime!r}: unknown setting {pair!r}; it takes {accepted}")
        try:
            values[key] = _SETTINGS[key](value)
        except ValueError:
            raise RuntimeNotConfigured(f"runtime {runtime!r}: {key}={value!r} is not a number") from None
    try:
        return ModelSettings(**values)
    except ValueError as exc:
        raise RuntimeNotConfigured(f"runtime {runtime!r}: {exc}") from None


#: The settings a runtime string may carry, and how each is read.
_SETTINGS: dict[str, Callable[[str], Any]] = {"temperature": float, "max_tokens": int}


def _resolved(runtime: str, provider: str, model: str) -> AgentRuntime:
    if provider in _PROVIDERS:
        load, extra, example = _PROVIDERS[provider]
        if example is not None and not model.strip():
            raise RuntimeNotConfigured(
                f"runtime {runtime!r} names no model: {provider} needs one, as '{provider}:<model>' "
                f"(for instance {example!r})"
            )
        try:
            factory = load()
        except ImportError as exc:
            raise RuntimeNotConfigured(
                f"runtime {provider!r} needs its SDK ({exc.name}): {install(extra)}"
            ) from exc
        return factory(model)
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP, name=provider):
        factory = ep.load()
        return factory(model)  # type: ignore[no-any-return]
    close = difflib.get_close_matches(provider, available_providers(), n=1)
    guess = f" (did you mean {close[0]!r}?)" if close else ""
    raise RuntimeNotConfigured(f"no runtime provider named {provider!r}{guess}. " + _what_exists())


def _what_exists() -> str:
    providers = available_providers()
    named = ", ".join(providers) if providers else "none are installed yet in this version"
    return (
        f"Providers by name: {named}. Any AgentRuntime subclass works as runtime=...; "
        "dcaf_like.testing.FakeRuntime is the scripted runtime for tests."
    )
