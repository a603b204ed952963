"""The local model's prompts and the lenient reader of the tool calls it writes."""

from __future__ import annotations

import base64

import pytest

from dcaf_like import (
    AssistantTurn,
    Attachment,
    ModelRequest,
    ModelRequestInvalid,
    ModelToolCall,
    ToolResult,
    ToolSpec,
    UserTurn,
    attachment,
)
from dcaf_like.runtimes.local import LocalRuntime
from dcaf_like.runtimes.local_prompts import chat_messages, is_text_file, repeated_call, system_prompt
from dcaf_like.runtimes.text_calls import read_tool_calls

DELETE = ToolSpec(
    "delete_pod",
    "Delete a pod.\n\nMore details nobody needs.",
    {
        "title": "delete_pod",
        "type": "object",
        "properties": {
            "name": {"title": "Name", "type": "string"},
            "namespace": {"title": "Namespace", "type": "string", "default": "default"},
        },
        "required": ["name"],
        "additionalProperties": False,
    },
)
LIST = ToolSpec("list_pods", "List pods.", {"type": "object", "properties": {}})


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "delete_pod", "arguments": {"name": "web-1", "namespace": "prod"}}',
        '```json\n{\n  "name": "delete_pod",\n  "arguments": {"name": "web-1", "namespace": "prod"}\n}\n```',
        '```\n{"name": "delete_pod", "arguments": {"name": "web-1", "namespace": "prod"}}\n```',
        "<tool_call>\n"
        '{"name": "delete_pod", "arguments": {"name": "web-1", "namespace": "prod"}}\n</tool_call>',
        '{{"name": "delete_pod", "arguments": {{"name": "web-1", "namespace": "prod"}}}}',
        '{"name": "delete_pod", "arguments": "{\\"name\\": \\"web-1\\", \\"namespace\\": \\"prod\\"}"}',
        '{"tool": "delete_pod", "parameters": {"name": "web-1", "namespace": "prod"}}',
    ],
    ids=["bare", "fenced-json", "fenced", "tagged", "doubled-braces", "string-arguments", "tool-parameters"],
)
def test_every_accepted_form_reads_as_the_same_call(text):
    prose, calls = read_tool_calls(text)

    assert prose == ""
    [call] = calls
    assert (call.name, dict(call.arguments), call.invalid_arguments) == (
        "delete_pod",
        {"name": "web-1", "namespace": "prod"},
        None,
    )
    assert call.id.startswith("call_")


def test_prose_around_a_fenced_call_is_kept_as_text():
    prose, calls = read_tool_calls(
        "web-2 is crash-looping, so I will delete it.\n"
        '```json\n{"name": "delete_pod", "arguments": {"name": "web-2"}}\n```'
    )

    assert prose == "web-2 is crash-looping, so I will delete it."
    assert [c.name for c in calls] == ["delete_pod"]


def test_several_calls_in_a_list():
    _, calls = read_tool_calls(
        '[{"name": "list_pods", "arguments": {}}, {"name": "delete_pod", "arguments": {"name": "a"}}]'
    )

    assert [c.name for c in calls] == ["list_pods", "delete_pod"]
    assert len({c.id for c in calls}) == 2


@pytest.mark.parametrize(
    "text",
    [
        "The pods in prod are web-1 (Running) and api-1 (CrashLoopBackOff).",
        '{"web-1": "Running"} is what the cluster says.',
        "```yaml\nkind: Pod\n```",
    ],
)
def test_plain_answers_and_json_that_names_no_tool_are_text(text):
    prose, calls = read_tool_calls(text)

    assert calls == ()
    assert prose == text.strip()


def test_an_unreadable_call_is_reported_not_guessed():
    _, calls = read_tool_calls('{"name": "delete_pod", "arguments": {"name": "web-1"')

    [call] = calls
    assert call.name == "delete_pod"
    assert call.arguments == {}
    assert "not valid JSON" in (call.invalid_arguments or "")


def test_arguments_that_are_not_an_object_are_reported():
    _, calls = read_tool_calls('{"name": "delete_pod", "arguments": ["web-1"]}')

    assert "must be a JSON object" in (calls[0].invalid_arguments or "")


def test_the_system_prompt_lists_each_tool_compactly_after_the_instructions():
    prompt = system_prompt("You operate Kubernetes.", [DELETE, LIST])

    assert prompt.startswith("You operate Kubernetes.\n\n")
    assert (
        '- delete_pod: Delete a pod. {"type": "object", "properties": {"name": {"type": "string"}' in prompt
    )
    assert '"required": ["name"]' in prompt
    assert "title" not in prompt
    assert "additionalProperties" not in prompt
    assert "More details" not in prompt
    assert '{"name": "<tool name>", "arguments": {<arguments>}}' in prompt
    assert system_prompt("Just chat.", []) == "Just chat."


def test_history_is_written_back_as_the_model_writes_it_and_results_restate_the_request():
    call = ModelToolCall("c1", "delete_pod", {"name": "web-1"})
    request = ModelRequest(
        "sys",
        (
            UserTurn("delete web-1"),
            AssistantTurn("", (call,)),
            ToolResult("c1", "delete_pod", 'pod "web-1" deleted'),
        ),
        (DELETE,),
    )

    messages = chat_messages(request)

    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[2]["content"] == '{"name": "delete_pod", "arguments": {"name": "web-1"}}'
    assert messages[3]["content"].startswith('Result of delete_pod: pod "web-1" deleted\n')
    assert 'My request was: "delete web-1"' in messages[3]["content"]


def test_a_failed_call_is_labelled_as_an_error():
    call = ModelToolCall("c1", "delete_pod", {"name": "x"})
    request = ModelRequest(
        "",
        (
            UserTurn("go"),
            AssistantTurn("", (call,)),
            ToolResult("c1", "delete_pod", "Rejected: no", is_error=True),
        ),
    )

    assert chat_messages(request)[-1]["content"].startswith("Error from delete_pod: Rejected: no")


def test_a_call_identical_to_an_answered_one_is_a_repeat():
    done = ModelToolCall("c1", "list_pods", {"namespace": "prod"})
    history = (UserTurn("pods?"), AssistantTurn("", (done,)), ToolResult("c1", "list_pods", "{}"))
    request = ModelRequest("", history)

    again = ModelToolCall("c2", "list_pods", {"namespace": "prod"})
    other = ModelToolCall("c3", "list_pods", {"namespace": "dev"})

    assert repeated_call(request, (again,)) is again
    assert repeated_call(request, (other,)) is None


def text_file(name: str, text: bytes, media_type: str = "text/plain") -> Attachment:
    return attachment("file", media_type=media_type, data=base64.b64encode(text).decode(), name=name)


def test_a_text_file_is_inlined_after_the_message_named_by_its_file():
    events = text_file("events.txt", b"Warning BackOff pod/web-2")
    values = text_file("values.yaml", b"replicas: 3\n", "application/yaml")
    request = ModelRequest("", (UserTurn("why does web-2 crash?", (events, values)),))

    [_, asked] = chat_messages(request)

    assert asked == {
        "role": "user",
        "content": 'why does web-2 crash?\n\n<file name="events.txt">\nWarning BackOff pod/web-2\n</file>'
        '\n\n<file name="values.yaml">\nreplicas: 3\n\n</file>',
    }


def test_a_file_alone_is_the_whole_message_and_bytes_that_are_not_utf8_show_as_replacements():
    request = ModelRequest("", (UserTurn("", (text_file("log.txt", b"ok \xff done"),)),))

    assert chat_messages(request)[1]["content"] == '<file name="log.txt">\nok \ufffd done\n</file>'


@pytest.mark.parametrize(
    ("media_type", "read"),
    [
        ("text/plain", True),
        ("text/csv", True),
        ("application/json", True),
        ("application/x-yaml", True),
        ("application/vnd.api+json", True),
        ("application/pdf", False),
        ("application/octet-stream", False),
    ],
)
def test_only_text_files_are_read(media_type, read):
    assert is_text_file(text_file("f", b"x", media_type)) is read
    assert LocalRuntime("unused.gguf").takes(text_file("f", b"x", media_type)) is read


def test_an_image_is_never_taken_and_a_request_carrying_one_is_refused_naming_it():
    image = attachment("image", media_type="image/png", data="iVBORw0KGgo=")

    assert not LocalRuntime("unused.gguf").takes(image)
    with pytest.raises(ModelRequestInvalid, match="text only, not image/png image"):
        chat_messages(ModelRequest("", (UserTurn("look", (image,)),)))
