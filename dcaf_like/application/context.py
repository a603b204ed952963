"""What the model reads of a conversation: the transcript, fitted to the model's context window.

A policy sees the conversation as *blocks*, one per stored message: a user turn, or an assistant turn
followed by the results of its calls. A block is never split, so a tool call is never separated from
its result. :class:`ContextWindow`, the default, keeps the system prompt, every block holding a call
that is not settled yet and the newest blocks that fit; the oldest exchanges go first. With
``summarize=True`` what it drops is summarized once by the agent's own runtime, and the summary is
stored with the conversation (:class:`~dcaf_like.domain.ContextSummary`) for later turns to reuse.

Tokens are counted with the runtime's tokenizer (:meth:`AgentRuntime.count_tokens`); a runtime without
one estimates a token per four characters, rounded up (:func:`estimate_tokens`). The images and files
a user's message carries are counted by an estimate of their own (:func:`part_tokens`).
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from dcaf_like.application.image_size import image_size
from dcaf_like.application.messages import (
    AssistantTurn,
    ModelMessage,
    ModelRequest,
    ToolResult,
    ToolSpec,
    UserTurn,
)
from dcaf_like.domain import Attachment, ContextSummary, PartKind

#: Characters per token of the estimate used when a runtime has no tokenizer of its own.
CHARS_PER_TOKEN = 4
#: Tokens a message costs besides its text (role markers and separators of a chat template).
MESSAGE_OVERHEAD = 8

#: Tokens of an image whose size in pixels is not known (by URL, or a header not read): the most
#: either rule of :func:`image_tokens` gives one image.
IMAGE_TOKENS = 1_600
#: Tokens per KiB of a file that is not text (a PDF, ...): a PDF page costs Claude 1,500 to 3,000
#: tokens (its text and its picture) and usually takes 20 to 50 KiB.
FILE_TOKENS_PER_KIB = 100
# Media types of files that are text besides text/*, and suffixes of structured ones (+json).
_TEXT_TYPES = frozenset(
    {
        "application/json",
        "application/xml",
        "application/yaml",
        "application/x-yaml",
        "application/toml",
        "application/javascript",
        "application/x-sh",
        "application/sql",
        "application/x-ndjson",
    }
)
_TEXT_SUFFIXES = ("+json", "+xml", "+yaml")

TokenCounter = Callable[[str], int]


def estimate_tokens(text: str) -> int:
    """A token per four characters, rounded up: close for English and code with BPE tokenizers, and
    on the safe side for JSON."""
    return -(-len(text) // CHARS_PER_TOKEN)


def part_tokens(part: Attachment) -> int:
    """What an image or a file costs the model's context, estimated (no runtime tokenizes them):
    an image by :func:`image_tokens` when its size in pixels can be read (inline PNG, JPEG, GIF or
    WebP), else :data:`IMAGE_TOKENS`; a file of a text type by the estimate of its text (a token per
    four bytes), any other :data:`FILE_TOKENS_PER_KIB` per KiB."""
    if part.kind is PartKind.IMAGE:
        pixels = None if part.data is None else image_size(part.data)
        return IMAGE_TOKENS if pixels is None else image_tokens(*pixels)
    if _is_text(part.media_type):
        return -(-part.size // CHARS_PER_TOKEN)
    return -(-part.size * FILE_TOKENS_PER_KIB // 1024)


def image_tokens(width: int, height: int) -> int:
    """Tokens of an image of `width` x `height` pixels: the larger of two published rules, as the
    model reading it is not known here.

    - OpenAI (``detail: high``): scaled to fit 2048 x 2048, then its short side to 768; 170 tokens
      per 512-pixel tile, plus 85.
    - Anthropic (Claude): width x height / 750, the image first scaled to fit 1568 pixels on its
      long side; at most 1,600."""
    w, h = _scaled_down(width, height, 2048 / max(width, height))
    w, h = _scaled_down(w, h, 768 / min(w, h))
    openai = 170 * math.ceil(w / 512) * math.ceil(h / 512) + 85
    w, h = _scaled_down(width, height, 1568 / max(width, height))
    claude = min(math.ceil(w * h / 750), IMAGE_TOKENS)
    return max(openai, claude)


def _scaled_down(width: int, height: int, factor: float) -> tuple[int, int]:
    """The size scaled by `factor` when it is below 1, in whole pixels."""
    if factor >= 1:
        return width, height
    return max(1, round(width * factor)), max(1, round(height * factor))


def _is_text(media_type: str) -> bool:
    return media_type.startswith("text/") or media_type in _TEXT_TYPES or media_type.endswith(_TEXT_SUFFIXES)


@dataclass(frozen=True, slots=True)
class Block:
    """One stored message as the model reads it (never split): `index` in the conversation's messages,
    `pinned` when it holds a call that is not settled yet."""

    index: int
    messages: tuple[ModelMessage, ...]
    user: bool
    pinned: bool = False


@dataclass(frozen=True, slots=True)
class ContextView:
    """What a policy fits: the request as it would be sent whole, split into blocks."""

    system: str
    tools: tuple[ToolSpec, ...]
    blocks: Sequence[Block]
    summary: ContextSummary | None
    #: The model's context window in tokens (the policy's own, else the runtime's).
    window: int
    count: TokenCounter
    #: Tokens of a whole request as the runtime sends it, when it can tell (else None).
    measure: Callable[[ModelRequest], int | None] | None = None
    #: The conversation's stored cut (:attr:`Conversation.cut`): a block before it is not sent again,
    #: unless it is pinned. A turn reading the recent part holds no other block before it (ADR 25).
    cut: int = 0
    #: The tokens of each block by `count`, in the order of `blocks`, when the caller counted them
    #: already (a turn keeps those of settled blocks from one model call to the next); None: the
    #: policy counts them (:func:`block_costs`).
    costs: Sequence[int] | None = None


@dataclass(frozen=True, slots=True)
class Fitted:
    """A policy's answer: the system prompt and messages to send, or first a summary to write.

    When `summarize` is set, the turn asks the runtime for it, stores the answer as the summary of
    ``messages[:through]`` and asks the policy again. A `cut` past the view's is stored with the
    conversation (:meth:`~dcaf_like.domain.Conversation.move_cut`): later fits send nothing before it
    but pinned blocks."""

    system: str
    messages: tuple[ModelMessage, ...]
    summarize: ModelRequest | None = None
    through: int = 0
    cut: int = 0


class ContextPolicy(ABC):
    """Decides what part of a conversation the model reads on each call (``Agent(context=...)``)."""

    #: The window in tokens; None takes the runtime's (``runtime.context_window``).
    window: int | None = None
    #: Whether :meth:`fit` may send messages the stored summary covers, or that lie before the stored
    #: cut (besides those whose calls are not settled yet). One that never does (:class:`ContextWindow`)
    #: lets a turn read only the conversation's recent messages from the store
    #: (``ConversationRepository.get_recent``, ADR 22 and 23).
    sends_summarized: bool = True

    @abstractmethod
    def fit(self, view: ContextView) -> Fitted: ...


SUMMARY_SYSTEM = (
    "You keep the memory of a long operations conversation. Summarize what was asked, what was done "
    "(tools run, their results, what was approved or rejected) and what is still open, in at most "
    "120 words of plain text. Keep names, namespaces, identifiers and numbers exactly."
)
SUMMARY_HEADER = "Summary of the earlier part of this conversation, which is no longer shown:\n"
DROPPED_NOTE = (
    "{n} earlier messages of this conversation are not shown: they did not fit the model's context window."
)


class ContextWindow(ContextPolicy):
    """The default policy: the newest exchanges that fit, never a call without its result.

    `reserve` tokens are left for the answer, and `margin` (a fraction of the window) for what the
    count misses: a runtime's own wrapping of messages (the local model restates the request after
    tool results: ~3% of its prompt), or an estimate's error. The transcript is cut at the start of
    an exchange (a user's message), and the cut is stored with the conversation: later calls send
    nothing before it (a call not settled yet aside) and it moves only when what follows no longer
    fits, then far enough to leave a quarter of the budget free, so consecutive calls send the same
    beginning (a provider's prompt cache, or a local model, reuses what it already read of it) and a
    turn reads only the conversation's part from the cut on (ADR 25). When even the latest exchange
    does not fit, its oldest tool rounds go, its user message stays. With `summarize`, what is cut is
    summarized first, once, by the agent's runtime, and the summary's end is where later calls start.
    """

    sends_summarized = False  # a summary stands for the messages it covers; nothing before the cut is sent

    def __init__(
        self, window: int | None = None, *, reserve: int = 512, margin: float = 0.05, summarize: bool = False
    ) -> None:
        if reserve < 0 or not 0 <= margin < 1:
            raise ValueError(
                "reserve is a number of tokens (0 or more), margin a fraction of the window (0 to 1)"
            )
        if window is not None and window - reserve - math.ceil(window * margin) <= 0:
            raise ValueError(f"a context window of {window} tokens leaves nothing after reserving {reserve}")
        self.window = window
        self.reserve = reserve
        self.margin = margin
        self.summarize = summarize

    def __repr__(self) -> str:
        return (
            f"ContextWindow(window={self.window}, reserve={self.reserve}, margin={self.margin}, "
            f"summarize={self.summarize})"
        )

    def fit(self, view: ContextView) -> Fitted:
        """Fitted by the counts of each message; then, when the runtime can measure the whole request
        as it sends it (the local model renders its own prompt), cut again by what was over."""
        room = view.window - self.reserve - math.ceil(view.window * self.margin)
        target = room
        if view.costs is None:  # counted once, however many times it is fitted below
            view = replace(view, costs=block_costs(view))
        for _ in range(6):
            fitted = self._fit(view, target)
            if fitted.summarize is not None or view.measure is None:
                return fitted
            measured = view.measure(ModelRequest(fitted.system, fitted.messages, view.tools))
            if measured is None or measured <= room:
                return fitted
            # The counts fell short by measured / counted: fit again with the room scaled down by that.
            counted = system_cost(fitted.system, view.tools, view.count) + sum(
                message_cost(m, view.count) for m in fitted.messages
            )
            target = min(target - 1, int(counted * room / measured * 0.99))
        return fitted

    def _fit(self, view: ContextView, room: int) -> Fitted:
        count = view.count
        covered = max(view.cut, 0 if view.summary is None else view.summary.through)
        sent = [
            (b, c)
            for b, c in zip(view.blocks, block_costs(view), strict=True)
            if b.index >= covered or b.pinned
        ]
        blocks = [b for b, _ in sent]
        costs = [c for _, c in sent]
        system = with_summary(view.system, view.summary)
        budget = room - system_cost(system, view.tools, count)
        # The messages before the cut that are not sent (the pinned ones are).
        left_out = covered - sum(1 for b in blocks if b.index < covered)
        if view.summary is None and (left_out or sum(costs) > budget):
            # Say that something is left out, in the room it takes.
            budget -= count(DROPPED_NOTE.format(n=left_out + len(blocks))) + 1
        if sum(costs) <= budget:
            return Fitted(_noted(system, view.summary, left_out), _messages(blocks))
        # A summary costs a model call: a summarizing window cuts to half the budget, so it is needed rarely.
        keep = cut(blocks, costs, budget // 2) if self.summarize else cut_forward(blocks, costs, budget)
        kept = [b for b, k in zip(blocks, keep, strict=True) if k]
        through = next((b.index for b in kept if not b.pinned), blocks[-1].index if blocks else 0)
        system = _noted(system, view.summary, left_out + len(blocks) - len(kept))
        if not self.summarize:  # the turn stores the cut; a summarizing window summarizes up to it instead
            return Fitted(system, _messages(kept), cut=through)
        fitted = Fitted(system, _messages(kept))
        if through <= covered:
            return fitted
        dropped = [b for b, k in zip(blocks, keep, strict=True) if not k and b.index < through]
        request = summary_request(view.summary, dropped, room, count)
        return Fitted(fitted.system, fitted.messages, summarize=request, through=through)


def cut(blocks: Sequence[Block], costs: Sequence[int], budget: int) -> list[bool]:
    """Which blocks to keep within `budget`: the pinned ones, and the newest exchanges that fit.

    An exchange starts at a user's message. The cut is made at the first exchange to start in a new
    quarter of the budget (counted from the first block), so it stays where it is while the
    conversation grows by less than a quarter, then moves a quarter at once. When even the latest
    exchange does not fit, its oldest rounds go; its user message and its newest round stay."""
    n = len(blocks)
    users = [i for i, b in enumerate(blocks) if b.user]
    last = users[-1] if users else 0
    after = [0] * (n + 1)  # after[i]: cost of blocks[i:]
    for i in range(n - 1, -1, -1):
        after[i] = after[i + 1] + costs[i]
    page = max(1, budget // 4)
    pinned_before = 0
    page_of_last_cut = 0
    for i in range(1, last + 1):
        pinned_before += costs[i - 1] if blocks[i - 1].pinned else 0
        if not blocks[i].user:
            continue
        before = after[0] - after[i]
        if before // page == page_of_last_cut and i != last:
            continue  # not the first exchange of a new quarter: cutting here would move every call
        page_of_last_cut = before // page
        if after[i] + pinned_before <= budget:
            return [j >= i or blocks[j].pinned for j in range(n)]
    return latest(blocks, costs, budget, last)


def cut_forward(blocks: Sequence[Block], costs: Sequence[int], budget: int) -> list[bool]:
    """Which blocks to keep within `budget` when they do not all fit and no summary stands for what
    goes: the blocks are those from the conversation's stored cut on (and the pinned ones before it).

    The cut moves forward to the first exchange after which what is kept (the pinned blocks with it)
    takes at most three quarters of the budget, so that the conversation may grow by a quarter of the
    budget before it moves again; failing that, to the first after which it fits the budget. When
    even the latest exchange does not fit, its oldest rounds go."""
    users = [i for i, b in enumerate(blocks) if b.user]
    last = users[-1] if users else 0
    after = [0] * (len(blocks) + 1)  # after[i]: cost of blocks[i:]
    for i in range(len(blocks) - 1, -1, -1):
        after[i] = after[i + 1] + costs[i]
    target = budget - max(1, budget // 4)
    pinned_before = 0
    fitting = None
    for i in range(1, last + 1):
        pinned_before += costs[i - 1] if blocks[i - 1].pinned else 0
        if not blocks[i].user:
            continue
        size = after[i] + pinned_before  # of what is sent when the cut moves to blocks[i]
        if size <= target:
            return [j >= i or b.pinned for j, b in enumerate(blocks)]
        if fitting is None and size <= budget:
            fitting = i
    if fitting is not None:
        return [j >= fitting or b.pinned for j, b in enumerate(blocks)]
    return latest(blocks, costs, budget, last)


def latest(blocks: Sequence[Block], costs: Sequence[int], budget: int, last: int) -> list[bool]:
    """The pinned blocks and the latest exchange (from `last`) when it alone does not fit: its oldest
    rounds go, its user message and its newest round stay."""
    n = len(blocks)
    keep = [j >= last or blocks[j].pinned for j in range(n)]
    total = sum(c for c, k in zip(costs, keep, strict=True) if k)
    for j in range(last, n - 1):
        if total <= budget:
            break
        if blocks[j].pinned or (j == last and blocks[j].user):
            continue
        keep[j] = False
        total -= costs[j]
    return keep


def _messages(blocks: Sequence[Block]) -> tuple[ModelMessage, ...]:
    return tuple(m for b in blocks for m in b.messages)


def _noted(system: str, summary: ContextSummary | None, left_out: int) -> str:
    """The system prompt saying how many messages are left out, unless a summary stands for them."""
    if summary is not None or not left_out:
        return system
    return _joined(system, DROPPED_NOTE.format(n=left_out))


def _joined(system: str, extra: str) -> str:
    return f"{system.rstrip()}\n\n{extra}" if system.strip() else extra


def with_summary(system: str, summary: ContextSummary | None) -> str:
    return system if summary is None else _joined(system, SUMMARY_HEADER + summary.text)


def message_text(message: ModelMessage) -> str:
    """The text of a message as a tokenizer should count it."""
    if isinstance(message, AssistantTurn):
        calls = " ".join(
            f"{c.name} {json.dumps(dict(c.arguments), ensure_ascii=False)}" for c in message.tool_calls
        )
        return f"{message.text} {calls}" if calls else message.text
    if isinstance(message, ToolResult):
        return f"{message.tool_name}: {message.content}"
    return message.text


def message_cost(message: ModelMessage, count: TokenCounter) -> int:
    """Tokens of a message: its text, the chat template's markers, and its images and files."""
    cost = count(message_text(message)) + MESSAGE_OVERHEAD
    if isinstance(message, UserTurn):
        cost += sum(part_tokens(part) for part in message.attachments)
    return cost


def block_cost(block: Block, count: TokenCounter) -> int:
    return sum(message_cost(m, count) for m in block.messages)


def block_costs(view: ContextView) -> Sequence[int]:
    """The tokens of each of the view's blocks: those the caller counted, else counted now."""
    if view.costs is not None:
        return view.costs
    return [block_cost(b, view.count) for b in view.blocks]


def system_cost(system: str, tools: Sequence[ToolSpec], count: TokenCounter) -> int:
    specs = json.dumps(
        [{"name": t.name, "description": t.description, "parameters": t.input_schema} for t in tools],
        ensure_ascii=False,
    )
    return count(system) + (count(specs) if tools else 0) + MESSAGE_OVERHEAD


def summary_request(
    previous: ContextSummary | None, dropped: Sequence[Block], limit: int, count: TokenCounter
) -> ModelRequest:
    """What the runtime is asked to summarize: the previous summary, then the dropped messages as
    lines, the oldest left out first when they do not all fit the window."""
    lines = [f"{_speaker(m)}: {message_text(m)}" for b in dropped for m in b.messages]
    head = [f"Summary so far: {previous.text}"] if previous is not None else []
    room = limit - count(SUMMARY_SYSTEM) - count(" ".join(head)) - 2 * MESSAGE_OVERHEAD
    costs = [count(line) + 1 for line in lines]
    total = sum(costs)
    first = 0
    while total > room and first < len(lines) - 1:
        total -= costs[first]
        first += 1
    text = "\n".join([*head, *lines[first:]])
    return ModelRequest(system=SUMMARY_SYSTEM, messages=(UserTurn(text),))


def _speaker(message: ModelMessage) -> str:
    if isinstance(message, UserTurn):
        return "User"
    if isinstance(message, ToolResult):
        return f"Result of {message.tool_name}" if not message.is_error else f"Error from {message.tool_name}"
    return "Assistant"
