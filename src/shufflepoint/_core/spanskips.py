"""Exclusion under the ``spans`` deal: the rest of an epoch re-dealt without the excluded positions.

Under ``strided`` the state's cursor is an epoch position and the rest of the epoch is simply the
kept positions after it (``exclusion.FilteredStridedCut``). Under ``spans`` what was handed out is
not a prefix: each rank read the front of its own stretch. An ``exclude()`` mid-epoch is therefore
a re-deal, like a resize: the positions not handed out yet, minus the excluded ones, become a new
*space*, dealt in stretches to the current world as ``spans.SpanCut`` deals a space.

Vocabulary (all integers, epoch positions unless said otherwise):

- *Handed*: the positions handed out before the epoch's latest exclusion, as sorted ranges. A range
  may cover excluded positions too (they are gone either way), so it stays a few ranges per rank
  and segment however many samples were read. The state keeps it as ``handed``:
  ``[first_world_size, gap, length, gap, length, ...]`` (``[]`` when nothing was handed out before
  an exclusion in this epoch); ``first_world_size`` is the world size the epoch began on, which the
  ``blocks`` order of a corpus is laid along.
- *Gone*: handed plus the excluded positions of the epoch. The *space* is ``[0, n)`` minus gone,
  read front to back; its q-th position is ``q + (gone positions before it)``, one binary search
  over the gone ranges.
- The space is dealt as ``spans`` deals an epoch, with the state's ``segments`` counting from the
  latest exclusion (each rank keeps reading its own stretch of what is left, skipping).

Worked, n = 10, identity order, 2 ranks x batch 2 (``tests/core/test_spanskips.py`` pins these)::

    stretches       : 0 1 2 3 4 | 5 6 7 8 9       rank 0 read 0 1, rank 1 read 5 6
    exclude 3 and 8 : handed [0, 2) and [5, 7); gone 0 1 3 5 6 8
    the space       : 2 4 7 9                      W = 2: rank 0 -> 2 4, rank 1 -> 7 9

A resume on the same world continues the same space and segment (exact); another world re-deals
what the space has left (each remaining sample once), as a resize does without exclusion.

Words: docs/glossary.md (spans, handed, exclusion, stretch).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from shufflepoint._core.exclusion import MAX_RANGES, Exclusion
from shufflepoint._core.segments import Segments
from shufflepoint._core.spans import MAX_SEGMENTS, SpanCut, check_segments
from shufflepoint._errors import DAMAGED, Plain, Refused, refusal

__all__ = ["FilteredSpanCut", "Handed"]


class Handed:
    """What an epoch handed out before its latest exclusion, and the world size it began on."""

    __slots__ = ("first_world_size", "ranges")

    def __init__(self, first_world_size: int, ranges: Exclusion) -> None:
        self.first_world_size, self.ranges = first_world_size, ranges

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Handed) and self.first_world_size == other.first_world_size
                and self.ranges == other.ranges)

    __hash__ = None  # type: ignore[assignment]

    def to_state(self) -> list[int]:
        return [self.first_world_size, *self.ranges.to_state()]

    @classmethod
    def from_state_field(cls, value: list[object], n: int, excluding_spans: bool) -> Handed | None:
        """A state's ``handed`` checked; :class:`Refused` naming what is wrong."""
        if value and not excluding_spans:
            raise Refused("handed", value, "[] (only the spans deal with samples excluded records it)", DAMAGED)
        return cls.from_state(value, n)

    @classmethod
    def from_state(cls, value: list[object], n: int) -> Handed | None:
        """The state's ``handed``; ValueError(message) naming the element when malformed."""
        if not value:
            return None
        first = value[0]
        if isinstance(first, bool) or not isinstance(first, int) or not 1 <= first <= 2**31:
            raise Refused("element 0", first, "the epoch's first world size, an int in [1, 2**31]", DAMAGED)
        try:
            ranges = Exclusion.from_state(value[1:], n)
        except Refused as error:  # its elements count from element 1 of ``handed``
            raise Refused(f"after element 0, {error.subject}", error.found, error.expected, error.fix,
                          why=error.why) from None
        if not ranges:
            raise Refused("handed", Plain("a world size and no ranges"), "[] when nothing was handed out", DAMAGED)
        return cls(first, ranges)


def _intervals(positions: np.ndarray, n: int) -> Exclusion:
    return Exclusion.from_indices(positions, n, name="positions") if positions.size else Exclusion.empty(n)


class FilteredSpanCut:
    """The rest of an epoch under ``spans`` with gone positions skipped: ``SpanCut``'s questions,
    asked of the space ``[0, n)`` minus ``handed`` minus ``excluded`` (epoch positions, or their ranges
    as an ``Exclusion``, which a loader builds once per epoch)."""

    def __init__(self, n: int, handed: Handed | None, excluded: np.ndarray | Exclusion,
                 segments: Sequence[Sequence[int]], world_size: int, batch_size: int, drop_last: bool) -> None:
        self.n, self.handed = n, handed
        gone = excluded if isinstance(excluded, Exclusion) else _intervals(np.asarray(excluded, dtype=np.int64), n)
        if handed is not None:
            gone = gone.union(handed.ranges)
        lengths = gone.stops - gone.starts
        self._gone_before = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        self._kept_before = gone.starts - self._gone_before[:-1]  # kept positions before each gone range
        self.size = n - int(self._gone_before[-1])
        self.segments = Segments(segments)
        self._inner = SpanCut(self.size, self.segments, world_size, batch_size, drop_last)
        first = handed.first_world_size if handed is not None else self._inner.first_world_size
        self.first_world_size = first
        self.stretches: int | None = first  # the epoch's order is laid along its first world's stretches

    @property
    def world_size(self) -> int:
        return self._inner.world_size

    def samples_per_rank(self) -> int:
        return self._inner.samples_per_rank()

    def real_samples(self, rank: int) -> int:
        return self._inner.real_samples(rank)

    def to_epoch(self, space: np.ndarray, ascending: bool | None = None) -> np.ndarray:
        """Positions of the space -> epoch positions (each gone range before them skipped); ``ascending``
        (None: checked) lets a sorted chunk shift once per gone range instead of a search per position."""
        space = np.asarray(space, dtype=np.int64)
        if ascending is None:
            ascending = space.size > 1 and bool((space[1:] >= space[:-1]).all())
        if ascending and space.size:  # a rank's chunk: each gone range once
            low, high = np.searchsorted(self._kept_before, space[[0, -1]], side="right").tolist()
            shifted: np.ndarray = space + self._gone_before[low]
            if high > low:  # each gone range among them shifts the positions from the first one at or after it
                first = np.searchsorted(space, self._kept_before[low:high], side="left")
                steps = np.zeros(space.size, dtype=np.int64)
                np.add.at(steps, first, self._gone_before[low + 1:high + 1] - self._gone_before[low:high])
                shifted += np.cumsum(steps, out=steps)
            return shifted
        found: np.ndarray = space + self._gone_before[np.searchsorted(self._kept_before, space, side="right")]
        return found

    def rank_positions(self, rank: int, start: int, stop: int) -> np.ndarray:
        # Before the tail padding a rank's positions ascend (its stretch, read front to back, and each
        # earlier segment's ``back`` map is increasing), so the chunk needs no check.
        return self.to_epoch(self._inner.rank_positions(rank, start, stop),
                             ascending=True if stop <= self._inner.real_samples(rank) else None)

    def world_positions(self, start: int, stop: int) -> np.ndarray:
        """``rank_positions(rank, start, stop)`` of every rank at once, one row a rank (``which``)."""
        inner = self._inner.world_positions(start, stop)
        return self.to_epoch(inner.reshape(-1), ascending=False).reshape(inner.shape)

    def after(self, received: int) -> tuple[int, Segments]:
        """(cursor, segments) once every rank has received ``received`` more samples: ``cursor`` counts
        the epoch positions that will not be read any more (handed out or gone)."""
        cursor, segments = self._inner.after(received)
        return self.n - (self.size - cursor), segments

    def handed_after(self, received: int) -> Handed | None:
        """What the epoch has handed out once every rank received ``received`` more samples, as ranges
        (the ``handed`` of an exclusion made there); None when nothing was."""
        _, segments = self._inner.after(received)
        if segments.folded:
            # LIMIT(exclude-folded-epoch): docs/exclusion.md#limits
            raise ValueError(refusal("exclude", Plain(f"an epoch folded after {MAX_SEGMENTS} world sizes"),
                                     "an epoch dealt in stretches", "exclude at the start of the next epoch",
                                     why="nothing was excluded: what the fold handed out is not kept as ranges"))
        built = check_segments(self.size, segments)
        found: list[tuple[int, int]] = []
        for number, segment in enumerate(built):
            starts, lengths = segment.stretch(np.arange(segment.world_size))
            read = np.minimum(lengths, segment.taken)
            ranges = [(int(s), int(s + r)) for s, r in zip(starts.tolist(), read.tolist(), strict=True) if r > 0]
            for earlier in reversed(built[:number]):
                ranges = _back_ranges(earlier, ranges)
            found.extend(ranges)
        starts_a = np.array([a for a, _ in found], dtype=np.int64)
        lasts_a = np.array([b - 1 for _, b in found], dtype=np.int64)
        epoch_starts, epoch_stops = self.to_epoch(starts_a), self.to_epoch(lasts_a) + 1
        order = np.argsort(epoch_starts, kind="stable")
        ranges_now = Exclusion.from_sorted(epoch_starts[order], epoch_stops[order], self.n)
        if self.handed is not None:
            ranges_now = ranges_now.union(self.handed.ranges)
        if not ranges_now:
            return None
        if len(ranges_now) > MAX_RANGES:
            # LIMIT(handed-ranges): docs/exclusion.md#limits
            raise ValueError(refusal("exclude", Plain(f"{len(ranges_now)} ranges of handed-out positions this epoch"),
                                     f"at most {MAX_RANGES}", "exclude at the start of the next epoch",
                                     why="nothing was excluded: the state could not record it"))
        return Handed(self.first_world_size, ranges_now)


def _back_ranges(segment: object, ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Ranges of the space after ``segment`` (what it left) -> ranges of its own space: each range is
    split where it crosses from one rank's leftover to the next (``spans._Segment.back`` per piece)."""
    longer, left_long, left_short = segment.left_per_rank()  # type: ignore[attr-defined]
    world_size = segment.world_size  # type: ignore[attr-defined]
    ranks = np.arange(world_size, dtype=np.int64)
    piece_lengths = np.where(ranks < longer, left_long, left_short)
    piece_starts = np.concatenate(([0], np.cumsum(piece_lengths)[:-1]))
    stretch_starts, _ = segment.stretch(ranks)  # type: ignore[attr-defined]
    out: list[tuple[int, int]] = []
    for low, high in ranges:
        rank = int(np.searchsorted(piece_starts, low, side="right")) - 1
        while low < high:
            while int(piece_lengths[rank]) == 0 or low >= int(piece_starts[rank] + piece_lengths[rank]):
                rank += 1
            end = min(high, int(piece_starts[rank] + piece_lengths[rank]))
            base = int(stretch_starts[rank]) + segment.taken - int(piece_starts[rank])  # type: ignore[attr-defined]
            out.append((base + low, base + end))
            low = end
    return out

