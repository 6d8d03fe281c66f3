"""The project's one SHA-256: of a file (read in blocks), or of a sequence of byte strings. Corpora, tables,
caches and served models are named by it."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from pathlib import Path


def sha256_of(parts: Iterable[bytes]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.hexdigest()


def blocks(path: str | Path, size: int = 1 << 20) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while block := f.read(size):
            yield block


def file_sha256(path: str | Path, extra: bytes = b"") -> str:
    """sha256 of the file's bytes followed by `extra`."""
    return sha256_of([*blocks(path), extra])
