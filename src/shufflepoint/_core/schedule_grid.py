"""A schedule read in global batches (``Schedule.on_grid``): with three sources or more, each holds
its phase's share to within one row at every global batch edge, where a chain of floors (``Schedule``)
leaves up to S - 1 rows to the last source.

At an edge x rows into a phase, the counts are largest remainders (Hamilton's method) of share * x:
every source gets the floor or the ceiling of its exact share, so a window of global batches is within
two rows (measured over random weights: at most 1.4 rows in one global batch, 2.25 with the chain), and
no window can do better than about two for every weight set (Tijdeman's bound on the chairman
assignment problem). Largest remainders only grow from one edge to the next when every source with a
share holds at least one row of each window (share * G >= 1, and share * t >= 1 for an epoch's short
last global batch of t rows); a phase where one does not keeps the chain, which always grows. Two
sources keep the chain too: it is already within one row over any window. The counts always sum to the
rows, so every row of each source's stream is read once, in order.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from shufflepoint._core.schedule import Schedule


def largest_remainder(shares: tuple[Fraction, ...], total: Any) -> list[Any]:
    """Integers near ``share * total`` that sum to ``total``: the floors, then one more for the largest
    remainders (ties by source). Each is the floor or the ceiling of its exact share. ``total`` an int,
    or a numpy array of Python ints (one array per source comes back).

    >>> largest_remainder((Fraction(6, 10), Fraction(3, 10), Fraction(1, 10)), 8)
    [5, 2, 1]
    """
    common = math.lcm(*(share.denominator for share in shares))
    parts = [share.numerator * (common // share.denominator) for share in shares]  # share = part / common
    floors = [total * part // common for part in parts]
    remainders = [total * part % common for part in parts]
    if not isinstance(total, np.ndarray):
        by_remainder = sorted(range(len(shares)), key=lambda s: (-remainders[s], s))
        for s in by_remainder[: total - sum(floors)]:
            floors[s] += 1
        return floors
    left = (total - sum(floors)).astype(np.int64)  # < sources
    order = np.argsort(-np.stack(remainders, axis=1).astype(object), axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(len(shares))[None, :].repeat(len(total), axis=0), axis=1)
    return [floors[s] + (rank[:, s] < left) for s in range(len(shares))]


class GridSchedule(Schedule):
    """A ``Schedule`` on the edges of global batches of ``grid`` rows (phases start on them)."""

    grid: int
    samples_per_epoch: int

    def _steady(self, phase: int) -> bool:
        """Whether largest remainders only grow from one window edge to the next in this phase: three
        sources or more (two are within one row by the chain already), each with a share holding at least
        one row of a global batch and of an epoch's short last one."""
        sizes = [self.grid] + ([self.samples_per_epoch % self.grid] if self.samples_per_epoch % self.grid else [])
        shares = self.shares[phase]
        return sum(1 for share in shares if share) > 2 and all(
            share == 0 or share * size >= 1 for share in shares for size in sizes)

    def _within(self, phase: int, x: int) -> list[int]:
        return [b + c for b, c in zip(self._before[phase], self._increments(phase, x), strict=True)]

    def _increments(self, phase: int, x: Any) -> list[Any]:
        return largest_remainder(self.shares[phase], x) if self._steady(phase) else self._chained(phase, x)
