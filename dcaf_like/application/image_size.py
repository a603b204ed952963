"""An image's width and height in pixels, read from its first bytes (PNG, GIF, WebP, JPEG), so that the
context window can count what the image costs the model (:func:`~dcaf_like.application.context.part_tokens`).
Nothing is decoded but the format's header; an image whose header says nothing readable has no size."""

from __future__ import annotations

import base64
import struct

#: Bytes of an image read for its size: a JPEG's size comes after its metadata, usually within this.
HEAD_BYTES = 65_535

# JPEG start-of-frame markers (baseline, progressive, lossless, ...): they hold the size.
_FRAMES = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
# JPEG markers that stand alone (no length follows): start of image, TEM, restarts.
_STANDALONE = frozenset({0xD8, 0x01, *range(0xD0, 0xD8)})


def image_size(data: str) -> tuple[int, int] | None:
    """(width, height) of the image whose base64 is `data`, or None when its first bytes do not tell."""
    head = base64.b64decode(data[: HEAD_BYTES // 3 * 4])
    size = _png(head) or _gif(head) or _webp(head) or _jpeg(head)
    if size is None or 0 in size:
        return None
    return size


def _png(head: bytes) -> tuple[int, int] | None:
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR" or len(head) < 24:
        return None
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def _gif(head: bytes) -> tuple[int, int] | None:
    if head[:6] not in (b"GIF87a", b"GIF89a") or len(head) < 10:
        return None
    width, height = struct.unpack("<HH", head[6:10])
    return width, height


def _webp(head: bytes) -> tuple[int, int] | None:
    if head[:4] != b"RIFF" or head[8:12] != b"WEBP" or len(head) < 30:
        return None
    chunk = head[12:16]
    if chunk == b"VP8 " and head[23:26] == b"\x9d\x01\x2a":  # lossy: after the frame tag and start code
        width, height = struct.unpack("<HH", head[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and head[20] == 0x2F:  # lossless: 14 bits each, less one
        bits = int.from_bytes(head[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":  # extended: the canvas, 24 bits each, less one
        return int.from_bytes(head[24:27], "little") + 1, int.from_bytes(head[27:30], "little") + 1
    return None


def _jpeg(head: bytes) -> tuple[int, int] | None:
    """The size its frame header gives, walking the segments before it."""
    if head[:2] != b"\xff\xd8":
        return None
    at = 2
    while at + 9 <= len(head):
        if head[at] != 0xFF:
            return None  # not a marker: not a JPEG we read
        marker = head[at + 1]
        if marker == 0xFF:  # a fill byte
            at += 1
        elif marker in _FRAMES:
            height, width = struct.unpack(">HH", head[at + 5 : at + 9])
            return width, height
        elif marker in _STANDALONE:
            at += 2
        else:
            at += 2 + int.from_bytes(head[at + 2 : at + 4], "big")
    return None
