"""Resizes at a fixed global batch under the ``spans`` deal: the same global batches at any world size.

Under ``spans`` each rank of the epoch's first world reads its own stretch of the epoch stream
(``spans.py``), so global batch k of that run is the k-th slice of every stretch. While the global
batch G = world_size x batch_size stays the same, the stretches of the first world that read at G
stay the *canonical parts* of every epoch, and each new world cuts each global batch among its
ranks: the same global batches at any world size, so the weights differ from the uninterrupted
run's only by the order of the reduction.

Vocabulary (all integers):

- *parts* W0: the world size whose stretches are the parts (the first ``n % W0`` one longer), each
  read from the front; ``taken`` samples of every part are consumed (the epoch's one segment
  ``[W0, taken]``, or none at its start). The run's layout history says which world that is
  (``History.parts``: the first leg of the latest run of legs at this G).
- the *part batch* B0 = G / W0: what each part gives to one global batch.
- global batch k (counted from here): positions ``taken + k*B0 .. taken + (k+1)*B0 - 1`` of every part,
  laid end to end in part order; new rank r' reads the r'-th run of B1 = G / W1 of them.

Four ranks of 3 then two of 6 (G = 12), n = 40 (``tests/core/test_global_batch.py`` pins these values)::

    parts          : [0, 10) [10, 20) [20, 30) [30, 40)      the stretches of the 4 x 3 run
    after 2 steps  : taken = 6 of each part                  state: segments [[4, 6]]
    global batch 2 : 6 7 8 | 16 17 18 | 26 27 28 | 36 37 38  its slices, the same as in the 4 x 3 run
    2 x 6          : rank 0 -> 6 7 8 16 17 18, rank 1 -> 26 27 28 36 37 38
    3 x 4          : rank 0 -> 6 7 8 16, rank 1 -> 17 18 26 27, rank 2 -> 28 36 37 38

The tail: with ``drop_last`` the same whole global batches as the uninterrupted run, and nothing
else; without it the last global batch holds what the parts have left (fewer than B0 of each, one
less in a shorter part), dealt to the new ranks in near-equal runs, and a rank whose run is short
repeats its own first sample of that step, a rank with none the step's first (padding, only in
the epoch's last step). An epoch has ceil(n / G) global batches at any cut of it at G.

Locality: a new rank reads its parts' slices plus pieces of the parts it shares with a neighbour.
Those pieces come back in *every* global batch, so a rank that shares a part reads from all of
that part's blocks: a node fetches about the parts it touches, not its share (4 -> 2: its share;
4 -> 3: 1.5x; 4 -> 6: 1.5x to 3x; ``docs/shards.md``, "A fixed global batch").

When it applies (``keeps_global_batch``): G divides by W0, W0 is not the world reading now (that
world reads its own stretches anyway), and the epoch is at its start or has one segment, of W0.
Anything else keeps the ``spans`` rule of re-dealing what remains (every sample once, the global
batches cut again).

*Under a grid* (``follows_grid``: a schedule's phases and shares follow the global batches of the
run's grid, a scheduled ``Mixture``'s order laid along the epoch's parts) an epoch read as one segment
of its first world W0 stays W0's global batches after a change of global batch too, as long as W0
divides the new one: global batch k then takes the next G' / W0 positions of every part, so a phase,
which starts on a window edge of every part at once, starts at the global batch it names on any world
(``grid_parts``). Re-dealt instead, a rank's stretch would hold another part's later windows (a phase
early on one rank, late on another). After a new global batch W0 does not divide, the rest of the epoch
is read *interleaved* (``InterleavedCut``): each global batch takes the next positions of the parts in
turn, every part advancing G / W0 a global batch, give or take one, so the parts stay in step (each
source's share within a few rows at every global batch, through any number of resizes), recorded as
``[[W0, taken], [0, handed]]`` (a fold after one segment).

Words: docs/glossary.md (global batch, part, part batch, grid, interleave).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shufflepoint._core.cut import rank_rows
from shufflepoint._core.segments import FOLD, Segments
from shufflepoint._core.spans import SpanCut, check_segments
from shufflepoint._errors import Plain, refusal


def keeps_global_batch(segments: Sequence[Sequence[int]], parts: int | None, world_size: int,
                       batch_size: int) -> bool:
    """Whether the rest of the epoch at ``segments`` is read as the global batches of ``parts`` ranks' stretches.

    ``parts``: the world size whose stretches are the canonical parts at this global batch (None: this
    world's own).

    >>> keeps_global_batch([[4, 6]], 4, 2, 6)     # 4 x 3 -> 2 x 6: G = 12 both times
    True
    >>> keeps_global_batch([], 4, 3, 4)           # a later epoch on 3 x 4: still the 4 parts
    True
    >>> keeps_global_batch([[4, 6]], 2, 2, 5)     # G changed to 10: the 2 x 5 run's own stretches
    False
    """
    if parts is None or parts == world_size or world_size * batch_size % parts:
        return False
    return not segments or len(segments) == 1 and int(segments[0][0]) == parts


def grid_parts(segments: Sequence[Sequence[int]], parts: int | None, world_size: int, batch_size: int) -> int | None:
    """The parts an epoch is read as under a grid (module docstring): its first world W0 when it is one segment
    of W0 (not a fold) and W0 divides this global batch, else ``parts``.

    >>> grid_parts([[2, 8]], 4, 4, 2)     # 2 x 2 -> 4 x 2: G 4 -> 8, still the 2 parts' global batches
    2
    >>> grid_parts([[2, 8]], 3, 3, 1)     # 2 x 2 -> 3 x 1: 2 does not divide 3, re-dealt
    3
    >>> grid_parts([], 4, 4, 2)           # an epoch's start: the history's parts
    4
    """
    if len(segments) == 1 and int(segments[0][0]) > 0 and world_size * batch_size % int(segments[0][0]) == 0:
        return int(segments[0][0])
    return parts


def _stretches(n: int, world_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(start, length) of each rank's stretch of n positions, the first ``n % world_size`` one longer."""
    base, extra = divmod(n, world_size)
    rank = np.arange(world_size, dtype=np.int64)
    return rank * base + np.minimum(rank, extra), base + (rank < extra).astype(np.int64)


class _TailedCut(SpanCut):
    """What a cut that reads its rest in whole global batches, then one partial one padded across the ranks,
    answers alike (``GlobalBatchCut``, ``InterleavedCut``): it sets ``_world_size``, ``_first_world_size``,
    ``full_steps``, ``batch_size``, ``last_per_rank`` and ``_last_total``."""

    _world_size: int
    _first_world_size: int
    full_steps: int
    batch_size: int
    last_per_rank: int
    _last_total: int

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def first_world_size(self) -> int:
        """The world size the epoch started with: its parts, the stretches its order is laid along."""
        return self._first_world_size

    def samples_per_rank(self) -> int:
        """How many samples each rank reads from here to the end of the epoch."""
        return self.full_steps * self.batch_size + self.last_per_rank

    def _last_run(self, rank: int) -> tuple[int, int]:
        """(start, length) of rank's run in the last, partial global batch laid end to end."""
        base, extra = divmod(self._last_total, self._world_size)
        return rank * base + min(rank, extra), base + int(rank < extra)

    def real_samples(self, rank: int) -> int:
        """Of those, how many are not padding (only the last, partial global batch pads)."""
        return self.full_steps * self.batch_size + min(self._last_run(rank)[1], self.last_per_rank)


class GlobalBatchCut(_TailedCut):
    """The rest of an epoch under ``spans`` at a fixed global batch: what each rank of the new world reads.

    A ``SpanCut`` (the same deal, the same questions; the ``spans`` deal picks which) for the position
    ``[[first_world_size, taken]]`` (``taken`` 0: the epoch's start) read by ``world_size`` ranks of
    ``batch_size``, where ``world_size * batch_size`` divides by ``first_world_size``. It answers
    every question itself.
    """

    def __init__(self, n: int, first_world_size: int, taken: int, world_size: int, batch_size: int,
                 drop_last: bool) -> None:  # not SpanCut's: the parts replace its segments
        global_batch = world_size * batch_size
        if global_batch % first_world_size:
            raise ValueError(refusal("global batch", Plain(f"{world_size} x {batch_size} = {global_batch}"),
                                     f"a multiple of the first world size {first_world_size}",
                                     "choose a batch size whose global batch it divides",
                                     why="its parts give equal slices"))
        if taken:
            check_segments(n, [[first_world_size, taken]])
        self.n, self.batch_size, self.drop_last, self.taken = n, batch_size, drop_last, taken
        self._world_size, self._first_world_size = world_size, first_world_size
        self.part_batch = global_batch // first_world_size
        self._starts, self._lengths = _stretches(n, first_world_size)
        self._longest = int(self._lengths.max())
        left = np.maximum(self._lengths - taken, 0)
        if drop_last:
            self.steps = int(left.sum()) // global_batch
        else:
            self.steps = -(-int(left.max()) // self.part_batch)
        last = np.clip(left - max(self.steps - 1, 0) * self.part_batch, 0, self.part_batch)
        self._last_sizes = last if self.steps else np.zeros_like(last)
        self._last_total = int(self._last_sizes.sum())
        self._last_ends = np.cumsum(self._last_sizes)
        self.full_steps = self.steps if self._last_total in (0, global_batch) else self.steps - 1
        self.last_per_rank = 0 if self.full_steps == self.steps else -(-self._last_total // world_size)

    def rank_positions(self, rank: int, start: int, stop: int) -> np.ndarray:
        """Epoch-stream positions of this rank's samples ``start..stop-1`` (counted from here)."""
        index = np.arange(start, stop, dtype=np.int64)
        step, offset = np.divmod(index, self.batch_size)
        in_batch = rank * self.batch_size + offset  # where it sits in its global batch, parts end to end
        part, within = np.divmod(in_batch, self.part_batch)
        tail = index >= self.full_steps * self.batch_size
        if tail.any():
            first, length = self._last_run(rank)
            late = index[tail] - self.full_steps * self.batch_size
            at = first + late % length if length else late % max(self._last_total, 1)
            part[tail] = np.searchsorted(self._last_ends, at, side="right")
            within[tail] = at - (self._last_ends[part[tail]] - self._last_sizes[part[tail]])
            step[tail] = self.steps - 1
        found: np.ndarray = self._starts[part] + self.taken + step * self.part_batch + within
        return found

    def world_positions(self, start: int, stop: int) -> np.ndarray:
        """``rank_positions(rank, start, stop)`` of every rank, one row a rank (not ``SpanCut``'s: rank by rank)."""
        return rank_rows(self, start, stop)

    def after(self, received: int) -> tuple[int, Segments]:
        """(cursor, segments) once every rank has received ``received`` more samples (whole global batches).

        The position stays one segment of the first world: ``received / B1`` global batches took B0
        more samples of every part.
        """
        if received >= self.samples_per_rank():
            taken = self.taken + self.steps * self.part_batch if self.drop_last else self._longest
        elif received % self.batch_size:
            raise ValueError(refusal("received", Plain(f"{received} samples per rank"), "whole global batches of "
                                     f"{self.batch_size}", "count whole global batches",
                                     why="a position at a fixed global batch is a number of global batches"))
        else:
            taken = self.taken + received // self.batch_size * self.part_batch
        taken = min(taken, self._longest)
        remaining = int(np.maximum(self._lengths - taken, 0).sum())
        return self.n - remaining, Segments([(self._first_world_size, taken)] if taken else [])


def interleaved(segments: Sequence[Sequence[int]], world_size: int, batch_size: int) -> tuple[int, int, int] | None:
    """(first world size, taken, handed) where the rest of an epoch under a grid is read interleaved
    (``InterleavedCut``): an epoch read so (its segments one of its first world and ``[0, handed]``), or one
    segment of a first world that does not divide this global batch; None: read as before.

    >>> interleaved([[4, 6]], 3, 2)            # 4 x 4 -> 3 x 2: G 16 -> 6, 4 does not divide it
    (4, 6, 0)
    >>> interleaved([[4, 6], [0, 12]], 4, 4)   # read on interleaved, whatever the world
    (4, 6, 12)
    >>> interleaved([[4, 6]], 3, 4) is None    # 4 divides 12: the parts' global batches (grid_parts)
    True
    """
    if len(segments) == 2 and int(segments[1][0]) == FOLD and int(segments[0][0]) > 0:
        return int(segments[0][0]), int(segments[0][1]), int(segments[1][1])
    if len(segments) == 1 and int(segments[0][0]) > 0 and world_size * batch_size % int(segments[0][0]):
        return int(segments[0][0]), int(segments[0][1]), 0
    return None


class InterleavedCut(_TailedCut):
    """The rest of an epoch under a grid, read *interleaved*: after its first world W0 read ``taken`` of each of its
    parts, global batch after global batch takes the next positions of the parts' rests in turn (position j of
    part r is the ``j * W0 + r``-th of them, the longer rests' last positions after), so every part advances by
    ``G / W0`` a global batch, give or take one, whatever the global batch G: a phase, a source's share and its
    pass stay where the epoch's order put them in time, on any world, through any number of resizes. A global
    batch's positions, laid part by part, are cut among the ranks in runs of ``batch_size`` (each rank about
    ``W0 / W`` parts, a node its parts' shards, as at a fixed global batch). The state records
    ``[[W0, taken], [0, handed]]``: ``handed`` positions of the rests read so (``0``: the fold's marker).
    """

    def __init__(self, n: int, first_world_size: int, taken: int, handed: int, world_size: int, batch_size: int,
                 drop_last: bool) -> None:  # not SpanCut's: the interleave replaces its segments
        check_segments(n, [[first_world_size, taken]])
        self.n, self.batch_size, self.drop_last, self.taken = n, batch_size, drop_last, taken
        self._world_size, self._first_world_size = world_size, first_world_size
        starts, lengths = _stretches(n, first_world_size)
        rests = np.maximum(lengths - taken, 0)  # the longer ones first
        self._starts, self.size = starts, int(rests.sum())
        self._short, self._longer = int(rests.min()), int((rests > rests.min()).sum())
        if not 0 <= handed <= self.size:
            raise ValueError(refusal("handed", handed, f"an int in [0, {self.size}]", "use the state as written"))
        self.handed = handed
        global_batch = world_size * batch_size
        left = self.size - handed
        if drop_last:
            self.steps = self.full_steps = left // global_batch
            self._last_total = 0
        else:
            self.steps = -(-left // global_batch)
            self._last_total = left - (self.steps - 1) * global_batch if self.steps else 0
            self.full_steps = self.steps if self._last_total in (0, global_batch) else self.steps - 1
            if self.full_steps == self.steps:
                self._last_total = 0
        self.last_per_rank = -(-self._last_total // world_size)

    def _before(self, x: np.ndarray) -> np.ndarray:
        """Interleave positions below each x that are part r's (x by parts: one row per x, one column per part)."""
        parts = np.arange(self._first_world_size, dtype=np.int64)[None, :]
        x = x[:, None]
        edge = self._first_world_size * self._short  # the rounds of every part; then the longer rests' last
        found: np.ndarray = np.where(x <= edge, np.maximum(x - parts + self._first_world_size - 1, 0)
                                     // self._first_world_size, self._short + (parts < x - edge))
        return found

    def rank_positions(self, rank: int, start: int, stop: int) -> np.ndarray:
        """Epoch-stream positions of this rank's samples ``start..stop-1`` (counted from here)."""
        index = np.arange(start, stop, dtype=np.int64)
        global_batch = self._world_size * self.batch_size
        step, offset = np.divmod(index, self.batch_size)
        in_batch = rank * self.batch_size + offset  # its place in its global batch, laid part by part
        tail = index >= self.full_steps * self.batch_size
        if tail.any():  # the last, partial global batch: runs of it, a short one repeating its own first
            first, length = self._last_run(rank)
            late = index[tail] - self.full_steps * self.batch_size
            in_batch[tail] = first + late % length if length else late % max(self._last_total, 1)
            step[tail] = self.full_steps
        steps, at = np.unique(step, return_inverse=True)
        low = self.handed + steps * global_batch
        high = np.minimum(low + global_batch, self.size)
        before, upto = self._before(low), self._before(high)
        ends = np.cumsum(upto - before, axis=1)  # each global batch's positions, part by part
        part = (ends[at] <= in_batch[:, None]).sum(axis=1)
        part = np.minimum(part, self._first_world_size - 1)
        within = in_batch - (ends[at, part] - (upto - before)[at, part])
        found: np.ndarray = self._starts[part] + self.taken + before[at, part] + within
        return found

    def world_positions(self, start: int, stop: int) -> np.ndarray:
        return rank_rows(self, start, stop)

    def after(self, received: int) -> tuple[int, Segments]:
        """(cursor, segments) once every rank has received ``received`` more samples (whole global batches)."""
        global_batch = self._world_size * self.batch_size
        if received >= self.samples_per_rank():
            handed = self.handed + self.full_steps * global_batch if self.drop_last else self.size
        elif received % self.batch_size:
            raise ValueError(refusal("received", Plain(f"{received} samples per rank"), "whole global batches of "
                                     f"{self.batch_size}", "count whole global batches",
                                     why="an interleaved position is a number of global batches"))
        else:
            handed = self.handed + received // self.batch_size * global_batch
        handed = min(handed, self.size)
        pairs = [(self._first_world_size, self.taken)] + ([(FOLD, handed)] if handed else [])
        return self.n - self.size + handed, Segments(pairs)
