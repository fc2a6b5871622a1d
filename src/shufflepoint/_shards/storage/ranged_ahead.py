"""Read-ahead for shards read by byte range: the ranges this rank's upcoming rows need, fetched early.

A shard read by range (``_shards/storage/ranged``) is never downloaded whole, so the whole-shard prefetch
has nothing to do for it; without this, every range would be fetched when a row asks for it and a
steady loop would wait on a round trip per shard it enters. The loader announces each chunk of
upcoming indices one chunk early (``Shards.prefetch``); here each shard of the chunk becomes a job:
its rows in that chunk. A background thread opens the shard's partial entry, asks the reader for
the ranges those rows read (``ranged_plan``: Parquet reads the footer once, then maps rows to the
column chunks of their row groups; a ``.bin`` maps windows to bytes) and ``ensure``s them. The read
then finds them held and fetches nothing.

A pass's first chunk is read at once: its jobs fetch its rows joined only across gaps of ``_WIDE`` (a
fresh node's first batch waits for its rows, not for the wide spans of the chunks after it), and the jobs
of later chunks start once they are done (``_FIRST_WAIT_S`` at most), so the first batch has the links
and the entry locks to itself.

Everything the foreground relies on stays in ``PartialShard``: the entry lock (a range is fetched
once per node, whichever thread or process asks first), the version check of every fetch (a
rewritten shard fails the job; the foreground read then meets it as a ``ShardError``), and the
cache budget (``make_room`` before a fetch). A job is keyed by (shard, its rows' digest), so the
same rows announced twice are fetched once; a shard's later rows are a new job.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from shufflepoint._shards.readers.base import OpensRanged, Ranged, TilesShards
from shufflepoint._shards.storage.prefetch import Prefetcher
from shufflepoint._shards.storage.ranged import DENSE, PartialShard, RangedFile, merged

Plan = Callable[[np.ndarray], list[tuple[int, int]]]
_THREADS = 16  # jobs in flight: each is a look-up and a few GETs, mostly waiting on the network
_JOBS_AHEAD = 1024  # a chunk (<= 8,192 rows) may touch hundreds of small shards: all of them ahead
_PLANS_KEPT = 4096  # footers parsed, per process
# A rank reading densely (``ranged.DENSE``: a stretch of its own) reads the rows between a chunk's rows of a
# shard in its next chunks (``spans``: all of them): those gaps are fetched too, up to _WIDE bytes each (a
# reader whose rows tile its shards says more: ``TilesShards.dense_gap``, 1 MiB for tokens), in few large
# GETs. Below it, the rows between are other ranks' (a global batch split k ways after a resize,
# ``strided``): only the chunk's own ranges are fetched, joined where a GET costs more (``ensure``).
_WIDE = 64 << 10  # gaps fetched with their neighbours: a fraction of what a round trip costs in transfer
# Dense, and a chunk reads 1/_WHOLE of a shard's rows: the whole shard in one go (the rank reads all of it
# within a few chunks; a loop past its first chunks then finds every shard of its block whole, as the
# whole-shard prefetch did, and reads it at the whole-shard rate). Where rows tile the shard, all that is
# missing of it, however much is held (else a shard half held fetched its holes a chunk at a time, in GETs
# of a few windows each); a Parquet shard half held fetches only its rows' column chunks (the rest may be
# columns no read asks for). The first chunk (256 rows) reads fewer: a fresh node fetches its rows.
_WHOLE = 16
_FIRST_WAIT_S = 5.0  # the longest a later chunk's job waits for the first chunk's: an ordering, never what is read
_EXIT_WAIT_S = 2.0  # at exit, the longest the jobs in flight are waited for (``_exiting``)


class Job:
    """Rows of one shard a chunk will read (``dense``: this rank reads the rows in between next;
    ``whole``: and so much of the shard that one GET of all of it is cheapest; ``at_once``: of a pass's
    first chunk, fetched narrowly); equal (and hashed) by (shard, digest of the rows)."""

    __slots__ = ("shard", "rows", "dense", "whole", "at_once", "_key")

    def __init__(self, shard: int, rows: np.ndarray, dense: bool, whole: bool, at_once: bool = False) -> None:
        self.shard, self.rows, self.dense, self.whole, self.at_once = shard, rows, dense, whole, at_once
        self._key = (shard, hashlib.blake2b(rows.tobytes(), digest_size=8).digest())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and other._key == self._key

    def __hash__(self) -> int:
        return hash(self._key)


def jobs(shards: np.ndarray, rows: np.ndarray, order: list[int], density: float,
         shard_rows: np.ndarray, at_once: bool = False) -> list[Job]:
    """One job per shard of ``order`` (the shards to read ahead, in reading order): the ``rows`` whose
    ``shards`` entry is it, sorted; dense where this rank reads nearly all the positions it spans
    (``PrefetchesDealt``), whole where it also reads 1/_WHOLE of the shard (``shard_rows``) in this chunk."""
    # One sort of the chunk's (shard, row) pairs, not a np.unique per shard (100 shards: 20 ms of a loop).
    shards, rows = np.asarray(shards, np.int64), np.asarray(rows, np.int64)
    span = int(rows.max()) + 1 if rows.size else 1
    pairs = np.unique(shards * span + rows)
    by_shard, by_row = pairs // span, pairs % span
    bounds = np.searchsorted(by_shard, np.stack([order, np.add(order, 1)], axis=1)).tolist()
    dense = density >= DENSE
    return [Job(shard, by_row[first:last], dense,
                not at_once and dense and (last - first) * _WHOLE >= int(shard_rows[shard]), at_once)
            for shard, (first, last) in zip(order, bounds, strict=True)]


_LIVE: weakref.WeakSet[RangedAhead] = weakref.WeakSet()


@atexit.register
def _exiting() -> None:
    """At exit, read-ahead starts nothing more and the jobs in flight get ``_EXIT_WAIT_S`` to end: a daemon thread
    still at work when the interpreter finalizes is stopped where it next takes the GIL, and inside a C++ frame
    (numpy's sort under ``np.unique``) that aborts the process ("terminate called without an active
    exception": a bench child exiting right after its first batch, 2 of ~130 runs without this wait)."""
    for ahead in list(_LIVE):
        ahead.exit()
    for ahead in list(_LIVE):
        ahead.prefetcher.join(_EXIT_WAIT_S)


class RangedAhead:
    """A process's read-ahead of ranges for ``corpus`` (a ``Shards``'s ``ShardAccess``: its ``index``,
    ``ranged_shard(shard)`` and ``partial(url, size, version)``): ``announce`` never blocks.
    ``planner(ranged, shard)`` is the reader's ``ranged_plan``; ``tiles``: the reader's rows tile its shards
    (``TilesShards``), so a rank reading densely joins gaps up to ``wide`` bytes (``_WIDE`` otherwise)."""

    def __init__(self, corpus: Any, planner: Callable[[Ranged, str], Plan], tiles: bool = False,
                 wide: int = _WIDE) -> None:
        self._corpus, self._planner, self._tiles, self._wide = corpus, planner, tiles, wide
        self._plans: dict[int, Plan] = {}
        self._by_range: dict[int, bool] = {}  # shard -> read by range, asked once per process (a stat each)
        self._complete: dict[int, tuple[str, int]] = {}  # shard -> (its partial copy, inode) seen complete
        self._first = threading.Condition()
        self._first_left = 0  # the first chunk's jobs not yet run; later jobs wait for 0
        self._exited = False
        _LIVE.add(self)
        self.prefetcher = Prefetcher(self._run, max_ahead=_JOBS_AHEAD, threads=_THREADS)

    def announce(self, upcoming: list[int], shards: np.ndarray, rows: np.ndarray, density: float,
                 at_once: bool = False) -> list[int]:
        """Schedule the jobs of the ``upcoming`` shards read by range (``shards``/``rows``: each index's
        shard and row in it; ``at_once``: a pass's first chunk); the others, in order, for the caller to
        download whole."""
        by_range = [s for s in upcoming if self._ranged(s)]
        if not by_range:
            return upcoming
        wanted = [s for s in by_range if not self._held_whole(s)]  # held whole: no job (each costs the GIL)
        if wanted:
            found = jobs(shards, rows, wanted, density, self._corpus.index.rows, at_once)
            if at_once:
                with self._first:
                    self._first_left += len(found)
            queued = set(self.prefetcher.schedule(found))
            for job in found:
                if at_once and job not in queued:  # in flight or done already: nothing to wait for
                    self._first_done()
        taken = set(by_range)
        return [s for s in upcoming if s not in taken]

    def _ranged(self, shard: int) -> bool:
        """Whether ``shard`` is read by range (not whole in the node cache), asked once: a chunk announces
        its hundreds of shards again and again. A shard found whole later is still read whole by the
        read itself (``ShardAccess.open`` asks afresh); only this read-ahead of its ranges is then wasted."""
        found = self._by_range.get(shard)
        if found is None:
            found = self._by_range[shard] = self._corpus.ranged_shard(shard)
        return found

    def _partial(self, shard: int) -> tuple[PartialShard, str] | None:
        """A job's partial entry; None: the shard is not read by range (whole in the node cache)."""
        corpus = self._corpus
        if not self._ranged(shard):
            return None
        record, url = corpus.index.shards[shard], corpus.index.url(shard)
        return corpus.partial(url, record.size, record.version), url

    def _held_whole(self, shard: int) -> bool:
        """Whether ``shard``'s partial entry was seen complete, and is still that file (a stat): a job
        for it has nothing to fetch, so it opens nothing (a chunk's job per shard, every chunk)."""
        found = self._complete.get(shard)
        if found is None:
            return False
        try:
            return os.stat(found[0]).st_ino == found[1]
        except FileNotFoundError:  # evicted since: read ahead again
            return False

    def _first_done(self) -> None:
        with self._first:
            self._first_left -= 1
            self._first.notify_all()

    def _run(self, job: Any) -> None:
        """Fetch the ranges ``job``'s rows read into the shard's partial entry (a background thread); a
        later chunk's job once the first chunk's are done."""
        if job.at_once:
            try:
                self._run_job(job)
            finally:
                self._first_done()
            return
        with self._first:
            self._first.wait_for(lambda: self._first_left <= 0 or self._exited, _FIRST_WAIT_S)
            if self._exited:
                return
        self._run_job(job)

    def exit(self) -> None:
        """The interpreter is exiting: jobs still waiting start nothing (``_exiting``)."""
        with self._first:
            self._exited = True
            self._first.notify_all()
        self.prefetcher.close()

    def _run_job(self, job: Any) -> None:
        if self._held_whole(job.shard):
            return
        opened = self._partial(job.shard)
        if opened is None:
            return
        partial, url = opened
        source = RangedFile(partial)
        try:
            self._fetch(job, partial, source, url)
            if partial.complete():
                self._complete[job.shard] = (partial.path, partial.inode())
        finally:
            source.close()

    def _fetch(self, job: Any, partial: PartialShard, source: RangedFile, url: str) -> None:
        if job.whole and (self._tiles or partial.held_bytes() * 2 < partial.size):  # what is missing, in few GETs
            partial.ensure([(0, partial.size)])
            return
        # Mostly held already (its rows' ranges, the footer): only what the rows read, not the
        # leftovers no read needs (one round trip each, for a few bytes, under the entry's lock).
        plan = self._plans.get(job.shard)
        if plan is None:
            plan = self._planner(Ranged(source, partial.ensure, ""), url)
            if len(self._plans) >= _PLANS_KEPT:
                self._plans.clear()
            self._plans[job.shard] = plan
        spans = plan(job.rows)
        if spans and job.dense:  # the first chunk's joined only where a GET costs more than the gap
            spans = merged(spans, _WIDE if job.at_once else self._wide)
        if spans:
            partial.ensure(spans, join=job.dense and not job.at_once)

    def close(self) -> None:
        self.prefetcher.close()


def ranged_ahead_for(corpus: Any, reader: OpensRanged) -> RangedAhead:
    """The read-ahead of ``corpus`` read by ``reader``, joining the gaps its rows leave as widely as they tile."""
    if isinstance(reader, TilesShards):
        return RangedAhead(corpus, reader.ranged_plan, True, reader.dense_gap())
    return RangedAhead(corpus, reader.ranged_plan)
