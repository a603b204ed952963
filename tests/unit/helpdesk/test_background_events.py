"""docs/protocol.md: a call sent to the agent's job engine is a `tool_queued` line on the stream,
and its turn's `done` says `stop_reason: "running_in_background"`."""

from dcaf_like import Agent, ToolQueued, tool
from dcaf_like.helpdesk.protocol import assistant_message, event_lines
from dcaf_like.testing import FakeRuntime, reply, tool_call, tool_calls


class KeptJobs:
    queue_ttl = 60.0

    def __init__(self) -> None:
        self.jobs: list[object] = []

    def submit(self, job: object) -> None:
        self.jobs.append(job)

    async def asubmit(self, job: object) -> None:
        self.jobs.append(job)


@tool(background=True)
def drain_node(node: str) -> str:
    """Evict every pod of a node."""
    return f"{node} drained"


def test_a_queued_call_is_a_tool_queued_line_and_its_turn_says_running_in_background():
    model = FakeRuntime([tool_calls(tool_call("drain_node", node="n1")), reply("unused")])
    agent = Agent(tools=[drain_node], runtime=model, executor=KeptJobs())
    asked = agent.run("drain n1")
    [pending] = asked.pending_tool_calls
    events = list(agent.run_stream([{"role": "user", "content": "", "data": {"tool_calls": [
        {"id": pending.id, "execute": True}]}}], conversation_id=asked.conversation_id))  # fmt: skip
    [queued] = [e for e in events if isinstance(e, ToolQueued)]
    assert event_lines(queued, "req_1") == [{"type": "tool_queued", "id": pending.id, "name": "drain_node"}]
    done = events[-1].response
    assert assistant_message(done, request_id="req_1")["meta"]["stop_reason"] == "running_in_background"
