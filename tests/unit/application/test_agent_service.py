"""The agent loop, through the Agent facade, with the scripted runtime and the in-memory store."""

from __future__ import annotations

import threading

import pytest

from dcaf_like import (
    Agent,
    AgentRequest,
    ApprovalMismatch,
    ApprovalPolicy,
    ConcurrencyConflict,
    EditNotAllowed,
    IllegalTransition,
    InMemoryConversationRepository,
    InvalidRequest,
    InvalidToolArguments,
    ModelRateLimited,
    PendingToolCalls,
    ToolCallAlreadyDecided,
    ToolDecision,
    ToolResult,
    UnknownToolCall,
    UserTurn,
    argument_in,
    attachment,
    deny,
    tool,
)
from dcaf_like.helpdesk.protocol import assistant_message
from dcaf_like.server.errors import http_error
from dcaf_like.testing import FakeRuntime, fail, reply, tool_call, tool_calls


def make_agent(cluster, *script, **kwargs) -> tuple[Agent, FakeRuntime]:
    runtime = FakeRuntime(script)
    agent = Agent(tools=cluster.tools(), system="You operate Kubernetes.", runtime=runtime, **kwargs)
    return agent, runtime


def results_seen_by_model(runtime: FakeRuntime) -> list[ToolResult]:
    return [m for m in runtime.requests[-1].messages if isinstance(m, ToolResult)]


def test_an_auto_approved_call_runs_and_the_model_answers_with_its_result(cluster):
    agent, runtime = make_agent(cluster, tool_calls("list_pods"), reply("web-2 is crashing."))

    response = agent.run("which pods are unhealthy?")

    assert response.text == "web-2 is crashing."
    assert response.stop_reason == "end_turn"
    assert not response.has_pending_approvals
    [executed] = response.executed_tool_calls
    assert executed.name == "list_pods"
    assert "CrashLoopBackOff" in executed.output
    assert results_seen_by_model(runtime)[0].content == executed.output


def test_a_call_that_requires_approval_suspends_the_turn_until_a_human_approves_it(cluster):
    agent, runtime = make_agent(
        cluster,
        tool_calls(tool_call("delete_pod", name="web-2"), text="I will delete web-2."),
        reply("web-2 is gone."),
    )

    first = agent.run("delete the crashing pod")

    assert first.stop_reason == "awaiting_approval"
    assert first.text == "I will delete web-2."
    [pending] = first.pending_tool_calls
    assert (pending.name, pending.input) == ("delete_pod", {"name": "web-2", "namespace": "default"})
    assert pending.description == "Delete a pod."
    assert cluster.deleted == []
    assert len(runtime.requests) == 1

    second = agent.approve(first.conversation_id, pending.id)

    assert cluster.deleted == [("default", "web-2")]
    assert second.text == "web-2 is gone."
    assert [c.output for c in second.executed_tool_calls] == ['pod "web-2" deleted']
    assert not second.has_pending_approvals
    assert results_seen_by_model(runtime)[0].content == 'pod "web-2" deleted'


def test_a_rejection_runs_nothing_and_its_reason_reaches_the_model(cluster):
    agent, runtime = make_agent(
        cluster, tool_calls(tool_call("delete_pod", name="web-2")), reply("Understood, I left it.")
    )
    first = agent.run("delete web-2")

    second = agent.reject(first.conversation_id, first.pending_tool_calls[0].id, "it is serving traffic")

    assert cluster.deleted == []
    assert second.text == "Understood, I left it."
    [rejected] = second.rejected_tool_calls
    assert rejected.rejection_reason == "it is serving traffic"
    [result] = results_seen_by_model(runtime)
    assert result.is_error
    assert "it is serving traffic" in result.content


def test_an_edited_approval_runs_the_edited_arguments_and_records_both(cluster):
    agent, runtime = make_agent(cluster, tool_calls(tool_call("delete_pod", name="web-1")), reply("Done."))
    first = agent.run("delete a pod")
    call_id = first.pending_tool_calls[0].id

    second = agent.approve(first.conversation_id, call_id, edited_arguments={"name": "web-2"})

    assert cluster.deleted == [("default", "web-2")]
    [executed] = second.executed_tool_calls
    assert executed.proposed_input == {"name": "web-1", "namespace": "default"}
    assert (executed.input, executed.edited) == ({"name": "web-2", "namespace": "default"}, True)
    helpdesk = assistant_message(second)["data"]["executed_tool_calls"][0]
    assert helpdesk["proposed_input"] == {"name": "web-1", "namespace": "default"}
    assert helpdesk["input"] == {"name": "web-2", "namespace": "default"}
    assert "edited the arguments" in results_seen_by_model(runtime)[0].content


def test_an_edit_that_fails_the_schema_is_refused_and_changes_nothing(cluster):
    agent, _ = make_agent(cluster, tool_calls(tool_call("delete_pod", name="web-1")))
    first = agent.run("delete a pod")
    call_id = first.pending_tool_calls[0].id
    before = agent.conversation(first.conversation_id)

    with pytest.raises(InvalidToolArguments, match="name"):
        agent.approve(first.conversation_id, call_id, edited_arguments={"name": 42, "force": True})

    after = agent.conversation(first.conversation_id)
    assert after.version == before.version
    assert after.tool_call(call_id).status.value == "pending"
    assert cluster.deleted == []


def test_only_editable_tools_accept_edited_arguments(cluster):
    agent, _ = make_agent(cluster, tool_calls(tool_call("restart_pod", name="web-1")))
    first = agent.run("restart a pod")

    with pytest.raises(EditNotAllowed, match="restart_pod"):
        agent.approve(first.conversation_id, first.pending_tool_calls[0].id, edited_arguments={"name": "x"})


def test_several_pending_calls_are_decided_by_id_in_any_order(cluster):
    agent, runtime = make_agent(
        cluster,
        tool_calls(
            tool_call("delete_pod", name="web-1"),
            tool_call("delete_pod", name="web-2"),
            tool_call("restart_pod", name="api-1", namespace="prod"),
        ),
        reply("All decided."),
    )
    first = agent.run("clean up")
    ids = {c.input["name"]: c.id for c in first.pending_tool_calls}
    assert len(ids) == 3

    second = agent.decide(first.conversation_id, [ToolDecision.approved(ids["web-2"])])
    assert second.stop_reason == "awaiting_approval"
    assert {c.id for c in second.pending_tool_calls} == {ids["web-1"], ids["api-1"]}
    assert cluster.deleted == [("default", "web-2")]
    assert len(runtime.requests) == 1

    third = agent.decide(
        first.conversation_id,
        [ToolDecision.rejected(ids["api-1"], "not now"), ToolDecision.approved(ids["web-1"])],
    )

    assert third.text == "All decided."
    assert cluster.deleted == [("default", "web-2"), ("default", "web-1")]
    outcomes = {r.call_id: (r.is_error, r.content) for r in results_seen_by_model(runtime)}
    assert outcomes[ids["api-1"]][0] is True
    assert outcomes[ids["web-1"]] == (False, 'pod "web-1" deleted')


def test_a_tool_that_raises_becomes_a_failed_call_reported_to_the_model(cluster):
    agent, runtime = make_agent(
        cluster, tool_calls(tool_call("delete_pod", name="ghost")), reply("It was gone.")
    )
    first = agent.run("delete ghost")

    second = agent.approve(first.conversation_id, first.pending_tool_calls[0].id)

    [failed] = second.executed_tool_calls
    assert failed.status == "failed"
    assert failed.error == "LookupError: pod ghost not found in default"
    [result] = results_seen_by_model(runtime)
    assert result.is_error
    assert "not found" in result.content
    assert second.text == "It was gone."


def test_invalid_arguments_from_the_model_fail_the_call_without_running_the_tool(cluster):
    agent, runtime = make_agent(
        cluster, tool_calls(tool_call("delete_pod", namespace="default")), reply("I need a pod name.")
    )

    response = agent.run("delete something")

    [failed] = response.executed_tool_calls
    assert failed.status == "failed"
    assert "name" in failed.error
    assert not response.has_pending_approvals
    assert cluster.deleted == []
    assert results_seen_by_model(runtime)[0].is_error


def test_a_call_to_a_tool_the_agent_does_not_have_fails_and_names_the_real_tools(cluster):
    agent, runtime = make_agent(cluster, tool_calls(tool_call("rm_rf", path="/")), reply("Sorry."))

    response = agent.run("wipe it")

    [failed] = response.executed_tool_calls
    assert "unknown tool 'rm_rf'" in failed.error
    assert "delete_pod" in failed.error
    assert results_seen_by_model(runtime)[0].is_error


def test_the_loop_stops_after_max_iterations(cluster):
    agent, runtime = make_agent(cluster, *[tool_calls("list_pods")] * 5, max_iterations=3)

    response = agent.run("loop forever")

    assert response.stop_reason == "max_iterations"
    assert len(runtime.requests) == 3
    assert len(response.executed_tool_calls) == 3


def test_a_call_denied_by_policy_never_runs_and_the_model_hears_why(cluster):
    policy = ApprovalPolicy(
        [deny("kube-system is protected", when=argument_in("namespace", "kube-system"), tools=["delete_pod"])]
    )
    agent, runtime = make_agent(
        cluster,
        tool_calls(tool_call("delete_pod", name="coredns", namespace="kube-system")),
        reply("I may not touch kube-system."),
        approval_policy=policy,
    )

    response = agent.run("delete coredns")

    assert not response.has_pending_approvals
    [rejected] = response.rejected_tool_calls
    assert "kube-system is protected" in rejected.rejection_reason
    assert cluster.deleted == []
    assert "kube-system is protected" in results_seen_by_model(runtime)[0].content


def test_approving_other_arguments_than_proposed_is_refused_and_runs_nothing(cluster):
    agent, _ = make_agent(cluster, tool_calls(tool_call("delete_pod", name="web-1")))
    first = agent.run("delete web-1")
    pending = first.pending_tool_calls[0]
    tampered = [
        {
            "role": "user",
            "content": "",
            "data": {
                "tool_calls": [
                    {"id": pending.id, "name": "delete_pod", "input": {"name": "api-1"}, "execute": True}
                ]
            },
        }
    ]

    with pytest.raises(ApprovalMismatch, match="arguments differ"):
        agent.run(tampered, conversation_id=first.conversation_id)

    assert cluster.deleted == []
    assert agent.conversation(first.conversation_id).tool_call(pending.id).status.value == "pending"


def test_an_approval_is_single_use(cluster):
    agent, _ = make_agent(cluster, tool_calls(tool_call("delete_pod", name="web-1")), reply("Deleted."))
    first = agent.run("delete web-1")
    call_id = first.pending_tool_calls[0].id
    agent.approve(first.conversation_id, call_id)

    with pytest.raises(ToolCallAlreadyDecided) as replayed:
        agent.approve(first.conversation_id, call_id)
    with pytest.raises(ToolCallAlreadyDecided) as rejected_late:
        agent.reject(first.conversation_id, call_id, "too late")

    assert cluster.deleted == [("default", "web-1")]
    # Python says what HTTP's 409 tool_call_already_decided says, not the state machine's words.
    said = (
        f"tool call {call_id} is executed, not pending: a decision is honoured once, for a call that still "
        "waits for one"
    )
    assert str(replayed.value) == str(rejected_late.value) == said
    assert http_error(replayed.value).message == said
    assert http_error(replayed.value).code == "tool_call_already_decided"
    assert isinstance(replayed.value, IllegalTransition)  # what code written before it catches


def test_an_approval_cannot_be_carried_into_another_conversation(cluster):
    agent, _ = make_agent(cluster, tool_calls(tool_call("delete_pod", name="web-1")), reply("hello"))
    first = agent.run("delete web-1")
    other = agent.run("hi")

    with pytest.raises(UnknownToolCall):
        agent.approve(other.conversation_id, first.pending_tool_calls[0].id)

    assert cluster.deleted == []


def test_a_message_into_a_running_run_a_message_while_calls_wait_is_queued_and_decides_nothing(cluster):
    """docs/runs.md, "A message into a running run": kept, answered ``queued``, read after the decision."""
    agent, runtime = make_agent(
        cluster, tool_calls(tool_call("delete_pod", name="web-1")), reply("Deleted; web-2 looks fine.")
    )
    first = agent.run("delete web-1")
    [waiting] = first.pending_tool_calls

    queued = agent.run("and check web-2 too", conversation_id=first.conversation_id)

    assert queued.stop_reason == "queued"
    assert [c.id for c in queued.pending_tool_calls] == [waiting.id]  # still waiting: nothing approved
    assert cluster.deleted == []
    assert len(runtime.requests) == 1  # the model was not asked
    stored = agent.conversation(first.conversation_id)
    assert stored is not None
    assert [q.text for q in stored.queued] == ["and check web-2 too"]

    done = agent.approve(first.conversation_id, waiting.id)

    assert cluster.deleted == [("default", "web-1")]
    assert done.text == "Deleted; web-2 looks fine."
    read = runtime.requests[-1].messages
    assert isinstance(read[-1], UserTurn)  # after the call's result, the queued message
    assert read[-1].text == "and check web-2 too"
    assert isinstance(read[-2], ToolResult)
    after = agent.conversation(first.conversation_id)
    assert after is not None
    assert after.queued == []


def test_a_message_with_a_file_while_calls_wait_for_a_decision_is_still_refused(cluster):
    runtime = FakeRuntime([tool_calls(tool_call("delete_pod", name="web-1"))], accepts={"image"})
    agent = Agent(tools=cluster.tools(), runtime=runtime)
    first = agent.run("delete web-1")
    with_file = AgentRequest(
        conversation_id=first.conversation_id,
        text="see this",
        attachments=(attachment("image", media_type="image/png", data="iVBORw0KGgo="),),
    )

    with pytest.raises(PendingToolCalls, match=first.pending_tool_calls[0].id):
        agent.run_request(with_file)


def test_decisions_ride_along_with_a_new_message_in_the_helpdesk_style(cluster):
    agent, _runtime = make_agent(
        cluster, tool_calls(tool_call("delete_pod", name="web-1")), reply("Deleted, and noted.")
    )
    first = agent.run("delete web-1")
    history = [{"role": "user", "content": "delete web-1"}, assistant_message(first)]
    approval = {
        "role": "user",
        "content": "go ahead",
        "data": {"tool_calls": [{**assistant_message(first)["data"]["tool_calls"][0], "execute": True}]},
    }

    second = agent.run([*history, approval])

    assert second.conversation_id == first.conversation_id
    assert cluster.deleted == [("default", "web-1")]
    assert second.text == "Deleted, and noted."


def test_a_runtime_failure_is_raised_after_saving_what_already_ran(cluster):
    agent, _runtime = make_agent(
        cluster,
        tool_calls(tool_call("delete_pod", name="web-1")),
        fail(ModelRateLimited("slow down", runtime="fake")),
        reply("Deleted."),
    )
    first = agent.run("delete web-1")

    with pytest.raises(ModelRateLimited, match="slow down"):
        agent.approve(first.conversation_id, first.pending_tool_calls[0].id)

    stored = agent.conversation(first.conversation_id)
    assert stored.tool_call(first.pending_tool_calls[0].id).status.value == "executed"
    retry = agent.run([{"role": "user", "content": ""}], conversation_id=first.conversation_id)
    assert retry.text == "Deleted."
    assert cluster.deleted == [("default", "web-1")]


def test_an_unexpected_runtime_exception_is_reported_as_a_model_error_naming_the_runtime(cluster):
    from dcaf_like import ModelError

    agent, _ = make_agent(cluster, fail(ConnectionError("connection refused")))

    with pytest.raises(ModelError, match="fake failed: ConnectionError: connection refused"):
        agent.run("hi")


def test_a_request_with_nothing_to_do_is_refused(cluster):
    agent, _ = make_agent(cluster, reply("hello"))
    first = agent.run("hi")

    with pytest.raises(InvalidRequest, match="nothing to do"):
        agent.run([{"role": "user", "content": ""}], conversation_id=first.conversation_id)


class BarrierRepository(InMemoryConversationRepository):
    """Makes two workers read a conversation at the same moment, before either writes."""

    def __init__(self) -> None:
        super().__init__()
        self.barrier: threading.Barrier | None = None

    def get(self, conversation_id):
        conversation = super().get(conversation_id)
        if self.barrier is not None:
            self.barrier.wait(timeout=5)
        return conversation


def test_two_workers_approving_the_same_call_at_once_execute_it_exactly_once():
    attempts = []

    @tool
    def drop_database(name: str) -> str:
        """Drop a database."""
        attempts.append(name)
        return f"dropped {name}"

    repository = BarrierRepository()
    script = [tool_calls(tool_call("drop_database", name="orders")), reply("done"), reply("done")]
    runtime = FakeRuntime(script)
    workers = [Agent(tools=[drop_database], runtime=runtime, repository=repository) for _ in range(2)]
    first = workers[0].run("drop orders")
    call_id = first.pending_tool_calls[0].id
    repository.barrier = threading.Barrier(2)
    outcomes: list[object] = []

    def approve(worker: Agent) -> None:
        try:
            outcomes.append(worker.approve(first.conversation_id, call_id))
        except ConcurrencyConflict as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=approve, args=(w,)) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)

    assert attempts == ["orders"]
    assert sorted(type(o).__name__ for o in outcomes) == ["AgentResponse", "ConcurrencyConflict"]


def test_an_expired_approval_is_refused_and_a_new_message_closes_it(cluster):
    now = [1000.0]
    agent, _runtime = make_agent(
        cluster,
        tool_calls(tool_call("delete_pod", name="web-1")),
        reply("OK, moving on."),
        approval_ttl=60,
        clock=lambda: now[0],
    )
    first = agent.run("delete web-1")
    call_id = first.pending_tool_calls[0].id
    now[0] += 61

    from dcaf_like import ApprovalExpired

    with pytest.raises(ApprovalExpired):
        agent.approve(first.conversation_id, call_id)
    second = agent.run("never mind", conversation_id=first.conversation_id)

    assert cluster.deleted == []
    assert second.rejected_tool_calls[0].id == call_id
    assert "approval window closed" in second.rejected_tool_calls[0].rejection_reason
    assert second.text == "OK, moving on."


def test_handle_is_the_former_name_of_run_request_and_says_so():
    """Code written against ``Agent.handle`` and ``FunctionAgent.handle`` still runs, with a
    DeprecationWarning naming the new method."""
    from dcaf_like import AgentResult, FunctionAgent

    agent = Agent(runtime=FakeRuntime([reply("hello"), reply("hello again")]))
    answer = agent.run_request(AgentRequest(text="hi"))
    with pytest.warns(DeprecationWarning, match=r"Agent\.run_request"):
        again = agent.handle(AgentRequest(text="hi", conversation_id=answer.conversation_id))
    assert (answer.text, again.text) == ("hello", "hello again")

    function = FunctionAgent(lambda messages, context: AgentResult(text=messages[-1]["content"].upper()))
    with pytest.warns(DeprecationWarning, match=r"FunctionAgent\.run_request"):
        assert function.handle(AgentRequest(text="hi")).text == "HI"
