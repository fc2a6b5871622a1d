"""A corpus's token counts as ``Packed`` holds them: per-shard totals for all, per-document counts on demand.

The epoch table needs only each shard's token total (a ``blocks`` run is a whole shard), and a rank's
reads need the per-document counts of the shards it reads. ``ShardCounts`` holds the O(shards) totals
and one digest, and loads a shard's counts when first asked (``ShardLoader``: kept in the node's cache
folder, else a ranged read of the published counts, else counted from the shard, which the read
downloads anyway), keeping the last few million documents' worth. ``FullCounts`` holds every count of a
dataset that has no shards to key them by (a list, a ``Shards`` with a transform): counted at every
construction, 16 bytes a document, as before.

Both add the framing (``extra`` tokens, bos/eos, per document) when asked, so no shifted copy of the
counts or of their prefix sums is ever made.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import OrderedDict
from typing import Any

import numpy as np

from shufflepoint._errors import Plain, refusal
from shufflepoint._order.distinct import distinct
from shufflepoint._shards.counting import count_files
from shufflepoint._shards.counting.token_counts import count_range, count_ranges, digest

_KEPT_DOCUMENTS = 1 << 22  # per-document counts kept in memory, whole shards (32 MB of int64)
_MASKED = 16  # shards in one lookup found by a mask each; more: by one sort
_RECOUNT = "build the Packed again (the corpus changed since its counts were taken)"


class FullCounts:
    """Every document's count, in memory: ``lengths`` and their prefix sums (16 B a document)."""

    def __init__(self, lengths: np.ndarray, extra: int = 0) -> None:
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self._cumulative = np.concatenate(([0], np.cumsum(self.lengths))).astype(np.int64)
        self.extra = extra
        self.documents = int(self.lengths.size)
        self._digest: str | None = None

    def framed(self, extra: int) -> FullCounts:
        found = copy.copy(self)
        found.extra = extra
        return found

    @property
    def tokens(self) -> int:
        return int(self._cumulative[-1]) + self.extra * self.documents

    @property
    def digest(self) -> str:
        if self._digest is None:
            self._digest = digest(self.lengths)
        return self._digest

    def sizes(self, documents: np.ndarray) -> np.ndarray:
        found: np.ndarray = self.lengths[np.asarray(documents, dtype=np.int64)] + self.extra
        return found

    def run_tokens(self, first: np.ndarray, documents: np.ndarray) -> np.ndarray:
        """Tokens of each run of consecutive documents ``[first, first + documents)``."""
        found: np.ndarray = self._cumulative[first + documents] - self._cumulative[first] + self.extra * documents
        return found


class ShardLoader:
    """One shard's per-document counts, from the cheapest place that has them, checked against its total
    and digest (a refusal when they differ: the shard changed since it was counted, or a file is damaged)."""

    def __init__(self, dataset: Any, count: Any, identity: str, published: tuple[Any, str] | None) -> None:
        self.dataset, self.count, self.identity, self.published = dataset, count, identity, published
        index = dataset.index
        self._starts = np.concatenate(([0], np.cumsum(index.rows))).astype(np.int64)
        self._published_rows: np.ndarray | None = None
        self._paths: dict[int, str] = {}

    def published_rows(self) -> np.ndarray:
        """Each shard's row in the published totals, or -1 where they do not hold it (matched once)."""
        if self._published_rows is None:
            assert self.published is not None
            totals, url = self.published
            self._published_rows = totals.matching(self.dataset.index)
            self.published = (dataclasses.replace(totals, names=[], versions=[]), url)  # matched: not kept
        return self._published_rows

    def kept_path(self, shard: int) -> str:
        found = self._paths.get(shard)
        if found is None:
            record = self.dataset.index.shards[shard]
            found = self._paths[shard] = count_files.kept_path(
                self.dataset.cache_dir, self.dataset.index.url(shard), (record.size, record.version, record.rows),
                self.identity)
        return found

    def kept(self, shard: int) -> np.ndarray | None:
        return count_files.load_kept(self.kept_path(shard), int(self.dataset.index.rows[shard]))

    def counted(self, shards: list[int], workers: int | None, progress: bool) -> dict[int, np.ndarray]:
        """These shards counted from their documents (in a pool), each kept in the cache folder."""
        ranges = [(int(self._starts[s]), int(self._starts[s + 1])) for s in shards]
        found = count_ranges(self.dataset, self.count, ranges, workers, progress)
        by_shard = dict(zip(shards, found, strict=True))
        for s, counts in by_shard.items():
            count_files.save_kept(self.kept_path(s), counts)
        return by_shard

    def __call__(self, shard: int, total: int, shard_digest: str) -> np.ndarray:
        found = self.kept(shard)
        source = "kept in the cache folder"
        if found is None and self.published is not None:
            totals, url = self.published
            row = int(self.published_rows()[shard])
            if row >= 0:
                name = self.dataset.index.shards[shard].name
                found, source = count_files.read_range(self.dataset.storage, url, totals, row, name), url
                count_files.save_kept(self.kept_path(shard), found)
        if found is None:
            start, stop = int(self._starts[shard]), int(self._starts[shard + 1])
            found, source = count_range(self.dataset, self.count, start, stop), "counted from the shard"
            count_files.save_kept(self.kept_path(shard), found)
        if int(found.sum()) != total or count_files.shard_digest(found) != shard_digest:
            name = self.dataset.index.shards[shard].name
            raise ValueError(refusal(f"token counts of shard {name}", Plain(f"{int(found.sum())} tokens "
                                     f"({source})"), f"{total} tokens, digest {shard_digest}, as the totals say",
                                     _RECOUNT, why="the shard or its counts changed since the totals were taken"))
        return found


class ShardCounts:
    """Per-shard token totals (O(shards)) and their digest; per-document counts of a shard loaded when asked."""

    def __init__(self, rows: np.ndarray, totals: np.ndarray, digests: list[str], load: ShardLoader,
                 extra: int = 0) -> None:
        self.rows = np.asarray(rows, dtype=np.int64)
        self.totals = np.asarray(totals, dtype=np.int64)
        self._digests = np.asarray(digests, dtype="S32")  # 32 B a shard, not a Python string each
        self._load, self.extra = load, extra
        self._starts = np.concatenate(([0], np.cumsum(self.rows))).astype(np.int64)
        self.documents = int(self._starts[-1])
        self.digest = count_files.corpus_digest(self.totals, digests)
        self._kept: OrderedDict[int, np.ndarray] = OrderedDict()
        self._kept_documents = 0

    def framed(self, extra: int) -> ShardCounts:
        found = copy.copy(self)
        found.extra = extra
        return found

    @property
    def tokens(self) -> int:
        return int(self.totals.sum()) + self.extra * self.documents

    def shard(self, shard: int) -> np.ndarray:
        """Shard ``shard``'s per-document counts (unframed), the last few million documents' kept."""
        found = self._kept.get(shard)
        if found is not None:
            self._kept.move_to_end(shard)
            return found
        digest = self._digests[shard].decode()
        found = np.asarray(self._load(shard, int(self.totals[shard]), digest), dtype=np.int64)
        self._kept[shard] = found
        self._kept_documents += found.size
        while self._kept_documents > _KEPT_DOCUMENTS and len(self._kept) > 1:
            self._kept_documents -= self._kept.popitem(last=False)[1].size
        return found

    def sizes(self, documents: np.ndarray) -> np.ndarray:
        """The framed token count of each document (any order), loading the shards they are in."""
        documents = np.asarray(documents, dtype=np.int64)
        found = np.empty(documents.shape, dtype=np.int64)
        if not documents.size:
            return found
        shard = np.searchsorted(self._starts, documents, side="right") - 1
        lowest, highest = int(shard.min()), int(shard.max())
        if lowest == highest:  # a block of one shard: no grouping
            found[...] = self.shard(lowest)[documents - self._starts[lowest]]
        else:
            touched = distinct(shard.reshape(-1))
            if touched.size <= _MASKED:  # a block holds whole shards, a window a few blocks: a mask per shard
                for s in touched.tolist():
                    where = shard == s
                    found[where] = self.shard(s)[documents[where] - self._starts[s]]
            else:  # many small shards: grouped by one sort
                self._grouped(documents.reshape(-1), shard.reshape(-1), found.reshape(-1))
        found += self.extra
        return found

    def _grouped(self, documents: np.ndarray, shard: np.ndarray, found: np.ndarray) -> None:
        by_shard = np.argsort(shard, kind="stable")
        ordered = shard[by_shard]
        edges = np.flatnonzero(ordered[1:] != ordered[:-1]) + 1
        for lo, hi in zip([0, *edges.tolist()], [*edges.tolist(), ordered.size], strict=True):
            s = int(ordered[lo])
            where = by_shard[lo:hi]
            found[where] = self.shard(s)[documents[where] - self._starts[s]]

    def run_tokens(self, first: np.ndarray, documents: np.ndarray) -> np.ndarray:
        """Tokens of each run ``[first, first + documents)``: a whole shard's total (O(1) each, no per-document
        count read); a run that is part of a shard sums its documents."""
        first, documents = np.asarray(first, np.int64), np.asarray(documents, np.int64)
        shard = np.searchsorted(self._starts, first, side="right") - 1
        whole = (self._starts[shard] == first) & (self.rows[shard] == documents)
        found: np.ndarray = self.totals[shard] + self.extra * documents
        for k in np.flatnonzero(~whole).tolist():
            found[k] = int(self.sizes(np.arange(first[k], first[k] + documents[k])).sum())
        return found
