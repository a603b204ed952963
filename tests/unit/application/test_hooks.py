"""Hooks: the agent's own code before and after each model call and tool, and when a turn fails."""

from __future__ import annotations

import logging

import pytest

from dcaf_like import (
    Agent,
    ContextWindow,
    Hook,
    HookContext,
    HookFailed,
    ModelAccessDenied,
    ModelRequest,
    ModelResponse,
    RunFailed,
    ToolCallInfo,
    ToolFinished,
    Veto,
    tool,
)
from dcaf_like.application.context import SUMMARY_SYSTEM
from dcaf_like.testing import FakeRuntime, fail, tool_call, tool_calls


class Recorder(Hook):
    """Records every point it is called at, with what it was told."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.contexts: list[HookContext] = []

    def before_model(self, context: HookContext, request: ModelRequest) -> None:
        self.contexts.append(context)
        self.seen.append(("before_model", str(len(request.messages))))

    def after_model(self, context: HookContext, response: ModelResponse) -> None:
        self.seen.append(("after_model", response.text or ",".join(c.name for c in response.tool_calls)))

    def before_tool(self, context: HookContext, call: ToolCallInfo) -> None:
        self.seen.append(("before_tool", f"{call.name} {call.status} {call.arguments}"))

    def after_tool(self, context: HookContext, call: ToolCallInfo) -> None:
        self.seen.append(("after_tool", f"{call.name} {call.status} {call.output or call.error}"))


class AsyncRecorder(Hook):
    def __init__(self) -> None:
        self.seen: list[str] = []

    async def before_model(self, context: HookContext, request: ModelRequest) -> None:
        self.seen.append("before_model")

    async def after_model(self, context: HookContext, response: ModelResponse) -> None:
        self.seen.append("after_model")

    async def before_tool(self, context: HookContext, call: ToolCallInfo) -> Veto | None:
        self.seen.append(f"before_tool {call.name}")
        return None

    async def after_tool(self, context: HookContext, call: ToolCallInfo) -> None:
        self.seen.append(f"after_tool {call.name} {call.status}")


class Refuse(Hook):
    name = "freeze"

    def __init__(self, *tools: str) -> None:
        self.tools = tools

    async def before_tool(self, context: HookContext, call: ToolCallInfo) -> Veto | None:
        return Veto("change freeze") if call.name in self.tools else None


class Raises(Hook):
    """Raises at `point`; records the failures it is told about."""

    name = "broken"

    def __init__(self, point: str) -> None:
        self.point = point
        self.errors: list[Exception] = []

    def _maybe(self, point: str) -> None:
        if point == self.point:
            raise RuntimeError("the hook's own words, maybe a secret path /etc/ops")

    def before_model(self, context: HookContext, request: ModelRequest) -> None:
        self._maybe("before_model")

    def after_model(self, context: HookContext, response: ModelResponse) -> None:
        self._maybe("after_model")

    def before_tool(self, context: HookContext, call: ToolCallInfo) -> None:
        self._maybe("before_tool")

    def after_tool(self, context: HookContext, call: ToolCallInfo) -> None:
        self._maybe("after_tool")

    def on_error(self, context: HookContext, error: Exception) -> None:
        self.errors.append(error)


def two_listings() -> FakeRuntime:
    """The model lists two namespaces at once (no approval needed), then answers."""
    return FakeRuntime(
        [
            tool_calls(tool_call("list_pods", namespace="default"), tool_call("list_pods", namespace="prod")),
            "two namespaces listed",
            "still here",
        ]
    )


def test_sync_hooks_are_called_around_each_model_call_and_each_tool_in_order(cluster):
    recorder = Recorder()
    agent = Agent(
        tools=cluster.tools(), runtime=FakeRuntime([tool_call("list_pods"), "all fine"]), hooks=[recorder]
    )

    response = agent.run(
        "how are the pods?", platform_context={"tenant": "acme", "aws_credentials": {"k": "v"}}
    )

    assert recorder.seen == [
        ("before_model", "1"),
        ("after_model", "list_pods"),
        ("before_tool", "list_pods approved {'namespace': 'default'}"),
        ("after_tool", 'list_pods executed {"web-1": "Running", "web-2": "CrashLoopBackOff"}'),
        ("before_model", "3"),
        ("after_model", "all fine"),
    ]
    context = recorder.contexts[0]
    assert (context.agent, context.conversation_id) == ("agent", response.conversation_id)
    assert dict(context.platform_context) == {"tenant": "acme"}  # the credentials are not a hook's
    with pytest.raises(TypeError):
        context.platform_context["tenant"] = "other"  # type: ignore[index]


async def test_async_hooks_on_the_async_path_and_on_the_blocking_one(cluster):
    on_async, on_sync = AsyncRecorder(), AsyncRecorder()
    script = [tool_call("list_pods"), "fine"]
    expected = ["before_model", "after_model", "before_tool list_pods", "after_tool list_pods executed"]
    expected += ["before_model", "after_model"]

    await Agent(tools=cluster.tools(), runtime=FakeRuntime(script), hooks=[on_async]).arun("pods?")
    Agent(tools=cluster.tools(), runtime=FakeRuntime(script), hooks=[on_sync]).run("pods?")

    assert on_async.seen == expected
    assert on_sync.seen == expected


def test_a_veto_stops_an_approved_call_and_the_model_reads_which_hook_refused_and_why(cluster):
    runtime = FakeRuntime([tool_call("delete_pod", name="web-2"), "I could not: a change freeze."])
    agent = Agent(tools=cluster.tools(), runtime=runtime, hooks=[Refuse("delete_pod")])

    proposed = agent.run("delete web-2")
    decided = agent.approve(proposed.conversation_id, proposed.pending_tool_calls[0].id, user="olga")

    assert cluster.deleted == []
    [call] = decided.executed_tool_calls
    assert (call.status, call.error) == ("failed", "not run: refused by the hook 'freeze': change freeze")
    assert runtime.requests[-1].messages[-1].content == f"Error: {call.error}"  # type: ignore[union-attr]
    assert decided.text == "I could not: a change freeze."


def test_hooks_see_only_calls_the_gate_let_run_and_cannot_approve_one(cluster):
    recorder = Recorder()
    agent = Agent(
        tools=cluster.tools(), runtime=FakeRuntime([tool_call("delete_pod", name="web-2")]), hooks=[recorder]
    )

    response = agent.run("delete web-2")

    assert [c.status for c in response.pending_tool_calls] == ["pending"]
    assert [point for point, _ in recorder.seen] == ["before_model", "after_model"]
    assert cluster.deleted == []


def test_a_hook_changing_the_arguments_it_reads_changes_nothing_that_runs(cluster):
    class Meddles(Hook):
        def before_tool(self, context: HookContext, call: ToolCallInfo) -> None:
            call.arguments["name"] = "web-1"  # a fresh copy: the call runs as approved

    runtime = FakeRuntime([tool_call("delete_pod", name="web-2"), "done"])
    agent = Agent(tools=cluster.tools(), runtime=runtime, hooks=[Meddles()])

    proposed = agent.run("delete web-2")
    agent.approve(proposed.conversation_id, proposed.pending_tool_calls[0].id)

    assert cluster.deleted == [("default", "web-2")]


def test_secret_arguments_reach_a_hook_masked():
    seen: list[dict] = []

    class Reads(Hook):
        def before_tool(self, context: HookContext, call: ToolCallInfo) -> None:
            seen.append(call.arguments)

    @tool(requires_approval=False, secret=["password"])
    def login(user: str, password: str) -> str:
        """Log in."""
        return "in" if password == "hunter2hunter2" else "no"

    runtime = FakeRuntime([tool_call("login", user="olga", password="hunter2hunter2"), "ok"])
    response = Agent(tools=[login], runtime=runtime, hooks=[Reads()]).run("log in")

    assert seen == [{"user": "olga", "password": "***"}]
    assert response.executed_tool_calls[0].output == "in"


@pytest.mark.parametrize("point", ["before_tool", "after_tool"])
def test_a_hook_that_raises_at_a_tool_fails_the_turn_closed_and_the_conversation_goes_on(point):
    listed: list[str] = []

    @tool(requires_approval=False)
    def list_pods(namespace: str) -> str:
        """List pods."""
        listed.append(namespace)
        return "web-1"

    broken = Raises(point)
    agent = Agent(tools=[list_pods], runtime=two_listings(), hooks=[broken])

    with pytest.raises(HookFailed) as raised:
        agent.run("list default and prod")

    failure = raised.value
    assert (failure.hook, failure.point) == ("broken", point)
    assert (
        str(failure)
        == f"the hook 'broken' failed in {point} (RuntimeError); the turn stopped, no tool ran after it"
    )
    assert isinstance(failure.__cause__, RuntimeError)
    assert listed == ([] if point == "before_tool" else ["default"])  # nothing ran after the failure
    [conversation_id] = agent.conversation_ids()
    stored = agent.conversation(conversation_id)
    assert stored is not None
    statuses = [(c.status.value, c.error) for c in stored.tool_calls.values()]
    if point == "before_tool":
        assert statuses == [
            ("failed", "not run: the hook 'broken' failed before it ran"),
            ("failed", "not run: the hook 'broken' failed before it ran"),
        ]
    else:
        assert [s for s, _ in statuses] == ["executed", "failed"]
        assert statuses[1][1] == "not run: the hook 'broken' failed before it ran"
    assert broken.errors == [failure]  # on_error is told
    broken.point = ""  # mended: the conversation is usable, every call settled
    assert agent.run("and now?", conversation_id=conversation_id).text == "two namespaces listed"


@pytest.mark.parametrize("point", ["before_model", "after_model"])
async def test_a_hook_that_raises_at_a_model_call_fails_the_turn_before_any_tool(cluster, point):
    agent = Agent(tools=cluster.tools(), runtime=two_listings(), hooks=[Raises(point)])

    with pytest.raises(HookFailed, match=f"'broken' failed in {point}"):
        await agent.arun("list default and prod")

    [conversation_id] = agent.conversation_ids()
    stored = agent.conversation(conversation_id)
    assert stored is not None
    assert stored.tool_calls == {}


def test_a_stream_ends_with_the_hooks_failure():
    agent = Agent(runtime=FakeRuntime(["hello"]), hooks=[Raises("after_model")])

    events = list(agent.run_stream("hi"))

    assert isinstance(events[-1], RunFailed)
    assert events[-1].kind == "HookFailed"
    assert "'broken' failed in after_model" in events[-1].error


async def test_an_async_stream_fails_closed_on_a_hook_at_a_tool(cluster):
    agent = Agent(tools=cluster.tools(), runtime=two_listings(), hooks=[Raises("before_tool")])

    events = [e async for e in agent.arun_stream("list default and prod")]

    assert [e.call.status for e in events if isinstance(e, ToolFinished)] == ["failed", "failed"]
    assert isinstance(events[-1], RunFailed)
    assert events[-1].kind == "HookFailed"


def test_on_error_is_told_of_a_models_failure_and_its_own_failure_is_only_logged(caplog):
    told: list[Exception] = []

    class Tells(Hook):
        async def on_error(self, context: HookContext, error: Exception) -> None:
            told.append(error)

    class Fails(Hook):
        def on_error(self, context: HookContext, error: Exception) -> None:
            raise ValueError("on_error broke")

    runtime = FakeRuntime([fail(ModelAccessDenied("no access", runtime="fake"))])
    agent = Agent(runtime=runtime, hooks=[Fails(), Tells()])

    with caplog.at_level(logging.ERROR, logger="dcaf_like.hooks"), pytest.raises(ModelAccessDenied):
        agent.run("hi")

    assert [type(e) for e in told] == [ModelAccessDenied]
    assert "the hook 'Fails' failed in on_error" in caplog.text


def test_a_before_tool_that_answers_something_else_than_a_veto_fails_closed(cluster):
    class Approves(Hook):
        def before_tool(self, context: HookContext, call: ToolCallInfo) -> object:
            return True  # not a way to approve anything

    agent = Agent(tools=cluster.tools(), runtime=FakeRuntime([tool_call("list_pods")]), hooks=[Approves()])

    with pytest.raises(HookFailed, match="'Approves' failed in before_tool \\(TypeError\\)") as raised:
        agent.run("pods?")
    assert "it returned bool, not a Veto or None" in str(raised.value.error)


def test_an_object_with_none_of_the_methods_of_a_hook_is_refused():
    class Typo:
        def befor_tool(self, context: HookContext, call: ToolCallInfo) -> None: ...

    with pytest.raises(TypeError, match="hook 'Typo' has none of the methods of a hook"):
        Agent(runtime=FakeRuntime([]), hooks=[Typo()])


def test_a_plain_object_with_hook_methods_is_a_hook(cluster):
    class Plain:
        name = "plain"

        def __init__(self) -> None:
            self.tools: list[str] = []

        def after_tool(self, context: HookContext, call: ToolCallInfo) -> None:
            self.tools.append(call.name)

    plain = Plain()
    Agent(tools=cluster.tools(), runtime=FakeRuntime([tool_call("list_pods"), "ok"]), hooks=[plain]).run(
        "pods?"
    )

    assert plain.tools == ["list_pods"]


def test_the_first_veto_wins_and_the_hooks_after_it_are_not_asked(cluster):
    after = Recorder()
    runtime = FakeRuntime([tool_call("list_pods"), "ok"])
    response = Agent(tools=cluster.tools(), runtime=runtime, hooks=[Refuse("list_pods"), after]).run("pods?")

    assert response.executed_tool_calls[0].error == "not run: refused by the hook 'freeze': change freeze"
    assert [point for point, _ in after.seen] == [
        "before_model",
        "after_model",
        "before_model",
        "after_model",
    ]


# -- the call that writes a context window's summary ----------------------------------------------


class Summarizing(FakeRuntime):
    """A model with a small window that writes the summary it is asked for; the rest from the script."""

    def __init__(self, turns: int) -> None:
        answers = [f"answer {n}: " + "web-2 crash-loops (OOMKilled). " * 6 for n in range(turns)]
        super().__init__(answers, context_window=1500)
        self.summaries = 0

    def invoke(self, request: ModelRequest) -> ModelResponse:  # type: ignore[override]
        if request.system == SUMMARY_SYSTEM:
            self.summaries += 1
            return ModelResponse(text="the user asked about prod; web-2 crash-loops")
        return super().invoke(request)  # type: ignore[return-value]


class Audit(Hook):
    """What a team's audit sees of every model call: why it is made, and what is sent and answered."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def before_model(self, context: HookContext, request: ModelRequest) -> None:
        sent = "\n".join(str(m) for m in request.messages)
        self.seen.append(("before_model", context.purpose, sent))

    def after_model(self, context: HookContext, response: ModelResponse) -> None:
        self.seen.append(("after_model", context.purpose, response.text))


def question(n: int) -> str:
    return f"question {n}: is tenant acme-prod healthy? " * 3


def talk_until_summarized(agent: Agent, runtime: Summarizing) -> str:
    """Turns of one conversation until the window had to be summarized; its id."""
    conversation_id = agent.run(question(0)).conversation_id
    for n in range(1, 30):
        if runtime.summaries:
            break
        agent.run(question(n), conversation_id=conversation_id)
    assert runtime.summaries == 1
    return conversation_id


def test_the_call_that_writes_a_summary_passes_the_model_hooks_which_are_told_it_is_the_summary():
    audit, runtime = Audit(), Summarizing(30)
    agent = Agent(runtime=runtime, context=ContextWindow(summarize=True), hooks=[audit])

    talk_until_summarized(agent, runtime)

    summary = [seen for seen in audit.seen if seen[1] == "summary"]
    assert [(point, purpose) for point, purpose, _ in summary] == [
        ("before_model", "summary"),
        ("after_model", "summary"),
    ]
    assert question(0) in summary[0][2]  # the conversation's content, as the model reads it
    assert summary[1][2] == "the user asked about prod; web-2 crash-loops"
    at = audit.seen.index(summary[0])
    assert [(point, purpose) for point, purpose, _ in audit.seen[at + 2 : at + 4]] == [
        ("before_model", "turn"),  # then the turn's own call, which reads the summary
        ("after_model", "turn"),
    ]
    assert "the user asked about prod" not in audit.seen[at + 2][2]  # in the system prompt, not a message
    calls = len(runtime.requests) + runtime.summaries
    assert len(audit.seen) == 2 * calls  # every model call, each seen before and after


async def test_an_async_summary_passes_the_hooks_too():
    audit, runtime = Audit(), Summarizing(30)
    agent = Agent(runtime=runtime, context=ContextWindow(summarize=True), hooks=[audit])
    conversation_id = (await agent.arun(question(0))).conversation_id
    n = 1
    while not runtime.summaries and n < 30:
        async for _ in agent.arun_stream(question(n), conversation_id=conversation_id):
            pass
        n += 1

    assert runtime.summaries == 1
    assert [(p, purpose) for p, purpose, _ in audit.seen if purpose == "summary"] == [
        ("before_model", "summary"),
        ("after_model", "summary"),
    ]


def test_a_hook_that_raises_before_the_summary_fails_the_turn_and_nothing_is_sent_or_summarized():
    class NoSummaries(Hook):
        name = "no_summaries"

        def before_model(self, context: HookContext, request: ModelRequest) -> None:
            if context.purpose == "summary":
                raise PermissionError("this tenant's conversations are not sent to be summarized")

    runtime = Summarizing(30)
    agent = Agent(runtime=runtime, context=ContextWindow(summarize=True), hooks=[NoSummaries()])
    conversation_id = agent.run(question(0)).conversation_id

    failed: HookFailed | None = None
    for n in range(1, 30):  # until the window has to be summarized
        try:
            agent.run(question(n), conversation_id=conversation_id)
        except HookFailed as exc:
            failed = exc
            break

    assert failed is not None
    assert (failed.hook, failed.point) == ("no_summaries", "before_model")
    assert isinstance(failed.error, PermissionError)
    assert runtime.summaries == 0
    stored = agent.conversation(conversation_id)
    assert stored is not None
    assert stored.summary is None
