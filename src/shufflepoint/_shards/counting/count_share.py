"""How a process gets every shard's token total while reading only its share of the corpus.

In order: the totals published beside the corpus (``shufflepoint index --tokens``), for every shard
they still match; then, for the rest, what the node kept (its totals file, its per-shard counts);
then counting. Without processes to share the work, this process counts what is left. With a
process group (``torch.distributed`` initialised, more than one process), each process counts only
the shards of its *share* and the per-shard totals are exchanged in one ``all_gather_object``
(O(shards) bytes per process), so no node downloads a shard it will not read.

The share follows what the process reads: the shards in their own order are cut into ``world_size``
stretches of bytes, and a shard goes to the rank whose stretch holds its middle byte (bytes: what token
counts are most alike before they are counted). Under the ``spans`` deal ``Packed`` lays its documents along
the same runs of shards, cut by tokens (``packed_layout``), so what a rank counts it reads next, every epoch
(its node's cache keeps the downloaded shards). No seed enters it: a ``Mixture`` asks its ``Packed`` sources
their length when built, before a loader says the seed, and the share is the same.

Whether to exchange is decided on facts every process shares (the published totals, the process
group): a node's own cache only saves it work, never changes who takes part in the collective.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch.distributed as dist

from shufflepoint._errors import Plain, refusal, warn_user
from shufflepoint._shards.counting import count_files
from shufflepoint._shards.counting.shard_counts import ShardCounts, ShardLoader
from shufflepoint._shards.index import sidecar


def distributed() -> bool:
    """Whether a process group of more than one process can exchange the totals."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


@dataclass(frozen=True)
class Share:
    """Which shards this process counts: ``rank`` of ``world_size``, a run of consecutive shards."""

    rank: int
    world_size: int

    @classmethod
    def of_this_process(cls) -> Share:
        """This process's share in the default process group (one process alone: the whole corpus)."""
        return cls(dist.get_rank(), dist.get_world_size()) if distributed() else cls(0, 1)

    def owners(self, rows: np.ndarray, sizes: np.ndarray | None = None) -> np.ndarray:
        """The rank that counts each shard: every shard exactly one, each rank a run of consecutive shards of
        about 1/W of the corpus's bytes (``sizes``: what token counts are most alike before they are counted;
        else its documents), the shard going to the rank whose stretch holds its middle byte."""
        weight = np.asarray(rows if sizes is None else sizes, dtype=np.int64) * (np.asarray(rows) > 0)
        total = int(weight.sum())
        if not total:
            return np.arange(rows.size, dtype=np.int64) * self.world_size // max(int(rows.size), 1)
        middle = np.concatenate(([0], np.cumsum(weight)[:-1])) + weight // 2
        found: np.ndarray = np.minimum(middle * self.world_size // total, self.world_size - 1)
        return found


class Resolver:
    """The token totals of a ``Shards`` corpus (without a transform) for one token source."""

    def __init__(self, dataset: Any, count: Any, identity: str, workers: int | None, progress: bool) -> None:
        index = dataset.index
        self.dataset, self.identity, self.workers, self.progress = dataset, identity, workers, progress
        published = count_files.read_published(dataset.storage, index, identity)  # a damaged one: refused
        shards = len(index.shards)
        self.rows = np.asarray(index.rows, dtype=np.int64)
        self.sizes = np.asarray(index.shards.sizes, dtype=np.int64)  # whose stretch counts a shard: Share.owners
        self.totals = np.full(shards, -1, dtype=np.int64)
        self.digests = [""] * shards
        self.loader = ShardLoader(dataset, count, identity, published)
        if published is not None:
            rows = self.loader.published_rows()
            known = np.flatnonzero(rows >= 0)
            self.totals[known] = published[0].tokens[rows[known]]
            digests = published[0].digests
            if rows.size == len(digests) and bool((rows == np.arange(rows.size)).all()):
                self.digests = list(digests)  # the published shards, in order: no step per shard
            else:
                self.digests = [digests[row] if row >= 0 else "" for row in rows.tolist()]
        empty = np.flatnonzero((self.rows == 0) & (self.totals < 0))
        self.totals[empty] = 0
        for shard in empty.tolist():
            self.digests[shard] = count_files.shard_digest(np.empty(0, np.int64))
        self.unknown = np.flatnonzero(self.totals < 0)
        if published is not None and self.unknown.size:
            names = [index.shards[s].name for s in self.unknown[:3].tolist()]
            warn_user(f"the token counts published at {count_files.published_urls(index, identity)[0]} do not "
                      f"match {self.unknown.size} shard(s) (e.g. {', '.join(names)}: rewritten or added since they "
                      "were published); those shards are counted again. Re-run `shufflepoint index SOURCES --tokens "
                      "FIELD` to publish them.")

    @property
    def complete(self) -> bool:
        return not self.unknown.size

    def finish(self, share: Share | None) -> ShardCounts:
        """Every shard's total: counting the unknown ones here, or this process's share of them and exchanging."""
        if self.unknown.size:
            path = count_files.node_totals_path(self.dataset.cache_dir, self.dataset.fingerprint, self.identity)
            node = count_files.load_node_totals(path, self.identity)
            if share is not None and distributed():
                mine = self.unknown[share.owners(self.rows, self.sizes)[self.unknown] == share.rank]
                try:
                    counted: dict[int, tuple[int, str]] | BaseException = self._fill(mine, node)
                except Exception as error:  # still exchanged: every rank raises, none waits for this one
                    counted = error
                self._merge(_exchange(counted))
            if (self.totals < 0).any():  # not shared: counted here, by one process of the node at a time
                with sidecar.building(os.path.dirname(path), os.path.basename(path)[:-5]):
                    node = count_files.load_node_totals(path, self.identity)  # another may have counted meanwhile
                    self._merge(self._fill(np.flatnonzero(self.totals < 0), node))
                    count_files.save_node_totals(path, self.dataset.index, self.identity, self.totals, self.digests)
            else:
                count_files.save_node_totals(path, self.dataset.index, self.identity, self.totals, self.digests)
            self.unknown = self.unknown[:0]
        return ShardCounts(self.rows, self.totals, self.digests, self.loader)

    def _fill(self, shards: np.ndarray, node: count_files.Totals | None) -> dict[int, tuple[int, str]]:
        """(total, digest) of these shards: from the node's totals or kept counts, else counted (in a pool)."""
        found: dict[int, tuple[int, str]] = {}
        rows = node.matching(self.dataset.index) if node is not None and shards.size else None
        todo = []
        for shard in shards.tolist():
            row = -1 if rows is None else int(rows[shard])
            kept = self.loader.kept(shard) if row < 0 else None
            if node is not None and row >= 0:
                found[shard] = (int(node.tokens[row]), node.digests[row])
            elif kept is not None:
                found[shard] = (int(kept.sum()), count_files.shard_digest(kept))
            else:
                todo.append(shard)
        for shard, counts in self.loader.counted(todo, self.workers, self.progress).items():
            found[shard] = (int(counts.sum()), count_files.shard_digest(counts))
        return found

    def _merge(self, found: dict[int, tuple[int, str]]) -> None:
        for shard, (total, digest) in found.items():
            if self.totals[shard] >= 0 and (int(self.totals[shard]), self.digests[shard]) != (total, digest):
                name = self.dataset.index.shards[shard].name
                raise ValueError(refusal(f"token counts of shard {name}", Plain(f"{total} tokens from one process"),
                                         f"{int(self.totals[shard])}, as another process counted", "make every "
                                         "process read the same corpus with the same tokenizer",
                                         why="two processes counted the same shard differently"))
            self.totals[shard], self.digests[shard] = total, digest


def _exchange(mine: dict[int, tuple[int, str]] | BaseException) -> dict[int, tuple[int, str]]:
    """Every process's counted totals, in one collective over the default process group. A process whose
    counting failed sends its error instead: it raises its own, every other process a refusal naming it."""
    gathered: list[Any] = [None] * dist.get_world_size()
    if isinstance(mine, BaseException):
        dist.all_gather_object(gathered, f"{type(mine).__name__}: {mine}")
        raise mine
    dist.all_gather_object(gathered, sorted((s, t, d) for s, (t, d) in mine.items()))
    for rank, part in enumerate(gathered):
        if isinstance(part, str):
            raise RuntimeError(refusal("token counts", Plain(f"rank {rank} failed to count its shards ({part})"),
                                       "every rank's counts of its share", "fix what that rank names",
                                       why="the totals are exchanged by every rank at once"))
    return {int(s): (int(t), str(d)) for part in gathered for s, t, d in part}
