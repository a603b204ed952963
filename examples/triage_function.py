"""A custom agent function, served like any Agent: ``(messages, context) -> AgentResult``.

It needs no model: it answers from a table of known alerts, and counts the turns in its session.

    python examples/triage_function.py                              # serves on 127.0.0.1:8000
    dcaf-like serve examples/triage_function.py:triage --port 8000  # the same, from the command line
    curl -s localhost:8000/api/chat -H 'content-type: application/json' \\
         -d '{"messages": [{"role": "user", "content": "CrashLoopBackOff on web-2"}]}'
"""

from __future__ import annotations

from typing import Any

from dcaf_like import AgentContext, AgentResult

RUNBOOK = {
    "crashloopbackoff": "Read the pod's last logs (kubectl logs --previous), then check its liveness probe.",
    "oomkilled": "Raise the container's memory limit or find the leak; check the last deploy.",
    "imagepullbackoff": "Check the image tag exists and the pull secret is valid for the registry.",
}


def triage(messages: list[dict[str, Any]], context: AgentContext) -> AgentResult:
    """Suggests the first step for a Kubernetes alert."""
    turns = int(context.session.get("turns", 0)) + 1
    context.session.set("turns", turns)
    text = messages[-1]["content"].lower().replace(" ", "")
    advice = next((step for alert, step in RUNBOOK.items() if alert in text), None)
    tenant = context.platform_context.get("tenant_name")
    where = f" in {tenant}" if tenant else ""
    if advice is None:
        return AgentResult(text=f"I know these alerts{where}: {', '.join(RUNBOOK)}. Which one is it?")
    return AgentResult(text=f"First step{where}: {advice}")


if __name__ == "__main__":
    from dcaf_like import serve

    serve(triage)
