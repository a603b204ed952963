"""Run by tests/e2e/test_local_model_context.py in a child process (llama.cpp stays out of the test
process): the real local model asked a question at the end of an operations session far longer than its
context window. Prints one JSON object: the answer, the calls run, each model call's prompt size.

    python tests/e2e/long_conversation.py EXCHANGES [--summarize]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from k8s_agent import POLICY, SYSTEM, Cluster

from dcaf_like import Agent, ContextWindow, InMemoryConversationRepository, ModelCompleted, ModelRequest
from dcaf_like.application.context import message_text
from dcaf_like.application.messages import ModelStreamEvent
from dcaf_like.application.transcript import transcript
from dcaf_like.domain import Conversation, ToolInput
from dcaf_like.runtimes.local import LocalRuntime

QUESTION = "which pods are running in namespace prod?"


class RecordingRuntime(LocalRuntime):
    """The local model, noting the prompt size of every call and which were summaries."""

    calls: list[dict[str, object]]

    def stream(self, request: ModelRequest) -> Iterator[ModelStreamEvent]:
        for event in super().stream(request):
            if isinstance(event, ModelCompleted):
                usage = event.response.usage
                self.calls.append({"prompt": usage.input_tokens, "summary": not request.tools})
            yield event


def session(exchanges: int) -> Conversation:
    """An operations session: per namespace, a question, a list_pods call (its result attached), an
    answer: three stored messages an exchange."""
    conversation = Conversation.start("long-ops-session", at=1_700_000_000.0)
    for n in range(exchanges):
        conversation.add_user_message(f"check namespace team-{n}: which pods crash there?")
        conversation.add_assistant_message("")
        call = conversation.request_tool_call(
            "list_pods", ToolInput.of({"namespace": f"team-{n}"}), requires_approval=False
        )
        conversation.approve_tool_call(call.id.value, by="policy")
        result = {f"api-{n}": "Running", f"worker-{n}": "CrashLoopBackOff"}
        conversation.record_tool_result(call.id.value, json.dumps(result))
        conversation.add_assistant_message(f"In team-{n}, worker-{n} is in CrashLoopBackOff; api-{n} runs.")
    return conversation


def main() -> None:
    exchanges = int(sys.argv[1])
    summarize = "--summarize" in sys.argv
    runtime = RecordingRuntime()
    runtime.calls = []
    store = InMemoryConversationRepository()
    history = session(exchanges)
    store.save(history, 0)
    agent = Agent(
        tools=Cluster().tools(),
        system=SYSTEM,
        runtime=runtime,
        approval_policy=POLICY,
        repository=store,
        context=ContextWindow(summarize=summarize),
    )
    history_tokens = sum(runtime.count_tokens(message_text(m)) for m in transcript(history))
    answer = agent.run(QUESTION, conversation_id=history.id)
    stored = agent.conversation(history.id)
    assert stored is not None
    print(
        json.dumps(
            {
                "window": runtime.context_window,
                "history_tokens": history_tokens,
                "text": answer.text,
                "executed": [(c.name, c.input, c.output) for c in answer.executed_tool_calls],
                "calls": runtime.calls,
                "stored_messages": len(stored.messages),
                "summary": None if stored.summary is None else [stored.summary.text, stored.summary.through],
            }
        )
    )


if __name__ == "__main__":
    main()
