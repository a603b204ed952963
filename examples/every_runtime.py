"""The same agent and the same approval flow on every runtime: swap one argument, nothing else.

    python examples/every_runtime.py

Each runtime talks to a local server that speaks its provider's real wire format (the test kit's
OpenAI-compatible, Bedrock Converse and Gemini servers), scripted to propose deleting a pod and then
to answer. For each: the call waits for approval, runs once when approved, and the agent answers.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from k8s_agent import Cluster, build_agent

from dcaf_like import AgentRuntime
from dcaf_like.testing import BedrockConverseServer, GeminiServer, OpenAICompatibleServer

PROPOSAL = [("delete_pod", {"name": "web-2", "namespace": "default"})]
ANSWER = "Deleted web-2."


Server = OpenAICompatibleServer | BedrockConverseServer | GeminiServer


def runtimes(
    openai: OpenAICompatibleServer, bedrock: BedrockConverseServer, gemini: GeminiServer
) -> dict[str, tuple[Server, Callable[[], AgentRuntime]]]:
    """Each runtime, the local server it talks to, and how to build it: the only part that differs."""
    from agno.models.openai.like import OpenAILike
    from google.adk.models import Gemini
    from langchain_aws import ChatBedrockConverse
    from langchain_openai import ChatOpenAI

    from dcaf_like.runtimes.adk import AdkRuntime
    from dcaf_like.runtimes.agno import AgnoRuntime
    from dcaf_like.runtimes.bedrock import BedrockRuntime
    from dcaf_like.runtimes.langchain import LangChainRuntime
    from dcaf_like.runtimes.openai_chat import OpenAIRuntime

    claude = "anthropic.claude-3-5-haiku-20241022-v1:0"
    return {
        "OpenAIRuntime": (openai, lambda: OpenAIRuntime("gpt-4o-mini", base_url=openai.base_url)),
        "BedrockRuntime": (bedrock, lambda: BedrockRuntime(claude, client=bedrock.client())),
        "LangChain ChatOpenAI": (
            openai,
            lambda: LangChainRuntime(
                ChatOpenAI(model="gpt-4o-mini", base_url=openai.base_url, api_key="unused")
            ),
        ),
        "LangChain ChatBedrockConverse": (
            bedrock,
            lambda: LangChainRuntime(
                ChatBedrockConverse(model=claude, client=bedrock.client(), region_name="us-east-1")
            ),
        ),
        "Agno OpenAILike": (
            openai,
            lambda: AgnoRuntime(OpenAILike(id="gpt-4o-mini", base_url=openai.base_url, api_key="unused")),
        ),
        "ADK Gemini": (
            gemini,
            lambda: AdkRuntime(
                Gemini(
                    model="gemini-2.5-flash", base_url=gemini.base_url, client_kwargs={"api_key": "unused"}
                )
            ),
        ),
    }


def main() -> list[dict[str, Any]]:
    rows = []
    with OpenAICompatibleServer() as openai, BedrockConverseServer() as bedrock, GeminiServer() as gemini:
        for name, (server, make) in runtimes(openai, bedrock, gemini).items():
            server.call(PROPOSAL)
            server.reply(ANSWER)
            cluster = Cluster()
            runtime = make()
            agent = build_agent(runtime, cluster)
            proposed = agent.run("web-2 keeps crashing, delete it")
            waiting = [(c.name, c.input) for c in proposed.pending_tool_calls]
            untouched = "web-2" in cluster.pods["default"]
            answered = agent.approve(proposed.conversation_id, proposed.pending_tool_calls[0].id)
            rows.append(
                {
                    "runtime": name,
                    "waited for approval": waiting == PROPOSAL and untouched,
                    "ran once when approved": [c.output for c in answered.executed_tool_calls]
                    == ['pod "web-2" deleted']
                    and "web-2" not in cluster.pods["default"],
                    "answer": answered.text,
                }
            )
            runtime.close()
    width = max(len(r["runtime"]) for r in rows)
    for row in rows:
        print(
            f"{row['runtime']:<{width}}  waited: {row['waited for approval']!s:<5}  "
            f"ran once: {row['ran once when approved']!s:<5}  answer: {row['answer']!r}"
        )
    return rows


if __name__ == "__main__":
    main()
