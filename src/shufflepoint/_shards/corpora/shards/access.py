"""Per-process access to a ``Shards`` corpus's files: opening, fetching, byte ranges, the node cache, read-ahead.

``Shards`` (``shards.py``) is the catalog and the read API: which shard and row an index is, a batch read
shard by shard. What a process holds to read those shards is here, one ``ShardAccess`` per corpus object:

- the shards it keeps open (``max_open``; by default those of two blocks of the loader's order, ``keep_open_for``),
  and the arena its Parquet shards lay their decoded columns in side by side (``readers/_flat``);
- the node cache: a remote shard fetched whole into it the first time a process needs it (or earlier, by the
  prefetcher), a remote Parquet or ``.bin`` shard read by byte range into a partial entry of it
  (``_shards/storage/ranged``), a local one read in place;
- the read-ahead along this rank's upcoming indices: whole shards (``storage/prefetch``), or the ranges of their
  rows (``storage/ranged_ahead``), joined as densely as this rank reads (``read_at_density``);
- the decode budget's view of a row (``decoded_row_bytes``), which sizes the loader's default block.

A DataLoader worker starts with none of the per-process part (``reset``: forked, it is found in another
process; pickled, it is left behind).

Words: docs/glossary.md (shard, node cache, ranged read, read-ahead, prefetch, dataset arena).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from shufflepoint._core.capabilities import offered
from shufflepoint._errors import ShardError
from shufflepoint._order.blocks import DEFAULT_SHUFFLE_BLOCK
from shufflepoint._order.decode_budget import fitting_block, warn_if_redecoding
from shufflepoint._order.distinct import in_first_seen_order
from shufflepoint._shards.corpora.shards.batch import Batch
from shufflepoint._shards.index import index as _index
from shufflepoint._shards.index.integrity import check_checksum
from shufflepoint._shards.readers._decoded import GROUPS
from shufflepoint._shards.readers._flat import DatasetArena
from shufflepoint._shards.readers.base import (
    JoinsArena,
    KeepsDecodedIds,
    MeasuresDecodedRows,
    OpenShard,
    OpensRanged,
    Ranged,
    Reader,
)
from shufflepoint._shards.readers.tokens import TokensReader
from shufflepoint._shards.storage import kept_ids
from shufflepoint._shards.storage import ranged as by_range
from shufflepoint._shards.storage.cache import NodeCache
from shufflepoint._shards.storage.prefetch import Prefetcher
from shufflepoint._shards.storage.ranged_ahead import RangedAhead, ranged_ahead_for
from shufflepoint._shards.storage.storage import Storage, is_remote

_MIN_OPEN, _MAX_OPEN_CAP = 32, 512  # open shards per process: any block (a reopen costs ~0.6 ms), a block of tiny ones
_PER_PROCESS = ("_opened", "_cache", "_prefetcher", "_ranged_ahead", "_shard_by_url", "_arena")


@dataclass(frozen=True)
class AccessOptions:
    """The ``Shards`` arguments that say how a process reads the shards (``Shards`` documents each)."""

    cache_limit: int | None = None
    prefetch: int = 16
    max_open: int | None = None
    verify: str = "version"


class ShardAccess:
    """How this process reads the shards of one corpus: ``open(shard)``, ``prefetch(...)`` and what they keep.

    ``storage`` and ``cache_dir`` come first: the index build may already fetch shards whole into the node cache
    (a format that counts rows only by reading them), so the access exists before the index it reads, which
    ``attach`` then gives it."""

    index: _index.CorpusIndex
    _opened: OrderedDict[int, OpenShard]
    _cache: NodeCache | None
    _prefetcher: Prefetcher | None
    _ranged_ahead: RangedAhead | None
    _shard_by_url: dict[str, int] | None
    _announced: tuple[set[int], set[int]]
    _arena: DatasetArena | None

    def __init__(self, reader: Reader, storage: Storage, cache_dir: str, options: AccessOptions) -> None:
        self.reader, self.storage, self.cache_dir = reader, storage, cache_dir
        self._verify = options.verify
        self._opens_ranged = isinstance(reader, OpensRanged)  # asked per open: a Protocol check is slow
        self._density, self._at_once = 1.0, False  # how densely this rank reads; the next chunk is a pass's first
        self._cache_limit = options.cache_limit
        self._prefetch_depth = int(options.prefetch)
        self._max_open = _MIN_OPEN if options.max_open is None else max(1, int(options.max_open))
        self._max_open_chosen = options.max_open is not None
        self._remote = False
        self._row_bytes: tuple[int | None] | None = None  # decoded_row_bytes, once asked
        self._block = DEFAULT_SHUFFLE_BLOCK  # the loader's shuffle_block, once told (keep_open_for)
        self._cache = None

    def attach(self, index: _index.CorpusIndex, remote: bool) -> None:
        """The corpus's index, once built (``remote``: some shard is a URL); the process starts afresh."""
        self.index, self._remote = index, remote
        self.reset()

    # -- opening -----------------------------------------------------------------------------
    def open(self, shard: int) -> OpenShard:
        """The shard opened in this process (kept open, up to ``max_open`` shards, least recently used closed)."""
        if os.getpid() != self._pid:  # forked into a DataLoader worker: open files are the parent's
            self.reset()
        found = self._opened.get(shard)
        if found is not None:
            self._opened.move_to_end(shard)
            return found
        record = self.index.shards[shard]
        url = self.index.url(shard)
        if self.ranged(url, record.version, record.checksum):
            opened = self._open_ranged(url, record.size, record.version)
        elif isinstance(self.reader, TokensReader) and not (record.checksum or is_remote(url)):  # one path lookup
            fd, path = self.storage.open_local(url, record.size, record.version)
            opened = self.reader.open_descriptor(fd, path, url, record.size)
        else:
            path = self.fetch(url, record.size, record.version, record.checksum)
            if record.checksum and shard not in self._verified:  # every copy, once per process
                check_checksum(url, path, record.checksum)
                self._verified.add(shard)
            opened = self.reader.open(path, url)
        if len(opened) != record.rows:
            opened.close()
            raise ShardError(url, f"has {len(opened)} rows, the index says {record.rows}: it changed since "
                                  "the index was built; rebuild the index (delete its sidecar) and restart the epoch")
        if offered(opened, KeepsDecodedIds):  # Parquet: token ids decoded once per node, then mapped
            cast(KeepsDecodedIds, opened).keep_ids_in(kept_ids.store(self.cache_dir))
        if offered(opened, JoinsArena):  # Parquet: a batch across files is one gather per column
            if self._arena is None:  # an arena of about two blocks: a block's files side by side
                largest = int(self.index.rows.max())
                self._arena = DatasetArena(len(self.index.shards), min(int(self.index.rows.sum()),
                                                                  2 * (self._block + largest)))
            cast(JoinsArena, opened).join_arena(self._arena, shard)
        self._opened[shard] = opened
        while len(self._opened) > self._max_open:
            self._opened.popitem(last=False)[1].close()
        return opened

    def laid_out(self, shards: np.ndarray, rows: np.ndarray) -> Batch | None:
        """The batch from the decoded columns of its files laid out side by side (``readers/_flat``):
        one index per column, where every row's group is held there; else None (read file by file)."""
        arena = self._arena
        if arena is None or os.getpid() != self._pid:
            return None
        found = arena.take(shards, rows)
        if found is not None:
            opened = self._opened
            for shard in set(shards.tolist()):  # read: most recently used, as open would mark them
                if shard in opened:
                    opened.move_to_end(shard)
        return found

    def keep_open_for(self, shuffle_block: int) -> None:
        """The loader's block size: keep open the shards of two blocks (the rows of a block come in
        any order, so fewer open shards reopen a shard per sample; measured: 4 open shards made
        token windows 4x slower and Parquet rows 30x). Unless ``max_open`` was given. Warns when a
        block's decoded rows exceed the process's budget (``decode_budget.warn_if_redecoding``)."""
        rows = self.index.rows
        if not len(self.index.shards):
            return
        self._block = int(shuffle_block)
        warn_if_redecoding(shuffle_block, int(rows.max()), int(rows.sum()), self.decoded_row_bytes(), GROUPS.limit)
        if self._max_open_chosen:
            return
        smallest = max(1, int(np.min(rows[rows > 0], initial=shuffle_block)))
        per_block = -(-int(shuffle_block) // smallest) + 1
        self._max_open = min(_MAX_OPEN_CAP, max(self._max_open, 2 * per_block))

    def fitting_shuffle_block(self) -> int:
        """The ``shuffle_block`` a loader uses when given none: the default, or fewer rows where a
        block's decoded rows would not fit half the process's budget (``decode_budget``)."""
        return fitting_block(self.decoded_row_bytes(), GROUPS.limit)

    def decoded_row_bytes(self) -> int | None:
        """About the bytes a row holds decoded, from the first non-empty shard's metadata (Parquet;
        None for formats decoded row by row), asked once per dataset."""
        if self._row_bytes is None:
            reader = self.reader
            nonempty = np.flatnonzero(self.index.rows)
            found = None
            if isinstance(reader, MeasuresDecodedRows) and nonempty.size:
                record = self.index.shards[int(nonempty[0])]
                url = self.index.url(int(nonempty[0]))
                if self.ranged(url, record.version, record.checksum):  # kept: a restart reads it locally
                    partial = self.partial(url, record.size, record.version)
                    try:
                        found = reader.decoded_row_bytes(partial.pread, record.size, url)
                    finally:
                        partial.close()
                else:
                    with self.storage.ranges(url, record.size, record.version) as read:
                        found = reader.decoded_row_bytes(read, record.size, url)
            self._row_bytes = (found,)
        return self._row_bytes[0]

    # -- fetching ----------------------------------------------------------------------------
    def fetch(self, url: str, size: int, version: str, checksum: str) -> str:
        """A local path holding the whole shard as the index recorded it (size, version and, with
        verify="checksum", content): the file itself, or its copy in the node cache. The cache entry
        is named by the version, or by the checksum where the storage reports no version."""
        if not is_remote(url):
            return self.storage.local_path(url, size, version)

        def download(dest: str) -> None:
            self.storage.fetch(url, dest, size, version)
            if checksum:
                check_checksum(url, dest, checksum)

        return self.node_cache().path_for(url, version or checksum, size, download)

    def ranged(self, url: str, version: str, checksum: str) -> bool:
        """Whether this shard is read by byte range (``_shards/storage/ranged``): a remote shard of a format
        that can (Parquet), with a version to pin the ranges to and no checksum to check (that needs
        the whole file), and not already whole in the node cache."""
        return (self.ranged_reader() and is_remote(url) and bool(version) and not checksum
                and cast(OpensRanged, self.reader).ranged_for(url)
                and not os.path.exists(self.node_cache().entry(url, version)))

    def ranged_shard(self, shard: int) -> bool:
        """``ranged`` for shard number ``shard``."""
        record = self.index.shards[shard]
        return self.ranged(self.index.url(shard), record.version, record.checksum)

    def ranged_reader(self) -> bool:
        """Whether some remote shards may be read by range (then read ahead by range, not whole)."""
        return by_range.enabled_for(self.reader.name) and self._verify != "checksum" and self._opens_ranged

    def partial(self, url: str, size: int, version: str) -> by_range.PartialShard:
        """The shard's partial entry in the node cache: the byte ranges of it fetched so far."""
        return by_range.PartialShard(self.node_cache(), url, version, size,
                                     lambda: self.storage.ranges(url, size, version, "reading a range"),
                                     by_range.join_gap(self.reader, self._density))

    def _open_ranged(self, url: str, size: int, version: str) -> OpenShard:
        partial = self.partial(url, size, version)
        source = by_range.RangedFile(partial)
        try:
            handle = Ranged(source, partial.ensure, by_range.identity(url, version))
            return cast(OpenShard, cast(OpensRanged, self.reader).open_ranged(handle, url))
        except BaseException:
            source.close()
            raise

    def node_cache(self) -> NodeCache:
        """This process's view of the node cache (made when first needed)."""
        if self._cache is None:
            self._cache = NodeCache(os.path.join(self.cache_dir, "shards"), self._cache_limit)
        return self._cache

    # -- read-ahead --------------------------------------------------------------------------
    @property
    def reads_ahead(self) -> bool:
        """Whether ``prefetch`` does anything (remote shards, a prefetch depth): else nothing is announced."""
        return bool(self._remote and self._prefetch_depth > 0)

    def read_at_density(self, density: float) -> None:
        """How densely this rank reads the order this pass (``ReadsAtDensity``): told before workers start; the
        next chunk announced is the pass's first, read at once."""
        self._density, self._at_once = float(density), True

    def prefetch(self, shards: np.ndarray, rows: np.ndarray, density: float) -> None:
        """Fetch, in the background, what upcoming rows (``shards``/``rows``, in reading order) read: their
        ranges in a shard read by range (every such shard of the chunk, in wide spans where this rank reads
        densely, ``ranged_ahead``), the first ``prefetch`` other shards whole."""
        upcoming = in_first_seen_order(shards).tolist()  # in the order they will be read
        whole = upcoming
        if self.ranged_reader():
            if self._ranged_ahead is None:
                self._ranged_ahead = ranged_ahead_for(self, cast(OpensRanged, self.reader))
            at_once, self._at_once = self._at_once, False  # the pass's first chunk, read at once
            whole = self._ranged_ahead.announce(upcoming, shards, rows, density, at_once)
        if whole:
            if self._prefetcher is None:
                self._prefetcher = Prefetcher(self._prefetch_lookup, max_ahead=self._prefetch_depth)
            self._prefetcher.schedule([self.index.url(s) for s in whole[: self._prefetch_depth]])
        self._release_finished(set(upcoming))

    def _release_finished(self, announced: set[int]) -> None:
        """Mark first out of the node cache the shards this rank is done with for the epoch: read in
        the chunk before the current one and in neither it nor the one just announced (the blocks
        order reads a shard inside its block, and a block in consecutive chunks). So a cache smaller
        than the node's share evicts what it will not read again this epoch, not the shards kept
        from the last epoch that this one has yet to read (plain LRU would take those first)."""
        before, current = self._announced
        for shard in before - current - announced:
            record = self.index.shards[shard]
            self.node_cache().release(self.index.url(shard), record.version or record.checksum)
        self._announced = (current, announced)

    def _prefetch_lookup(self, url: str) -> str:
        if self._shard_by_url is None:  # built on first use: 40 ms for 5,000 shards, in every worker
            self._shard_by_url = {self.index.url(s): s for s in range(len(self.index.shards))}
        shard = self._shard_by_url[url]
        record = self.index.shards[shard]
        return self.fetch(url, record.size, record.version, record.checksum)

    # -- processes ---------------------------------------------------------------------------
    def reset(self) -> None:
        """This process starts with nothing open, cached or in flight (a DataLoader worker)."""
        self._pid = os.getpid()
        self._announced = (set(), set())  # the shards of the last two announced chunks
        self._opened = OrderedDict()
        self._verified: set[int] = set()  # shards whose copy this process hashed (verify="checksum")
        self._cache = None
        self._prefetcher = None
        self._ranged_ahead = None
        self._shard_by_url = None
        self._arena = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in _PER_PROCESS:
            state[name] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.reset()
