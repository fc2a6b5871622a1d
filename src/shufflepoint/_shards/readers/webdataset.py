"""WebDataset shards: an uncompressed ``.tar`` whose consecutive members sharing a key form a sample.

The key of a member is its path up to the first ``.`` of its basename, the rest (lower-cased) its
field: ``train/0001.seg.png`` is field ``seg.png`` of sample ``train/0001``, as webdataset splits
them. Members whose basename has no ``.``, directories and links carry no field and are passed
over (webdataset does the same); a field twice in one sample is an error. A row is
``{"__key__": key, field: bytes, ...}`` and decoding the bytes is the transform's job.

The headers are walked once at open to index where each member's bytes lie; a row is then a few
slices of the memory-mapped tar, with no TarFile kept. Bytes after the last member must be the
zero blocks that end a tar (or nothing): a header cut short, garbage, or a second archive appended
is refused rather than its samples lost. A compressed tar has no random access and is refused.

Words: docs/glossary.md (shard, row).
"""

from __future__ import annotations

import mmap
import os
import tarfile
from typing import Any

import numpy as np

from shufflepoint._errors import ShardError, shard_error
from shufflepoint._shards.corpora.shards.batch import Rows
from shufflepoint._shards.readers._common import check_row, check_rows, in_sorted_order

# (field, offset of its bytes in the tar, size)
_Field = tuple[str, int, int]


def _split_name(path: str) -> tuple[str, str] | None:
    """(key, field) of a member path, or None when its basename has no dot."""
    folder, _, base = path.rpartition("/")
    stem, dot, field = base.partition(".")
    if not dot or not stem:
        return None
    return (f"{folder}/{stem}" if folder else stem), field.lower()


def _members(path: str, shard: str) -> tuple[list[tarfile.TarInfo], int]:
    """The members, and where the archive's last member ends (tarfile stops quietly at a header
    cut short or garbled, so the caller checks what lies beyond)."""
    try:
        with tarfile.open(path, mode="r:") as tar:
            return tar.getmembers(), tar.offset
    except tarfile.ReadError as e:
        with open(path, "rb") as f:
            compressed = f.read(2) == b"\x1f\x8b"
        if compressed:
            raise shard_error(shard, "a gzip-compressed tar", "a plain .tar", "decompress the shard (WebDataset "
                              "shards need a plain .tar to be read at random)") from e
        raise shard_error(shard, "a truncated or corrupt tar", "a readable tar", why=str(e)) from e
    except OSError as e:
        raise shard_error(shard, "a file that cannot be read", "a readable file", why=str(e)) from e


def index_samples(members: list[tarfile.TarInfo], size: int, shard: str) -> list[tuple[str, list[_Field]]]:
    """Group consecutive members by key; check that every member's bytes lie inside the file."""
    samples: list[tuple[str, list[_Field]]] = []
    for member in members:
        if not member.isfile():
            continue
        if member.offset_data + member.size > size:
            raise ShardError(shard, f"truncated: member {member.name!r} needs bytes up to "
                                    f"{member.offset_data + member.size}, the file has {size}")
        split = _split_name(member.name)
        if split is None:
            continue
        key, field = split
        if not samples or samples[-1][0] != key:
            samples.append((key, []))
        fields = samples[-1][1]
        if any(field == known for known, _, _ in fields):
            raise ShardError(shard, f"sample {key!r} has field {field!r} twice (member {member.name!r})")
        fields.append((field, member.offset_data, member.size))
    return samples


class OpenWebDataset:
    """One tar, its samples indexed; a row is read from the memory map by offset."""

    def __init__(self, path: str, shard: str) -> None:
        members, end = _members(path, shard)
        size = os.path.getsize(path)
        self._samples = index_samples(members, size, shard)
        with open(path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if self._map[end:].strip(b"\0"):
            self._map.close()
            raise ShardError(shard, f"truncated or corrupt tar: the {size - end} bytes after member "
                                    f"{members[-1].name if members else '(none)'!r} are neither a whole header "
                                    "nor the zero blocks that end an archive")

    def __len__(self) -> int:
        return len(self._samples)

    def __getitem__(self, row: int) -> dict[str, Any]:
        return self._sample(check_row(row, len(self)))

    def take(self, rows: np.ndarray) -> Rows:
        """The samples, their members read in the order of their offsets in the tar."""
        return Rows(in_sorted_order(check_rows(rows, len(self)), self._sample))

    def _sample(self, row: int) -> dict[str, Any]:
        key, fields = self._samples[row]
        sample: dict[str, Any] = {"__key__": key}
        for field, offset, size in fields:
            sample[field] = self._map[offset:offset + size]
        return sample

    def locate(self, row: int) -> dict[str, Any]:
        """Where sample ``row`` lies in the tar: its key, and each field's member bytes."""
        key, fields = self._samples[check_row(row, len(self))]
        return {"key": key, "byte_offset": min(offset for _, offset, _ in fields),
                "members": [{"field": field, "byte_offset": offset, "bytes": size} for field, offset, size in fields]}

    def close(self) -> None:
        self._map.close()


class WebDatasetReader:
    """WebDataset tars; a row is the dict of one sample's fields, as bytes."""

    name: str = "webdataset"
    suffixes: tuple[str, ...] = (".tar",)
    takes: tuple[str, ...] = ()

    def open(self, path: str, shard: str) -> OpenWebDataset:
        return OpenWebDataset(path, shard)

    def options(self) -> dict[str, Any]:
        return {}
