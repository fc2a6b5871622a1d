"""The shards of a corpus index as columns: names, sizes, versions, rows and checksums, one array or list each.

1e5 shards are 1e5 records in every process that builds a ``Shards``; held as five columns they cost no
Python object per shard until one is asked for (``shards[i]``, a ``ShardColumns``), the rows are the int64 array the
``blocks`` order needs, and the content hash and the columnar file (``_shards/index/index_file.py``) are
written from the columns in a few C-level passes.

Words: docs/glossary.md (corpus index, shard, row, block).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple, overload

import numpy as np


class ShardRecord(NamedTuple):
    """One shard as the index records it: what ``columns[i]`` gives."""

    name: str  # relative to the corpus root
    size: int
    version: str
    rows: int
    checksum: str = ""  # "sha256:<hex>" with verify="checksum", else ""


def _frozen(values: Any) -> np.ndarray:
    array = np.ascontiguousarray(values, dtype=np.int64)
    if array.ndim != 1:
        raise ValueError(f"a column of shape {array.shape}, expected one dimension")
    array.flags.writeable = False  # shared by every reader of the index: nobody may change it in place
    return array


class ShardColumns(Sequence[ShardRecord]):
    """A sequence of ``ShardRecord`` stored as columns; equal to any sequence of the same records."""

    __slots__ = ("names", "sizes", "versions", "rows", "checksums")

    def __init__(self, names: list[str], sizes: Any, versions: list[str], rows: Any, checksums: list[str]) -> None:
        self.names, self.versions, self.checksums = names, versions, checksums
        self.sizes, self.rows = _frozen(sizes), _frozen(rows)
        n = len(names)
        if not len(self.sizes) == len(versions) == len(self.rows) == len(checksums) == n:
            raise ValueError(f"columns of unequal lengths: {n} names, {len(self.sizes)} sizes, {len(versions)} "
                             f"versions, {len(self.rows)} rows, {len(checksums)} checksums")

    @classmethod
    def of(cls, records: Iterable[Sequence[Any]]) -> ShardColumns:
        """ShardColumns from records (``ShardRecord`` or plain tuples: name, size, version, rows[, checksum])."""
        if isinstance(records, ShardColumns):
            return records
        found = [ShardRecord(*r) for r in records]
        return cls([str(r.name) for r in found], [int(r.size) for r in found], [str(r.version) for r in found],
                   [int(r.rows) for r in found], [str(r.checksum) for r in found])

    def __len__(self) -> int:
        return len(self.names)

    @overload
    def __getitem__(self, at: int) -> ShardRecord: ...

    @overload
    def __getitem__(self, at: slice) -> tuple[ShardRecord, ...]: ...

    def __getitem__(self, at: int | slice) -> ShardRecord | tuple[ShardRecord, ...]:
        if isinstance(at, slice):
            return tuple(self)[at]
        return ShardRecord(self.names[at], int(self.sizes[at]), self.versions[at], int(self.rows[at]),
                           self.checksums[at])

    def __iter__(self) -> Iterator[ShardRecord]:
        return map(ShardRecord, self.names, self.sizes.tolist(), self.versions, self.rows.tolist(), self.checksums)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ShardColumns):
            return (self.names == other.names and self.versions == other.versions
                    and self.checksums == other.checksums and bool(np.array_equal(self.sizes, other.sizes))
                    and bool(np.array_equal(self.rows, other.rows)))
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(other) == len(self) and list(self) == [tuple(r) for r in other]
        return NotImplemented

    def __hash__(self) -> int:
        return hash((tuple(self.names), self.sizes.tobytes(), tuple(self.versions), self.rows.tobytes()))

    def __repr__(self) -> str:
        return f"ShardColumns({len(self)} shards)"

    def identity(self) -> list[tuple[str, int, str, int]]:
        """(name, size, version, rows) of every shard, as the content hash covers them: tuples made in C."""
        return list(zip(self.names, self.sizes.tolist(), self.versions, self.rows.tolist(), strict=True))

    def take(self, numbers: np.ndarray) -> ShardColumns:
        """The shards numbered ``numbers`` (their places in this sequence), in that order."""
        at = numbers.tolist()
        return ShardColumns([self.names[i] for i in at], self.sizes[numbers], [self.versions[i] for i in at],
                            self.rows[numbers], [self.checksums[i] for i in at])
