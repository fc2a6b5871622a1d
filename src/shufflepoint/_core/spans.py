"""The ``spans`` deal: each rank reads one contiguous stretch of the epoch, and a new world re-deals
what remains.

The order says *what* the epoch is (a permutation, read front to back as the epoch stream); a deal
says *who* reads which of its positions. The ``strided`` deal (``plan.Layout``, DistributedSampler's)
gives rank r the positions r, r+W, r+2W, ...; the ``spans`` deal cuts the stream into W near-equal
stretches, the first ``m % W`` one longer, and rank r reads its own from the front. On a sharded
corpus whose order keeps neighbouring positions in the same shards, a node then reads only the
shards of its stretches, about 1/nodes of the corpus, instead of all of them.

Vocabulary (all integers):

- A *segment* is a stretch of the epoch read at one world size: ``(world_size, taken)``, ``taken``
  being the samples each rank received in it. An epoch that was never resized on another world
  size has one segment; the state lists them (reset at each epoch).
- The *space* a segment deals is what the earlier segments left, its pieces laid end to end in
  rank order. The first space is the whole stream. Mapping a position of a later space back to
  the stream is one O(1) interval map per segment.

Two ranks then three, n = 10, B = 2 (``tests/core/test_spans.py`` pins these values)::

    stream        : 0 1 2 3 4 | 5 6 7 8 9            W = 2: stretches [0, 5) and [5, 10)
    after 1 batch : rank 0 read 0 1, rank 1 read 5 6  (segment (2, 2))
    what remains  : 2 3 4 7 8 9                       the next space, 6 positions
    W = 3         : rank 0 -> 2 3, rank 1 -> 4 7, rank 2 -> 8 9

The tail: the ranks of the last segment take ``ceil(m / W)`` samples each, a rank whose stretch is
one shorter repeating its own first sample (padding, only in the epoch's last step); with
``drop_last`` each rank takes ``floor(m / (W*B)) * B``, so fewer than W*B samples of the epoch (the
ends of the stretches) are never read. With the same world size a resume continues the same
segment, so it is exact; with another one every remaining sample is read once.

*Any number of resizes* (the fold). Each segment adds a map every position is sent back through, and
two integers to the state. So an epoch deals at most ``MAX_SEGMENTS`` world sizes in stretches; a
resize to yet another world size *folds* the epoch: what the segments left (the next space) is read to
the end of the epoch strided, as the ``strided`` deal reads an epoch, rank r's t-th sample at
``handed + r + W*t`` of that space, by whatever world reads it, and the state records one more pair,
``[0, handed]`` (world size 0 marks the fold; ``handed``: positions of the space handed out). Every
later resize in the epoch only moves ``handed``: the state stays at 65 pairs and the arithmetic exact
(each remaining sample once, tail padding as ``strided`` pads) however many resizes follow. The price:
from the fold to the end of the epoch a node reads from the whole remaining space, not its stretch
(locality is lost for that rest, never exactness); the next epoch deals in stretches again. Under a
grid (a scheduled ``Mixture``'s loader) a fold may also follow one segment: the epoch read interleaved
along its first world's parts (``global_batch.InterleavedCut``), not by this module's ``SpanCut``.

Words: docs/glossary.md (spans, stretch, space, world segment, fold, handed).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shufflepoint._core.segments import FOLD, Segments
from shufflepoint._errors import DAMAGED, Refused

NAME = "spans"
MAX_SEGMENTS = 64  # world sizes dealt in stretches inside one epoch; another one folds the epoch (module docstring)


@dataclass(frozen=True)
class _Segment:
    """One segment of the epoch: W ranks each took ``taken`` samples from a space of ``size``."""

    size: int
    world_size: int
    taken: int

    def stretch(self, rank: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
        """(start, length) of rank's stretch in this segment's space."""
        base, extra = divmod(self.size, self.world_size)
        rank = np.asarray(rank, dtype=np.int64)
        return rank * base + np.minimum(rank, extra), base + (rank < extra).astype(np.int64)

    def left_per_rank(self) -> tuple[int, int, int]:
        """(ranks with a longer stretch, what each of them has left, what each other rank has left)."""
        base, extra = divmod(self.size, self.world_size)
        return extra, max(base + 1 - self.taken, 0), max(base - self.taken, 0)

    def remaining(self) -> int:
        """Positions of this segment's space no rank has read: the size of the next space."""
        longer, left_long, left_short = self.left_per_rank()
        return longer * left_long + (self.world_size - longer) * left_short

    def back(self, positions: np.ndarray) -> np.ndarray:
        """Positions of the next space (what remains) -> positions of this one."""
        # Position p of the next space is in the leftover of rank k (the ranks' leftovers laid end to end);
        # each of the ranks up to k read ``taken`` before it, so it sits at p + (k + 1) * taken here.
        longer, left_long, left_short = self.left_per_rank()
        split = longer * left_long  # the longer stretches' leftovers come first
        positions = np.asarray(positions, dtype=np.int64)
        if split == 0 or not positions.size or int(positions.min()) >= split:
            rank = positions - split
            rank //= max(left_short, 1)
            rank += longer + 1
        elif int(positions.max()) < split:
            rank = positions // left_long
            rank += 1
        else:
            short = (positions - split) // max(left_short, 1) + longer
            rank = np.where(positions < split, positions // left_long, short)
            rank += 1
        rank *= self.taken
        rank += positions
        return rank


def check_segments(n: int, segments: Sequence[Sequence[int]]) -> list[_Segment]:
    """Replay a recorded history; ValueError naming what is inconsistent."""
    built: list[_Segment] = []
    size = n
    for number, (world_size, taken) in enumerate(segments):
        if world_size < 1 or taken < 1:
            raise Refused(f"segments[{number}]", [world_size, taken], "a world size >= 1 and samples taken >= 1",
                          DAMAGED, why="a segment with nothing taken is never recorded")
        if built and built[-1].world_size == world_size:
            raise Refused(f"segments[{number}]", [world_size, taken], f"a world size other than {world_size}",
                          DAMAGED, why="a resume on the same world size continues its segment")
        most = -(-size // world_size)
        if taken > most:
            raise Refused(f"segments[{number}]", [world_size, taken], f"at most {most} samples taken per rank "
                          f"({size} positions left for {world_size} ranks)", DAMAGED)
        built.append(_Segment(size, world_size, taken))
        size = built[-1].remaining()
    return built


def split_fold(segments: Sequence[Sequence[int]]) -> tuple[Segments, int | None]:
    """(the segments dealt in stretches, positions of the folded rest handed out, or None when not folded)."""
    pairs = Segments(segments)
    if pairs.folded:
        return Segments(pairs[:-1]), pairs[-1].taken
    return pairs, None


def check_fold(n: int, segments: Sequence[Sequence[int]]) -> tuple[list[_Segment], int | None]:
    """``check_segments`` of a possibly folded epoch: (the stretch segments, the fold's ``handed`` or None).
    Kept for the latest few epochs' segments: a load places up to 33 history legs, each cutting an epoch
    of up to 65 segments (0.7 ms of Python each)."""
    built, handed = _checked_fold(n, Segments(segments))
    return list(built), handed


@functools.lru_cache(maxsize=64)
def _checked_fold(n: int, segments: Segments) -> tuple[tuple[_Segment, ...], int | None]:
    pairs, handed = split_fold(segments)
    built = check_segments(n, pairs)
    if handed is not None:
        number = len(pairs)
        if number not in (1, MAX_SEGMENTS):
            raise Refused(f"segments[{number}]", [FOLD, handed], f"a fold only after {MAX_SEGMENTS} segments (or "
                          "after 1: an epoch read interleaved under a grid, global_batch.InterleavedCut)", DAMAGED,
                          why="an epoch folds at the world size past the last it deals in stretches")
        left = built[-1].remaining()
        if not 1 <= handed <= left:
            raise Refused(f"segments[{number}]", [FOLD, handed], f"[{FOLD}, handed] with handed in [1, {left}]",
                          DAMAGED, why=f"the {MAX_SEGMENTS} segments leave {left} positions")
    return tuple(built), handed


def remaining(n: int, segments: Sequence[Sequence[int]]) -> int:
    """Positions of the epoch no rank has read yet, at ``segments`` (checked)."""
    built, handed = check_fold(n, segments)
    return (built[-1].remaining() if built else n) - (handed or 0)


@dataclass(frozen=True)
class _Fold:
    """The folded rest of an epoch: a space of ``size`` read strided from ``handed`` by W ranks in batches of B."""

    size: int
    handed: int
    world_size: int
    batch_size: int
    drop_last: bool

    def samples_per_rank(self) -> int:
        full, tail = divmod(self.size - self.handed, self.world_size * self.batch_size)
        return full * self.batch_size + (0 if self.drop_last else -(-tail // self.world_size))

    def real_samples(self, rank: int) -> int:
        left = self.size - self.handed - rank
        return min(max(-(-left // self.world_size), 0), self.samples_per_rank())

    def positions(self, ranks: np.ndarray, taken: np.ndarray) -> np.ndarray:
        """Space positions of each rank's samples ``taken`` (broadcast), past the end wrapped (tail padding)."""
        found: np.ndarray = self.handed + ranks + self.world_size * taken
        if found.size and int(found.max()) >= self.size:
            found = found % self.size
        return found


class SpanCut:
    """The rest of an epoch under the ``spans`` deal, for the current world: what each rank reads.

    ``segments`` is the epoch's recorded history; the current world continues its last segment
    when the world size is the same (an exact resume), else opens a new one over what remains.
    """

    def __init__(self, n: int, segments: Sequence[Sequence[int]], world_size: int, batch_size: int,
                 drop_last: bool) -> None:
        history, handed = check_fold(n, segments)
        if handed is not None and len(history) != MAX_SEGMENTS:
            raise Refused("segments", Segments(segments), f"a fold only after {MAX_SEGMENTS} segments", DAMAGED,
                          why="an epoch read interleaved (a fold after one segment) is read by a scheduled Mixture's "
                          "loader, under its grid")
        self.n, self.batch_size, self.drop_last = n, batch_size, drop_last
        self._fold: _Fold | None = None
        if handed is None and history and history[-1].world_size == world_size:
            current = history.pop()
        else:
            current = _Segment(history[-1].remaining() if history else n, world_size, 0)
        if handed is not None or len(history) >= MAX_SEGMENTS:  # the fold: the rest strided (module docstring)
            self._fold = _Fold(current.size, handed or 0, world_size, batch_size, drop_last)
        self._history, self._current = history, current

    @property
    def world_size(self) -> int:
        return self._current.world_size

    @property
    def first_world_size(self) -> int:
        """The world size the epoch started with: the stretches its order is laid along."""
        return self._history[0].world_size if self._history else self._current.world_size

    @property
    def stretches(self) -> int | None:
        """The world size whose stretches the epoch's order is laid along: the first."""
        return self.first_world_size

    def samples_per_rank(self) -> int:
        """How many samples each rank reads from here to the end of the epoch."""
        if self._fold is not None:
            return self._fold.samples_per_rank()
        left = self._current.remaining()
        world_size = self._current.world_size
        if self.drop_last:
            return left // (world_size * self.batch_size) * self.batch_size
        return -(-left // world_size)

    def real_samples(self, rank: int) -> int:
        """Of those, how many are not padding (the rest repeat the rank's own samples)."""
        if self._fold is not None:
            return self._fold.real_samples(rank)
        _, length = self._current.stretch(rank)
        return min(max(int(length) - self._current.taken, 0), self.samples_per_rank())

    def rank_positions(self, rank: int, start: int, stop: int) -> np.ndarray:
        """Epoch-stream positions of this rank's samples ``start..stop-1`` (counted from here)."""
        if self._fold is not None:
            return self._back(self._fold.positions(np.int64(rank), np.arange(start, stop, dtype=np.int64)))
        segment = self._current
        taken = np.arange(start, stop, dtype=np.int64) + segment.taken
        first, length = (int(v) for v in segment.stretch(rank))
        if length > 0:
            positions = first + np.where(taken < length, taken, taken % length)
        else:  # fewer positions than ranks: a rank with none pads from the whole space
            positions = taken % max(segment.size, 1)
        return self._back(positions)

    def _back(self, positions: np.ndarray) -> np.ndarray:
        """Positions of the current space -> epoch positions, back through every earlier segment."""
        for earlier in reversed(self._history):
            positions = earlier.back(positions)
        return positions

    def world_positions(self, start: int, stop: int) -> np.ndarray:
        """``rank_positions(rank, start, stop)`` of every rank at once, one row a rank (``which``): each
        earlier segment's map runs once over the world's positions, not once per rank."""
        if self._fold is not None:
            ranks = np.arange(self._fold.world_size, dtype=np.int64)[:, None]
            folded = self._fold.positions(ranks, np.arange(start, stop, dtype=np.int64)[None, :])
            return self._back(folded.reshape(-1)).reshape(folded.shape)
        segment = self._current
        taken = (np.arange(start, stop, dtype=np.int64) + segment.taken)[None, :]
        first, length = segment.stretch(np.arange(segment.world_size, dtype=np.int64))
        first, length = first[:, None], length[:, None]
        positions = first + np.where(taken < length, taken, taken % np.maximum(length, 1))
        empty = length[:, 0] == 0
        if empty.any():  # fewer positions than ranks: a rank with none pads from the whole space
            positions[empty] = taken % max(segment.size, 1)
        found: np.ndarray = self._back(positions.reshape(-1)).reshape(positions.shape)
        return found

    def after(self, received: int) -> tuple[int, Segments]:
        """(cursor, segments) once every rank has received ``received`` more samples."""
        current, fold = self._current, self._fold
        history = [(s.world_size, s.taken) for s in self._history]
        if fold is not None:  # the fold's rest: only ``handed`` moves
            handed = min(fold.handed + fold.world_size * min(received, self.samples_per_rank()), fold.size)
            return self.n - fold.size + handed, Segments(history + ([(FOLD, handed)] if handed else []))
        taken = current.taken + min(received, self.samples_per_rank())
        if taken > 0:
            history.append((current.world_size, taken))
            left = _Segment(current.size, current.world_size, taken).remaining()
        else:
            left = current.size
        return self.n - left, Segments(history)
