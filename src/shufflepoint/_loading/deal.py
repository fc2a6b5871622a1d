"""The deal a loader or sampler reads with (what each deal does: ``_core/deals/``), and a rank's stream of
(positions, indices) chunks read from an epoch's order through a cut of the deal.

Words: docs/glossary.md (deal, cut, chunk, rank).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator

import numpy as np

from shufflepoint._core import deals
from shufflepoint._core.cut import Cut, Deal
from shufflepoint._loading.capabilities import deal_for
from shufflepoint._loading.orders import OrderCache
from shufflepoint._order import Order
from shufflepoint._order.blocks import NAME as BLOCKS

# First chunks are small so a resume reaches its first batch fast; later ones amortise numpy calls.
# The largest bounds the working set: 8192 indices as Python ints plus numpy temporaries stay
# < 1 MiB at any n (benchmarks/results.md, memory), still far above what a loader consumes.
_FIRST_CHUNK, _MAX_CHUNK = 1 << 8, 1 << 13


def deal_of(name: str | None, orders: OrderCache) -> Deal:
    """The deal a loader or sampler built with ``deal=name`` reads with: ``name`` (checked against the dataset,
    ``deal_for``), or, for None, the default: ``spans`` for a corpus order (``blocks``, ``mixture``), so a node
    reads its own share of the shards, ``strided`` (DistributedSampler's) for anything else. The deal it
    resolves to is all that is kept: ``deal=None`` and ``deal="spans"`` on a corpus are the same loader, on a
    resume too (``Deal.for_state``). ``buckets`` is a deal of its own, built from the keys (``bucketed.py``). Orders
    with a grid (a scheduled dataset's, read by a loader) give the deal on that grid (``Deal.on_grid``)."""
    deals.check_argument(name)  # deal_for checks the name, and a dataset that needs one deal (Mixture's)
    deal = deals.named(deal_for(name, deals.default_name(orders.is_corpus), orders.dataset))
    return deal.on_grid() if orders.grid is not None else deal


def warn_if_blocks_exceed_the_share(orders: OrderCache, deal: Deal, n: int, world_size: int) -> None:
    """Under a deal of stretches (``spans``) a node reads its share of the corpus; a ``shuffle_block`` of more
    than half of it makes the order's blocks as large as the stretches (the shuffle is capped at a stretch),
    and after a re-deal a block cut by a new edge is read by two nodes. Said once, at construction."""
    if not deal.stretched or orders.name != BLOCKS:
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


def rank_chunks(order: Order, cut: Cut, rank: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """This rank's (epoch positions, sample indices) from ``cut``'s start to the end of the epoch."""
    total = cut.samples_per_rank()
    start, size = 0, _FIRST_CHUNK
    while start < total:
        stop = min(start + size, total)
        positions = cut.rank_positions(rank, start, stop)
        yield positions, order.take(positions)
        start, size = stop, min(size * 4, _MAX_CHUNK)


def rank_index_chunks(order: Order, cut: Cut, rank: int) -> Iterator[list[int]]:
    """This rank's sample indices from ``cut``'s start to the end of the epoch, as lists of ints."""
    for _, indices in rank_chunks(order, cut, rank):
        yield indices.tolist()


