"""The one small interface every shard format implements.

A reader turns one *local* shard file (the storage layer has already fetched a remote one) into an
``OpenShard``: its number of rows, and any row by its index. Readers know nothing about orders,
ranks, caches or torch.distributed; what to read next is decided above them.

What a format may offer besides, each a small ``typing.Protocol`` asked with ``isinstance`` (inside
``_shards`` only: the index, the storage and ``Shards``' access to its shards): ``CountsRowsFromSize``,
``CountsRowsFromMetadata``, ``MeasuresDecodedRows`` (a reader); ``TakesIds``, ``KeepsDecodedIds``,
``JoinsArena``, ``LocatesRows`` (an opened shard); ``OpensRanged``, ``TilesShards`` (a reader of remote
shards by byte range). The datasets' capabilities, which the loader asks for, are ``_core/capabilities.py``'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

from shufflepoint._shards.corpora.shards.batch import Batch


class OpenShard(Protocol):
    """One shard, opened: ``len()`` rows, ``shard[row]`` a sample, ``take(rows)`` many at once,
    ``close()`` frees its resources."""

    def __len__(self) -> int: ...

    def __getitem__(self, row: int) -> Any: ...

    def take(self, rows: np.ndarray) -> Batch:
        """The rows at ``rows`` (int64, any order, repeats allowed) read at once; item i of the batch
        equals ``shard[rows[i]]``."""
        ...

    def close(self) -> None: ...


class Reader(Protocol):
    """A shard format. ``name`` is what ``Shards(format=...)`` takes; ``suffixes`` infer it."""

    name: str
    suffixes: tuple[str, ...]

    def open(self, path: str, shard: str) -> OpenShard:
        """Open the local file ``path`` of the shard named ``shard`` (its source URL or path, for
        messages). Raises ``ShardError`` naming ``shard`` when the file is corrupt or truncated."""
        ...

    def options(self) -> dict[str, Any]:
        """The options that change what the rows are (columns, seq_len, dtype, ...): they join the
        corpus fingerprint, so a resume with other options is refused."""
        ...


class Ranged(NamedTuple):
    """A remote file read by byte range (``_shards/storage/ranged``): ``source`` the file object a reader
    opens, ``ensure(spans)`` fetches byte ranges ahead of a decode (one GET for a row group, not one
    per column chunk), ``identity`` names its content (url and version) where a local file's path,
    mtime and inode would (``kept_ids``: a partial file's mtime changes as ranges arrive)."""

    source: Any
    ensure: Callable[..., None]  # (spans: a list of (start, end) or an (n, 2) array, join=True)
    identity: str


# -- what a format may offer beyond ``Reader`` and ``OpenShard``, asked with ``isinstance`` ----------------

ReadBytes = Callable[[int, int], bytes]  # (offset, length) -> bytes of one shard


@runtime_checkable
class CountsRowsFromSize(Protocol):
    """A format whose row count follows from the file size (fixed-width token shards)."""

    def rows_from_size(self, shard: str, size: int) -> int | None: ...


@runtime_checkable
class CountsRowsFromMetadata(Protocol):
    """A format whose row count is in a footer or header (Parquet, token shards with a header)."""

    def rows_from_metadata(self, read: ReadBytes, size: int, shard: str) -> int | None: ...


@runtime_checkable
class MeasuresDecodedRows(Protocol):
    """A format that knows a decoded row's size from its metadata (the decode budget's block)."""

    def decoded_row_bytes(self, read: ReadBytes, size: int, shard: str) -> int | None: ...


@runtime_checkable
class TakesIds(Protocol):
    """An opened shard that reads a token column's rows as arrays (Parquet): ``take_ids_ascending`` for
    rows already sorted, in one pass; ``take_id_spans_ascending`` as (values, starts, stops) of its decoded
    groups, no array per row."""

    def take_ids(self, rows: Sequence[int], column: str) -> list[np.ndarray] | None: ...

    def take_ids_ascending(self, rows: np.ndarray, column: str) -> list[np.ndarray] | None: ...

    def take_id_spans_ascending(self, rows: np.ndarray, column: str) -> list[Any] | None: ...


@runtime_checkable
class KeepsDecodedIds(Protocol):
    """An opened shard that keeps its decoded token ids where it is told (Parquet: in the node's cache
    folder, ``_shards/storage/kept_ids``), so a later open maps them instead of decoding again."""

    def keep_ids_in(self, kept: Any) -> None: ...


@runtime_checkable
class JoinsArena(Protocol):
    """An opened shard that lays its decoded columns out beside its neighbours' in one arena per process
    (Parquet, ``readers/_flat.DatasetArena``), so a batch across files is one gather per column."""

    def join_arena(self, dataset_arena: Any, shard: int) -> None: ...


@runtime_checkable
class OpensRanged(Protocol):
    """A reader that opens a remote shard read by byte range (Parquet: its footer, then the row
    groups it decodes; a ``.bin``: the windows it reads), given a file object and a hook that fetches
    ranges ahead (``_shards/storage/ranged``); ``ranged_for(shard)``: whether this shard can be (not a ``.npy``);
    ``ranged_plan(ranged, shard)``: a function of rows giving the byte ranges their read will need, so
    read-ahead fetches them before the loader asks (Parquet reads the footer for it)."""

    def ranged_for(self, shard: str) -> bool: ...

    def open_ranged(self, ranged: Any, shard: str) -> Any: ...

    def ranged_plan(self, ranged: Any, shard: str) -> Any: ...


@runtime_checkable
class TilesShards(Protocol):
    """An ``OpensRanged`` reader whose rows' byte ranges tile its shards (token windows, nothing else in the
    file): the bytes between two rows a rank reading densely reads are rows it reads next, so read-ahead
    joins gaps up to ``dense_gap()`` bytes (what a GET's round trip costs in transfer), not Parquet's
    64 KiB (whose gaps may be columns no read asks for)."""

    def dense_gap(self) -> int: ...


@runtime_checkable
class LocatesRows(Protocol):
    """An opened shard that says where its row lives (byte offset, row group, member name, ...)."""

    def locate(self, row: int) -> dict[str, Any]: ...
