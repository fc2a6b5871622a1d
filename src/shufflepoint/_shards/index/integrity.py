"""Is the corpus still the one its index describes? Checksums, and a check of every shard at once.

The storage layer checks each shard as it is read (size and version, see ``faults.check_version``);
this module holds what needs more than one object: the content checksum of ``verify="checksum"``
(sha256, for storage that reports no version, such as plain HTTP) and ``verify_corpus``, which
``shufflepoint inspect --verify`` runs over every shard of an index.

Words: docs/glossary.md (shard, corpus index).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from shufflepoint._errors import ShardError, refusal

VERIFY_MODES = ("version", "checksum")
_PREFIX = "sha256:"
_CHUNK = 8 << 20


def check_verify(verify: Any) -> str:
    if verify not in VERIFY_MODES:
        raise ValueError(refusal("verify", verify, f"one of {', '.join(map(repr, VERIFY_MODES))}",
                                 "pass one of these, or leave verify unset"))
    return str(verify)


def stream_checksum(source: IO[bytes], seen: Callable[[int], None] | None = None) -> str:
    digest = hashlib.sha256()
    while chunk := source.read(_CHUNK):
        digest.update(chunk)
        if seen is not None:
            seen(len(chunk))
    return _PREFIX + digest.hexdigest()


def file_checksum(path: str) -> str:
    """``sha256:<hex>`` of a local file."""
    with open(path, "rb") as f:
        return stream_checksum(f)


def check_checksum(url: str, path: str, expected: str) -> None:
    """A ShardError when the local copy ``path`` of shard ``url`` does not hash to ``expected``."""
    found = file_checksum(path)
    if found != expected:
        raise ShardError(url, f"content changed: the copy {path} hashes to {found[:23]}..., the index recorded "
                              f"{expected[:23]}... (the shard was rewritten with the same size, or this copy is "
                              "damaged); no row of it was read. Delete a damaged copy; for a rewritten shard rebuild "
                              "the index (delete its sidecar, or re-run shufflepoint index) and restart the epoch")


@dataclass(frozen=True)
class Finding:
    """One shard that is not what the index says: ``kind`` is missing, truncated, resized or rewritten."""

    shard: str
    kind: str
    detail: str


def verify_shard(name: str, record_size: int, record_version: str, found: tuple[int, str] | None,
                 checksum: Callable[[], str] | None, record_checksum: str) -> Finding | None:
    """Compare one shard with its record: its (size, version) now (None: gone), then, when the index
    holds a checksum and ``checksum`` computes the current one, its content."""
    if found is None:
        return Finding(name, "missing", "no such object any more")
    size, version = found
    if size < record_size:
        return Finding(name, "truncated", f"{size} bytes now, {record_size} in the index")
    if size != record_size:
        return Finding(name, "resized", f"{size} bytes now, {record_size} in the index")
    if record_version and version and version != record_version:
        return Finding(name, "rewritten", f"version {version} now, {record_version} in the index (same size)")
    if record_checksum and checksum is not None:
        now = checksum()
        if now != record_checksum:
            return Finding(name, "rewritten", f"content {now[:23]}... now, {record_checksum[:23]}... in the index")
    return None
