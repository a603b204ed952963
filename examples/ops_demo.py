"""`make demo`: the operations agent on a real model, served over HTTP behind the approval gate.

    make demo                                         # the local model, offline (fetched once, verified)
    DCAF_RUNTIME=openai:qwen2.5-coder OPENAI_BASE_URL=http://127.0.0.1:11434/v1 make demo   # e.g. Ollama
    DCAF_RUNTIME=bedrock:anthropic.claude-3-5-haiku-20241022-v1:0 AWS_REGION=us-east-1 make demo

Then, in another terminal:

    python examples/ops_demo.py ask "delete the pod web-1 in namespace prod"

which sends the question, shows each call the agent wants to run and asks you to approve it. The
agent works on an in-memory cluster (namespaces default, prod, kube-system) that this process owns;
conversations are kept in ./dcaf_like.sqlite3, so a pending approval survives a restart.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from k8s_agent import Cluster, build_agent

from dcaf_like import Agent, AgentRuntime, ModelError, serve

PORT = int(os.environ.get("PORT", "8000"))
URL = os.environ.get("DCAF_DEMO_URL", f"http://127.0.0.1:{PORT}")


def demo_runtime() -> AgentRuntime | str:
    """``DCAF_RUNTIME`` if set, else the local model."""
    named = os.environ.get("DCAF_RUNTIME")
    if named:
        return named
    from dcaf_like.runtimes.local import LocalRuntime

    return LocalRuntime()


def demo_agent(runtime: AgentRuntime | str | None = None, cluster: Cluster | None = None) -> Agent:
    return build_agent(runtime or demo_runtime(), cluster)


def main() -> None:
    agent = demo_agent()
    load = getattr(agent.runtime, "load", None)
    if load is not None:
        print(f"dcaf_like demo: loading {agent.runtime.name} ...", flush=True)
        try:
            load()  # the first run fetches and verifies the model, then tries it in a child process
        except ModelError as error:
            raise SystemExit(f"dcaf_like demo: {error}") from None
    ask = 'python examples/ops_demo.py ask "delete the pod web-1 in namespace prod"'
    question = json.dumps({"messages": [{"role": "user", "content": "which pods run in namespace prod?"}]})
    print(
        f"\ndcaf_like demo: {agent.name} on {agent.runtime.name}\n"
        f"  chat page:        {URL}/\n"
        f"  ask and approve:  {ask}\n"
        f"  or with curl:     curl -s {URL}/api/chat -H 'content-type: application/json' -d '{question}'\n"
        f"  API docs:         {URL}/docs\n",
        flush=True,
    )
    serve(agent, port=PORT)


def ask(question: str, *, url: str = URL, answer: Any = input) -> dict[str, Any]:
    """One question to the served agent; approve or reject each call it proposes, until it answers."""
    import httpx

    with httpx.Client(base_url=url, timeout=600) as client:
        reply = _post(client, {"messages": [{"role": "user", "content": question}]})
        while reply["data"]["tool_calls"]:
            decisions = []
            for call in reply["data"]["tool_calls"]:
                print(f"\nThe agent wants to run {call['name']}({json.dumps(call['input'])})")
                print(f"  why it needs approval: {call.get('approval_reason') or 'the tool requires it'}")
                if call.get("risk"):
                    print(f"  risk: {call['risk']}")
                if "preview_digest" in call:  # echoed back with the decision: the approval is of this preview
                    print("  what it would do:")
                    print(shown_preview(call))
                yes = _confirm(answer, "  approve? [y/N] ")
                decisions.append(
                    {**call, "execute": yes}
                    if yes
                    else {**call, "execute": False, "rejection_reason": "the operator said no"}
                )
            data = {"conversation_id": reply["data"]["conversation_id"], "tool_calls": decisions}
            reply = _post(client, {"messages": [{"role": "user", "content": "", "data": data}]})
        for done in reply["data"]["executed_tool_calls"]:
            print(f"ran {done['name']}({json.dumps(done['input'])}) -> {done['output']}")
        print(f"\n{reply['content']}")
        return reply


def shown_preview(call: dict[str, Any]) -> str:
    """A call's preview as the terminal shows it, indented: JSON laid out, a diff or text as it is."""
    if call.get("preview") is None:
        return f"    (no preview: {call.get('preview_error')})"
    text = call["preview"]
    if call.get("preview_kind") == "json":
        text = json.dumps(json.loads(text), indent=2)
    return "\n".join(f"    {line}" for line in text.splitlines())


def _confirm(answer: Any, prompt: str) -> bool:
    """A yes from the operator; the end of input (no terminal, Ctrl-D) is a no, and is said to be."""
    try:
        reply: str = answer(prompt)
    except EOFError:
        print("\n  no answer (end of input): rejected", flush=True)
        return False
    return reply.strip().lower() in ("y", "yes")


def _post(client: Any, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/api/chat", json=body)
    if response.status_code != 200:
        raise SystemExit(f"the server answered {response.status_code}: {response.text}")
    result: dict[str, Any] = response.json()
    return result


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "ask":
        ask(" ".join(sys.argv[2:]))
    else:
        main()
