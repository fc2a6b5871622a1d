"""Steps as addresses: which dataset indices every rank received at a step of the run.

A loader's state carries the run's layout history (``_core/history.py``), so a step of the run is
placed by arithmetic: step -> (epoch, cut, batch) -> each rank's positions -> the epoch's order.
Nothing is logged during training and nothing is replayed.

>>> import shufflepoint
>>> loader = shufflepoint.DataLoader(list(range(10)), batch_size=2, world_size=2, rank=0, seed=1)
>>> batches = [b.tolist() for b in loader]         # rank 0's three batches of epoch 0
>>> loader.which(1)[0] == batches[1]
True
"""

from __future__ import annotations

import copy

import numpy as np

from shufflepoint._core.history import Cuts, History
from shufflepoint._core.spanskips import Cut
from shufflepoint._loading.orders import OrderCache
from shufflepoint._order import check_int


class Pass:
    """One run of ``iter(loader)`` over (part of) an epoch: where it started, what was received, the
    step it started at, and the pass it takes over from (``set_batch_size`` during a pass)."""

    __slots__ = ("epoch", "cut", "received", "steps", "follows")

    def __init__(self, epoch: int, start: Cut, steps: int, follows: Pass | None = None) -> None:
        self.epoch, self.cut, self.received, self.steps, self.follows = epoch, start, 0, steps, follows


class Lookup:
    """Answers ``which`` with an order cache of its own, so that looking up another epoch never
    evicts the order the live pass reads."""

    def __init__(self) -> None:
        self._source: OrderCache | None = None
        self._orders: OrderCache | None = None

    def orders(self, orders: OrderCache) -> OrderCache:
        """This lookup's copy of the loader's ``orders`` (the cuts of an exclusion read it too)."""
        if self._source is not orders or self._orders is None:
            self._source, self._orders = orders, copy.copy(orders)
        return self._orders

    def which(self, history: History, orders: OrderCache, step: int, cuts: Cuts | None = None) -> dict[int, list[int]]:
        """For each rank of the world that read ``step``, the dataset indices of its batch; ``cuts``: the
        loader's, for a step read with samples excluded (built over ``self.orders(orders)``)."""
        check_int("step", step, 0, 2**63 - 1)
        placed = history.place(int(step), cuts)
        order = self.orders(orders).get(placed.epoch, placed.cut)
        positions = [placed.rank_positions(rank) for rank in range(placed.layout.world_size)]
        indices = order.take(np.concatenate(positions)).tolist()  # one call for the world, not one per rank
        bounds = np.cumsum([0] + [len(p) for p in positions]).tolist()
        return {rank: indices[bounds[rank]:bounds[rank + 1]] for rank in range(len(positions))}
