"""Two agents over A2A: an orchestrator asks a Kubernetes specialist, served with ``a2a=True``.

The specialist wants to delete a pod, which needs approval. The orchestrator does not approve it on
anyone's behalf: its user is shown the specialist's tool and exact arguments and decides.

    python examples/a2a_orchestrator.py          # you approve on the terminal
    python examples/a2a_orchestrator.py --yes    # approves for you (used by the tests)

Both models are scripted (dcaf_like.testing.FakeRuntime) so the example runs offline; pass any
AgentRuntime in real use. The specialist listens on a free loopback port for the run.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import uvicorn

from dcaf_like import Agent, ModelRequest, ModelResponse, RemoteAgent, ToolResult, create_app, tool
from dcaf_like.testing import FakeRuntime, tool_call, tool_calls

pods = {"web-1": "Running", "web-2": "CrashLoopBackOff"}


@tool(requires_approval=False)
def list_pods() -> dict[str, str]:
    """List the pods with their status."""
    return pods


@tool
def delete_pod(name: str) -> str:
    """Delete a pod."""
    del pods[name]
    return f'pod "{name}" deleted'


def specialist() -> Agent:
    model = FakeRuntime([tool_calls(tool_call("delete_pod", name="web-2")), "Deleted web-2."])
    return Agent(tools=[list_pods, delete_pod], name="k8s", description="Kubernetes pods.", runtime=model)


def start(agent: Agent) -> tuple[str, uvicorn.Server]:
    """Serve `agent` with A2A on a free loopback port (``serve(agent, a2a=True)`` in a deployment)."""
    server = uvicorn.Server(
        uvicorn.Config(create_app(agent, a2a=True), host="127.0.0.1", port=0, log_level="warning")
    )
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    return f"http://127.0.0.1:{port}", server


def orchestrator_model() -> FakeRuntime:
    """Plays the orchestrator's model: ask the specialist, forward its approval request, report."""

    def last_answer(request: ModelRequest) -> dict:
        return json.loads(next(m for m in reversed(request.messages) if isinstance(m, ToolResult)).content)

    def forward(request: ModelRequest) -> ModelResponse:
        answer = last_answer(request)
        [pending] = answer["pending"]
        decide = tool_call(
            "decide_k8s_call",
            task_id=answer["task_id"],
            call_id=pending["call_id"],
            tool=pending["tool"],
            arguments=pending["arguments"],
        )
        return ModelResponse(text="The k8s agent wants to act.", tool_calls=(decide,))

    def report(request: ModelRequest) -> ModelResponse:
        result = next(m for m in reversed(request.messages) if isinstance(m, ToolResult))
        if result.content.startswith("Not run"):
            return ModelResponse(text="Nothing was deleted.")
        return ModelResponse(text=f"k8s: {last_answer(request)['text']}")

    return FakeRuntime([tool_calls(tool_call("ask_k8s", message="web-2 keeps crashing")), forward, report])


def main(argv: list[str]) -> int:
    url, server = start(specialist())
    try:
        k8s = RemoteAgent(url)
        print(f"remote agent: {k8s.card.name} ({', '.join(s.name for s in k8s.card.skills)})")
        boss = Agent(tools=[k8s.as_tool()], name="orchestrator", runtime=orchestrator_model())
        response = boss.run("fix the crashing pod")
        for call in response.pending_tool_calls:
            remote_call = f"{call.input['tool']}{call.input['arguments']}"
            print(f"orchestrator: the k8s agent wants to run {remote_call}")
            answer = "y" if "--yes" in argv else input("  approve? [y/N] ").strip().lower()
            if answer == "y":
                response = boss.approve(response.conversation_id, call.id)
            else:
                response = boss.reject(response.conversation_id, call.id, "the operator said no")
        print(f"orchestrator: {response.text}")
        print(f"pods now: {pods}")
    finally:
        server.should_exit = True
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
