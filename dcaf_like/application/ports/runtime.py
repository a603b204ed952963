"""The model behind an agent: :class:`AgentRuntime` implements one method (``invoke``); the others
have defaults, sync and async both ways, so a runtime writes only what its SDK offers natively (as
httpx's transports do)."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterator, Sequence

from dcaf_like.application.context import estimate_tokens
from dcaf_like.application.messages import (
    NO_SETTINGS,
    ModelCompleted,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ModelStreamEvent,
    ReasoningDelta,
    TextDelta,
)
from dcaf_like.concurrency.bridges import iterate_in_thread
from dcaf_like.domain import (
    Attachment,
)


class AgentRuntime(ABC):
    """A model behind an agent. Implement :meth:`invoke`; override the others when the SDK streams
    natively or has an async client."""

    #: Shown in responses' metadata and in errors, e.g. ``"bedrock:anthropic.claude-3-haiku"``.
    name: str = "runtime"
    #: The model's context window in tokens when known (``context_window=`` on each runtime; the local
    #: model's is its ``n_ctx``). None: the whole transcript is sent, as the model may take it.
    context_window: int | None = None
    #: The kinds of message parts besides text its model reads (``"image"``, ``"file"``); a message
    #: carrying another kind is refused before the model is called. None by default. A tool's images
    #: and files of a kind it takes reach it in a user's turn after the calls' results (ADR 23).
    accepts: frozenset[str] = frozenset()
    #: Its own model settings (from the runtime string, ``"openai:gpt-4o-mini?temperature=0"``); a
    #: request's settings (the agent's) override them. Read them with :meth:`settings_for`.
    settings: ModelSettings = NO_SETTINGS

    def settings_for(self, request: ModelRequest) -> ModelSettings:
        """The settings a request is answered with: the request's, then this runtime's own."""
        return request.settings.over(self.settings)

    def takes(self, part: Attachment) -> bool:
        """Whether its model reads `part`: whether :attr:`accepts` names its kind. A runtime that reads
        only some parts of a kind (the local model: text files) narrows it; a part it does not take is
        refused before the model is called."""
        return part.kind.value in self.accepts

    def refused_part(self, parts: Sequence[Attachment]) -> tuple[int, str] | None:
        """The first of `parts` its model cannot take, and why, or None when it takes them all.

        `parts` are every attachment a model request of the conversation would carry, in order: the
        earlier messages' and then this turn's, so that a rule on a whole request (at most five
        documents) can be kept as well as one on a part (a format, a size, an image by URL). By
        default a part is refused when :meth:`takes` says no; a runtime whose provider
        has narrower rules says them here, and the turn is refused before anything is saved or sent.
        """
        for i, part in enumerate(parts):
            if not self.takes(part):
                # a kind it takes in other media types is named by this part's media type
                kind = part.media_type if part.kind.value in self.accepts else part.kind.value
                return i, f"it takes no {kind} parts"
        return None

    def count_tokens(self, text: str) -> int:
        """Tokens `text` takes for this model: the runtime's tokenizer where it has one, else the
        estimate of :func:`~dcaf_like.application.context.estimate_tokens` (four characters a token)."""
        return estimate_tokens(text)

    def count_request_tokens(self, request: ModelRequest) -> int | None:
        """Tokens of the whole request as this runtime sends it, when it can tell (a runtime that
        renders its own prompt); None: the context policy goes by :meth:`count_tokens` alone."""
        return None

    @abstractmethod
    def invoke(self, request: ModelRequest) -> ModelResponse:
        """One model call: the conversation so far in, the model's answer out."""

    def stream(self, request: ModelRequest) -> Iterator[ModelStreamEvent]:
        """Deltas as the model produces them, then one :class:`ModelCompleted`."""
        response = self.invoke(request)
        yield from _deltas_of(response)
        yield ModelCompleted(response)

    async def ainvoke(self, request: ModelRequest) -> ModelResponse:
        return await asyncio.to_thread(self.invoke, request)

    def secret_values(self) -> tuple[str, ...]:
        """Values this runtime holds that no error may show (its API key): the service removes them
        from the text of every failure it reports. Override when the runtime holds one."""
        return ()

    def close(self) -> None:  # noqa: B027  (optional hook: most runtimes hold nothing to release)
        """Release the SDK's connections (a server calls this at shutdown)."""

    async def aclose(self) -> None:  # noqa: B027
        """Release the connections of the asyncio client used by the running event loop."""

    async def astream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        if type(self).stream is AgentRuntime.stream:
            response = await self.ainvoke(request)
            for delta in _deltas_of(response):
                yield delta
            yield ModelCompleted(response)
            return
        async for event in iterate_in_thread(self.stream(request)):
            yield event


def _deltas_of(response: ModelResponse) -> Iterator[ModelStreamEvent]:
    if response.reasoning:
        yield ReasoningDelta(response.reasoning)
    if response.text:
        yield TextDelta(response.text)
