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

import json
import os
import sys

from dcaf_like import Agent, AgentRuntime, ApprovalPolicy, ToolDecision, argument_in, deny, tool


class Cluster:
    """Pods by namespace (``pods``: name -> status), what each pod runs (``specs``: its node, its
    images, and the controller that owns it, the one that recreates it when it is deleted), and the
    replicas each deployment asks for (``deployments``). A toy: scaling a deployment changes its
    count of replicas and starts or stops no pod."""

    def __init__(self) -> None:
        self.pods = {
            "default": {"web-1": "Running", "web-2": "CrashLoopBackOff"},
            "prod": {"web-1": "Running", "api-1": "Running", "worker-1": "CrashLoopBackOff"},
            "kube-system": {"coredns": "Running"},
        }
        web = {"images": ["nginx:1.27"], "owner": "ReplicaSet web-6b7c9 (of Deployment web)"}
        self.specs = {
            "default": {"web-1": {**web, "node": "node-a"}, "web-2": {**web, "node": "node-b"}},
            "prod": {
                "web-1": {
                    "node": "node-c",
                    "images": ["nginx:1.27", "envoy:1.31"],
                    "owner": "ReplicaSet web-7d9f8 (of Deployment web)",
                },
                "api-1": {"node": "node-c", "images": ["api:2.4"], "owner": "StatefulSet api"},
                "worker-1": {"node": "node-d", "images": ["worker:0.9"], "owner": None},
            },
            "kube-system": {
                "coredns": {"node": "node-a", "images": ["coredns:1.11"], "owner": "ReplicaSet coredns-5d7"}
            },
        }
        self.deployments = {"default": {"web": 2}, "prod": {"web": 1}, "kube-system": {"coredns": 1}}

    def tools(self) -> list:
        pods, specs, deployments = self.pods, self.specs, self.deployments

        @tool(requires_approval=False)
        def list_pods(namespace: str = "default") -> dict[str, str]:
            """List the pods of a namespace with their status."""
            return pods.get(namespace, {})

        @tool(requires_approval=False)
        def describe_pod(name: str, namespace: str = "default") -> str:
            """Describe one pod."""
            status = pods.get(namespace, {}).get(name)
            return f"{namespace}/{name}: {status}" if status else f"no pod {name} in {namespace}"

        def what_delete_does(name: str, namespace: str = "default") -> dict[str, object]:
            """The preview an approver sees: the pod as it is now, what it runs, and whether anything
            brings it back once deleted (its owner starts a replacement; a pod without one is gone)."""
            status = pods.get(namespace, {}).get(name)
            if status is None:
                raise LookupError(f"no pod {name} in {namespace}")
            spec = specs.get(namespace, {}).get(name, {})
            owner = spec.get("owner")
            return {
                "pod": f"{namespace}/{name}",
                "status now": status,
                "node": spec.get("node", "unknown"),
                "images": spec.get("images", []),
                "owner": owner or "none",
                "after": (
                    f"deleted; its owner, {owner}, starts a replacement"
                    if owner
                    else "deleted; no owner: it will not come back"
                ),
            }

        # Reversible when the pod has an owner (its preview says whether it has). The preview runs again
        # just before the call runs: a pod that changed since the approver looked is not deleted.
        @tool(risk="reversible", preview=what_delete_does, recheck=True)
        def delete_pod(name: str, namespace: str = "default") -> str:
            """Delete a pod. Its controller, if it has one, starts a fresh one.

            Args:
                name: The pod to delete.
                namespace: The pod's namespace.
            """
            if pods.get(namespace, {}).pop(name, None) is None:
                raise LookupError(f"no pod {name} in {namespace}")
            specs.get(namespace, {}).pop(name, None)
            return f'pod "{name}" deleted'

        def what_scaling_does(name: str, replicas: int, namespace: str = "default") -> str:
            """The preview an approver sees: the deployment's replicas now and after, as a diff."""
            now = deployments.get(namespace, {}).get(name)
            if now is None:
                raise LookupError(f"no deployment {name} in {namespace}")
            if replicas < 0:
                raise ValueError("replicas cannot be negative")
            return (
                f"--- deployment {namespace}/{name}\n+++ deployment {namespace}/{name}\n"
                f"@@ spec @@\n-replicas: {now}\n+replicas: {replicas}\n"
            )

        # Rechecked like delete_pod: a deployment scaled by someone else since is not scaled again.
        @tool(risk="reversible", preview=what_scaling_does, recheck=True)
        def scale_deployment(name: str, replicas: int, namespace: str = "default") -> str:
            """Set how many replicas of a deployment run.

            Args:
                name: The deployment to scale.
                replicas: How many pods it should run (0 stops them all).
                namespace: The deployment's namespace.
            """
            if replicas < 0:
                raise ValueError("replicas cannot be negative")
            if name not in deployments.get(namespace, {}):
                raise LookupError(f"no deployment {name} in {namespace}")
            deployments[namespace][name] = replicas
            return f"deployment {name} scaled to {replicas}"

        return [list_pods, describe_pod, delete_pod, scale_deployment]


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
        description="Inspects and repairs pods; deleting one or scaling a deployment needs your approval.",
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
        print(f"  risk: {call.risk}")
        print("  what it would do:")
        print(_shown(call.preview, call.preview_kind, call.preview_error))
        if "--yes" in argv or _confirm("  approve? [y/N] "):
            # The approval is of the preview shown: if the pod changed since, the call waits again.
            decision = ToolDecision(call.id, True, preview_digest=call.preview_digest)
            response = agent.decide(response.conversation_id, [decision])
        else:
            response = agent.reject(response.conversation_id, call.id, "the operator said no")
    print(f"agent: {response.text}")
    print(f"pods now: {cluster.pods['default']}")
    return 0


def _shown(preview: str | None, kind: str | None, error: str | None) -> str:
    """A preview as the terminal shows it, indented: JSON laid out, a diff or text as it is."""
    if preview is None:
        return f"    (no preview: {error})"
    text = json.dumps(json.loads(preview), indent=2) if kind == "json" else preview
    return "\n".join(f"    {line}" for line in text.splitlines())


def _confirm(prompt: str) -> bool:
    """A yes from the operator; the end of input (no terminal, Ctrl-D) is a no, and is said to be."""
    try:
        return input(prompt).strip().lower() in ("y", "yes")
    except EOFError:
        print("\n  no answer (end of input): rejected")
        return False


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
