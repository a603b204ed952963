"""Log formats: the default text lines, or one JSON object per line for log pipelines.

``serve(agent, log_format="json")``, ``dcaf-like serve ... --log-format json`` or
``DCAF_LOG_FORMAT=json``. Every field a record carries as an ``extra`` (request and conversation ids,
method, path, status, duration, user) becomes a JSON field; credentials are never put in records.

In the text format a message is one line whatever a client put in it: control characters (newline,
carriage return, escape, ...) in a path, an id or a tool's name are written as ``\\xNN`` escapes, so a
request cannot forge a log line or drive the terminal that shows the log.
"""

from __future__ import annotations

import json
import logging
import os
from copy import copy
from datetime import UTC, datetime
from typing import Any

ENV_VAR = "DCAF_LOG_FORMAT"

FIELDS = ("request_id", "conversation_id", "user", "method", "path", "status", "duration_ms", "code")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in FIELDS:
            value = getattr(record, field, None)
            if value is not None:
                data[field] = value
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False, default=str)


# C0 controls, DEL, C1 controls, and the Unicode line and paragraph separators.
_CONTROLS = {
    **{c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))},
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


def escape_controls(text: str) -> str:
    """`text` with its control characters as ``\\xNN`` escapes (one C call when there are none)."""
    return text if text.isprintable() else text.translate(_CONTROLS)


def text_formatter(
    fmt: str | None = None, datefmt: str | None = None, style: str = "%", use_colors: bool | None = None
) -> logging.Formatter:
    """uvicorn's text formatter (level prefix, colours on a terminal), each message escaped with
    :func:`escape_controls`. For ``logging.config`` (``"()": "dcaf_like.telemetry.logs.text_formatter"``)."""
    from uvicorn.logging import DefaultFormatter

    class EscapingFormatter(DefaultFormatter):
        def formatMessage(self, record: logging.LogRecord) -> str:
            if not record.message.isprintable():
                record = copy(record)
                record.message = escape_controls(record.message)
            return super().formatMessage(record)

    return EscapingFormatter(fmt, datefmt, style, use_colors)  # type: ignore[arg-type]


def log_format(chosen: str | None = None) -> str:
    """`chosen`, else ``DCAF_LOG_FORMAT``, else ``text``; refuses anything else by name."""
    value = (chosen or os.environ.get(ENV_VAR) or "text").lower()
    if value not in ("text", "json"):
        raise ValueError(f"log format must be 'text' or 'json', not {value!r}")
    return value
