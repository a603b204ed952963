"""Runs in flight: how many turns one server keeps waiting on a slow model, and what each one costs.

    .venv/bin/python benchmarks/in_flight.py                      # ours and the peers, model 10 s
    .venv/bin/python benchmarks/in_flight.py --servers dcaf_like --rates 100,200,400
    .venv/bin/python benchmarks/in_flight.py --quick              # 2 s at 20 turns/s, model 0.5 s

A server (one uvicorn worker, in a process of its own, sessions in memory) serves an agent whose model
is the asyncio stub of benchmarks/openai_stub.py, another process, which answers every request after
``--delay`` seconds (so the stub is not the limit). This process starts a new ``/api/chat`` turn (or
the peer's own request) every 1/R seconds for ``--seconds``, each on a connection of its own, so that
R x delay turns are in flight once the first answers come back: the load a server meets when real
users wait on a real model. For each rate R of ``--rates``, in order, until one misses the target:
what the server adds over the model's delay (p50, p99), the turns in flight at the peak, the server's
CPU per turn (``/proc/PID/stat``: the server's alone, whatever else the machine runs), and its
resident memory per turn in flight (VmRSS sampled while they wait, over its memory before).

The peers get the same model through their own OpenAI-compatible clients: Agno's AgentOS with
``OpenAILike``, Google ADK's ``api_server`` with a ``BaseLlm`` on the ``openai`` SDK's async client
(ADK's own route to such a server is LiteLLM, which is not installed here).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("AGNO_TELEMETRY", "false")

import openai_stub  # noqa: E402  (from this folder, on the path above)
import peer_servers  # noqa: E402

TARGET_P99_MS = 250.0
SERVERS = ("dcaf_like", "agno", "adk")
LABELS = {
    "dcaf_like": "dcaf_like `serve()`, `OpenAIRuntime`",
    "agno": "Agno AgentOS, `OpenAILike`",
    "adk": "Google ADK `api_server`, a `BaseLlm` on the `openai` SDK",
}

ADK_AGENT = """
from in_flight import openai_adk_model
from google.adk.agents import LlmAgent

root_agent = LlmAgent(name="ops", model=openai_adk_model())
"""


# -- the servers (run with --serve KIND PORT BASE_URL) ---------------------------------------------------


def dcaf_app(base_url: str) -> Any:
    from dcaf_like import Agent, create_app
    from dcaf_like.runtimes.openai_chat import OpenAIRuntime

    return create_app(
        Agent(runtime=OpenAIRuntime("stub-model", base_url=base_url, max_retries=0, timeout=600))
    )


def waiting_app(base_url: str) -> Any:
    """An agent whose instant model proposes a call that needs approval: every turn ends waiting."""
    from dcaf_like import Agent, ModelResponse, create_app, tool
    from dcaf_like.testing import FakeRuntime
    from dcaf_like.testing import tool_call as call

    def delete_pod(name: str) -> str:
        """Delete a pod."""
        return f"deleted {name}"

    class Proposing(FakeRuntime):
        def invoke(self, request: Any) -> Any:
            return ModelResponse(tool_calls=(call("delete_pod", name="web-1"),), stop_reason="tool_use")

        async def ainvoke(self, request: Any) -> Any:
            return self.invoke(request)

    return create_app(Agent(tools=[tool(delete_pod)], runtime=Proposing()))


def agno_app(base_url: str) -> Any:
    from agno.agent import Agent as AgnoAgent
    from agno.models.openai.like import OpenAILike
    from agno.os import AgentOS

    model = OpenAILike(id="stub-model", base_url=base_url, api_key="unused", timeout=600, max_retries=0)
    agent = AgnoAgent(id="ops", name="ops", model=model, telemetry=False)
    return AgentOS(agents=[agent], telemetry=False).get_app()


def openai_adk_model() -> Any:
    """An ADK model asking the stub (its URL in ``IN_FLIGHT_MODEL_URL``) with the ``openai`` SDK."""
    from google.adk.models import BaseLlm, LlmResponse
    from google.genai import types
    from openai import AsyncOpenAI

    client = AsyncOpenAI(
        base_url=os.environ["IN_FLIGHT_MODEL_URL"], api_key="unused", timeout=600, max_retries=0
    )

    class OpenAICompatible(BaseLlm):
        model: str = "stub-model"

        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            messages = [
                {"role": "user" if c.role == "user" else "assistant", "content": p.text}
                for c in llm_request.contents
                for p in (c.parts or ())
                if p.text
            ]
            answer = await client.chat.completions.create(model=self.model, messages=messages)
            part = types.Part(text=answer.choices[0].message.content or "")
            yield LlmResponse(
                content=types.Content(role="model", parts=[part]), partial=False, turn_complete=True
            )

    return OpenAICompatible()


def serve(kind: str, port: int, base_url: str) -> None:
    os.environ["IN_FLIGHT_MODEL_URL"] = base_url
    builders: dict[str, Callable[[str], Any]] = {
        "dcaf_like": lambda _: dcaf_app(base_url),
        "waiting": lambda _: waiting_app(base_url),
        "agno": lambda _: agno_app(base_url),
        "adk": lambda directory: peer_servers.adk_app(directory, agent=ADK_AGENT),
    }
    peer_servers.serve_app(builders[kind], port, backlog=8192)


@contextlib.contextmanager
def running(kind: str, base_url: str) -> Iterator[tuple[int, int]]:
    """The server's port and process id."""
    command = [__file__, "--serve", kind, base_url, "--port"]
    with peer_servers.server_process(kind, lambda port: [*command, str(port)]) as server:
        yield server


# -- the load -------------------------------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Load:
    """Turns started at a steady rate, each on its own connection, checked for the model's answer."""

    def __init__(self, kind: str, port: int) -> None:
        self.kind = kind
        self.port = port
        self.next_request: Callable[[], bytes] = peer_servers.requests_for(kind, port)
        self.latencies: list[float] = []
        self.in_flight = 0
        self.peak = 0

    async def turn(self) -> None:
        import http_load

        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            try:
                start = time.perf_counter()
                body = await http_load.exchange(reader, writer, self.next_request())
                self.latencies.append(time.perf_counter() - start)
                text = peer_servers.answer_text(self.kind, json.loads(body))
                if openai_stub.ANSWER not in text:
                    raise RuntimeError(f"{self.kind} answered {body[:300]!r}")
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
        finally:
            self.in_flight -= 1

    async def at_rate(self, rate: float, seconds: float, pid: int) -> int:
        """Run the load; the server's peak RSS (KiB) while it ran."""
        count = max(1, round(rate * seconds))
        started = time.perf_counter()
        tasks: list[asyncio.Task[None]] = []
        peak_rss = 0
        for i in range(count):
            delay = started + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(self.turn()))
            if i % max(1, int(rate / 10)) == 0:
                peak_rss = max(peak_rss, rss_kib(pid))
        while not all(t.done() for t in tasks):
            peak_rss = max(peak_rss, rss_kib(pid))
            await asyncio.sleep(0.1)
        for task in tasks:
            task.result()  # a failed turn fails the benchmark
        return peak_rss


def measure(kind: str, rate: float, seconds: float, delay: float) -> dict[str, float]:
    with openai_stub.started(delay) as base_url, running(kind, base_url) as (port, pid):
        asyncio.run(Load(kind, port).at_rate(20, 0.5, pid))  # warm-up: imports, first allocations
        idle = rss_kib(pid)
        cpu_before = cpu_seconds(pid)
        load = Load(kind, port)
        peak_rss = asyncio.run(load.at_rate(rate, seconds, pid))
        cpu = cpu_seconds(pid) - cpu_before
    added = sorted(latency - delay for latency in load.latencies)
    return {
        "rate": rate,
        "in_flight": load.peak,
        "p50_ms": statistics.median(added) * 1000,
        "p99_ms": added[min(len(added) - 1, int(len(added) * 0.99))] * 1000,
        "cpu_ms": cpu / len(added) * 1000,
        "kib_per_turn": (peak_rss - idle) / load.peak,
        "idle_mib": idle / 1024,
    }


async def _waiting_turns(port: int, count: int) -> None:
    import http_load

    request = http_load.request_bytes(port, "/api/chat", http_load.TURN)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for _ in range(count):
            body = json.loads(await http_load.exchange(reader, writer, request))
            if body["data"]["tool_calls"][0]["execute"] is not False:
                raise RuntimeError(f"the call is not waiting: {body}")
    finally:
        writer.close()
        await writer.wait_closed()


def waiting(count: int) -> dict[str, float]:
    """RSS per conversation left waiting for approval, kept in memory (the in-memory store)."""
    with openai_stub.started(0) as base_url, running("waiting", base_url) as (port, pid):
        asyncio.run(_waiting_turns(port, 20))
        idle = rss_kib(pid)
        asyncio.run(_waiting_turns(port, count))
        return {"count": count, "kib_each": (rss_kib(pid) - idle) / count}


def ladder(kind: str, rates: list[float], seconds: float, delay: float) -> list[dict[str, float]]:
    """Each rate in turn, until the first whose p99 misses the target (it is reported too)."""
    rows = []
    for rate in rates:
        rows.append(measure(kind, rate, seconds, delay))
        if rows[-1]["p99_ms"] > TARGET_P99_MS:
            break
    return rows


def report(
    servers: list[str], rates: list[float], seconds: float, delay: float, waiting_count: int
) -> dict[str, Any]:
    return {
        "delay": delay,
        "seconds": seconds,
        "servers": {kind: ladder(kind, rates, seconds, delay) for kind in servers},
        "waiting": waiting(waiting_count),
    }


def sustained(rows: list[dict[str, float]]) -> float:
    """The highest rate whose p99 met the target (0 when none did)."""
    return max((r["rate"] for r in rows if r["p99_ms"] <= TARGET_P99_MS), default=0.0)


def markdown(results: dict[str, Any]) -> str:
    delay, seconds = results["delay"], results["seconds"]
    lines = [
        f"| Runs in flight: turns started at a steady rate for {seconds:g} s, the model answering after "
        f"{delay:g} s | turns/s | in flight at the peak | added p50 ms | added p99 ms | server CPU ms per "
        "turn | KiB of RSS per turn in flight |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, rows in results["servers"].items():
        for r in rows:
            lines.append(
                f"| {LABELS[kind]} | {r['rate']:g} | {r['in_flight']:.0f} | {r['p50_ms']:.0f} "
                f"| {r['p99_ms']:.0f} | {r['cpu_ms']:.2f} | {r['kib_per_turn']:.1f} |"
            )
    best = {kind: sustained(rows) for kind, rows in results["servers"].items()}
    summary = ", ".join(f"{kind} {rate:g} turns/s" for kind, rate in best.items())
    lines.append(
        f"\nSustained with added p99 under {TARGET_P99_MS:.0f} ms (the highest rate tried that met it): "
        f"{summary}. One uvicorn worker each, sessions in memory. "
        "Command: `.venv/bin/python benchmarks/in_flight.py`."
    )
    peers = [rate for kind, rate in best.items() if kind != "dcaf_like"]
    if "dcaf_like" in best and peers and max(peers) > 0:
        lines[-1] += f" Ours against the faster peer: {best['dcaf_like'] / max(peers):.1f}x."
    held = results["waiting"]
    lines.append(
        f"\nA conversation waiting for approval (in memory, {held['count']:,} of them, each one turn that "
        f"proposed a call): {held['kib_each']:.1f} KiB of the server's RSS each."
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="2 s at 20 turns/s, model 0.5 s: checks it runs")
    parser.add_argument("--delay", type=float, default=10.0, help="seconds the model takes to answer")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long turns are started at a rate")
    parser.add_argument(
        "--rates", default="50,100,150,200,300,400,500", help="turns started per second, in order"
    )
    parser.add_argument("--waiting", type=int, default=10_000, help="conversations left waiting")
    parser.add_argument("--servers", default=",".join(SERVERS), help="which servers, comma-separated")
    parser.add_argument("--serve", nargs=2, metavar=("KIND", "BASE_URL"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], args.port, args.serve[1])
        return
    servers = args.servers.split(",")
    if args.quick:
        print(markdown(report(servers, [20], 2, 0.5, 50)))
        return
    rates = [float(r) for r in args.rates.split(",")]
    print(markdown(report(servers, rates, args.seconds, args.delay, args.waiting)))


if __name__ == "__main__":
    main()
