"""Log formats: the default text lines, or one JSON object per line for log pipelines.

``serve(agent, log_format="json")``, ``dcaf-like serve ... --log-format json`` or
``DCAF_LOG_FORMAT=json``. Every field a record carries as an ``extra`` (request and conversation ids,
method, path, status, duration, user) becomes a JSON field; credentials are never put in records.
"""

from __future__ import annotations

import json
import logging
import os
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


def log_format(chosen: str | None = None) -> str:
    """`chosen`, else ``DCAF_LOG_FORMAT``, else ``text``; refuses anything else by name."""
    value = (chosen or os.environ.get(ENV_VAR) or "text").lower()
    if value not in ("text", "json"):
        raise ValueError(f"log format must be 'text' or 'json', not {value!r}")
    return value
