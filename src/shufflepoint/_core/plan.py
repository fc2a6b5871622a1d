"""The arithmetic of one epoch under the ``strided`` deal: which positions each rank reads, and when.

(The other deals are ``spans`` (``spans.py``) and ``buckets`` (``buckets.py``); each answers the same
questions through a *cut*, the rest of an epoch dealt to the current world, and ``_core/deals/strided.py``
says what sets this one apart.)

Vocabulary (all integers):

- ``n``: samples in the dataset; the epoch's order is a permutation of ``range(n)``, read front to
  back as the *global stream*.
- ``cursor``: positions of the global stream already handed out, over all ranks (0..n).
- ``world_size`` W, ``batch_size`` B (per rank). A *global step* takes W*B positions.
- Layout (chosen once, the one ``DistributedSampler`` uses): rank r reads the positions
  ``cursor + r, cursor + r + W, cursor + r + 2W, ...``; its t-th sample is at ``cursor + r + W*t``.
  Two ranks, B = 2, from cursor 0::

      global stream  : p0 p1 p2 p3 | p4 p5 p6 p7 | ...
      rank 0 batches : [p0, p2]      [p4, p6]
      rank 1 batches : [p1, p3]      [p5, p7]

- The tail: when fewer than W*B positions remain, ``drop_last=True`` drops them; otherwise every
  rank gets ceil(remaining / W) samples, and positions past the end wrap to the start of the epoch
  (padding, as ``DistributedSampler`` pads), so all ranks take the same number of steps.

Because a rank's t-th sample depends on t, not on B, and the cursor counts global positions, a new
W or B on resume simply cuts the same remaining stream differently: each sample once.

Words: docs/glossary.md (layout, strided, cut, global batch, cursor).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shufflepoint._core.segments import Segments
from shufflepoint._errors import refusal
from shufflepoint._order import check_int

MAX_N = 2**62
STRIDED = "strided"


@dataclass(frozen=True)
class Layout:
    """How one epoch of n samples is dealt to W ranks in batches of B. Validated once, here."""

    n: int
    world_size: int
    batch_size: int
    drop_last: bool

    def __post_init__(self) -> None:
        check_int("n", self.n, 0, MAX_N)
        check_int("world_size", self.world_size, 1, 2**31)
        check_int("batch_size", self.batch_size, 1, 2**31)
        if not isinstance(self.drop_last, bool):
            raise TypeError(refusal("drop_last", self.drop_last, "a bool", "pass drop_last=True or False"))

    @property
    def step_size(self) -> int:
        """Positions consumed by one global step: world_size * batch_size."""
        return self.world_size * self.batch_size

    def samples_per_rank(self, cursor: int) -> int:
        """How many samples each rank reads from ``cursor`` to the end of the epoch."""
        remaining = self.n - cursor
        full_steps, tail = divmod(remaining, self.step_size)
        tail_per_rank = 0 if self.drop_last else -(-tail // self.world_size)
        return full_steps * self.batch_size + tail_per_rank

    def batches_per_rank(self, cursor: int = 0) -> int:
        """How many batches each rank receives from ``cursor`` to the end of the epoch."""
        return -(-self.samples_per_rank(cursor) // self.batch_size)

    def cursor_after(self, cursor: int, samples_received: int) -> int:
        """The global cursor once every rank has received ``samples_received`` more samples."""
        return min(cursor + self.world_size * samples_received, self.n)

    def rank_positions(self, rank: int, cursor: int, start: int, stop: int) -> np.ndarray:
        """Global-stream positions of this rank's samples ``start..stop-1`` (counted from cursor).

        Positions past the end of the epoch are the tail padding and wrap modulo n.
        """
        positions = np.arange(start, stop, dtype=np.int64)
        positions *= self.world_size
        positions += cursor + rank
        if positions.size and positions[-1] >= self.n:
            np.remainder(positions, self.n, out=positions)
        return positions


class StridedCut:
    """The rest of an epoch under the ``strided`` deal, from ``cursor``: what each rank reads."""

    stretches = None  # the strided order is laid along no stretches

    def __init__(self, layout: Layout, cursor: int) -> None:
        self.layout, self.cursor = layout, cursor

    @property
    def world_size(self) -> int:
        return self.layout.world_size

    def samples_per_rank(self) -> int:
        return self.layout.samples_per_rank(self.cursor)

    def real_samples(self, rank: int) -> int:
        """Of those, how many are not padding: rank's t-th is real while cursor + rank + W*t < n."""
        left = self.layout.n - self.cursor - rank
        return min(max(-(-left // self.layout.world_size), 0), self.samples_per_rank())

    def rank_positions(self, rank: int, start: int, stop: int) -> np.ndarray:
        return self.layout.rank_positions(rank, self.cursor, start, stop)

    def world_positions(self, start: int, stop: int) -> np.ndarray:
        """``rank_positions(rank, start, stop)`` of every rank at once, one row a rank (``which``)."""
        layout = self.layout
        positions = np.arange(start, stop, dtype=np.int64)[None, :] * layout.world_size
        positions = positions + (self.cursor + np.arange(layout.world_size, dtype=np.int64))[:, None]
        if positions.size and int(positions[-1, -1]) >= layout.n:
            np.remainder(positions, layout.n, out=positions)
        return positions

    def after(self, received: int) -> tuple[int, Segments]:
        """(cursor, segments) once every rank has received ``received`` more samples (no segments: the cursor
        says it all)."""
        return self.layout.cursor_after(self.cursor, min(received, self.samples_per_rank())), Segments()
