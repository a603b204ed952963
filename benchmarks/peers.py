"""dcaf_like against Agno, Google ADK and LangChain, side by side in one run.

    .venv/bin/python benchmarks/peers.py            # full run, prints a Markdown report
    .venv/bin/python benchmarks/peers.py --quick    # a few iterations: checks that it all runs

Measured: cold import (a fresh interpreter per sample: wall time, modules loaded; the peak of Python
allocations in another); building an agent with
one tool (warm-up, then many constructions; time each, tracemalloc peak of one); the framework's
overhead per turn with a model that answers instantly (one auto-approved tool call, then text) in a
fresh session each turn. Every peer runs in the same process and run as dcaf_like, so the ratios hold
on a noisy machine.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

os.environ.setdefault("AGNO_TELEMETRY", "false")

IMPORTS = {
    "dcaf_like": "import dcaf_like",
    # What a program that builds an agent imports (`import dcaf_like` alone loads a name when first used).
    "dcaf_like, an agent": "from dcaf_like import Agent, tool",
    "agno": "import agno.agent",
    "google-adk": "from google.adk.agents import LlmAgent\nfrom google.adk.runners import Runner",
    "langchain": "import langchain_core\nfrom langchain_openai import ChatOpenAI",
}

# Time and module count in one fresh interpreter; memory (tracemalloc, which slows imports) in another.
_PROBE = """
import sys, time
start = time.perf_counter()
{code}
elapsed = time.perf_counter() - start
print(elapsed, len(sys.modules))
"""
_MEMORY_PROBE = """
import tracemalloc
tracemalloc.start()
{code}
print(tracemalloc.get_traced_memory()[1])
"""


def list_pods(namespace: str = "default") -> str:
    """List the pods of a namespace."""
    return '{"web-1": "Running"}'


# -- cold import -------------------------------------------------------------------------------------


def cold_import(samples: int) -> dict[str, dict[str, float]]:
    baseline = _probe("pass", samples)
    results = {}
    for name, code in IMPORTS.items():
        measured = _probe(code, samples)
        results[name] = {
            "seconds": measured["seconds"],
            "mib": measured["bytes"] / 2**20,
            "modules": measured["modules"] - baseline["modules"],
        }
    return results


def _probe(code: str, samples: int) -> dict[str, float]:
    def run(probe: str) -> list[str]:
        command = [sys.executable, "-c", probe.format(code=code)]
        return subprocess.run(command, capture_output=True, text=True, check=True).stdout.split()

    timed = [run(_PROBE) for _ in range(samples)]
    memory = float(run(_MEMORY_PROBE)[0])  # deterministic: one sample is enough
    return {
        "seconds": statistics.median(float(t[0]) for t in timed),
        "modules": statistics.median(float(t[1]) for t in timed),
        "bytes": memory,
    }


# -- agent construction ------------------------------------------------------------------------------


def construction(iterations: int) -> dict[str, dict[str, float]]:
    from agno.agent import Agent as AgnoAgent
    from google.adk.agents import LlmAgent

    from dcaf_like import Agent, tool
    from dcaf_like.testing import FakeRuntime

    runtime = FakeRuntime()
    agno_model = InstantAgnoModel(id="instant")
    adk_model = instant_adk_model()
    builders: dict[str, Callable[[], Any]] = {
        # The same argument as the peers' (the function), then a new Tool object for each agent.
        "dcaf_like": lambda: Agent(tools=[list_pods], runtime=runtime),
        "dcaf_like, a new `tool()` each time": lambda: Agent(tools=[tool(list_pods)], runtime=runtime),
        "agno": lambda: AgnoAgent(model=agno_model, tools=[list_pods], telemetry=False),
        "google-adk": lambda: LlmAgent(name="ops", model=adk_model, tools=[list_pods]),
    }
    return {name: _construct(build, iterations) for name, build in builders.items()}


def _construct(build: Callable[[], Any], iterations: int) -> dict[str, float]:
    for _ in range(max(10, iterations // 10)):
        build()
    gc.collect()
    start = time.perf_counter()
    for _ in range(iterations):
        build()
    seconds = (time.perf_counter() - start) / iterations
    gc.collect()
    tracemalloc.start()
    kept = build()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del kept
    return {"microseconds": seconds * 1e6, "kib": peak / 1024}


# -- per-turn overhead ------------------------------------------------------------------------------


ROUNDS = 5


def per_turn(turns: int) -> dict[str, float]:
    """Milliseconds per turn: a tool call the policy allows, its result, then the answer.

    dcaf_like and Agno, whose ratio is a target, take turns: ROUNDS rounds of `turns` turns each,
    alternating, and each keeps its best round, so a slow spell of a shared machine does not fall on
    one of them only. Both agents are built and the heap frozen first, as ``serve()`` does, so that
    neither pays for garbage collections walking the other's objects."""
    runs = {"dcaf_like": _dcaf_turn(), "agno": _agno_turn()}
    gc.collect()
    gc.freeze()
    best = {name: float("inf") for name in runs}
    for _ in range(ROUNDS):
        for name, run in runs.items():
            best[name] = min(best[name], _timed(run, turns))
    gc.unfreeze()
    return {**best, "google-adk": asyncio.run(_adk_turn(turns))}


def _timed(run: Callable[[], Any], turns: int) -> float:
    for _ in range(max(3, turns // 10)):
        run()
    start = time.perf_counter()
    for _ in range(turns):
        run()
    return (time.perf_counter() - start) / turns * 1000


def _dcaf_turn() -> Callable[[], None]:
    from dcaf_like import Agent, ModelResponse, tool
    from dcaf_like.testing import FakeRuntime
    from dcaf_like.testing import tool_call as call

    class Instant(FakeRuntime):
        def invoke(self, request: Any) -> Any:
            answered = any(getattr(m, "call_id", None) for m in request.messages)
            if answered:
                return ModelResponse(text="web-1 is running.")
            return ModelResponse(tool_calls=(call("list_pods", namespace="default"),), stop_reason="tool_use")

    agent = Agent(tools=[tool(requires_approval=False)(list_pods)], runtime=Instant())

    def run() -> None:
        response = agent.run("which pods run?")
        assert response.text == "web-1 is running."

    return run


def _agno_turn() -> Callable[[], None]:
    from agno.agent import Agent as AgnoAgent

    agent = AgnoAgent(model=InstantAgnoModel(id="instant"), tools=[list_pods], telemetry=False)

    def run() -> None:
        output = agent.run("which pods run?")
        assert output.content == "web-1 is running.", output.content

    return run


async def _adk_turn(turns: int) -> float:
    from google.adk.agents import LlmAgent
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types

    sessions = InMemorySessionService()
    runner = Runner(
        app_name="bench",
        agent=LlmAgent(name="ops", model=instant_adk_model(), tools=[list_pods]),
        session_service=sessions,
    )
    message = types.Content(role="user", parts=[types.Part(text="which pods run?")])

    async def run() -> None:
        session = await sessions.create_session(app_name="bench", user_id="u")
        texts = [
            part.text
            async for event in runner.run_async(user_id="u", session_id=session.id, new_message=message)
            for part in (event.content.parts if event.content else [])
            if part.text
        ]
        assert texts[-1] == "web-1 is running.", texts

    for _ in range(max(3, turns // 10)):
        await run()
    start = time.perf_counter()
    for _ in range(turns):
        await run()
    return (time.perf_counter() - start) / turns * 1000


# -- instant peer models ----------------------------------------------------------------------------


def _agno_model_class() -> type:
    from dataclasses import dataclass

    from agno.models.base import Model
    from agno.models.response import ModelResponse

    @dataclass
    class Instant(Model):
        """Answers at once: a list_pods call, then, once a tool result is in, the text."""

        def _answer(self, messages: Any) -> Any:
            if any(m.role == "tool" for m in messages):
                return ModelResponse(role="assistant", content="web-1 is running.")
            calls = [
                {"id": "call_1", "type": "function", "function": {"name": "list_pods", "arguments": "{}"}}
            ]
            return ModelResponse(role="assistant", content="", tool_calls=calls)

        def invoke(self, messages: Any, assistant_message: Any = None, **_: Any) -> Any:
            return self._answer(messages)

        async def ainvoke(self, messages: Any, assistant_message: Any = None, **_: Any) -> Any:
            return self._answer(messages)

        def invoke_stream(self, messages: Any, assistant_message: Any = None, **_: Any) -> Any:
            yield self._answer(messages)

        async def ainvoke_stream(self, messages: Any, assistant_message: Any = None, **_: Any) -> Any:
            yield self._answer(messages)

        def _parse_provider_response(self, response: Any, **_: Any) -> Any:
            return response

        def _parse_provider_response_delta(self, response: Any) -> Any:
            return response

    return Instant


def instant_adk_model() -> Any:
    from google.adk.models import BaseLlm, LlmResponse
    from google.genai import types

    class Instant(BaseLlm):
        model: str = "instant"

        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            answered = any(p.function_response for c in llm_request.contents for p in (c.parts or ()))
            if answered:
                part = types.Part(text="web-1 is running.")
            else:
                part = types.Part(function_call=types.FunctionCall(name="list_pods", args={}))
            yield LlmResponse(
                content=types.Content(role="model", parts=[part]), partial=False, turn_complete=True
            )

    return Instant()


class _LazyAgno:
    def __call__(self, **kwargs: Any) -> Any:
        return _agno_model_class()(**kwargs)


InstantAgnoModel = _LazyAgno()


# -- report -----------------------------------------------------------------------------------------


def report(quick: bool) -> dict[str, Any]:
    samples, iterations, turns = (1, 20, 5) if quick else (7, 1000, 300)
    return {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "versions": {
            p: version(p) for p in ("dcaf_like", "agno", "google-adk", "langchain-core", "langchain-openai")
        },
        "import": cold_import(samples),
        "construction": construction(iterations),
        "turn_ms": per_turn(turns),
        "settings": {
            "import samples": samples,
            "constructions": iterations,
            "turns": f"best of {ROUNDS} rounds of {turns}",
        },
    }


def markdown(results: dict[str, Any]) -> str:
    imports, built, turns = results["import"], results["construction"], results["turn_ms"]
    ours = imports["dcaf_like"]
    lines = [
        f"Machine: {results['machine']}. Versions: "
        + ", ".join(f"{k} {v}" for k, v in results["versions"].items())
        + f". Settings: {results['settings']}.",
        "",
        "| Cold import | seconds | MiB allocated (tracemalloc peak) | modules | vs dcaf_like |",
        "|---|---|---|---|---|",
    ]
    for name, r in imports.items():
        ratio = r["seconds"] / ours["seconds"] if ours["seconds"] else float("nan")
        statement = IMPORTS[name].splitlines()[-1]
        figures = f"{r['seconds']:.3f} | {r['mib']:.1f} | {r['modules']:.0f} | {ratio:.1f}x"
        lines.append(f"| `{statement}` | {figures} |")
    lines += ["", "| Agent with one tool | µs per construction | KiB (tracemalloc peak) |", "|---|---|---|"]
    for name, r in built.items():
        lines.append(f"| {name} | {r['microseconds']:.1f} | {r['kib']:.1f} |")
    lines += [
        "",
        "| Turn: tool call, result, answer (instant model) | ms per turn | vs dcaf_like |",
        "|---|---|---|",
    ]
    for name, ms in turns.items():
        lines.append(f"| {name} | {ms:.3f} | {ms / turns['dcaf_like']:.1f}x |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a few iterations: checks that it runs")
    parser.add_argument("--json", action="store_true", help="print the raw figures as JSON too")
    args = parser.parse_args()
    results = report(args.quick)
    print(markdown(results))
    if args.json:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
