"""How cost grows with a conversation's length: per-turn time and stored size, through the Agent.

    .venv/bin/python benchmarks/growth.py            # full run, prints a Markdown table
    .venv/bin/python benchmarks/growth.py --quick    # a few turns: checks that it runs

Each sample stores a conversation of N messages (user questions, tool calls with their results,
answers), then times one instant turn on it through ``Agent.run(..., conversation_id=...)``: the
store's read, the turn (one auto-approved tool call, then text) and the store's compare-and-set
save. Every sample starts again from N messages, so N is the length the turn saw. "per message" is
the turn's time divided by N: flat means linear growth, rising means worse than linear.

The second table is the same turn with a summarizing context window (``ContextWindow(summarize=True)``
and a runtime declaring 100,000 tokens), on a conversation whose stored summary covers all but its
last nine messages, as a long conversation under such a window has: the turn reads and transcribes
only the recent part (ADR 22), so its cost should not grow with N.

The third is the same turn under a window that does not summarize, ``ContextWindow(4096)``: the
conversation carries the cut such a window stores (ADR 25; taken from the warm-up turn, which fits
the seed and stores it), and the turn reads and transcribes only what follows it: its cost grows
until the window is full (some 3,000 tokens of these messages, 150 of them), then no more.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from typing import Any

import stores as store_benchmarks

from dcaf_like import Agent, ContextWindow, ConversationRepository, ModelResponse, tool
from dcaf_like.application.messages import ModelRequest, ModelToolCall, ToolResult
from dcaf_like.application.ports import AgentRuntime
from dcaf_like.domain import Conversation, ToolInput
from dcaf_like.stores._codec import encode

LENGTHS = (10, 100, 1000)


@tool(requires_approval=False)
def list_pods(namespace: str = "default") -> str:
    """List the pods of a namespace."""
    return '{"web-1": "Running", "web-2": "CrashLoopBackOff"}'


class InstantRuntime(AgentRuntime):
    """A list_pods call, then, once its result is the last message, the answer."""

    name = "instant"

    def invoke(self, request: ModelRequest) -> ModelResponse:
        if isinstance(request.messages[-1], ToolResult):
            return ModelResponse(text="web-2 is crash-looping.")
        call = ModelToolCall("call_1", "list_pods", {"namespace": "prod"})
        return ModelResponse(tool_calls=(call,), stop_reason="tool_use")


class WindowedRuntime(InstantRuntime):
    """The same, declaring a context window (large enough that nothing after the summary is cut)."""

    context_window = 100_000


#: Messages a summarized conversation keeps after its summary's end.
RECENT = 9
#: The window of the third table, in tokens: a local model's (docs/runtimes.md).
WINDOW = 4096


def conversation(messages: int) -> Conversation:
    """`messages` messages in rounds of three: a question, a list_pods call with its result, an answer."""
    c = Conversation.start(at=1_700_000_000.0)
    at = c.created_at
    while len(c.messages) < messages:
        at += 1.0
        c.add_user_message("which pods in namespace prod are crash-looping, and since when?", at=at)
        if len(c.messages) == messages:
            break
        c.add_assistant_message("", at=at)
        call = c.request_tool_call(
            "list_pods", ToolInput.of({"namespace": "prod"}), requires_approval=False, at=at
        )
        c.approve_tool_call(call.id.value, by="policy", at=at)
        c.record_tool_result(call.id.value, '{"web-1": "Running", "web-2": "CrashLoopBackOff"}', at=at)
        if len(c.messages) == messages:
            break
        c.add_assistant_message("web-2 has been in CrashLoopBackOff since 10:42 (OOMKilled).", at=at)
    return c


def per_turn(
    store: ConversationRepository, messages: int, turns: int, *, summarized: bool = False, cut: bool = False
) -> float:
    """Seconds per turn on a stored conversation of `messages` messages, the median turn (one that a full
    garbage collection of the whole process fell on does not move it; the seeding is not timed);
    `summarized`: under a summarizing window, the summary covering all but the last messages; `cut`:
    under a window of WINDOW tokens that does not summarize, the conversation cut where it would be."""
    if summarized:
        runtime: AgentRuntime = WindowedRuntime()
        agent = Agent(
            tools=[list_pods], runtime=runtime, repository=store, context=ContextWindow(summarize=True)
        )
    elif cut:
        agent = Agent(
            tools=[list_pods], runtime=InstantRuntime(), repository=store, context=ContextWindow(WINDOW)
        )
    else:
        agent = Agent(tools=[list_pods], runtime=InstantRuntime(), repository=store)
    seed = conversation(messages)
    if summarized and messages > RECENT:
        seed.summarize("Pods of prod were listed; web-2 is crash-looping.", through=messages - RECENT)
    times: list[float] = []
    gc.collect()
    for i in range(turns + 1):  # the first turn warms up
        c = conversation(0)  # a fresh id, the seed's content
        c.messages, c.tool_calls, c.version, c.summary, c.cut = (
            seed.messages,
            seed.tool_calls,
            seed.version,
            seed.summary,
            seed.cut,
        )
        store.save(c, 0)
        start = time.perf_counter()
        response = agent.run("and now?", conversation_id=c.id)
        elapsed = time.perf_counter() - start
        assert response.text == "web-2 is crash-looping.", response.text
        if i:
            times.append(elapsed)
        elif cut:  # where the window cut the seed: the timed turns start from there, as later ones would
            warmed = store.get(c.id)
            assert warmed is not None
            seed.cut = warmed.cut
        store.delete(c.id)
    return statistics.median(times)


def report(quick: bool) -> dict[str, Any]:
    """Every store this machine reaches (benchmarks/stores.py: in memory, SQLite, Redis, PostgreSQL,
    DynamoDB on moto's emulator)."""
    turns = {10: 3, 100: 3, 1000: 2} if quick else {10: 300, 100: 200, 1000: 40}
    with store_benchmarks.every_store() as found:
        stores: dict[str, ConversationRepository] = dict(found)
        rows, recent, cut = [], [], []
        for messages in LENGTHS:
            size = len(encode(conversation(messages)).encode())
            row: dict[str, Any] = {"messages": messages, "kib": size / 1024}
            summarized: dict[str, Any] = dict(row)
            windowed: dict[str, Any] = dict(row)
            for name, store in stores.items():
                row[name] = per_turn(store, messages, turns[messages]) * 1000
                summarized[name] = per_turn(store, messages, turns[messages], summarized=True) * 1000
                windowed[name] = per_turn(store, messages, turns[messages], cut=True) * 1000
            rows.append(row)
            recent.append(summarized)
            cut.append(windowed)
    return {"rows": rows, "recent": recent, "cut": cut, "stores": list(stores), "turns": turns}


def markdown(results: dict[str, Any]) -> str:
    names = results["stores"]
    header = " | ".join(f"{n}: ms per turn | {n}: µs per message" for n in names)
    lines = [
        f"| Growth: messages already stored | stored KiB | {header} |",
        "|---" * (2 + 2 * len(names)) + "|",
    ]
    for row in results["rows"]:
        cells = " | ".join(f"{row[n]:.3f} | {row[n] * 1000 / row['messages']:.1f}" for n in names)
        lines.append(f"| {row['messages']} | {row['kib']:.1f} | {cells} |")
    first = results["recent"][0]
    base = first["messages"]
    columns = " | ".join(f"{n}: ms per turn | {n}: vs {base}" for n in names)
    lines += [
        "",
        f"| Growth under a summarizing window (all but the last {RECENT} messages summarized): "
        f"messages stored | {columns} |",
        "|---" * (1 + 2 * len(names)) + "|",
    ]
    for row in results["recent"]:
        cells = " | ".join(f"{row[n]:.3f} | {row[n] / first[n]:.2f}x" for n in names)
        lines.append(f"| {row['messages']} | {cells} |")
    first = results["cut"][0]
    lines += [
        "",
        f"| Growth under a window of {WINDOW:,} tokens that does not summarize (the stored cut): "
        f"messages stored | {columns} |",
        "|---" * (1 + 2 * len(names)) + "|",
    ]
    for row in results["cut"]:
        cells = " | ".join(f"{row[n]:.3f} | {row[n] / first[n]:.2f}x" for n in names)
        lines.append(f"| {row['messages']} | {cells} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="a few turns: checks that it runs")
    args = parser.parse_args()
    print(markdown(report(args.quick)))


if __name__ == "__main__":
    main()
