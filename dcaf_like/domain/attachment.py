"""What a user's message carries besides its text: an image (inline or by URL) or a file (inline).

An attachment is kept with its message in the conversation, so that every later model request of the
conversation shows it again, as the model saw it first. Its size is bounded (:data:`MAX_PART_BYTES`
each, :data:`MAX_PARTS_BYTES` a message), and whether a model can read it is its runtime's to say:
one that cannot refuses the turn, naming the part; nothing is dropped silently.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from dcaf_like.domain.errors import DomainError

#: The largest attachment, decoded (an image by URL counts its URL's length).
MAX_PART_BYTES = 5 * 1024 * 1024
#: The largest total of one message's attachments.
MAX_PARTS_BYTES = 10 * 1024 * 1024

_MEDIA_TYPE = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]*/[a-z0-9][a-z0-9!#$&^_.+-]*")


class PartKind(StrEnum):
    IMAGE = "image"
    FILE = "file"


class InvalidPart(DomainError):
    """A part that is not one (no data, an unknown media type, data that is not base64). `index` is
    its place among the message's attachments."""

    def __init__(self, index: int, message: str) -> None:
        self.index = index
        self.field: str | None = None  # where a protocol's reader found it (``messages[0].content[1]``)
        super().__init__(message)


class PartTooLarge(InvalidPart):
    """A part over its limit, or the one that takes a message's attachments over theirs."""


@dataclass(frozen=True, slots=True)
class Attachment:
    """An image (`data` base64 with its `media_type`, or a `url`) or a file (`data`, `media_type` and
    its `name`). Build it with :func:`attachment`, which checks it."""

    kind: PartKind
    media_type: str
    data: str | None = field(default=None, repr=False)  # may be megabytes: its size is in the repr
    url: str | None = None
    name: str | None = None

    def __repr__(self) -> str:
        where = f"url={self.url!r}" if self.url is not None else f"{self.size} bytes"
        named = f", name={self.name!r}" if self.name else ""
        return f"Attachment({self.kind.value}, {self.media_type!r}, {where}{named})"

    @property
    def size(self) -> int:
        """Its decoded size in bytes (a URL's length for an image by URL)."""
        if self.data is None:
            return len(self.url or "")
        return len(self.data) * 3 // 4 - self.data[-2:].count("=")

    def describe(self) -> str:
        """How an error names it: ``image/png image``, ``file 'report.pdf' (application/pdf)``."""
        if self.kind is PartKind.FILE:
            return f"file {self.name!r} ({self.media_type})"
        return f"{self.media_type or 'image'} image" + (" by URL" if self.url is not None else "")


def attachment(
    kind: str,
    *,
    media_type: str | None = None,
    data: str | None = None,
    url: str | None = None,
    name: str | None = None,
    index: int = 0,
) -> Attachment:
    """A checked :class:`Attachment`, `index` its place among the message's attachments (for errors)."""
    try:
        part_kind = PartKind(kind)
    except ValueError:
        raise InvalidPart(index, f"a part is text, image or file, not {kind!r}") from None
    if (data is None) == (url is None) or (url is not None and part_kind is PartKind.FILE):
        expected = "data (base64)" if part_kind is PartKind.FILE else "either data (base64) or a url"
        raise InvalidPart(index, f"{part_kind.value} part: give {expected}")
    if url is not None and not url.startswith(("https://", "http://")):
        raise InvalidPart(index, "an image's url is http:// or https:// (inline data goes in data)")
    if data is not None:
        if not media_type or not _MEDIA_TYPE.fullmatch(media_type):
            raise InvalidPart(index, f"{part_kind.value} part: media_type must be a type such as image/png")
        if len(data) * 3 // 4 - data[-2:].count("=") > MAX_PART_BYTES:  # checked before decoding it
            raise PartTooLarge(index, f"{part_kind.value} part: larger than {MAX_PART_BYTES} bytes")
        try:
            base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidPart(index, f"{part_kind.value} part: data is not base64") from None
    if part_kind is PartKind.FILE and not name:
        raise InvalidPart(index, "file part: give its name")
    if part_kind is PartKind.IMAGE and media_type and not media_type.startswith("image/"):
        raise InvalidPart(index, f"image part: {media_type} is not an image type")
    made = Attachment(part_kind, media_type or "", data=data, url=url, name=name)
    if made.size > MAX_PART_BYTES:
        raise PartTooLarge(index, f"{part_kind.value} part: larger than {MAX_PART_BYTES} bytes")
    return made


def check_total(attachments: Sequence[Attachment]) -> None:
    """Raise :class:`PartTooLarge` naming the attachment that takes the total over :data:`MAX_PARTS_BYTES`."""
    total = 0
    for i, part in enumerate(attachments):
        total += part.size
        if total > MAX_PARTS_BYTES:
            raise PartTooLarge(i, f"the message's parts come to more than {MAX_PARTS_BYTES} bytes")
