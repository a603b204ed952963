"""CPU per model call of each runtime, against local servers speaking each provider's wire format.

    .venv/bin/python benchmarks/provider_cpu.py            # 7 rounds of 300 calls each, best round kept
    .venv/bin/python benchmarks/provider_cpu.py --quick    # a few calls: checks that it all runs

The stub (benchmarks/openai_stub.py) answers at once, in a process of its own, so the CPU this process
spends (``time.process_time``) is the client's: building the request, HTTP, reading the answer into a
``ModelResponse``. Each runtime is called through ``ainvoke``, as a served agent calls it, with the
same one-message request, and its rounds alternate with the others' so a slow spell of a shared
machine does not fall on one only. The rows: ``OpenAIRuntime`` as it is, on its wire client; the same
runtime given an ``openai`` SDK client (how every call went before the wire client); LangChain's
``ChatOpenAI`` and Agno's ``OpenAILike`` through our adapters; then the runtimes of other wire formats,
each against the test kit's scripted server of its provider, also in a process of its own:
``BedrockRuntime`` (boto3's Converse) against ``BedrockConverseServer``, and ``AdkRuntime`` on ADK's
``Gemini`` model (google-genai's ``generateContent``) against ``GeminiServer``. Those servers answer
more slowly than the stub (a thread per request), which moves the wall time but not the client's CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("AGNO_TELEMETRY", "false")

import openai_stub

from dcaf_like import AgentRuntime, ModelRequest, UserTurn

REQUEST = ModelRequest(system="You operate Kubernetes.", messages=(UserTurn("Is web-1 running?"),))


# A child process serving one of the test kit's scripted provider servers with `replies` answers.
_SCRIPTED = """
import sys
from dcaf_like.testing import {server}
server = {server}().start()
for _ in range({replies}):
    server.reply({answer!r})
print(server.root_url, flush=True)
sys.stdin.read()  # until the parent closes it
server.stop()
"""


@contextlib.contextmanager
def scripted(server: str, replies: int) -> Iterator[str]:
    """The URL of a test-kit server (``BedrockConverseServer``, ``GeminiServer``) in a child process."""
    code = _SCRIPTED.format(server=server, replies=replies, answer=openai_stub.ANSWER)
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        if not url:
            raise RuntimeError(f"{server} did not start (exit {child.wait()})")
        yield url
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)


def runtimes(base_url: str, urls: dict[str, str]) -> dict[str, Callable[[], AgentRuntime]]:
    """Each runtime, built when measured (a peer that is not installed is skipped)."""

    def ours() -> AgentRuntime:
        from dcaf_like.runtimes.openai_chat import OpenAIRuntime

        return OpenAIRuntime("stub-model", base_url=base_url)

    def ours_on_the_sdk() -> AgentRuntime:
        import openai

        from dcaf_like.runtimes.openai_chat import OpenAIRuntime

        settings: dict[str, Any] = {"base_url": base_url, "api_key": "unused"}
        return OpenAIRuntime(
            "stub-model", client=openai.OpenAI(**settings), async_client=openai.AsyncOpenAI(**settings)
        )

    def langchain() -> AgentRuntime:
        from langchain_openai import ChatOpenAI

        from dcaf_like.runtimes.langchain import LangChainRuntime

        return LangChainRuntime(ChatOpenAI(model="stub-model", base_url=base_url, api_key="unused"))

    def agno() -> AgentRuntime:
        from agno.models.openai.like import OpenAILike

        from dcaf_like.runtimes.agno import AgnoRuntime

        return AgnoRuntime(OpenAILike(id="stub-model", base_url=base_url, api_key="unused"))

    def bedrock() -> AgentRuntime:
        import boto3
        from botocore.config import Config

        from dcaf_like.runtimes.bedrock import BedrockRuntime

        client = boto3.client(
            "bedrock-runtime",
            endpoint_url=urls["BedrockConverseServer"],
            region_name="us-east-1",
            aws_access_key_id="unused",
            aws_secret_access_key="unused",
            config=Config(retries={"total_max_attempts": 1}),
        )
        return BedrockRuntime("anthropic.claude-3-5-haiku-20241022-v1:0", client=client)

    def adk() -> AgentRuntime:
        from google.adk.models import Gemini

        from dcaf_like.runtimes.adk import AdkRuntime

        model = Gemini(
            model="gemini-2.5-flash", base_url=urls["GeminiServer"], client_kwargs={"api_key": "unused"}
        )
        return AdkRuntime(model)

    return {
        "`OpenAIRuntime` (its wire client)": ours,
        "`OpenAIRuntime(client=openai.OpenAI(...))` (the SDK)": ours_on_the_sdk,
        "`LangChainRuntime(ChatOpenAI(...))`": langchain,
        "`AgnoRuntime(OpenAILike(...))`": agno,
        "`BedrockRuntime` (boto3, Converse)": bedrock,
        "`AdkRuntime(Gemini(...))` (google-genai)": adk,
    }


async def _measure(built: dict[str, AgentRuntime], calls: int, rounds: int) -> dict[str, dict[str, float]]:
    for runtime in built.values():  # warm-up: connections open, lazy imports done
        for _ in range(max(3, calls // 10)):
            response = await runtime.ainvoke(REQUEST)
            assert response.text == openai_stub.ANSWER, response
    best: dict[str, dict[str, float]] = {}
    for _ in range(rounds):
        for name, runtime in built.items():
            cpu, wall = time.process_time(), time.perf_counter()
            for _ in range(calls):
                await runtime.ainvoke(REQUEST)
            figures = {
                "cpu_ms": (time.process_time() - cpu) / calls * 1000,
                "wall_ms": (time.perf_counter() - wall) / calls * 1000,
            }
            if name not in best or figures["cpu_ms"] < best[name]["cpu_ms"]:
                best[name] = figures
    for runtime in built.values():
        await runtime.aclose()
    return best


def report(quick: bool) -> dict[str, Any]:
    calls, rounds = (10, 1) if quick else (300, 7)
    replies = max(3, calls // 10) + calls * rounds
    with (
        openai_stub.started() as base_url,
        scripted("BedrockConverseServer", replies) as bedrock_url,
        scripted("GeminiServer", replies) as gemini_url,
    ):
        urls = {"BedrockConverseServer": bedrock_url, "GeminiServer": gemini_url}
        built: dict[str, AgentRuntime] = {}
        skipped = []
        for name, build in runtimes(base_url, urls).items():
            try:
                built[name] = build()
            except ImportError as exc:
                skipped.append(f"{name}: {exc.name} is not installed")
        results = asyncio.run(_measure(built, calls, rounds))
    return {"results": results, "skipped": skipped, "settings": f"best of {rounds} rounds of {calls} calls"}


def markdown(report: dict[str, Any]) -> str:
    results = report["results"]
    ours = next(iter(results.values()))["cpu_ms"]
    lines = [
        "| Provider client: CPU per model call, zero-delay stub | CPU ms per call | wall ms | vs ours |",
        "|---|---|---|---|",
    ]
    for name, r in results.items():
        lines.append(f"| {name} | {r['cpu_ms']:.3f} | {r['wall_ms']:.3f} | {r['cpu_ms'] / ours:.1f}x |")
    lines += [f"| (not measured: {why}) | | | |" for why in report["skipped"]]
    lines.append(f"\n{report['settings']}. Command: `.venv/bin/python benchmarks/provider_cpu.py`.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a few calls: checks that it runs")
    args = parser.parse_args()
    print(markdown(report(args.quick)))


if __name__ == "__main__":
    main()
