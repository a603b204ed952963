"""A2A task state is read from a stored conversation: no process keeps it."""

from __future__ import annotations

import pytest

from dcaf_like.application.tasks import TaskNotFound, TaskState, conversation_of, task_view
from dcaf_like.domain import Conversation, DomainError, TaskOutcome, ToolInput
from dcaf_like.domain.errors import UnknownTask
from dcaf_like.server.a2a_tasks import task_dict
from dcaf_like.stores._codec import conversation_from_dict, conversation_to_dict


def proposing(conversation: Conversation, text: str = "delete web-2") -> str:
    conversation.add_user_message(text)
    conversation.add_assistant_message("I will delete it.")
    call = conversation.request_tool_call(
        "delete_pod", ToolInput.of({"name": "web-2"}), requires_approval=True, description="Delete a pod."
    )
    return call.id.value


def test_a_task_id_names_its_conversation_and_counts_its_tasks():
    conversation = Conversation.start("conv_1")

    first, second = conversation.open_task(), conversation.open_task()

    assert (first.id, second.id) == ("conv_1~1", "conv_1~2")
    assert conversation_of(second.id) == "conv_1"
    with pytest.raises(TaskNotFound):
        conversation_of("conv_1")
    with pytest.raises(UnknownTask):
        conversation.task("conv_1~3")


def test_a_task_reads_working_then_input_required_then_completed():
    conversation = Conversation.start("conv_1")
    task = conversation.open_task()
    assert task_view(conversation, task.id).state is TaskState.SUBMITTED

    call_id = proposing(conversation)
    waiting = task_view(conversation, task.id)
    conversation.approve_tool_call(call_id, by="alice")
    running = task_view(conversation, task.id)
    conversation.record_tool_result(call_id, 'pod "web-2" deleted')
    conversation.add_assistant_message("Deleted web-2.")
    done = task_view(conversation, task.id)

    assert waiting.state is TaskState.INPUT_REQUIRED
    assert [(c.id, c.name, c.input) for c in waiting.pending] == [(call_id, "delete_pod", {"name": "web-2"})]
    assert running.state is TaskState.WORKING
    assert (done.state, done.text) == (TaskState.COMPLETED, "Deleted web-2.")
    assert task_dict(done)["executed_tool_calls"][0]["output"] == 'pod "web-2" deleted'


def test_an_earlier_task_is_completed_and_keeps_only_its_own_messages():
    conversation = Conversation.start("conv_1")
    first = conversation.open_task()
    conversation.add_user_message("hello")
    conversation.add_assistant_message("Hi.")
    second = conversation.open_task()
    proposing(conversation)

    earlier, current = task_view(conversation, first.id), task_view(conversation, second.id)

    assert earlier.state is TaskState.COMPLETED
    assert earlier.history == (("user", "hello", ()), ("assistant", "Hi.", ()))
    assert (current.state, current.history[0]) == (TaskState.INPUT_REQUIRED, ("user", "delete web-2", ()))


def test_only_an_end_the_messages_cannot_show_is_recorded_and_only_once():
    conversation = Conversation.start("conv_1")
    task = conversation.open_task()
    conversation.add_user_message("anything")
    version = conversation.version

    conversation.end_task(task.id, TaskOutcome.FAILED, "the model timed out")

    view = task_view(conversation, task.id)
    assert (view.state, task_dict(view)["error"]) == (TaskState.FAILED, "the model timed out")
    assert conversation.version == version + 1
    with pytest.raises(DomainError, match="already ended"):
        conversation.end_task(task.id, TaskOutcome.CANCELED)


def test_a_conversation_stored_before_tasks_existed_reads_with_none():
    stored = conversation_to_dict(Conversation.start("conv_1"))
    del stored["tasks"]

    assert conversation_from_dict(stored).tasks == {}


def test_a2a_without_the_sdk_says_which_extra_to_install(monkeypatch):
    import sys

    from dcaf_like import Agent, create_app
    from dcaf_like.testing import FakeRuntime

    monkeypatch.setitem(sys.modules, "a2a.server.routes.jsonrpc_dispatcher", None)

    with pytest.raises(ImportError, match=r'pip install "dcaf-like\[a2a\]"'):
        create_app(Agent(runtime=FakeRuntime()), a2a=True)


def test_a2a_needs_an_agent_that_keeps_conversations():
    from dcaf_like import create_app

    with pytest.raises(TypeError, match="keeps conversations"):
        create_app(lambda messages, context: "hi", a2a=True)
