"""An operations agent for a small in-memory Kubernetes-like cluster.

Reading is free; deleting a pod waits for a human; nothing may touch kube-system.

    python examples/k8s_agent.py            # asks you to approve on the terminal
    python examples/k8s_agent.py --yes      # approves for you (used by the tests)

The walkthrough drives the agent with a scripted model, so it runs anywhere in a second and always
takes the same path. For a real model, serve `from_environment` (below) with DCAF_RUNTIME naming one
("local" for the offline model, "openai:<model>", "bedrock:<model id>", ...), or run `make demo`.
`build_agent(runtime)` takes any AgentRuntime or runtime string.
"""

from __future__ import annotations

import os
import sys

from dcaf_like import Agent, AgentRuntime, ApprovalPolicy, argument_in, deny, tool


class Cluster:
    def __init__(self) -> None:
        self.pods = {
            "default": {"web-1": "Running", "web-2": "CrashLoopBackOff"},
            "prod": {"web-1": "Running", "api-1": "Running", "worker-1": "CrashLoopBackOff"},
            "kube-system": {"coredns": "Running"},
        }

    def tools(self) -> list:
        pods = self.pods

        @tool(requires_approval=False)
        def list_pods(namespace: str = "default") -> dict[str, str]:
            """List the pods of a namespace with their status."""
            return pods.get(namespace, {})

        @tool(requires_approval=False)
        def describe_pod(name: str, namespace: str = "default") -> str:
            """Describe one pod."""
            status = pods.get(namespace, {}).get(name)
            return f"{namespace}/{name}: {status}" if status else f"no pod {name} in {namespace}"

        def what_delete_does(name: str, namespace: str = "default") -> dict[str, str]:
            """The preview an approver sees: the pod as it is now, and what deleting it does."""
            status = pods.get(namespace, {}).get(name)
            if status is None:
                raise LookupError(f"no pod {name} in {namespace}")
            return {
                "pod": f"{namespace}/{name}",
                "status now": status,
                "after": "deleted; its controller may start a fresh one",
            }

        # Reversible: the pod's controller starts a fresh one. Its preview runs again just before it runs.
        @tool(risk="reversible", preview=what_delete_does, recheck=True)
        def delete_pod(name: str, namespace: str = "default") -> str:
            """Delete a pod. Its controller may start a fresh one.

            Args:
                name: The pod to delete.
                namespace: The pod's namespace.
            """
            if pods.get(namespace, {}).pop(name, None) is None:
                raise LookupError(f"no pod {name} in {namespace}")
            return f'pod "{name}" deleted'

        return [list_pods, describe_pod, delete_pod]


POLICY = ApprovalPolicy(
    [deny("kube-system is managed by the platform team", when=argument_in("namespace", "kube-system"))]
)

SYSTEM = "You operate a Kubernetes cluster. Look before you act; explain what you will change."


def build_agent(runtime: AgentRuntime | str | None, cluster: Cluster | None = None) -> Agent:
    cluster = cluster or Cluster()
    return Agent(
        tools=cluster.tools(),
        system=SYSTEM,
        name="k8s-operator",
        description="Inspects and repairs pods; deleting one needs your approval.",
        runtime=runtime,
        approval_policy=POLICY,
    )


def from_environment() -> Agent:
    """The agent on the model named by ``DCAF_RUNTIME`` ("provider:model"), for serving:

    DCAF_RUNTIME=... dcaf-like serve examples/k8s_agent.py:from_environment --factory
    """
    return build_agent(os.environ.get("DCAF_RUNTIME") or None)


def scripted_model() -> AgentRuntime:
    """Plays the model's part for the walkthrough."""
    from dcaf_like import ModelRequest, ModelResponse, ToolResult
    from dcaf_like.testing import FakeRuntime, tool_call, tool_calls

    def conclude(request: ModelRequest) -> ModelResponse:
        outcome = [m for m in request.messages if isinstance(m, ToolResult)][-1]
        if outcome.is_error:
            return ModelResponse(text=f"I left web-2 alone ({outcome.content}).")
        return ModelResponse(text="web-2 was deleted; its deployment will start a fresh pod.")

    return FakeRuntime(
        [
            tool_calls(tool_call("list_pods", namespace="default"), text="Let me look at the pods."),
            tool_calls(
                tool_call("delete_pod", name="web-2"), text="web-2 is crash-looping; I will delete it."
            ),
            conclude,
        ]
    )


def main(argv: list[str]) -> int:
    cluster = Cluster()
    agent = build_agent(scripted_model(), cluster)
    response = agent.run("web-2 keeps crashing, please fix it")
    print(f"agent: {response.text}")
    for call in response.executed_tool_calls:
        print(f"  ran {call.name}{call.input} -> {call.output}")
    for call in response.pending_tool_calls:
        print(f"  wants to run {call.name}{call.input}: {call.description}")
        if "--yes" in argv or _confirm("  approve? [y/N] "):
            response = agent.approve(response.conversation_id, call.id)
        else:
            response = agent.reject(response.conversation_id, call.id, "the operator said no")
    print(f"agent: {response.text}")
    print(f"pods now: {cluster.pods['default']}")
    return 0


def _confirm(prompt: str) -> bool:
    """A yes from the operator; the end of input (no terminal, Ctrl-D) is a no, and is said to be."""
    try:
        return input(prompt).strip().lower() in ("y", "yes")
    except EOFError:
        print("\n  no answer (end of input): rejected")
        return False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
