"""A receiver for dcaf_like's approval webhook that tells a chat channel a call waits for approval.

    DCAF_APPROVAL_WEBHOOK_SECRET=... CHAT_WEBHOOK_URL=https://hooks.slack.com/services/... \\
        python examples/approval_webhook_receiver.py --port 9000

and run the agent with ``DCAF_APPROVAL_WEBHOOK_URL=http://127.0.0.1:9000/`` and the same secret (see
docs/approvals.md, "Approvers notified"). Every delivery is checked before anything is posted: the
signature (HMAC-SHA256 of ``timestamp.body`` with the shared secret), the timestamp (five minutes at
most: an old delivery replayed is refused) and the delivery id (a retry of one already posted is
acknowledged, not posted twice). Without ``CHAT_WEBHOOK_URL`` the message is printed. The chat message
is ``{"text": ...}``, which Slack, Mattermost and Rocket.Chat incoming webhooks take.
"""

from __future__ import annotations

import argparse
import json
import os
import urllib.request
from collections import OrderedDict
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from dcaf_like.notifiers.webhook import DELIVERY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, verify

MAX_BODY = 1 << 20


def chat_text(notice: dict[str, Any]) -> str:
    """The message an approver reads: who waits, for what, with which arguments, and where to decide."""
    lines = [f"*{notice['agent']}* waits for approval (conversation `{notice['conversation_id']}`):"]
    for call in notice["calls"]:
        why = f" ({call['approval_reason']})" if call.get("approval_reason") else ""
        lines.append(f"- `{call['name']}` {json.dumps(call['input'], ensure_ascii=False)}{why}")
    if notice.get("link"):
        lines.append(f"Decide: {notice['link']}")
    return "\n".join(lines)


def post_to_chat(url: str | None) -> Callable[[str], None]:
    def post(text: str) -> None:
        if url is None:
            print(text, flush=True)
            return
        body = json.dumps({"text": text}).encode()
        request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            answer.read()

    return post


def make_handler(secret: str, post: Callable[[str], None]) -> type[BaseHTTPRequestHandler]:
    seen: OrderedDict[str, None] = OrderedDict()  # delivery ids already posted (the last 10,000)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self.answer(413)
                return
            body = self.rfile.read(length)
            if not verify(
                secret, body, self.headers.get(TIMESTAMP_HEADER), self.headers.get(SIGNATURE_HEADER)
            ):
                self.answer(401)  # not ours, altered, or replayed late
                return
            delivery = self.headers.get(DELIVERY_HEADER) or ""
            if delivery in seen:
                self.answer(200)  # a retry of one already posted
                return
            try:
                post(chat_text(json.loads(body)))
            except OSError:
                self.answer(502)  # the chat is down: the webhook will retry
                return
            seen[delivery] = None
            if len(seen) > 10_000:
                seen.popitem(last=False)
            self.answer(200)

        def answer(self, status: int) -> None:
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    args = parser.parse_args()
    secret = os.environ.get("DCAF_APPROVAL_WEBHOOK_SECRET")
    if not secret:
        raise SystemExit("set DCAF_APPROVAL_WEBHOOK_SECRET to the secret the agent signs with")
    handler = make_handler(secret, post_to_chat(os.environ.get("CHAT_WEBHOOK_URL")))
    server = ThreadingHTTPServer((args.host, args.port), handler)
    print(f"waiting for approval notices on http://{args.host}:{args.port}/", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
