"""``shufflepoint.Shards``: a corpus of shard files, local or in object storage, as a map-style dataset.

``len()`` and ``[i]`` work as for any map-style dataset, so ``shufflepoint.DataLoader(Shards(...))``
is the whole recipe: the loader sees ``shard_rows`` and uses the ``blocks`` order, which keeps
each stretch of an epoch inside a few shards. Index i is (shard, row) by binary search over the
prefix sums of the index. This module is the catalog and the read API; how a process opens, fetches,
caches and reads ahead the shards is ``access.py`` (``ShardAccess``), the token column read as arrays
``ids.py``, and what the loader asks beyond the public surface one object, ``ShardsHooks``.

Words: docs/glossary.md (corpus, shard, row, corpus index, block).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch.utils.data

from shufflepoint._errors import Plain, SampleError, refusal
from shufflepoint._shards.corpora.shards import ids
from shufflepoint._shards.corpora.shards.access import AccessOptions, ShardAccess
from shufflepoint._shards.corpora.shards.batch import Batch, Columnar, Rows, Stacked, checked_indices, gather
from shufflepoint._shards.corpora.shards.hub_dataset import hub_sources
from shufflepoint._shards.corpora.shards.locate import located_error, say_where, shard_location
from shufflepoint._shards.corpora.shards.shown import short
from shufflepoint._shards.index import collector, hub_listing, sidecar
from shufflepoint._shards.index import index as _index
from shufflepoint._shards.index.indexing import Indexer
from shufflepoint._shards.index.integrity import check_verify
from shufflepoint._shards.index.published_listing import listing
from shufflepoint._shards.readers import infer_format, make_reader, saved_dataset_files
from shufflepoint._shards.readers.tokens import OpenTokens, TokensReader
from shufflepoint._shards.storage.storage import Storage, is_remote

FINGERPRINT_PREFIX = "shards:"


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
            URL a line), or the folder of a Hugging Face dataset saved with ``save_to_disk``. A Hub
            dataset's files (``"hf://datasets/ORG/NAME[@REVISION]/data/*.parquet"``) are pinned to the
            revision's commit first (docs/hub.md; ``Shards.from_hub`` takes one by name). Required.
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
            endpoint, ...; for ``hf://``: ``token`` and ``endpoint``, else ``HF_TOKEN``/``HF_ENDPOINT``).
            Default None.
        retries (int): retries of each storage call (exponential backoff with jitter) before a
            ``ShardError`` names the shard. Default 5; 0 tries once.
        prefetch (int): remote shards downloaded ahead of the loader, in the background. Default 16;
            0 downloads a shard only when a row of it is read. Local shards, and remote ones read by
            byte range (Parquet, ``.bin``), are not prefetched.
        index_threads (int): threads that build the index (one shard each at a time). Default 8.
        progress (bool): show a tqdm bar while the index is built. Default True.
        max_open (int | None): shards kept open per process. Default None: those of two blocks of the
            loader's order (``ShardAccess.keep_open_for``), at least 32 and at most 512.
        verify (str): ``"version"`` (default) reads a shard only at the size and version (S3 ETag, GCS
            generation, local mtime_ns) the index recorded, else a ``ShardError``; ``"checksum"`` also
            records each shard's sha256 at indexing (downloading every shard once) and checks every
            copy against it before a row is read: for storage that reports no version (plain HTTP).

    >>> corpus = Shards("data/train-*.parquet", columns=["text"])      # doctest: +SKIP
    >>> loader = shufflepoint.DataLoader(corpus, batch_size=32, seed=1)  # doctest: +SKIP
    """

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
        storage = Storage(storage_options=storage_options, retries=retries)
        saved = saved_dataset_files(sources) if isinstance(sources, str) and os.path.isdir(sources) else None
        options = {k: v for k, v in (("columns", columns), ("seq_len", seq_len), ("dtype", dtype)) if v is not None}
        cache_dir = cache_dir or sidecar.default_cache_dir()
        with collector.paused():  # a listing of 1e5 objects: see _shards/index/collector.py
            urls, listed = (saved, None) if saved is not None else self._listing(storage, cache_dir, sources,
                                                                                 format, options)
        if not urls:
            raise ValueError(refusal("sources", sources, "at least one shard", "pass where the shards are"))
        reader = make_reader(format or infer_format(urls[0]), **options)
        self._transform = transform
        # per-process access; the index build below may already download remote shards through it
        self._access = ShardAccess(reader, storage, cache_dir, AccessOptions(cache_limit, prefetch, max_open,
                                                                             self._verify))
        self.index = self._load_or_build(urls, index_threads, progress, listed)
        rows = self.index.rows
        self._ends = np.cumsum(rows)
        self._starts = self._ends - rows
        self._access.attach(self.index, any(is_remote(u) for u in urls))

    @classmethod
    def from_hub(cls, name: str, config: str | None = None, split: str = "train", *, revision: str | None = None,
                 **options: Any) -> Shards:
        """A Hugging Face Hub dataset's split, with the files ``datasets.load_dataset(name, config, split=split,
        revision=revision)`` reads, pinned to the revision's commit (see ``hub_dataset``): its card's
        ``configs:`` data files, else the Hub's Parquet conversion (``refs/convert/parquet``).

        Args:
            name (str): the dataset's id, ``"ORG/NAME"``. Required.
            config (str | None): the config (``load_dataset``'s ``name``). Default None: the card's default.
            split (str): the split. Default ``"train"``.
            revision (str | None): a branch, tag or commit. Default None: the default branch. A commit
                (40 hex digits) is read with no lookup; a branch is resolved once, and the commit kept
                in ``index.root``.
            **options: ``Shards``' own keyword arguments (``columns``, ``transform``, ``cache_dir``,
                ``storage_options``...).

        Raises ``HubError`` (its ``reason``: ``"gated"``, ``"not_found"``, ``"revision"``, ``"config"``,
        ``"split"``, ``"rate_limited"``) for what a person must change.

        >>> corpus = Shards.from_hub("HuggingFaceFW/fineweb", "sample-10BT", columns=["text"])  # doctest: +SKIP
        """
        storage = Storage(storage_options=options.get("storage_options"), retries=options.get("retries", 5))
        cache_dir = options.get("cache_dir") or sidecar.default_cache_dir()
        return cls(hub_sources(storage, name, config, split, revision, cache_dir), **options)

    # -- the index ---------------------------------------------------------------------------
    _published_listing = True  # a glob ``shufflepoint index`` published is listed from its index (not by the tool)

    def _listing(self, storage: Storage, cache_dir: str, sources: str | Sequence[str], format: str | None,
                 options: dict[str, Any]) -> tuple[list[str], _index.CorpusIndex | None]:
        if (not self._published_listing or self._verify == "checksum") and not hub_listing.is_hub_sources(sources):
            return storage.expand(sources), None  # a Hub source is always pinned to a commit first
        return listing(storage, sources, format, options, cache_dir)

    def _load_or_build(self, urls: list[str], threads: int, progress: bool,
                       listed: _index.CorpusIndex | None) -> _index.CorpusIndex:
        access = self._access
        indexer = Indexer(access.storage, access.reader, access.cache_dir,
                          lambda url, size, version: access.fetch(url, size, version, ""),
                          checksums=self._verify == "checksum")
        return indexer.load_or_build(urls, threads, progress, listed)

    @property
    def fingerprint(self) -> str:
        """``shards:<content hash>``: the corpus identity that the loader's state carries."""
        return FINGERPRINT_PREFIX + self.index.content_hash

    @property
    def shard_rows(self) -> np.ndarray:
        """Rows per shard, in shard order: what the ``blocks`` order is built from."""
        return self.index.rows

    @property
    def cache_dir(self) -> str:
        """The folder of the index sidecars, the node cache and the kept token counts (``cache_dir=``, or its
        default)."""
        return self._access.cache_dir

    @property
    def transform(self) -> Callable[[Any], Any] | None:
        """The ``transform=`` every sample is read through, or None."""
        return self._transform

    @property
    def storage(self) -> Storage:
        """Where the shards' bytes come from (local paths or fsspec URLs, with ``storage_options`` and
        ``retries``): what the index and the token counts are read and published through."""
        return self._access.storage

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
        return {"index": int(index), **shard_location(shard, self.index.url(shard), row, self._access.open(shard))}

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
        sample = self._access.open(shard)[row]
        return self._transformed(sample, int(index)) if self._transform is not None else sample

    def _transformed(self, sample: Any, index: int) -> Any:
        """``transform(sample)``; a bad sample (``SampleError``) is re-raised naming its shard and row, any other
        exception marked with them (``say_where``)."""
        assert self._transform is not None
        try:
            return self._transform(sample)
        except SampleError as error:
            raise located_error(error, self, index) from error
        except Exception as error:  # its type kept (a caller may catch it), its shard and row said
            shard, row = self.shard_of(index)
            say_where(error, self.index.url(shard), row, index)
            raise

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """``[self[i] for i in indices]``, read a batch at once (torch's DataLoader calls this)."""
        return self.read_batch(indices).samples()

    def decodes_samples(self) -> bool:
        """Whether a batch read ends with work per sample (a ``transform``) that ``map_samples`` may thread."""
        return self._transform is not None

    def read_batch(self, indices: Sequence[int] | np.ndarray) -> Batch:
        """The samples at ``indices`` as one batch read shard by shard (each shard's rows at once, see
        the readers' ``take``), in the order asked; ``transform`` still sees one sample at a time."""
        return self.read_mapped(indices, None)

    def read_mapped(self, indices: Sequence[int] | np.ndarray, map_samples: Callable[..., Any] | None) -> Batch:
        """``read_batch(indices)`` with ``transform`` mapped over the batch by ``map_samples`` (``map``'s
        contract, in order: the loader's ``decode_threads``), or one sample after another for None."""
        flat = checked_indices("Shards", indices, len(self))
        shards = np.searchsorted(self._ends, flat, side="right")
        rows = flat - self._starts[shards]
        batch = self._access.laid_out(shards, rows) if flat.size else None
        if batch is None:
            batch = self._read_windows(shards, rows)
        if batch is None:
            batch = gather(shards, lambda shard, where: self._access.open(shard).take(rows[where]))
        if self._transform is None:
            return batch
        if map_samples is None:
            return Rows([self._transformed(sample, index) for sample, index in zip(batch.samples(), flat.tolist(),
                                                                                    strict=True)])
        return Rows(list(map_samples(lambda pair: self._transformed(*pair),
                                     zip(batch.samples(), flat.tolist(), strict=True))))

    def _read_windows(self, shards: np.ndarray, rows: np.ndarray) -> Batch | None:
        """Token windows from several shards written into one (n, seq_len + 1) array of the tokens' type,
        each shard's rows in place (``OpenTokens.take_into``: a pread straight into its row), then cast to
        int64 at once: no array per shard, no join, no reorder, no bytes object per window. A resume's
        first batch reads ~2 windows from each of ~110 shards. A batch inside one shard is its ``take``;
        None for the other readers."""
        reader = self._access.reader
        if not isinstance(reader, TokensReader) or not shards.size:
            return None
        if shards[0] == shards[-1] and (shards == shards[0]).all():  # the usual batch: one index into one shard
            return self._access.open(int(shards[0])).take(rows)
        out = np.empty((shards.size, reader.window_width), dtype=reader.token_type)  # as stored
        by_shard = np.argsort(shards, kind="stable")
        ordered = shards[by_shard]
        bounds = [0, *(np.flatnonzero(ordered[1:] != ordered[:-1]) + 1).tolist(), shards.size]
        for first, last in zip(bounds[:-1], bounds[1:], strict=True):
            where = by_shard[first:last]
            opened = self._access.open(int(ordered[first]))
            assert isinstance(opened, OpenTokens)  # what a TokensReader opens
            opened.take_into(out, where, rows[where])
        return Stacked(torch.from_numpy(out.astype(np.int64)))  # one cast for the batch

    def columnar(self) -> Columnar:
        """This corpus with batches kept as read, for ``shufflepoint.collate`` (see ``Columnar``)."""
        return Columnar(self)

    # -- read-ahead --------------------------------------------------------------------------
    def prefetch(self, indices: Sequence[int] | np.ndarray) -> None:
        """``Prefetching``: fetch in the background what these upcoming indices read, as a rank that reads
        them densely would (``prefetch_dealt`` with density 1.0). The loader calls it; a script need not."""
        self.prefetch_dealt(indices, 1.0)

    def prefetch_dealt(self, indices: Sequence[int] | np.ndarray, density: float) -> None:
        """Fetch, in the background, what these upcoming dataset indices read: the ranges of their
        rows in a shard read by range (every such shard of the chunk, in wide spans where this rank
        reads densely, ``ranged_ahead``), the first ``prefetch`` other shards whole."""
        if not self._access.reads_ahead or len(indices) == 0:
            return
        indices = np.asarray(indices, dtype=np.int64)
        shards = np.searchsorted(self._ends, indices, side="right")
        self._access.prefetch(shards, indices - self._starts[shards], density)

    def _loader_hooks(self) -> ShardsHooks:
        """What the loader and the other corpora ask of this corpus beyond its public surface (``Hooked``)."""
        return ShardsHooks(self)

    def __repr__(self) -> str:
        """``Shards(parquet, 12 shards, 1,024 rows, fingerprint='shards:0f3a9c1e…', root='s3://bucket/c4')``:
        from the index in memory (its content hash is computed once, when it is built or read)."""
        return (f"Shards({self._access.reader.name}, {len(self.index.shards):,} shards, {len(self):,} rows, "
                f"fingerprint={short(self.fingerprint)}, root={self.index.root!r})")


class ShardsHooks:
    """What the loader and the other corpora ask of a ``Shards`` beyond its public surface, one object
    (``_core/capabilities.py``: ``KeepsShardsOpen``, ``FitsDecodeBudget``, ``ExplainsFingerprint``,
    ``LegacyIdentified``, ``ReadsIds``, ``ReadsIdsAscending``, ``ReadsIdSpansAscending``, ``ReadsAtDensity``,
    ``ReadsAhead``)."""

    def __init__(self, corpus: Shards) -> None:
        self._corpus = corpus

    def keep_open_for(self, shuffle_block: int) -> None:
        """The loader's block: keep the shards of two blocks open (``ShardAccess.keep_open_for``)."""
        self._corpus._access.keep_open_for(shuffle_block)

    def fitting_shuffle_block(self) -> int:
        """The default block that fits the process's decode budget (``ShardAccess.fitting_shuffle_block``)."""
        return self._corpus._access.fitting_shuffle_block()

    @property
    def legacy_fingerprint(self) -> str:
        """The fingerprint shufflepoint 0.2 gave this corpus (index format 1: no shard versions), which
        its states carry: a version-1 state with it resumes, the corpus being the same by 0.2's measure."""
        return FINGERPRINT_PREFIX + self._corpus.index.legacy_hash

    def explain_fingerprint(self, saved: str) -> str:
        """What changed since a state with fingerprint ``saved`` was written, as far as known here."""
        if not saved.startswith(FINGERPRINT_PREFIX):
            return "The state was not saved on a Shards corpus"
        content_hash = saved[len(FINGERPRINT_PREFIX):].partition(":")[0]  # a changed block: the state's shuffle_block
        cache_dir = self._corpus.cache_dir
        old = sidecar.load_by_hash(cache_dir, content_hash)
        return _index.explain(content_hash, old, self._corpus.index, cache_dir)

    def read_ids(self, indices: Sequence[int] | np.ndarray, column: str) -> list[np.ndarray] | None:
        """Each sample's ``column`` as a 1-D integer array, where the reader holds it as one (a
        Parquet list of integers: views of the decoded group, no Python int per token); None where
        it does not, or with a ``transform`` (then read samples). What ``Packed`` reads documents with."""
        corpus = self._corpus
        flat = checked_indices("Shards", indices, len(corpus))
        if corpus._transform is not None or not flat.size:
            return None
        shards = np.searchsorted(corpus._ends, flat, side="right")
        return ids.take_ids(corpus._access.open, shards, flat - corpus._starts[shards], column)

    def read_ids_ascending(self, indices: Sequence[int] | np.ndarray, column: str) -> list[np.ndarray] | None:
        """``read_ids`` for indices in ascending order, many at once (``ids.take_ids_ascending``)."""
        located = self._ascending(indices, "read_ids_ascending")
        return None if located is None else ids.take_ids_ascending(self._corpus._access.open, *located, column)

    def read_id_spans_ascending(self, indices: Sequence[int] | np.ndarray,
                                column: str) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, np.ndarray] | None:
        """``read_ids_ascending`` without an array per index: ``(arrays, source, starts, stops)``
        (``ids.take_id_spans_ascending``). What ``Packed``'s token windows are built from."""
        located = self._ascending(indices, "read_id_spans_ascending")
        return None if located is None else ids.take_id_spans_ascending(self._corpus._access.open, *located, column)

    def _ascending(self, indices: Sequence[int] | np.ndarray, asked: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(shards, rows) of ascending ``indices``; None when samples are transformed (the ids are then the
        transform's); ``asked`` names the read in the refusal of unsorted indices."""
        corpus = self._corpus
        flat = checked_indices("Shards", indices, len(corpus))
        if corpus._transform is not None:
            return None
        if flat.size > 1 and bool((np.diff(flat) < 0).any()):
            raise ValueError(refusal("indices", Plain("indices out of order"), f"ascending indices ({asked})",
                                     "sort the indices first"))
        shards = np.searchsorted(corpus._ends, flat, side="right")
        return shards, flat - corpus._starts[shards]

    def read_at_density(self, density: float) -> None:
        """How densely this rank reads the order this pass (``ShardAccess.read_at_density``)."""
        self._corpus._access.read_at_density(density)

    @property
    def reads_ahead(self) -> bool:
        """Whether ``prefetch`` does anything (remote shards, a prefetch depth)."""
        return self._corpus._access.reads_ahead
