"""``shufflepoint.Shards``: a corpus of shard files, local or in object storage, as a map-style dataset.

``len()`` and ``[i]`` work as for any map-style dataset, so ``shufflepoint.DataLoader(Shards(...))``
is the whole recipe: the loader sees ``shard_rows`` and uses the ``blocks`` order, which keeps
each stretch of an epoch inside a few shards. Index i is (shard, row) by binary search over the
prefix sums of the index. A remote Parquet or ``.bin`` shard is read by byte range into a partial
entry of the node's cache (``_shards/storage/ranged``); another remote shard is fetched whole into it the
first time a process needs it (or earlier, by the prefetcher); a local one is read in place.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
import torch.utils.data

from shufflepoint._core.capabilities import offered
from shufflepoint._errors import Plain, SampleError, ShardError, refusal
from shufflepoint._order.blocks import DEFAULT_SHUFFLE_BLOCK
from shufflepoint._order.decode_budget import fitting_block, warn_if_redecoding
from shufflepoint._order.distinct import in_first_seen_order
from shufflepoint._shards.corpora.shards.batch import Batch, Columnar, Rows, Stacked, checked_indices, gather
from shufflepoint._shards.corpora.shards.locate import located_error, shard_location
from shufflepoint._shards.corpora.shards.shown import short
from shufflepoint._shards.index import collector, sidecar
from shufflepoint._shards.index import index as _index
from shufflepoint._shards.index.indexing import Indexer
from shufflepoint._shards.index.integrity import check_checksum, check_verify
from shufflepoint._shards.index.published_listing import listing
from shufflepoint._shards.readers import base as formats
from shufflepoint._shards.readers import infer_format, make_reader, saved_dataset_files
from shufflepoint._shards.readers._decoded import GROUPS
from shufflepoint._shards.readers._flat import Layout
from shufflepoint._shards.readers.base import OpenShard, OpensRanged, Ranged
from shufflepoint._shards.readers.tokens import OpenTokens, TokensReader
from shufflepoint._shards.storage import kept_ids, ranged
from shufflepoint._shards.storage.cache import NodeCache
from shufflepoint._shards.storage.prefetch import Prefetcher
from shufflepoint._shards.storage.ranged_ahead import RangedAhead, ranged_ahead_for
from shufflepoint._shards.storage.storage import Storage

FINGERPRINT_PREFIX = "shards:"
_MIN_OPEN, _MAX_OPEN_CAP = 32, 512  # open shards per process: any block (a reopen costs ~0.6 ms), a block of tiny ones


def _is_remote(url: str) -> bool:
    return "://" in url and not url.startswith("file://")


class Shards(torch.utils.data.Dataset[Any]):
    """The rows of many shard files, in shard order, as one map-style dataset.

    The index (rows, size and version per shard) is built once, in parallel, reading as little as each
    format allows or the index ``shufflepoint index`` published beside the corpus (see
    ``shufflepoint._shards.index.indexing``), and kept as a sidecar file; its content hash is
    ``fingerprint``, which the loader stores in its state, so a resume on a changed corpus is refused
    with the shards that changed.

    Args:
        sources (str | Sequence[str]): the shards: a list of paths or URLs, a glob
            (``"data/*.parquet"``, ``"s3://bucket/c4/*.jsonl.zst"``), a manifest (``*.txt``, one path or
            URL a line), or the folder of a Hugging Face dataset saved with ``save_to_disk``. Required.
        format (str | None): the reader: ``"parquet"``, ``"jsonl"``, ``"webdataset"``, ``"tokens"`` or
            ``"arrow"``. Default None: inferred from the first shard's suffix.
        columns (Sequence[str] | None): the columns a row holds (``parquet``, ``arrow``). Default None:
            every column. Part of the index's identity, so of ``fingerprint``.
        seq_len (int | None): tokens per window of a ``tokens`` corpus (each row is ``seq_len + 1``
            int64 tokens). Default None; required by ``tokens``, refused by the readers that take no
            windows.
        dtype (str | None): the token type of a ``tokens`` corpus (``"uint16"``, ``"uint32"``): how a
            ``.bin`` is read, and what a ``.npy`` header must say. Default None: ``"uint16"``.
        transform (Callable[[Any], Any] | None): called on every sample as it is read, in the process
            that reads it (a loader's worker). Default None: samples as the reader returns them.
        cache_dir (str | None): the folder for the index sidecars and the node cache of remote shards.
            Default None: ``$SHUFFLEPOINT_CACHE``, else ``$XDG_CACHE_HOME/shufflepoint``, else
            ``~/.cache/shufflepoint``.
        cache_limit (int | None): bytes the node cache of downloaded remote shards may hold; the least
            recently used shards are evicted first (one shard larger than the limit is still served).
            Default None: no limit.
        storage_options (dict[str, Any] | None): passed to fsspec for remote URLs (credentials,
            endpoint, ...). Default None.
        retries (int): retries of each storage call (exponential backoff with jitter) before a
            ``ShardError`` names the shard. Default 5; 0 tries once.
        prefetch (int): remote shards downloaded ahead of the loader, in the background. Default 16;
            0 downloads a shard only when a row of it is read. Local shards, and remote ones read by
            byte range (Parquet, ``.bin``), are not prefetched.
        index_threads (int): threads that build the index (one shard each at a time). Default 8.
        progress (bool): show a tqdm bar while the index is built. Default True.
        max_open (int | None): shards kept open per process. Default None: those of two blocks of the
            loader's order (``_keep_open_for``), at least 32 and at most 512.
        verify (str): ``"version"`` (default) reads a shard only at the size and version (S3 ETag, GCS
            generation, local mtime_ns) the index recorded, else a ``ShardError``; ``"checksum"`` also
            records each shard's sha256 at indexing (downloading every shard once) and checks every
            copy against it before a row is read: for storage that reports no version (plain HTTP).

    >>> corpus = Shards("data/train-*.parquet", columns=["text"])      # doctest: +SKIP
    >>> loader = shufflepoint.DataLoader(corpus, batch_size=32, seed=1)  # doctest: +SKIP
    """

    _opened: OrderedDict[int, OpenShard]
    _cache: NodeCache | None
    _prefetcher: Prefetcher | None
    _ranged_ahead: RangedAhead | None
    _shard_by_url: dict[str, int] | None
    _announced: tuple[set[int], set[int]]
    _layout: Layout | None

    def __init__(
        self,
        sources: str | Sequence[str],
        *,
        format: str | None = None,
        columns: Sequence[str] | None = None,
        seq_len: int | None = None,
        dtype: str | None = None,
        transform: Callable[[Any], Any] | None = None,
        cache_dir: str | None = None,
        cache_limit: int | None = None,
        storage_options: dict[str, Any] | None = None,
        retries: int = 5,
        prefetch: int = 16,
        index_threads: int = 8,
        progress: bool = True,
        max_open: int | None = None,
        verify: str = "version",
    ) -> None:
        self._verify = check_verify(verify)
        self._storage = Storage(storage_options=storage_options, retries=retries)
        saved = saved_dataset_files(sources) if isinstance(sources, str) and os.path.isdir(sources) else None
        options = {k: v for k, v in (("columns", columns), ("seq_len", seq_len), ("dtype", dtype)) if v is not None}
        self._cache_dir = cache_dir or sidecar.default_cache_dir()
        with collector.paused():  # a listing of 1e5 objects: see _shards/index/collector.py
            urls, listed = (saved, None) if saved is not None else self._listing(sources, format, options)
        if not urls:
            raise ValueError(refusal("sources", sources, "at least one shard", "pass where the shards are"))
        self._reader = make_reader(format or infer_format(urls[0]), **options)
        self._opens_ranged = isinstance(self._reader, OpensRanged)  # asked per open: a Protocol check is slow
        self._density, self._at_once = 1.0, False  # how densely this rank reads; the next chunk is a pass's first
        self._cache_limit, self._transform = cache_limit, transform
        self._prefetch_depth = int(prefetch)
        self._max_open = _MIN_OPEN if max_open is None else max(1, int(max_open))
        self._max_open_chosen = max_open is not None
        self._cache = None  # the index build below may already download remote shards
        self.index = self._load_or_build(urls, index_threads, progress, listed)
        rows = self.index.rows
        self._ends = np.cumsum(rows)
        self._starts = self._ends - rows
        self._remote = any(_is_remote(u) for u in urls)
        self._row_bytes: tuple[int | None] | None = None  # decoded_row_bytes, once asked
        self._block = DEFAULT_SHUFFLE_BLOCK  # the loader's shuffle_block, once told (_keep_open_for)
        self._reset_process_state()

    # -- the index ---------------------------------------------------------------------------
    _published_listing = True  # a glob ``shufflepoint index`` published is listed from its index (not by the tool)

    def _listing(self, sources: str | Sequence[str], format: str | None,
                 options: dict[str, Any]) -> tuple[list[str], _index.CorpusIndex | None]:
        if not self._published_listing or self._verify == "checksum":
            return self._storage.expand(sources), None
        return listing(self._storage, sources, format, options, self._cache_dir)

    def _load_or_build(self, urls: list[str], threads: int, progress: bool,
                       listed: _index.CorpusIndex | None) -> _index.CorpusIndex:
        indexer = Indexer(self._storage, self._reader, self._cache_dir, self._fetch_for_index,
                          checksums=self._verify == "checksum")
        return indexer.load_or_build(urls, threads, progress, listed)

    def _fetch_for_index(self, url: str, size: int, version: str) -> str:
        return self._fetch(url, size, version, "")

    @property
    def fingerprint(self) -> str:
        """``shards:<content hash>``: the corpus identity that the loader's state carries."""
        return FINGERPRINT_PREFIX + self.index.content_hash

    @property
    def _legacy_fingerprint(self) -> str:
        """The fingerprint shufflepoint 0.2 gave this corpus (index format 1: no shard versions), which
        its states carry: a version-1 state with it resumes, the corpus being the same by 0.2's measure."""
        return FINGERPRINT_PREFIX + self.index.legacy_hash

    def _explain_fingerprint(self, saved: str) -> str:
        """What changed since a state with fingerprint ``saved`` was written, as far as known here."""
        if not saved.startswith(FINGERPRINT_PREFIX):
            return "The state was not saved on a Shards corpus"
        content_hash = saved[len(FINGERPRINT_PREFIX):].partition(":")[0]  # a changed block: the state's shuffle_block
        old = sidecar.load_by_hash(self._cache_dir, content_hash)
        return _index.explain(content_hash, old, self.index, self._cache_dir)

    @property
    def shard_rows(self) -> np.ndarray:
        """Rows per shard, in shard order: what the ``blocks`` order is built from."""
        return self.index.rows

    def _keep_open_for(self, shuffle_block: int) -> None:
        """The loader's block size: keep open the shards of two blocks (the rows of a block come in
        any order, so fewer open shards reopen a shard per sample; measured: 4 open shards made
        token windows 4x slower and Parquet rows 30x). Unless ``max_open`` was given. Warns when a
        block's decoded rows exceed the process's budget (``decode_budget.warn_if_redecoding``)."""
        if not len(self.index.shards):
            return
        self._block = int(shuffle_block)
        warn_if_redecoding(shuffle_block, int(self.index.rows.max()), len(self), self._decoded_row_bytes(),
                           GROUPS.limit)
        if self._max_open_chosen:
            return
        smallest = max(1, int(np.min(self.index.rows[self.index.rows > 0], initial=shuffle_block)))
        per_block = -(-int(shuffle_block) // smallest) + 1
        self._max_open = min(_MAX_OPEN_CAP, max(self._max_open, 2 * per_block))

    def _fitting_shuffle_block(self) -> int:
        """The ``shuffle_block`` a loader uses when given none: the default, or fewer rows where a
        block's decoded rows would not fit half the process's budget (``decode_budget``)."""
        return fitting_block(self._decoded_row_bytes(), GROUPS.limit)

    def _decoded_row_bytes(self) -> int | None:
        """About the bytes a row holds decoded, from the first non-empty shard's metadata (Parquet;
        None for formats decoded row by row), asked once per dataset."""
        if self._row_bytes is None:
            reader = self._reader
            nonempty = np.flatnonzero(self.index.rows)
            found = None
            if isinstance(reader, formats.MeasuresDecodedRows) and nonempty.size:
                record = self.index.shards[int(nonempty[0])]
                url = self.index.url(int(nonempty[0]))
                if self._ranged(url, record.version, record.checksum):  # kept: a restart reads it locally
                    partial = self._partial(url, record.size, record.version)
                    try:
                        found = reader.decoded_row_bytes(partial.pread, record.size, url)
                    finally:
                        partial.close()
                else:
                    with self._storage.ranges(url, record.size, record.version) as read:
                        found = reader.decoded_row_bytes(read, record.size, url)
            self._row_bytes = (found,)
        return self._row_bytes[0]

    def shard_of(self, index: int) -> tuple[int, int]:
        """(shard, row) of dataset index ``index``."""
        shard = int(np.searchsorted(self._ends, index, side="right"))
        return shard, int(index - self._starts[shard])

    def locate(self, index: int) -> dict[str, Any]:
        """Where ``index`` lives: ``{"index", "shard", "url", "row"}`` plus the format's own address
        (JSONL line and bytes, tar members, token window bytes, Parquet row group; see ``locate.py``).
        Opens the shard (a remote one is fetched into the node cache)."""
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < len(self):
            raise IndexError(refusal("Shards index", index, f"an int in [0, {len(self)})",
                                     "pass an index of the corpus's rows"))
        shard, row = self.shard_of(int(index))
        return {"index": int(index), **shard_location(shard, self.index.url(shard), row, self._open(shard))}

    # -- reading -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self._ends[-1]) if self._ends.size else 0

    def __getitem__(self, index: int) -> Any:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(refusal("Shards index", Plain(type(index).__name__), "an int",
                                    "pass an index of the corpus's rows"))
        if not 0 <= index < len(self):
            raise IndexError(refusal("Shards index", int(index), f"an int in [0, {len(self)}) (out of range)",
                                     "pass an index of the corpus's rows"))
        shard, row = self.shard_of(int(index))
        sample = self._open(shard)[row]
        return self._transformed(sample, int(index)) if self._transform is not None else sample

    def _transformed(self, sample: Any, index: int) -> Any:
        """``transform(sample)``; a bad sample (``SampleError``) is re-raised naming its shard and row."""
        assert self._transform is not None
        try:
            return self._transform(sample)
        except SampleError as error:
            raise located_error(error, self, index) from error

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """``[self[i] for i in indices]``, read a batch at once (torch's DataLoader calls this)."""
        return self.read_batch(indices).samples()

    def read_batch(self, indices: Sequence[int] | np.ndarray) -> Batch:
        """The samples at ``indices`` as one batch read shard by shard (each shard's rows at once, see
        the readers' ``take``), in the order asked; ``transform`` still sees one sample at a time."""
        flat = checked_indices("Shards", indices, len(self))
        shards = np.searchsorted(self._ends, flat, side="right")
        rows = flat - self._starts[shards]
        batch = self._read_laid_out(shards, rows) if flat.size else None
        if batch is None:
            batch = self._read_windows(shards, rows)
        if batch is None:
            batch = gather(shards, lambda shard, where: self._open(shard).take(rows[where]))
        if self._transform is None:
            return batch
        return Rows([self._transformed(sample, index) for sample, index in zip(batch.samples(), flat.tolist(),
                                                                                strict=True)])

    def _read_laid_out(self, shards: np.ndarray, rows: np.ndarray) -> Batch | None:
        """The batch from the decoded columns of its files laid out side by side (``readers/_flat``):
        one index per column, where every row's group is held there; else None (read file by file)."""
        layout = self._layout
        if layout is None or os.getpid() != self._pid:
            return None
        found = layout.take(shards, rows)
        if found is not None:
            opened = self._opened
            for shard in set(shards.tolist()):  # read: most recently used, as _open would mark them
                if shard in opened:
                    opened.move_to_end(shard)
        return found

    def _read_windows(self, shards: np.ndarray, rows: np.ndarray) -> Batch | None:
        """Token windows from several shards written into one (n, seq_len + 1) array of the tokens' type,
        each shard's rows in place (``OpenTokens.take_into``: a pread straight into its row), then cast to
        int64 at once: no array per shard, no join, no reorder, no bytes object per window. A resume's
        first batch reads ~2 windows from each of ~110 shards. A batch inside one shard is its ``take``;
        None for the other readers."""
        if not isinstance(self._reader, TokensReader) or not shards.size:
            return None
        if shards[0] == shards[-1] and (shards == shards[0]).all():  # the usual batch: one index into one shard
            return self._open(int(shards[0])).take(rows)
        out = np.empty((shards.size, self._reader.window_width), dtype=self._reader.token_type)  # as stored
        by_shard = np.argsort(shards, kind="stable")
        ordered = shards[by_shard]
        bounds = [0, *(np.flatnonzero(ordered[1:] != ordered[:-1]) + 1).tolist(), shards.size]
        for first, last in zip(bounds[:-1], bounds[1:], strict=True):
            where = by_shard[first:last]
            opened = self._open(int(ordered[first]))
            assert isinstance(opened, OpenTokens)  # what a TokensReader opens
            opened.take_into(out, where, rows[where])
        return Stacked(torch.from_numpy(out.astype(np.int64)))  # one cast for the batch

    def _read_ids(self, indices: Sequence[int] | np.ndarray, column: str) -> list[np.ndarray] | None:
        """Each sample's ``column`` as a 1-D integer array, where the reader holds it as one (a
        Parquet list of integers: views of the decoded group, no Python int per token); None where
        it does not, or with a ``transform`` (then read samples). What ``Packed`` reads documents with."""
        flat = checked_indices("Shards", indices, len(self))
        if self._transform is not None or not flat.size:
            return None
        shards = np.searchsorted(self._ends, flat, side="right")
        rows = (flat - self._starts[shards]).tolist()
        places: dict[int, list[int]] = {}  # a few documents per shard: grouped in Python, not numpy
        for place, shard in enumerate(shards.tolist()):
            places.setdefault(shard, []).append(place)
        found: list[np.ndarray] = [np.empty(0)] * flat.size
        for shard, where in places.items():
            opened = self._open(shard)
            takes = cast(formats.TakesIds, opened) if offered(opened, formats.TakesIds) else None
            part = takes.take_ids([rows[p] for p in where], column) if takes is not None else None
            if part is None:
                return None
            for place, ids in zip(where, part, strict=True):
                found[place] = ids
        return found

    def _ascending(self, indices: Sequence[int] | np.ndarray,
                   asked: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(indices, their shards, their rows) of ascending ``indices``; None when samples are transformed
        (the ids are then the transform's); ``asked`` names the read in the refusal of unsorted indices."""
        flat = checked_indices("Shards", indices, len(self))
        if self._transform is not None:
            return None
        if flat.size > 1 and bool((np.diff(flat) < 0).any()):
            raise ValueError(refusal("indices", Plain("indices out of order"), f"ascending indices ({asked})",
                                     "sort the indices first"))
        shards = np.searchsorted(self._ends, flat, side="right")
        return flat, shards, flat - self._starts[shards]

    def _read_ids_ascending(self, indices: Sequence[int] | np.ndarray, column: str) -> list[np.ndarray] | None:
        """``_read_ids`` for indices in ascending order, many at once (a window of ``Packed``'s token
        stream, thousands of documents): grouped by shard with numpy, then by decoded group."""
        located = self._ascending(indices, "_read_ids_ascending")
        if located is None:
            return None
        flat, shards, rows = located
        found: list[np.ndarray] = []
        for where in np.split(np.arange(flat.size), np.flatnonzero(np.diff(shards)) + 1):
            if not where.size:
                continue
            opened = self._open(int(shards[where[0]]))
            takes = cast(formats.TakesIds, opened) if offered(opened, formats.TakesIds) else None
            part = takes.take_ids_ascending(rows[where], column) if takes is not None else None
            if part is None:
                return None
            found += part
        return found

    def _read_id_spans_ascending(self, indices: Sequence[int] | np.ndarray,
                                 column: str) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, np.ndarray] | None:
        """``_read_ids_ascending`` without an array per index: ``(arrays, source, starts, stops)``, index
        k's ids being ``arrays[source[k]][starts[k]:stops[k]]`` (the decoded groups' values, read-only);
        None where the reader holds no such arrays. What ``Packed``'s token windows are built from: a
        few numpy calls for thousands of documents."""
        located = self._ascending(indices, "_read_id_spans_ascending")
        if located is None:
            return None
        flat, shards, rows = located
        arrays: list[np.ndarray] = []
        counts: list[int] = []
        starts: list[np.ndarray] = []
        stops: list[np.ndarray] = []
        bounds = [0, *(np.flatnonzero(shards[1:] != shards[:-1]) + 1).tolist(), flat.size]
        for first, last in zip(bounds[:-1], bounds[1:], strict=True):
            if first == last:
                continue
            opened = self._open(int(shards[first]))
            takes = cast(formats.TakesIds, opened) if offered(opened, formats.TakesIds) else None
            part = takes.take_id_spans_ascending(rows[first:last], column) if takes is not None else None
            if part is None:
                return None
            for values, opens, closes in part:
                arrays.append(values)
                counts.append(int(opens.size))
                starts.append(opens)
                stops.append(closes)
        if not arrays:
            empty = np.empty(0, np.int64)
            return [], empty, empty, empty
        source = np.repeat(np.arange(len(arrays), dtype=np.int64), counts)
        return arrays, source, np.concatenate(starts), np.concatenate(stops)

    def columnar(self) -> Columnar:
        """This corpus with batches kept as read, for ``shufflepoint.collate`` (see ``Columnar``)."""
        return Columnar(self)

    def _open(self, shard: int) -> OpenShard:
        if os.getpid() != self._pid:  # forked into a DataLoader worker: open files are the parent's
            self._reset_process_state()
        found = self._opened.get(shard)
        if found is not None:
            self._opened.move_to_end(shard)
            return found
        record = self.index.shards[shard]
        url = self.index.url(shard)
        if self._ranged(url, record.version, record.checksum):
            opened = self._open_ranged(url, record.size, record.version)
        elif isinstance(self._reader, TokensReader) and not (record.checksum or _is_remote(url)):  # one path lookup
            fd, path = self._storage.open_local(url, record.size, record.version)
            opened = self._reader.open_descriptor(fd, path, url, record.size)
        else:
            path = self._fetch(url, record.size, record.version, record.checksum)
            if record.checksum and shard not in self._verified:  # every copy, once per process
                check_checksum(url, path, record.checksum)
                self._verified.add(shard)
            opened = self._reader.open(path, url)
        if len(opened) != record.rows:
            opened.close()
            raise ShardError(url, f"has {len(opened)} rows, the index says {record.rows}: it changed since "
                                  "the index was built; rebuild the index (delete its sidecar) and restart the epoch")
        if offered(opened, formats.KeepsDecodedIds):  # Parquet: token ids decoded once per node, then mapped
            cast(formats.KeepsDecodedIds, opened).keep_ids_in(kept_ids.store(self._cache_dir))
        if offered(opened, formats.JoinsLayout):  # Parquet: a batch across files is one gather per column
            if self._layout is None:  # an arena of about two blocks: a block's files side by side
                largest = int(self.index.rows.max())
                self._layout = Layout(len(self.index.shards), min(len(self), 2 * (self._block + largest)))
            cast(formats.JoinsLayout, opened).join_layout(self._layout, shard)
        self._opened[shard] = opened
        while len(self._opened) > self._max_open:
            self._opened.popitem(last=False)[1].close()
        return opened

    def _fetch(self, url: str, size: int, version: str, checksum: str) -> str:
        """A local path holding the whole shard as the index recorded it (size, version and, with
        verify="checksum", content): the file itself, or its copy in the node cache. The cache entry
        is named by the version, or by the checksum where the storage reports no version."""
        if not _is_remote(url):
            return self._storage.local_path(url, size, version)

        def download(dest: str) -> None:
            self._storage.fetch(url, dest, size, version)
            if checksum:
                check_checksum(url, dest, checksum)

        return self._node_cache().path_for(url, version or checksum, size, download)

    def _ranged(self, url: str, version: str, checksum: str) -> bool:
        """Whether this shard is read by byte range (``_shards/storage/ranged``): a remote shard of a format
        that can (Parquet), with a version to pin the ranges to and no checksum to check (that needs
        the whole file), and not already whole in the node cache."""
        return (self._ranged_reader() and _is_remote(url) and bool(version) and not checksum
                and cast(OpensRanged, self._reader).ranged_for(url)
                and not os.path.exists(self._node_cache().entry(url, version)))

    def _partial(self, url: str, size: int, version: str) -> ranged.PartialShard:
        return ranged.PartialShard(self._node_cache(), url, version, size,
                                   lambda: self._storage.ranges(url, size, version, "reading a range"),
                                   ranged.join_gap(self._reader, self._density))

    def _open_ranged(self, url: str, size: int, version: str) -> OpenShard:
        partial = self._partial(url, size, version)
        source = ranged.RangedFile(partial)
        try:
            handle = Ranged(source, partial.ensure, ranged.identity(url, version))
            return cast(OpenShard, cast(OpensRanged, self._reader).open_ranged(handle, url))
        except BaseException:
            source.close()
            raise

    def _node_cache(self) -> NodeCache:
        if self._cache is None:
            self._cache = NodeCache(os.path.join(self._cache_dir, "shards"), self._cache_limit)
        return self._cache

    # -- read-ahead --------------------------------------------------------------------------
    @property
    def _reads_ahead(self) -> bool:
        """Whether ``prefetch`` does anything (remote shards, a prefetch depth): else nothing is announced."""
        return bool(self._remote and self._prefetch_depth > 0)

    def prefetch(self, indices: Sequence[int] | np.ndarray) -> None:
        self.prefetch_dealt(indices, 1.0)

    def prefetch_dealt(self, indices: Sequence[int] | np.ndarray, density: float) -> None:
        """Fetch, in the background, what these upcoming dataset indices read: the ranges of their
        rows in a shard read by range (every such shard of the chunk, in wide spans where this rank
        reads densely, ``ranged_ahead``), the first ``prefetch`` other shards whole."""
        if not self._remote or self._prefetch_depth <= 0 or len(indices) == 0:
            return
        indices = np.asarray(indices, dtype=np.int64)
        shards = np.searchsorted(self._ends, indices, side="right")
        upcoming = in_first_seen_order(shards).tolist()  # in the order they will be read
        whole = upcoming
        if self._ranged_reader():
            if self._ranged_ahead is None:
                self._ranged_ahead = ranged_ahead_for(self, cast(OpensRanged, self._reader))
            at_once, self._at_once = self._at_once, False  # the pass's first chunk, read at once
            whole = self._ranged_ahead.announce(upcoming, shards, indices - self._starts[shards], density, at_once)
        if whole:
            if self._prefetcher is None:
                self._prefetcher = Prefetcher(self._prefetch_lookup, max_ahead=self._prefetch_depth)
            self._prefetcher.schedule([self.index.url(s) for s in whole[: self._prefetch_depth]])
        self._release_finished(set(upcoming))

    def _ranged_reader(self) -> bool:
        """Whether some remote shards may be read by range (then read ahead by range, not whole)."""
        return ranged.enabled_for(self._reader.name) and self._verify != "checksum" and self._opens_ranged

    def _read_at_density(self, density: float) -> None:
        """How densely this rank reads the order this pass (``ReadsAtDensity``): told before workers start; the
        next chunk announced is the pass's first, read at once."""
        self._density, self._at_once = float(density), True

    def _ranged_shard(self, shard: int) -> bool:
        record = self.index.shards[shard]
        return self._ranged(self.index.url(shard), record.version, record.checksum)

    def _release_finished(self, announced: set[int]) -> None:
        """Mark first out of the node cache the shards this rank is done with for the epoch: read in
        the chunk before the current one and in neither it nor the one just announced (the blocks
        order reads a shard inside its block, and a block in consecutive chunks). So a cache smaller
        than the node's share evicts what it will not read again this epoch, not the shards kept
        from the last epoch that this one has yet to read (plain LRU would take those first)."""
        before, current = self._announced
        for shard in before - current - announced:
            record = self.index.shards[shard]
            self._node_cache().release(self.index.url(shard), record.version or record.checksum)
        self._announced = (current, announced)

    def _prefetch_lookup(self, url: str) -> str:
        if self._shard_by_url is None:  # built on first use: 40 ms for 5,000 shards, in every worker
            self._shard_by_url = {self.index.url(s): s for s in range(len(self.index.shards))}
        shard = self._shard_by_url[url]
        record = self.index.shards[shard]
        return self._fetch(url, record.size, record.version, record.checksum)

    # -- processes ---------------------------------------------------------------------------
    def _reset_process_state(self) -> None:
        self._pid = os.getpid()
        self._announced = (set(), set())  # the shards of the last two announced chunks
        self._opened = OrderedDict()
        self._verified: set[int] = set()  # shards whose copy this process hashed (verify="checksum")
        self._cache = None
        self._prefetcher = None
        self._ranged_ahead = None
        self._shard_by_url = None
        self._layout = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_opened", "_cache", "_prefetcher", "_ranged_ahead", "_shard_by_url", "_layout"):
            state[name] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_process_state()

    def __repr__(self) -> str:
        """``Shards(parquet, 12 shards, 1,024 rows, fingerprint='shards:0f3a9c1e…', root='s3://bucket/c4')``:
        from the index in memory (its content hash is computed once, when it is built or read)."""
        return (f"Shards({self._reader.name}, {len(self.index.shards):,} shards, {len(self):,} rows, "
                f"fingerprint={short(self.fingerprint)}, root={self.index.root!r})")
