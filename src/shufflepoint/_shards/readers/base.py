"""The one small interface every shard format implements.

A reader turns one *local* shard file (the storage layer has already fetched a remote one) into an
``OpenShard``: its number of rows, and any row by its index. Readers know nothing about orders,
ranks, caches or torch.distributed; what to read next is decided above them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

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
