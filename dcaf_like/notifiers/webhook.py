"""Approvers notified where they are: a signed webhook POSTed when calls start waiting, and when a
waiting call's rule reminds its approvers or escalates it (docs/approvals.md, "Escalation").

The body is JSON (``type: "approval_required"``; ``event``: ``"approval_required"``, ``"reminder"``
or ``"escalation"``; ``groups``: whom a reminder or an escalation is for; the agent, the
conversation, each waiting call with its arguments as an approver sees them: secret ones masked, and
a link to the chat page when ``page_url`` is given). Each delivery is signed with HMAC-SHA256 over
``"{timestamp}." + body``::

    X-Dcaf-Delivery: 6f1c...          (the same on every retry: receivers drop repeats by it)
    X-Dcaf-Timestamp: 1795430000      (seconds; receivers refuse old ones, against replay)
    X-Dcaf-Signature: v1=3b2a...      (hex)

:func:`verify` checks all three for a receiver. Deliveries run on a thread of the notifier's own, so a
slow or broken receiver never holds a turn; a failed one (connection error, timeout, 429 or 5xx) is
retried with exponential backoff, other answers are final. Nothing of the secret, and of the URL only
its scheme and host (chat webhook URLs carry tokens), is ever logged or shown.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import queue
import threading
import time
import uuid
from dataclasses import asdict
from typing import Any
from urllib.parse import quote, urlsplit

from dcaf_like.application.notifications import ApprovalNotice, ApprovalNotifier

logger = logging.getLogger("dcaf_like.notify")

SIGNATURE_HEADER = "X-Dcaf-Signature"
TIMESTAMP_HEADER = "X-Dcaf-Timestamp"
DELIVERY_HEADER = "X-Dcaf-Delivery"
DEFAULT_TOLERANCE = 300.0


def sign(secret: str | bytes, timestamp: int, body: bytes) -> str:
    """The signature header's value for `body` sent at `timestamp`."""
    key = secret.encode() if isinstance(secret, str) else secret
    return "v1=" + hmac.new(key, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def verify(
    secret: str | bytes,
    body: bytes,
    timestamp: str | None,
    signature: str | None,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> bool:
    """Whether a delivery is ours and recent: the signature matches `body` and the timestamp, and the
    timestamp is within `tolerance` seconds of `now` (a replayed delivery is refused once it is old)."""
    if not timestamp or not signature or not timestamp.isdigit():
        return False
    moment = time.time() if now is None else now
    if abs(moment - int(timestamp)) > tolerance:
        return False
    return hmac.compare_digest(sign(secret, int(timestamp), body), signature)


class ApprovalWebhook(ApprovalNotifier):
    """POSTs each notice to `url`, signed with `secret`.

    `attempts` bounds the tries of one delivery, waiting `backoff` seconds before the second and twice
    as long before each next (at most `max_backoff`); `queue_size` bounds the notices waiting to be
    sent (past it a notice is dropped and logged). :meth:`close` waits up to `close_timeout` seconds
    for what is queued.
    """

    def __init__(
        self,
        url: str,
        *,
        secret: str | bytes,
        page_url: str | None = None,
        timeout: float = 5.0,
        attempts: int = 5,
        backoff: float = 1.0,
        max_backoff: float = 60.0,
        queue_size: int = 1000,
        close_timeout: float = 10.0,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"the approval webhook needs an http(s) URL, not {parts.scheme or url!r}")
        if not secret:
            raise ValueError("the approval webhook needs a secret to sign its deliveries with")
        if attempts < 1:
            raise ValueError("attempts must be at least 1")
        self._url = url
        self._secret = secret
        self.target = f"{parts.scheme}://{parts.hostname}"  # what logs and reprs show of the URL
        self.page_url = page_url.rstrip("/") if page_url else None
        self.timeout = timeout
        self.attempts = attempts
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.close_timeout = close_timeout
        self.delivered = 0
        self.failed = 0
        self.dropped = 0
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=queue_size)
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ApprovalWebhook({self.target!r})"

    # -- the port -------------------------------------------------------------------------------------

    def approval_required(self, notice: ApprovalNotice) -> None:
        try:
            self._queue.put_nowait(self.body(notice))
        except queue.Full:
            self.dropped += 1
            logger.warning(
                "approval webhook %s: %d notices already wait to be sent; the one for conversation %s "
                "was dropped",
                self.target,
                self._queue.qsize(),
                notice.conversation_id,
            )
            return
        self._start()

    def close(self) -> None:
        thread = self._thread
        if thread is None:
            return
        self._queue.put(None)  # after everything queued
        thread.join(self.close_timeout)
        if thread.is_alive():
            self._stopping.set()  # cut the backoff waits short; what is left is given up
            thread.join(self.timeout + 1)
            logger.warning("approval webhook %s: closed with deliveries still pending", self.target)

    # -- the body, and its delivery -------------------------------------------------------------------

    def body(self, notice: ApprovalNotice) -> bytes:
        document: dict[str, Any] = {
            "type": "approval_required",
            # why this delivery: calls started waiting, or a waiting call's reminder or escalation
            "event": notice.event,
            "delivery": uuid.uuid4().hex,
            "agent": notice.agent,
            "conversation_id": notice.conversation_id,
            "user": notice.user,
            # a call under a team rule says who approved so far and what it still needs
            "calls": [
                {k: v for k, v in asdict(call).items() if v is not None or k != "approvals"}
                for call in notice.calls
            ],
        }
        if notice.groups:
            document["groups"] = list(notice.groups)  # whom it is for: the groups asked to decide
        if self.page_url is not None:
            document["link"] = f"{self.page_url}/#conversation={quote(notice.conversation_id, safe='')}"
        return json.dumps(document, ensure_ascii=False).encode()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="dcaf-like-webhook", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while (body := self._queue.get()) is not None:
            self._deliver(body)

    def _deliver(self, body: bytes) -> None:
        delivery = json.loads(body)["delivery"]
        wait = self.backoff
        for attempt in range(1, self.attempts + 1):
            outcome = self._post(body, delivery)
            if outcome is None:
                self.delivered += 1
                return
            final = not outcome.startswith("retry:")
            if final or attempt == self.attempts or self._stopping.is_set():
                self.failed += 1
                logger.error(
                    "approval webhook %s: delivery %s failed after %d attempt(s): %s",
                    self.target,
                    delivery,
                    attempt,
                    outcome.removeprefix("retry:"),
                )
                return
            self._stopping.wait(wait)
            wait = min(wait * 2, self.max_backoff)

    def _post(self, body: bytes, delivery: str) -> str | None:
        """None when the receiver took it; otherwise why not, prefixed ``retry:`` when worth retrying."""
        import urllib.error
        import urllib.request  # here: `import dcaf_like` does not load an HTTP client

        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "dcaf-like-webhook",
            DELIVERY_HEADER: delivery,
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: sign(self._secret, timestamp, body),
        }
        request = urllib.request.Request(self._url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as answer:
                answer.read()
                return None
        except urllib.error.HTTPError as exc:
            retry = exc.code == 429 or exc.code >= 500
            return f"{'retry:' if retry else ''}HTTP {exc.code}"
        except (urllib.error.URLError, OSError) as exc:
            return f"retry:{type(getattr(exc, 'reason', exc)).__name__}"


def from_environment(environ: dict[str, str] | None = None, **options: Any) -> ApprovalWebhook | None:
    """An :class:`ApprovalWebhook` from ``DCAF_APPROVAL_WEBHOOK_URL`` and ``DCAF_APPROVAL_WEBHOOK_SECRET``
    (and ``DCAF_PAGE_URL`` for the link), or None when no URL is set."""
    import os

    env = os.environ if environ is None else environ
    url = env.get("DCAF_APPROVAL_WEBHOOK_URL")
    if not url:
        return None
    secret = env.get("DCAF_APPROVAL_WEBHOOK_SECRET", "")
    if not secret:
        raise ValueError("DCAF_APPROVAL_WEBHOOK_URL is set but DCAF_APPROVAL_WEBHOOK_SECRET is not")
    return ApprovalWebhook(url, secret=secret, page_url=env.get("DCAF_PAGE_URL") or None, **options)
