"""What is particular to the Agno and ADK adapters (their shared behaviour is the contract suite's)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from dcaf_like import ModelRequest, RuntimeNotConfigured, UserTurn, resolve_runtime
from dcaf_like.testing import GeminiServer, OpenAICompatibleServer

pytest.importorskip("agno", reason="the agno extra is not installed: pip install -e '.[agno]'")
pytest.importorskip("google.adk", reason="the adk extra is not installed: pip install -e '.[adk]'")

from dcaf_like.runtimes.adk import AdkRuntime
from dcaf_like.runtimes.agno import AgnoRuntime

HI = ModelRequest("", (UserTurn("hi"),))


def test_agno_telemetry_is_off_unless_the_user_turned_it_on():
    code = (
        "import os\n"
        "from agno.models.openai.like import OpenAILike\n"
        "from dcaf_like.runtimes.agno import AgnoRuntime\n"
        "AgnoRuntime(OpenAILike(id='m', base_url='http://127.0.0.1:9/v1', api_key='x'))\n"
        "print(os.environ.get('AGNO_TELEMETRY'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "AGNO_TELEMETRY"}

    off = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    on = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "AGNO_TELEMETRY": "true"},
        capture_output=True,
        text=True,
        check=True,
    )

    assert off.stdout.strip() == "false"
    assert on.stdout.strip() == "true"


def test_agno_and_adk_strings_build_their_models(monkeypatch):
    with OpenAICompatibleServer() as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        server.reply("agno via a string")

        agno = resolve_runtime("agno:openai-like:test-model")

        assert agno.name == "agno:OpenAILike:test-model"
        assert agno.invoke(HI).text == "agno via a string"
        agno.close()
    adk = resolve_runtime("adk:gemini-2.5-flash")
    assert isinstance(adk, AdkRuntime)
    assert adk.name == "adk:gemini-2.5-flash"
    adk.close()
    with pytest.raises(RuntimeNotConfigured, match="expected one of"):
        resolve_runtime("agno:nonsense")


def test_each_adapter_takes_only_its_frameworks_models():
    with pytest.raises(TypeError, match="an Agno model"):
        AgnoRuntime("gpt-4o")
    with pytest.raises(TypeError, match="an ADK model"):
        AdkRuntime(42)


async def test_an_adk_runtime_serves_several_event_loops_and_blocking_callers():
    """ADK's clients belong to an event loop; the runtime keeps its own, whoever calls."""
    from google.adk.models import Gemini

    with GeminiServer() as server:
        runtime = AdkRuntime(
            Gemini(model="gemini-2.5-flash", base_url=server.base_url, client_kwargs={"api_key": "x"})
        )
        for text in ("from this loop", "from a thread", "from a new loop"):
            server.reply(text)

        here = await runtime.ainvoke(HI)
        in_thread = await asyncio.to_thread(runtime.invoke, HI)
        other_loop = await asyncio.to_thread(asyncio.run, runtime.ainvoke(HI))
        runtime.close()

    assert [here.text, in_thread.text, other_loop.text] == [
        "from this loop",
        "from a thread",
        "from a new loop",
    ]


def test_gemini_errors_are_typed():
    from google.adk.models import Gemini

    from dcaf_like import ModelAccessDenied, ModelRequestInvalid

    with GeminiServer() as server:
        runtime = AdkRuntime(
            Gemini(model="gemini-2.5-flash", base_url=server.base_url, client_kwargs={"api_key": "x"})
        )
        server.fail(403, "API key not valid")
        server.fail(400, "Invalid JSON payload")

        with pytest.raises(ModelAccessDenied, match="API key not valid"):
            runtime.invoke(HI)
        with pytest.raises(ModelRequestInvalid, match="Invalid JSON payload"):
            runtime.invoke(HI)
        runtime.close()
