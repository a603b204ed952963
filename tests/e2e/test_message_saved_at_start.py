"""docs/runs.md, "A crash keeps the user's message": the message a turn brings is saved as the turn
starts, before the model is asked, so a server killed while the model thinks does not lose it."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import httpx
from _helpdesk import user
from _server import dcaf_like_serve
from test_interrupted_runs import TARGET, wait_for

from dcaf_like.testing import OpenAICompatibleServer


def test_a_crash_keeps_the_users_message_a_server_killed_while_the_model_thinks_loses_nothing(
    tmp_path: Path,
) -> None:
    ledger = tmp_path / "ledger.log"
    ledger.touch()
    store = f"sqlite:///{tmp_path / 'conversations.sqlite3'}"
    serve = (TARGET, "--factory", "--port", "0", "--store", store)
    with OpenAICompatibleServer() as model:
        env = {
            **{k: v for k, v in os.environ.items() if k != "DCAF_STORE"},
            "DCAF_TEST_LEDGER": str(ledger),
            "DCAF_TEST_OPENAI_URL": model.base_url,
            "DCAF_TEST_LEASE": "600",
        }
        model.reply("Hello.")
        model.reply("never read: the server is killed first", delay=30)
        with dcaf_like_serve(*serve, env=env) as first:
            hello = httpx.post(f"{first.url}/api/chat", json={"messages": [user("hi")]}, timeout=10)
            conversation_id = hello.json()["data"]["conversation_id"]
            second = {"messages": [user("is web healthy?", conversation_id=conversation_id)]}

            def ask() -> None:
                with contextlib.suppress(httpx.HTTPError):
                    httpx.post(f"{first.url}/api/chat", json=second, timeout=40)

            asking = threading.Thread(target=ask, daemon=True)
            asking.start()
            wait_for(lambda: len(model.requests) == 2, "the model was asked the second time")
            assert first.process is not None
            first.process.kill()  # SIGKILL: the turn's end-of-turn save never happens
            first.process.wait(timeout=15)
            asking.join(timeout=45)

        with dcaf_like_serve(*serve, env=env) as again:
            stored = httpx.get(f"{again.url}/api/conversations/{conversation_id}", timeout=10).json()
    texts = [(m["role"], m["content"]) for m in stored["messages"]]
    assert texts == [("user", "hi"), ("assistant", "Hello."), ("user", "is web healthy?")]
