"""The deal: which rank reads which positions of an epoch (``strided`` or ``spans``), and a rank's
stream of (positions, indices) chunks read from an epoch's order through a cut of the deal."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator

import numpy as np

from shufflepoint._core.buckets import NAME as BUCKETS
from shufflepoint._core.cut import Cut
from shufflepoint._core.errors import refusal
from shufflepoint._core.history import Cuts
from shufflepoint._core.plan import STRIDED, Layout, cut
from shufflepoint._core.spans import NAME as SPANS
from shufflepoint._loading.capabilities import deal_for
from shufflepoint._loading.orders import OrderCache
from shufflepoint._order import Order
from shufflepoint._shards.blocks import NAME as BLOCKS

# First chunks are small so a resume reaches its first batch fast; later ones amortise numpy calls.
# The largest bounds the working set: 8192 indices as Python ints plus numpy temporaries stay
# < 1 MiB at any n (benchmarks/results.md, memory), still far above what a loader consumes.
_FIRST_CHUNK, _MAX_CHUNK = 1 << 8, 1 << 13


class Deal:
    """The deal a loader or sampler reads with: ``strided`` or ``spans``, chosen or defaulted.

    ``deal=None`` picks ``spans`` for a corpus order (``blocks``, ``mixture``), so a node reads its
    own share of the shards, and ``strided`` (DistributedSampler's) for anything else. A deal left
    to the default follows the deal a loaded state records (a 0.2 state of a corpus: ``strided``).
    ``buckets`` is a deal of its own (``_loading/bucketed.py``), built from the keys, never adopted.
    Under ``spans`` a dataset whose schedule follows a grid (a scheduled ``Mixture`` read by a loader) keeps
    an epoch's parts across a change of global batch (``follows_grid``, ``_core/global_batch.py``).
    """

    own_cuts: Cuts | None = None  # the history's cuts, for a deal whose cuts need more than a layout (buckets)
    keys_fingerprint: str | None = None  # the bucket keys' (the state's ``buckets``); None without buckets
    _gridded = False  # the orders have a grid (a scheduled dataset's): see ``follows_grid``

    def __init__(self, name: str | None, orders: OrderCache) -> None:
        if name == BUCKETS:
            raise ValueError(refusal("deal", name, "'strided', 'spans' or None: 'buckets' comes with buckets=keys",
                                     "pass the run's keys as buckets= (and leave deal unset)"))
        self.chosen = name is not None  # deal_for checks the name, and a dataset that needs one deal (Mixture's)
        self.name: str = deal_for(name, SPANS if orders.is_corpus else STRIDED, orders.dataset)
        self._gridded = orders.grid is not None

    @property
    def follows_grid(self) -> bool:
        """Whether the run's global batches follow a grid under ``spans`` (``plan.cut``'s ``follows_grid``)."""
        return self.name == SPANS and self._gridded

    def for_state(self, state: object) -> Deal:
        """This deal, or the state's when this one was left to the default (adopted once valid)."""
        found = state.get("deal", STRIDED) if isinstance(state, dict) else None
        if self.chosen or found not in (STRIDED, SPANS) or found == self.name:
            return self
        adopted = Deal.__new__(Deal)
        adopted.chosen, adopted.name, adopted._gridded = False, str(found), self._gridded
        return adopted

    def cut(self, layout: Layout, cursor: int, segments: list[list[int]],
            parts: int | None = None, *, epoch: int = 0) -> Cut:
        """The rest of ``epoch`` at (cursor, segments) for ``layout``'s world (``plan.cut``; the epoch is
        for a deal whose cuts depend on it, ``buckets``)."""
        return cut(layout, self.name, cursor, segments, parts, follows_grid=self.follows_grid)

    def check_exclusion(self) -> None:
        """ValueError where this deal cannot skip samples (``buckets``); every other deal can."""

    def epoch_layout(self, layout: Layout, whole: Layout) -> Layout:
        """A whole epoch's layout for ``len(loader)``: ``whole`` (the excluded samples taken out), or a deal's own."""
        return whole


def warn_if_blocks_exceed_the_share(orders: OrderCache, deal: Deal, n: int, world_size: int) -> None:
    """Under ``spans`` a node reads its share of the corpus; a ``shuffle_block`` of more than half of
    it makes the order's blocks as large as the stretches (the shuffle is capped at a stretch), and
    after a re-deal a block cut by a new edge is read by two nodes. Said once, at construction."""
    if deal.name != SPANS or orders.name != BLOCKS:
        return  # a dataset's own order (Mixture, Packed) counts its shuffle_block in its own units
    local_env = os.environ.get("LOCAL_WORLD_SIZE", "")
    local = int(local_env) if local_env.isdigit() else world_size  # unknown (not torchrun): one node
    if world_size <= max(local, 1):
        return  # one node reads the whole corpus anyway
    share = n * min(local, world_size) // world_size
    if orders.shuffle_block is not None and orders.shuffle_block * 2 > share:
        warnings.warn(
            f"shuffle_block: {orders.shuffle_block} rows is more than half of a node's share of the corpus "
            f"({share} of {n} rows over {world_size} ranks, {local} per node): the shuffle cannot reach "
            "beyond a rank's stretch, and after a change of world size a block cut by a new node edge is "
            f"fetched by two nodes. Use shuffle_block <= {max(share // 8, 1)} (docs/shards.md, 'Choosing "
            "shuffle_block').", UserWarning, stacklevel=3,
        )


def rank_chunks(order: Order, deal: Cut,
                rank: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """This rank's (epoch positions, sample indices) from ``deal``'s start to the end of the epoch."""
    total = deal.samples_per_rank()
    start, size = 0, _FIRST_CHUNK
    while start < total:
        stop = min(start + size, total)
        positions = deal.rank_positions(rank, start, stop)
        yield positions, order.take(positions)
        start, size = stop, min(size * 4, _MAX_CHUNK)


def rank_index_chunks(order: Order, deal: Cut, rank: int) -> Iterator[list[int]]:
    """This rank's sample indices from ``deal``'s start to the end of the epoch, as lists of ints."""
    for _, indices in rank_chunks(order, deal, rank):
        yield indices.tolist()


