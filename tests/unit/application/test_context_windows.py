"""What the model reads of a long conversation: the transcript fitted to the runtime's context window."""

from __future__ import annotations

import base64
import itertools
import math
import struct
from dataclasses import replace

import pytest

from dcaf_like import (
    Agent,
    AssistantTurn,
    ContextPolicy,
    ContextWindow,
    Done,
    FallbackRuntime,
    InMemoryConversationRepository,
    ModelRequest,
    ModelResponse,
    ToolResult,
    Usage,
    UserTurn,
    tool,
)
from dcaf_like.application.context import (
    DROPPED_NOTE,
    FILE_TOKENS_PER_KIB,
    IMAGE_TOKENS,
    SUMMARY_HEADER,
    SUMMARY_SYSTEM,
    Block,
    ContextView,
    Fitted,
    block_cost,
    estimate_tokens,
    image_tokens,
    part_tokens,
    system_cost,
)
from dcaf_like.application.image_size import image_size
from dcaf_like.application.messages import ModelMessage
from dcaf_like.application.ports import ToolOutput
from dcaf_like.domain import Conversation, DomainError, Role, attachment
from dcaf_like.testing import FakeRuntime, tool_call, tool_calls

SYSTEM = "You operate Kubernetes."


def question(n: int) -> str:
    return f"question {n}: " + "is the cluster healthy and which pods crash in namespace prod? " * 2


def answer(n: int) -> str:
    return f"answer {n}: " + "web-2 is in CrashLoopBackOff since 10:42 (OOMKilled); the rest run. " * 2


def chatty_agent(window: int | None, turns: int, *, context: ContextPolicy | None = None, **kwargs):
    """An agent whose runtime has `window` tokens, after `turns` question-and-answer turns."""
    runtime = FakeRuntime([answer(n) for n in range(turns)], context_window=window)
    agent = Agent(system=SYSTEM, runtime=runtime, context=context, **kwargs)
    conversation_id = None
    for n in range(turns):
        conversation_id = agent.run(question(n), conversation_id=conversation_id).conversation_id
    return agent, runtime, conversation_id


def tokens(request: ModelRequest) -> int:
    """What the request costs by the estimate the policy uses (FakeRuntime has no tokenizer)."""
    blocks = [Block(0, (m,), isinstance(m, UserTurn)) for m in request.messages]
    return system_cost(request.system, request.tools, estimate_tokens) + sum(
        block_cost(b, estimate_tokens) for b in blocks
    )


def texts(request: ModelRequest) -> list[str]:
    return [m.content if isinstance(m, ToolResult) else m.text for m in request.messages]


def assert_every_call_is_with_its_result(request: ModelRequest) -> None:
    messages = request.messages
    for i, message in enumerate(messages):
        if isinstance(message, AssistantTurn) and message.tool_calls:
            following = [m.call_id for m in messages[i + 1 : i + 1 + len(message.tool_calls)]]
            assert following == [c.id for c in message.tool_calls]
        if isinstance(message, ToolResult):
            proposer = next(m for m in reversed(messages[:i]) if isinstance(m, AssistantTurn))
            assert message.call_id in [c.id for c in proposer.tool_calls]


# -- the estimate ---------------------------------------------------------------------------------


def test_the_estimate_is_a_token_per_four_characters_rounded_up():
    assert [estimate_tokens(t) for t in ("", "a", "abcd", "abcde", "x" * 400)] == [0, 1, 1, 2, 100]


def test_a_runtime_without_a_tokenizer_counts_by_the_estimate_and_knows_no_window():
    runtime = FakeRuntime()

    assert runtime.count_tokens("abcdefgh") == 2
    assert runtime.context_window is None


# -- fitting ---------------------------------------------------------------------------------------


def test_without_a_known_window_the_whole_transcript_is_sent():
    _, runtime, _ = chatty_agent(None, 40)

    assert len(runtime.requests[-1].messages) == 2 * 40 - 1
    assert runtime.requests[-1].system == SYSTEM


def test_the_oldest_turns_go_first_and_the_system_prompt_and_latest_question_stay():
    _, runtime, _ = chatty_agent(1500, 40)

    last = runtime.requests[-1]
    sent = texts(last)
    assert tokens(last) <= 1500 - 512
    assert last.system.startswith(SYSTEM)
    assert sent[-1] == question(39)
    assert answer(0) not in sent
    assert question(0) not in sent
    assert isinstance(last.messages[0], UserTurn)  # cut where an exchange begins
    # What is kept is the newest part, without a hole.
    first = int(sent[0].split(":")[0].split()[1])
    assert sent == [t for n in range(first, 40) for t in (question(n), answer(n))][:-1]
    assert f"{2 * first} earlier messages of this conversation are not shown" in last.system


def test_the_cut_stays_put_while_the_conversation_grows_by_less_than_a_quarter_of_the_budget():
    _, runtime, _ = chatty_agent(1500, 60)

    firsts = [texts(r)[0] for r in runtime.requests if tokens(r) > 700]
    changes = sum(1 for a, b in itertools.pairwise(firsts) if a != b)
    # A quarter of the budget is ~247 tokens, a turn ~88: the cut moves every third turn, not every call.
    assert 0 < changes <= len(firsts) // 2


def test_a_tool_call_is_never_separated_from_its_result(cluster):
    script = []
    for n in range(30):
        script += [tool_call("list_pods", namespace="prod"), answer(n)]
    runtime = FakeRuntime(script, context_window=1200)
    agent = Agent(tools=cluster.tools(), system=SYSTEM, runtime=runtime)
    conversation_id = None
    for n in range(30):
        conversation_id = agent.run(question(n), conversation_id=conversation_id).conversation_id

    for request in runtime.requests:
        assert_every_call_is_with_its_result(request)
        assert tokens(request) <= 1200 - 512 or len(request.messages) <= 3
    assert answer(0) not in texts(runtime.requests[-1])


def test_when_the_latest_exchange_alone_is_too_long_its_oldest_rounds_go_and_its_question_stays(cluster):
    rounds = 12
    script = [tool_call("list_pods", namespace=f"ns-{n}") for n in range(rounds)] + ["done"]
    runtime = FakeRuntime(script, context_window=900)
    agent = Agent(tools=cluster.tools(), system=SYSTEM, runtime=runtime, max_iterations=rounds + 1)

    agent.run("list the pods of every namespace, one at a time")

    last = runtime.requests[-1]
    assert texts(last)[0] == "list the pods of every namespace, one at a time"
    assert_every_call_is_with_its_result(last)
    assert last.messages[-2].tool_calls[0].arguments == {"namespace": f"ns-{rounds - 1}"}  # type: ignore[union-attr]
    assert len(last.messages) < 1 + 2 * rounds
    assert tokens(last) <= 900 - 512


def test_a_runtime_that_measures_its_whole_prompt_gets_one_that_fits_by_that_measure():
    class Wrapping(FakeRuntime):
        """Adds 15 tokens of its own around every message, which the per-message count cannot see."""

        def count_request_tokens(self, request: ModelRequest) -> int:
            return tokens(request) + 15 * len(request.messages)

    runtime = Wrapping([answer(n) for n in range(40)], context_window=3000)
    agent = Agent(system=SYSTEM, runtime=runtime)
    conversation_id = None
    for n in range(40):
        conversation_id = agent.run(question(n), conversation_id=conversation_id).conversation_id

    room = 3000 - 512 - 150  # the reserve, and the 5% margin
    assert all(runtime.count_request_tokens(r) <= room for r in runtime.requests)
    assert tokens(runtime.requests[-1]) < room - 300  # what the per-message count alone would send


def test_a_call_still_waiting_for_its_result_is_always_kept():
    calls = (tool_call("delete_pod", name="web-1"),)
    waiting = Block(0, (UserTurn("delete web-1"),), user=True)
    pending = Block(1, (AssistantTurn("", calls),), user=False, pinned=True)
    later = [
        Block(2 + n, (UserTurn(question(n)) if n % 2 == 0 else AssistantTurn(answer(n)),), user=n % 2 == 0)
        for n in range(30)
    ]
    view = ContextView(SYSTEM, (), [waiting, pending, *later], None, 1000, estimate_tokens)

    fitted = ContextWindow().fit(view)

    assert fitted.messages[0] == AssistantTurn("", calls)
    assert UserTurn("delete web-1") not in fitted.messages
    assert fitted.messages[-1] == later[-1].messages[0]


def test_a_window_smaller_than_the_reserve_is_refused():
    with pytest.raises(ValueError, match="leaves nothing"):
        ContextWindow(512, reserve=512)


def test_the_policys_own_window_wins_over_the_runtimes():
    _, runtime, _ = chatty_agent(None, 30, context=ContextWindow(1200, reserve=200))

    assert tokens(runtime.requests[-1]) <= 1000
    assert len(runtime.requests[-1].messages) < 2 * 30 - 1


def test_a_policy_is_pluggable():
    class LatestOnly(ContextPolicy):
        window = 100_000

        def fit(self, view: ContextView) -> Fitted:
            return Fitted(view.system, view.blocks[-1].messages)

    _, runtime, _ = chatty_agent(None, 3, context=LatestOnly())

    assert texts(runtime.requests[-1]) == [question(2)]


def test_a_fallback_runtime_fits_the_smallest_window_it_may_use():
    runtime = FallbackRuntime(
        [FakeRuntime(context_window=8000), FakeRuntime(), FakeRuntime(context_window=4000)]
    )

    assert runtime.context_window == 4000


# -- summaries --------------------------------------------------------------------------------------


#: Tokens of each summary call, set apart from those of the script's answers (FakeRuntime's 10 in, 5 out).
SUMMARY_USAGE = Usage(300, 40)
ANSWER_USAGE = Usage(10, 5)


class Summarizing(FakeRuntime):
    """Answers a summary request with a summary naming how many lines it read, the rest from the script."""

    def __init__(self, script, window: int, accepts: frozenset[str] = frozenset()) -> None:
        super().__init__(script, context_window=window, accepts=accepts)
        self.summaries: list[ModelRequest] = []

    def invoke(self, request: ModelRequest) -> object:  # type: ignore[override]
        if request.system == SUMMARY_SYSTEM:
            self.summaries.append(request)
            lines = request.messages[0].text.splitlines()  # type: ignore[union-attr]
            return ModelResponse(text=f"summary of {len(lines)} lines", usage=SUMMARY_USAGE)
        return super().invoke(request)


def test_what_is_dropped_is_summarized_once_by_the_runtime_and_stored_with_the_conversation():
    store = InMemoryConversationRepository()
    runtime = Summarizing([answer(n) for n in range(40)], window=1500)
    agent = Agent(system=SYSTEM, runtime=runtime, repository=store, context=ContextWindow(summarize=True))
    conversation_id = agent.run(question(0)).conversation_id
    n = 1
    while not runtime.summaries:
        agent.run(question(n), conversation_id=conversation_id)
        n += 1
    stored = store.get(conversation_id)
    assert stored is not None
    assert stored.summary is not None
    summary = stored.summary

    agent.run(question(n), conversation_id=conversation_id)  # the next turn reads the stored summary

    assert len(runtime.summaries) == 1
    asked = runtime.summaries[0].messages[0].text  # type: ignore[union-attr]
    assert asked.startswith(f"User: {question(0)}\nAssistant: {answer(0)}")
    assert asked.count("User: ") == summary.through // 2
    last = runtime.requests[-1]
    assert last.system == f"{SYSTEM}\n\n{SUMMARY_HEADER}{summary.text}"
    assert texts(last)[0] == question(summary.through // 2)
    assert tokens(last) <= 1500 - 512
    again = store.get(conversation_id)
    assert again is not None
    assert again.summary == summary


def test_a_later_summary_builds_on_the_stored_one():
    runtime = Summarizing([answer(n) for n in range(60)], window=1500)
    agent = Agent(system=SYSTEM, runtime=runtime, context=ContextWindow(summarize=True))
    conversation_id = agent.run(question(0)).conversation_id
    for n in range(1, 60):
        agent.run(question(n), conversation_id=conversation_id)

    assert len(runtime.summaries) >= 2
    first, second = runtime.summaries[:2]
    assert first.messages[0].text.startswith("User: ")  # type: ignore[union-attr]
    assert second.messages[0].text.startswith("Summary so far: summary of ")  # type: ignore[union-attr]


def test_a_summary_only_ever_grows_forward():
    conversation = Conversation.start()
    for n in range(4):
        conversation.add_user_message(question(n))
    conversation.summarize("the first two", through=2)

    with pytest.raises(DomainError):
        conversation.summarize("back to one", through=1)
    with pytest.raises(DomainError):
        conversation.summarize("past the end", through=5)
    conversation.summarize("the first three", through=3)
    assert conversation.summary is not None
    assert conversation.summary.through == 3


async def test_an_async_streamed_turn_fits_and_summarizes_like_a_sync_one():
    runtime = Summarizing([answer(n) for n in range(30)], window=1500)
    agent = Agent(system=SYSTEM, runtime=runtime, context=ContextWindow(summarize=True))
    conversation_id = (await agent.arun(question(0))).conversation_id
    for n in range(1, 16):
        async for _ in agent.arun_stream(question(n), conversation_id=conversation_id):
            pass

    stored = agent.conversation(conversation_id)
    assert stored is not None
    assert stored.summary is not None
    assert len(runtime.summaries) == 1
    assert tokens(runtime.requests[-1]) <= 1500 - 512


class Span:
    def __init__(self, name: str, attributes: dict[str, object]) -> None:
        self.name = name
        self.attributes = attributes

    def set(self, key: str, value: object) -> None:
        self.attributes[key] = value

    def fail(self, error: object) -> None:
        return None

    def end(self) -> None:
        return None


class RecordingTracer:
    """Keeps every span started, with its attributes."""

    def __init__(self) -> None:
        self.spans: list[Span] = []

    def start(self, name: str, attributes: dict[str, object], parent: object = None) -> Span:
        span = Span(name, dict(attributes))
        self.spans.append(span)
        return span


def test_a_turn_that_summarized_counts_the_summary_call_in_its_usage_and_traces_it_as_the_summarys():
    tracer = RecordingTracer()
    runtime = Summarizing([answer(n) for n in range(40)], window=1500)
    agent = Agent(system=SYSTEM, runtime=runtime, tracer=tracer, context=ContextWindow(summarize=True))
    usages: list[Usage] = []
    conversation_id = None
    while not runtime.summaries:
        response = agent.run(question(len(usages)), conversation_id=conversation_id)
        conversation_id = response.conversation_id
        usages.append(response.usage)

    *before, summarized = usages
    assert set(before) == {ANSWER_USAGE}  # the turns before: one model call each
    assert summarized == ANSWER_USAGE + SUMMARY_USAGE  # its own call and the summary's
    models = [s.attributes for s in tracer.spans if s.name == "dcaf.model"]
    [summary] = [a for a in models if a["dcaf.purpose"] == "summary"]
    assert (summary["dcaf.input_tokens"], summary["dcaf.output_tokens"]) == (300, 40)
    assert [a["dcaf.purpose"] for a in models].count("turn") == len(usages)
    assert sum(a["dcaf.input_tokens"] for a in models) == sum(u.input_tokens for u in usages)  # type: ignore[misc]


async def test_a_streamed_turn_that_summarized_counts_the_summary_call_in_its_done_event():
    runtime = Summarizing([answer(n) for n in range(30)], window=1500)
    agent = Agent(system=SYSTEM, runtime=runtime, context=ContextWindow(summarize=True))
    conversation_id = (await agent.arun(question(0))).conversation_id
    done: list[Usage] = []
    while not runtime.summaries:
        async for event in agent.arun_stream(question(len(done) + 1), conversation_id=conversation_id):
            if isinstance(event, Done):
                done.append(event.response.usage)

    *before, summarized = done
    assert set(before) == {ANSWER_USAGE}
    assert summarized == ANSWER_USAGE + SUMMARY_USAGE
    assert summarized.total_tokens == 15 + 340


# -- a turn reads the recent part of a long conversation (ADR 22) -----------------------------------


class WholeReads(InMemoryConversationRepository):
    """A store without a read of its own for the recent part: the port's default reads it whole."""

    def get_recent(self, conversation_id: str) -> Conversation | None:
        return self.get(conversation_id)


class RecentReads(InMemoryConversationRepository):
    """Counts the reads of the recent part, and those that left messages out."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = self.partial = 0

    def get_recent(self, conversation_id: str) -> Conversation | None:
        self.asked += 1
        found = super().get_recent(conversation_id)
        self.partial += found is not None and found.message_offset > 0
        return found


def a_long_run(store: InMemoryConversationRepository) -> tuple[Summarizing, list[str]]:
    """Forty turns with a summarizing window: tool calls run by policy, others approved by a person
    in the next request; then a decision about a call settled long ago. What each model call was sent."""
    from dcaf_like import IllegalTransition, tool

    @tool(requires_approval=False)
    def list_pods(namespace: str) -> str:
        """The pods of a namespace."""
        return f"web-1 runs in {namespace}"

    @tool
    def delete_pod(name: str) -> str:
        """Delete a pod."""
        return f"{name} deleted"

    script: list[object] = []
    for n in range(40):
        if n % 5 == 1:
            script.append(tool_calls(tool_call("list_pods", namespace=f"ns-{n}")))
        if n % 5 == 3:
            script.append(tool_calls(tool_call("delete_pod", name=f"web-{n}")))
        script.append(answer(n))
    runtime = Summarizing(script, window=1500)
    agent = Agent(
        system=SYSTEM,
        runtime=runtime,
        repository=store,
        tools=[list_pods, delete_pod],
        context=ContextWindow(summarize=True),
    )
    first_call = None
    for n in range(40):
        response = agent.run(question(n), conversation_id="conv-long")
        for call in response.pending_tool_calls:
            agent.approve("conv-long", call.id)
            first_call = first_call or call.id
    assert first_call is not None
    with pytest.raises(IllegalTransition):  # the same refusal, whichever read found it
        agent.approve("conv-long", first_call)
    return runtime, [
        repr((r.system, [type(m).__name__ for m in r.messages], texts(r))) for r in runtime.requests
    ]


def test_a_turn_that_reads_the_recent_part_sends_what_a_whole_read_would():
    recent = RecentReads()
    _, sent = a_long_run(recent)
    runtime, sent_after_whole_reads = a_long_run(WholeReads())

    assert sent == sent_after_whole_reads
    assert runtime.summaries  # the summary stands for the older messages
    assert recent.partial > 20  # most turns read only the recent part


def test_without_a_known_window_a_turn_reads_the_whole_conversation():
    store = RecentReads()
    agent = Agent(system=SYSTEM, runtime=FakeRuntime([answer(n) for n in range(3)]), repository=store)
    conversation_id = None
    for n in range(3):
        conversation_id = agent.run(question(n), conversation_id=conversation_id).conversation_id

    assert store.asked == 0


# -- images and files -------------------------------------------------------------------------------


def png(width: int, height: int) -> bytes:
    """A PNG's signature and header chunk (what its size is read from), then some bytes."""
    header = struct.pack(">II", width, height) + bytes([8, 6, 0, 0, 0])
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + header + b"\0\0\0\0" + b"\0" * 64


def jpeg(width: int, height: int) -> bytes:
    """A JPEG with a JFIF and an Exif segment before its frame header, as a camera writes one."""
    jfif = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0"
    exif = b"\xff\xe1" + struct.pack(">H", 2 + 3000) + b"\xab" * 3000
    frame = b"\xff\xc2" + struct.pack(">HBHHB", 17, 8, height, width, 3) + b"\x01\x22\0" * 3
    return b"\xff\xd8" + jfif + exif + b"\xff" + frame + b"\xff\xda" + b"\0" * 64


def webp(chunk: bytes, width: int, height: int) -> bytes:
    if chunk == b"VP8 ":
        body = b"\x10\x02\x00" + b"\x9d\x01\x2a" + struct.pack("<HH", width, height)
    elif chunk == b"VP8L":
        body = b"\x2f" + ((width - 1) | (height - 1) << 14).to_bytes(4, "little")
    else:
        body = b"\x10\0\0\0" + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    data = b"WEBP" + chunk + struct.pack("<I", len(body)) + body + b"\0" * 16
    return b"RIFF" + struct.pack("<I", len(data)) + data


def gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\0" * 32


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize(
    "image",
    [
        png(1280, 720),
        jpeg(1280, 720),
        gif(1280, 720),
        webp(b"VP8 ", 1280, 720),
        webp(b"VP8L", 1280, 720),
        webp(b"VP8X", 1280, 720),
    ],
    ids=["png", "jpeg", "gif", "webp-lossy", "webp-lossless", "webp-extended"],
)
def test_an_images_size_in_pixels_is_read_from_its_header(image: bytes) -> None:
    assert image_size(b64(image)) == (1280, 720)


def test_an_image_whose_header_says_nothing_readable_has_no_size() -> None:
    assert image_size(b64(b"\x89PNG\r\n\x1a\n fake pixels")) is None
    assert image_size(b64(b"\xff\xd8" + b"\xff\xe1" + struct.pack(">H", 60_000) + b"\0" * 70_000)) is None
    assert image_size(b64(png(0, 720))) is None


def test_an_image_costs_the_larger_of_openais_tiles_and_anthropics_pixels_per_token() -> None:
    # 1024 x 1024: OpenAI 768 x 768, 4 tiles: 765; Claude 1024 * 1024 / 750: 1,399.
    assert image_tokens(1024, 1024) == 1399
    # 2048 x 768: OpenAI 8 tiles: 1,445; Claude 1568 x 588 / 750: 1,230.
    assert image_tokens(2048, 768) == 1445
    # A photo: OpenAI 1024 x 768, 4 tiles: 765; Claude capped at 1,600.
    assert image_tokens(4000, 3000) == 1600
    # A small one: one tile, 255; Claude 27.
    assert image_tokens(200, 100) == 255


def test_an_image_of_unknown_size_costs_the_most_either_rule_gives() -> None:
    by_url = attachment("image", url="https://example.com/pods.png")
    unread = attachment("image", media_type="image/png", data=b64(b"\x89PNG\r\n\x1a\n fake pixels"))

    assert part_tokens(by_url) == part_tokens(unread) == IMAGE_TOKENS == 1600
    assert part_tokens(attachment("image", media_type="image/png", data=b64(png(1024, 1024)))) == 1399


def test_a_text_file_costs_its_text_and_any_other_file_a_figure_per_kib() -> None:
    csv = attachment("file", media_type="text/csv", data=b64(b"pod,status\n" * 400), name="pods.csv")
    manifest = attachment("file", media_type="application/json", data=b64(b"{}" * 1000), name="m.json")
    pdf = attachment("file", media_type="application/pdf", data=b64(b"%PDF" * 2560), name="report.pdf")

    assert part_tokens(csv) == 4400 // 4
    assert part_tokens(manifest) == 2000 // 4
    assert part_tokens(pdf) == 10 * FILE_TOKENS_PER_KIB == 1000


def test_a_message_costs_its_images_and_files_besides_its_text() -> None:
    image = attachment("image", media_type="image/png", data=b64(png(1024, 1024)))
    plain = Block(0, (UserTurn("what is wrong here?"),), user=True)
    seeing = Block(0, (UserTurn("what is wrong here?", (image, image)),), user=True)

    assert block_cost(seeing, estimate_tokens) == block_cost(plain, estimate_tokens) + 2 * 1399


def test_a_conversation_with_images_is_not_sent_past_the_window() -> None:
    """Six questions, each with a screenshot: their text would fit the window many times over, the
    screenshots (1,399 tokens each) do not: the oldest exchanges go, the latest image stays."""
    screenshot = {"type": "image", "media_type": "image/png", "data": b64(png(1024, 1024))}
    runtime = FakeRuntime([answer(n) for n in range(6)], context_window=4096, accepts={"image"})
    agent = Agent(system=SYSTEM, runtime=runtime)
    conversation_id = None
    for n in range(6):
        content = [{"type": "text", "text": question(n)}, screenshot]
        conversation_id = agent.run(
            [{"role": "user", "content": content}], conversation_id=conversation_id
        ).conversation_id

    last = runtime.requests[-1]
    room = 4096 - 512 - math.ceil(4096 * 0.05)
    assert tokens(last) <= room
    assert texts(last)[-1] == question(5)
    assert isinstance(last.messages[-1], UserTurn)
    assert len(last.messages[-1].attachments) == 1
    assert len(last.messages) < 2 * 6 - 1  # older exchanges were left out
    whole = agent.conversation(conversation_id)
    assert whole is not None
    assert len(whole.messages) == 12
    # Without its images, the whole conversation would be far from the window.
    assert sum(estimate_tokens(m.content.text) + 8 for m in whole.messages) < room // 4


# -- a window without a summary stores where it cut (ADR 25) ----------------------------------------


def test_the_cut_only_moves_forward_and_never_past_the_last_message():
    conversation = Conversation.start()
    for n in range(6):
        conversation.add_user_message(question(n))
    conversation.move_cut(2)
    version = conversation.version

    for backward_or_beyond in (1, 2, 6):
        with pytest.raises(DomainError):
            conversation.move_cut(backward_or_beyond)
    assert (conversation.cut, conversation.version) == (2, version)
    conversation.move_cut(5)
    assert (conversation.cut, conversation.version) == (5, version + 1)


def test_a_window_without_a_summary_stores_its_cut_and_never_sends_what_lies_before_it():
    store = InMemoryConversationRepository()
    runtime = FakeRuntime([answer(n) for n in range(40)], context_window=1500)
    agent = Agent(system=SYSTEM, runtime=runtime, repository=store)
    cuts = []
    for n in range(40):
        agent.run(question(n), conversation_id="conv-cut")
        stored = store.get("conv-cut")
        assert stored is not None
        cuts.append(stored.cut)
        first = texts(runtime.requests[-1])[0]
        assert first == question(stored.cut // 2)  # what is sent begins at the stored cut
        if stored.cut:
            assert f"{stored.cut} earlier messages of this conversation are not shown" in (
                runtime.requests[-1].system
            )

    assert cuts == sorted(cuts)  # it only moved forward
    assert cuts[-1] > 0
    moves = sum(1 for a, b in itertools.pairwise(cuts) if a != b)
    assert 0 < moves <= len([c for c in cuts if c]) // 2  # in steps, not on every turn


def test_blocks_before_the_cut_are_not_sent_even_when_they_would_fit_but_a_pinned_one_is():
    calls = (tool_call("restart_pod", name="web-1"),)
    running = Block(1, (AssistantTurn("", calls),), user=False, pinned=True)
    blocks = [
        Block(0, (UserTurn("restart web-1"),), user=True),
        running,
        *[Block(2 + n, (UserTurn(question(n)) if n % 2 == 0 else AssistantTurn(answer(n)),), n % 2 == 0)
          for n in range(6)],
    ]  # fmt: skip
    view = ContextView(SYSTEM, (), blocks, None, 100_000, estimate_tokens, cut=4)

    fitted = ContextWindow().fit(view)

    assert fitted.messages == (AssistantTurn("", calls), *(m for b in blocks[4:] for m in b.messages))
    assert fitted.system.endswith("3 earlier messages of this conversation are not shown: they did not fit "
                                  "the model's context window.")  # fmt: skip
    assert fitted.cut == 0  # all that follows the cut fits: it stays where it is


def test_when_the_cut_moves_a_quarter_of_the_budget_is_left_free():
    blocks = [
        Block(n, (UserTurn(question(n)) if n % 2 == 0 else AssistantTurn(answer(n)),), n % 2 == 0)
        for n in range(60)
    ]
    view = ContextView(SYSTEM, (), blocks, None, 1500, estimate_tokens, cut=10)
    note = estimate_tokens(DROPPED_NOTE.format(n=60)) + 1
    budget = 1500 - 512 - 75 - system_cost(SYSTEM, (), estimate_tokens) - note

    fitted = ContextWindow().fit(view)

    cut = fitted.cut
    assert cut > 10
    assert blocks[cut].user  # where an exchange begins
    assert fitted.messages == tuple(m for b in blocks[cut:] for m in b.messages)
    assert fitted.system.endswith(DROPPED_NOTE.format(n=cut))
    # The first exchange that leaves a quarter of the budget free: the one before it would not.
    costs = [block_cost(b, estimate_tokens) for b in blocks]
    assert sum(costs[cut:]) <= budget - budget // 4 < sum(costs[cut - 2 :])


def test_a_whole_read_with_a_cut_sends_what_the_recent_read_from_it_does():
    blocks = [
        Block(n, (UserTurn(question(n)) if n % 2 == 0 else AssistantTurn(answer(n)),), n % 2 == 0)
        for n in range(80)
    ]
    view = ContextView(SYSTEM, (), blocks, None, 1500, estimate_tokens, cut=50)

    whole = ContextWindow().fit(view)
    recent = ContextWindow().fit(replace(view, blocks=blocks[50:]))

    assert recent == whole


def a_run_without_a_summary(store: InMemoryConversationRepository) -> list[str]:
    """Forty turns with a window that does not summarize, as a_long_run: what each call was sent."""
    from dcaf_like import IllegalTransition, tool

    @tool(requires_approval=False)
    def list_pods(namespace: str) -> str:
        """The pods of a namespace."""
        return f"web-1 runs in {namespace}"

    @tool
    def delete_pod(name: str) -> str:
        """Delete a pod."""
        return f"{name} deleted"

    script: list[object] = []
    for n in range(40):
        if n % 5 == 1:
            script.append(tool_calls(tool_call("list_pods", namespace=f"ns-{n}")))
        if n % 5 == 3:
            script.append(tool_calls(tool_call("delete_pod", name=f"web-{n}")))
        script.append(answer(n))
    runtime = FakeRuntime(script, context_window=1500)
    agent = Agent(system=SYSTEM, runtime=runtime, repository=store, tools=[list_pods, delete_pod])
    first_call = None
    for n in range(40):
        response = agent.run(question(n), conversation_id="conv-cut")
        for call in response.pending_tool_calls:
            agent.approve("conv-cut", call.id)
            first_call = first_call or call.id
    assert first_call is not None
    with pytest.raises(IllegalTransition):  # the same refusal, whichever read found it
        agent.approve("conv-cut", first_call)
    for request in runtime.requests:
        assert_every_call_is_with_its_result(request)
    return [repr((r.system, [type(m).__name__ for m in r.messages], texts(r))) for r in runtime.requests]


def test_a_turn_that_reads_from_the_cut_sends_what_a_whole_read_would():
    recent = RecentReads()
    sent = a_run_without_a_summary(recent)
    whole = WholeReads()
    sent_after_whole_reads = a_run_without_a_summary(whole)

    assert sent == sent_after_whole_reads
    stored = whole.get("conv-cut")
    assert stored is not None
    assert stored.cut > 0
    assert recent.partial > 20  # most turns read only the part from the cut on


# -- a turn counts a settled block once (issue 21) ---------------------------------------------------


def without_the_turns_blocks_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every model call of a turn transcribes and counts every block again, as before they were kept."""
    from dcaf_like.application.context import TokenCounter
    from dcaf_like.application.transcript import TranscriptCache, transcribe

    def afresh(
        self: TranscriptCache, conversation: Conversation, accepts: frozenset[str], count: TokenCounter
    ) -> tuple[list[Block], list[int]]:
        blocks = []
        for index, message in enumerate(conversation.messages, conversation.message_offset):
            messages: list[ModelMessage] = []
            settled = transcribe(conversation, message, messages, accepts)
            blocks.append(Block(index, tuple(messages), message.role is Role.USER, pinned=not settled))
        return blocks, [block_cost(b, count) for b in blocks]

    monkeypatch.setattr(TranscriptCache, "blocks", afresh)


IMAGES = frozenset({"image"})


def numbered_call_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls get ids 1, 2, ... (not random ones), so that two runs send the same requests."""
    from dcaf_like.domain import ToolCallId

    numbers = itertools.count(1)
    monkeypatch.setattr(ToolCallId, "new", classmethod(lambda cls: cls(f"tc_{next(numbers):024x}")))


class Measuring(Summarizing):
    """Also measures its whole prompt, adding 15 tokens of its own around every message."""

    def count_request_tokens(self, request: ModelRequest) -> int:
        return tokens(request) + 15 * len(request.messages)


def a_run_of_many_rounds(runtime: Summarizing, context: ContextWindow) -> Conversation:
    """Twenty turns of several model calls each: tool calls one after the other and two at once, some
    returning a screenshot, some approved by a person in the next request; questions with images."""
    screenshot = attachment("image", media_type="image/png", data=b64(png(640, 480)))

    @tool(requires_approval=False)
    def list_pods(namespace: str) -> str | ToolOutput:
        """The pods of a namespace, and a screenshot of its dashboard for namespace prod."""
        text = f"web-1 runs in {namespace}"
        return ToolOutput(text, (screenshot,)) if namespace == "prod" else text

    @tool
    def delete_pod(name: str) -> str:
        """Delete a pod."""
        return f"{name} deleted"

    for n in range(20):
        runtime.then(
            tool_calls(tool_call("list_pods", namespace=f"ns-{n}")),
            tool_calls(tool_call("list_pods", namespace="prod"), tool_call("list_pods", namespace="dev")),
        )
        if n % 3 == 1:
            runtime.then(tool_calls(tool_call("delete_pod", name=f"web-{n}")))
        runtime.then(answer(n))
    store = InMemoryConversationRepository()
    agent = Agent(
        system=SYSTEM, runtime=runtime, repository=store, tools=[list_pods, delete_pod], context=context
    )
    for n in range(20):
        content: list[dict[str, str]] = [{"type": "text", "text": question(n)}]
        if n % 4 == 0:
            content.append({"type": "image", "media_type": "image/png", "data": b64(png(320, 200))})
        response = agent.run([{"role": "user", "content": content}], conversation_id="conv-rounds")
        for call in response.pending_tool_calls:
            agent.approve("conv-rounds", call.id)
    stored = store.get("conv-rounds")
    assert stored is not None
    return stored


@pytest.mark.parametrize(
    ("runtime", "context"),
    [
        (lambda: Summarizing([], 4096, IMAGES), ContextWindow(summarize=True)),
        (lambda: Summarizing([], 4096, IMAGES), ContextWindow()),
        (lambda: Measuring([], 4096, IMAGES), ContextWindow()),
        (lambda: Summarizing([], 100_000, IMAGES), ContextWindow(2500, summarize=True)),
    ],
    ids=["summarizing", "cutting", "measured", "policys-own-window"],
)
def test_a_turn_keeping_its_settled_blocks_sends_every_model_what_counting_them_afresh_would(
    runtime, context, monkeypatch: pytest.MonkeyPatch
):
    numbered_call_ids(monkeypatch)
    kept = runtime()
    after_kept = a_run_of_many_rounds(kept, context)
    numbered_call_ids(monkeypatch)
    with monkeypatch.context() as patched:
        without_the_turns_blocks_kept(patched)
        afresh = runtime()
        after_afresh = a_run_of_many_rounds(afresh, context)

    assert kept.requests == afresh.requests  # every model call, its system prompt, messages and images
    assert kept.summaries == afresh.summaries
    assert (after_kept.cut, after_kept.summary) == (after_afresh.cut, after_afresh.summary)
    assert len(kept.requests) > 3 * 20  # several model calls a turn: the later ones reuse blocks
    assert after_kept.cut or after_kept.summary  # the window was full: blocks were left out
    assert any(isinstance(m, UserTurn) and m.attachments for m in kept.requests[-1].messages)
