"""Exclusion: dataset indices never served again, kept as sorted ranges, skipped while dealing.

``loader.exclude(indices)`` removes samples from the rest of the run without a log and without a
replay: the state holds the excluded set as sorted, disjoint ranges of dataset indices, and the
deal skips their positions. Vocabulary (all integers):

- *Ranges*: the excluded set as half-open ``[start, stop)`` intervals, sorted, never touching (two
  that touch are one range). In memory two int64 per range (16 bytes). In the state they are a
  flat list ``[gap, length, gap, length, ...]``: ``start = previous stop + gap`` (the first gap
  counts from 0), so scattered indices cost a few bytes each however large n is. At most
  ``MAX_RANGES`` ranges; a bigger set is refused, naming both numbers.
- *Excluded positions* of an epoch: where the order puts the excluded indices, found by the
  order's inverse (``positions_of``), sorted. O(|ranges| + |excluded|) once per epoch.
- *The rest of an epoch from a cursor c*: the positions ``[c, n)`` that are not excluded, read in
  order. Its q-th position is ``c + q + k``, k the number of excluded positions at or before it:
  one binary search per position (``numpy.searchsorted``), O(log |excluded|).

Worked, n = 10, the identity order, indices 3, 4 and 8 excluded at cursor 2 (``tests/core/
test_exclusion.py`` pins these values)::

    positions        : 0 1 | 2 3 4 5 6 7 8 9
    excluded         :         x x       x
    the rest from 2  : 2 5 6 7 9          (5 positions: the cut deals these to the ranks)
    W = 2            : rank 0 -> 2 6 9, rank 1 -> 5 7 (+ padding: the epoch's first kept position, 0)

Under the ``strided`` deal the state's cursor stays an *epoch position* (everything before it was
handed out), so an exclusion that grows mid-epoch never moves what was already served, a resume
on the same world continues the same stream, and another world deals the same rest, each once.
Tail padding wraps to the start of the epoch's kept positions, as it wraps to position 0 without
exclusion. The ``spans`` deal re-deals what is left at an exclusion: ``spanskips.py``.

Words: docs/glossary.md (exclusion, position, index).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from shufflepoint._core.plan import Layout
from shufflepoint._core.segments import Segments
from shufflepoint._errors import DAMAGED, Plain, Refused, refusal, shown
from shufflepoint._order.distinct import distinct

MAX_RANGES = 1 << 17  # 131,072 ranges: 2 MiB as int64 pairs, under ~1 MiB in a pickled state
NAME = "excluded"


class Exclusion:
    """A set of dataset indices as sorted, disjoint, non-touching ``[start, stop)`` ranges of ``[0, n)``.

    >>> e = Exclusion.from_indices([8, 3, 4, 4], n=10)
    >>> e.ranges(), e.count, e.to_state()
    ([(3, 5), (8, 9)], 3, [3, 2, 3, 1])
    >>> Exclusion.from_state([3, 2, 3, 1], n=10) == e
    True
    """

    __slots__ = ("n", "starts", "stops")

    def __init__(self, n: int, starts: np.ndarray, stops: np.ndarray) -> None:
        self.n, self.starts, self.stops = n, starts, stops

    @classmethod
    def empty(cls, n: int) -> Exclusion:
        return cls(n, np.zeros(0, np.int64), np.zeros(0, np.int64))

    @classmethod
    def from_indices(cls, indices: Any, n: int, *, name: str = "indices") -> Exclusion:
        """Indices (ints, any iterable, numpy or torch integer array) -> ranges; ValueError/TypeError
        naming ``name``, the offending value and the valid range."""
        values = _as_index_array(indices, name)
        if values.size:
            low, high = int(values.min()), int(values.max())
            if low < 0 or high >= n:
                bad = low if low < 0 else high
                raise ValueError(refusal(name, bad, f"dataset indices in [0, {n}) (len(dataset) = {n})",
                                         "pass indices of the dataset the loader reads"))
        unique = distinct(values)
        opens = np.concatenate(([True], np.diff(unique) != 1)) if unique.size else np.zeros(0, bool)
        starts = unique[opens]
        stops = np.concatenate((unique[np.flatnonzero(opens)[1:] - 1], unique[-1:])) + 1 if unique.size else starts
        return cls(n, starts.astype(np.int64), stops.astype(np.int64))

    def union(self, other: Exclusion) -> Exclusion:
        """Both sets as one (touching or overlapping ranges merged)."""
        if not other.starts.size:
            return self
        if not self.starts.size:
            return other
        starts = np.concatenate((self.starts, other.starts))
        stops = np.concatenate((self.stops, other.stops))
        order = np.argsort(starts, kind="stable")
        return Exclusion.from_sorted(starts[order], stops[order], self.n)

    @classmethod
    def from_sorted(cls, starts: np.ndarray, stops: np.ndarray, n: int) -> Exclusion:
        """Ranges sorted by start, possibly overlapping or touching, as one set (merged)."""
        if not starts.size:
            return cls.empty(n)
        reach = np.maximum.accumulate(stops)
        opens = np.concatenate(([True], starts[1:] > reach[:-1]))
        first = np.flatnonzero(opens)
        last = np.concatenate((first[1:], [starts.size])) - 1
        return cls(n, starts[first], reach[last])

    @property
    def count(self) -> int:
        """How many indices are excluded."""
        return int((self.stops - self.starts).sum())

    def __len__(self) -> int:
        return int(self.starts.size)

    def __bool__(self) -> bool:
        return bool(self.starts.size)

    def __eq__(self, other: object) -> bool:
        return other is self or (isinstance(other, Exclusion) and self.n == other.n
                                 and np.array_equal(self.starts, other.starts)
                                 and np.array_equal(self.stops, other.stops))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Exclusion(n={self.n}, ranges={len(self)}, count={self.count})"

    def ranges(self) -> list[tuple[int, int]]:
        return list(zip(self.starts.tolist(), self.stops.tolist(), strict=True))

    def indices(self) -> np.ndarray:
        """Every excluded index, sorted (int64): O(count)."""
        if not self.starts.size:
            return np.zeros(0, np.int64)
        lengths = self.stops - self.starts
        offsets = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        found: np.ndarray = np.repeat(self.starts, lengths) + offsets
        return found

    def contains(self, indices: np.ndarray) -> np.ndarray:
        """A bool mask: which of ``indices`` are excluded, O(log ranges) each."""
        values = np.asarray(indices, dtype=np.int64)
        at = np.searchsorted(self.starts, values, side="right") - 1
        inside: np.ndarray = (at >= 0) & (values < self.stops[np.maximum(at, 0)]) if self.starts.size else \
            np.zeros(values.shape, bool)
        return inside

    def to_state(self) -> list[int]:
        """The state's form: ``[gap, length, ...]``, gaps counted from the previous range's stop."""
        if not self.starts.size:
            return []
        gaps = self.starts - np.concatenate(([0], self.stops[:-1]))
        flat = np.empty(2 * self.starts.size, dtype=np.int64)
        flat[0::2], flat[1::2] = gaps, self.stops - self.starts
        return [int(v) for v in flat.tolist()]

    @classmethod
    def from_state(cls, value: Sequence[Any], n: int) -> Exclusion:
        """The state's form -> ranges. ValueError naming the element when it is malformed."""
        if len(value) % 2:
            raise Refused("excluded", Plain(f"{len(value)} numbers"), "an even count ([gap, length] per range)",
                          DAMAGED)
        if len(value) // 2 > MAX_RANGES:
            raise Refused("excluded", Plain(f"{len(value) // 2} ranges"), f"at most {MAX_RANGES} ranges", DAMAGED)
        for number, item in enumerate(value):
            if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item < 2**63:
                raise Refused(f"element {number}", item, "an int >= 0", DAMAGED)
        flat = np.asarray(value, dtype=np.int64).reshape(-1, 2)
        gaps, lengths = flat[:, 0], flat[:, 1]
        if lengths.size and int(lengths.min()) < 1:
            at = int(np.flatnonzero(lengths < 1)[0])
            raise Refused(f"element {2 * at + 1}", int(lengths[at]), "a range length >= 1", DAMAGED)
        if gaps.size > 1 and int(gaps[1:].min()) < 1:
            at = int(np.flatnonzero(gaps[1:] < 1)[0]) + 1
            raise Refused(f"element {2 * at}", 0, "a gap >= 1 between ranges", DAMAGED,
                          why="touching ranges are written as one")
        if gaps.size and int(gaps.sum()) + int(lengths.sum()) > n:  # exact ints: no int64 overflow below
            raise Refused("the ranges", Plain(f"index {int(gaps.sum()) + int(lengths.sum()) - 1} reached"),
                          f"every index < n = {n}", DAMAGED)
        stops = np.cumsum(gaps + lengths)
        return cls(n, stops - lengths, stops)

    @classmethod
    def from_state_field(cls, value: list[Any], n: int, kind: str) -> Exclusion | None:
        """A state's ``excluded`` checked (None for nothing excluded); :class:`Refused` naming the element."""
        if not value:
            return None
        excluded = cls.from_state(value, n)
        if kind != "loader":
            raise Refused("excluded", Plain(f"{excluded.count} excluded indices"), f"[] for a {kind}",
                          "load this state into a shufflepoint.DataLoader, the one that skips excluded samples")
        return excluded


_AS_INTS = "convert the indices to ints (a list of int, or an integer array)"
_IN_RANGE = "pass indices of the dataset the loader reads"


def _as_index_array(indices: Any, name: str) -> np.ndarray:
    if hasattr(indices, "detach") and hasattr(indices, "cpu"):  # a torch tensor, without importing torch
        indices = indices.detach().cpu().numpy()
    if isinstance(indices, np.ndarray):
        if indices.dtype == np.bool_ or not np.issubdtype(indices.dtype, np.integer):
            raise TypeError(refusal(name, Plain(f"an array of {indices.dtype}"), "integer dataset indices", _AS_INTS))
        if indices.dtype.kind == "u" and indices.size and int(indices.max()) >= 2**63:
            raise ValueError(refusal(name, int(indices.max()), "dataset indices that fit an int64", _IN_RANGE))
        return indices.astype(np.int64).reshape(-1)
    if isinstance(indices, (int, str, bytes)) or not isinstance(indices, Iterable):
        raise TypeError(refusal(name, Plain(type(indices).__name__), "an iterable of int dataset indices",
                                "pass a list, range, numpy or torch integer array"))
    values = list(indices)
    for value in values:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            found = Plain(f"{shown(value)} of type {type(value).__name__}")
            raise TypeError(refusal(name, found, "int dataset indices", _AS_INTS))
        if not -(2**63) <= int(value) < 2**63:
            raise ValueError(refusal(name, value, "dataset indices that fit an int64", _IN_RANGE))
    return np.asarray([int(v) for v in values], dtype=np.int64)


class Skips:
    """The sorted epoch positions of the excluded indices in one epoch, and the maps they define.

    >>> skips = Skips(np.array([3, 4, 8]), n=10)
    >>> skips.remaining(2), skips.nth(2, np.arange(5)).tolist()
    (5, [2, 5, 6, 7, 9])
    """

    def __init__(self, positions: np.ndarray, n: int) -> None:
        self.positions = np.sort(np.asarray(positions, dtype=np.int64))
        self.n = n
        self._from: tuple[int, np.ndarray] | None = None
        self._ranges: Exclusion | None = None

    def ranges(self) -> Exclusion:
        """The positions as sorted ranges (the ``spans`` deal skips them so), built once."""
        if self._ranges is None:
            self._ranges = Exclusion.from_indices(self.positions, self.n, name="positions")
        return self._ranges

    def remaining(self, cursor: int) -> int:
        """Positions in ``[cursor, n)`` that are not excluded."""
        excluded = self.positions.size - int(np.searchsorted(self.positions, cursor, side="left"))
        return self.n - cursor - excluded

    def _steps(self, cursor: int) -> np.ndarray:
        """For each excluded position p >= cursor: the kept positions in [cursor, p) (non-decreasing)."""
        if self._from is None or self._from[0] != cursor:
            after = self.positions[int(np.searchsorted(self.positions, cursor, side="left")):]
            self._from = (cursor, after - cursor - np.arange(after.size, dtype=np.int64))
        return self._from[1]

    def nth(self, cursor: int, kept: np.ndarray, ascending: bool = False) -> np.ndarray:
        """The epoch positions of the ``kept``-th kept positions from ``cursor`` (each < remaining).

        ``ascending`` (``kept`` sorted, as a rank's chunk is): only the excluded positions between the
        first and the last are searched, each once (a handful for a chunk of a large epoch).
        """
        kept = np.asarray(kept, dtype=np.int64)
        steps = self._steps(cursor)
        if ascending and kept.size and steps.size:
            low = int(np.searchsorted(steps, kept[0], side="right"))
            high = int(np.searchsorted(steps, kept[-1], side="right"))
            if low == high:  # no excluded position among them: one shift for the whole chunk
                shifted: np.ndarray = kept + (cursor + low)
                return shifted
            # each excluded position among them shifts the kept from the first one at or after it:
            # O(w log m + m) for w excluded among m kept, not O(m log w)
            first = np.searchsorted(kept, steps[low:high], side="left")
            found: np.ndarray = kept + (cursor + low) + np.cumsum(np.bincount(first, minlength=kept.size))
            return found
        found = cursor + kept + np.searchsorted(steps, kept, side="right")
        return found


class FilteredStridedCut:
    """The rest of an epoch under the ``strided`` deal from ``cursor``, its excluded positions skipped.

    The same questions as ``plan.StridedCut`` answers, asked of the kept positions: rank r reads
    the kept positions r, r + W, r + 2W, ... from the cursor; past the last one it pads with the
    epoch's first kept positions (as ``StridedCut`` pads with the epoch's first positions).
    """

    stretches = None  # the strided order is laid along no stretches

    def __init__(self, layout: Layout, cursor: int, skips: Skips) -> None:
        self.layout, self.cursor, self.skips = layout, cursor, skips
        self._left = skips.remaining(cursor)

    @property
    def world_size(self) -> int:
        return self.layout.world_size

    def samples_per_rank(self) -> int:
        full_steps, tail = divmod(self._left, self.layout.step_size)
        return full_steps * self.layout.batch_size + (0 if self.layout.drop_last else -(-tail // self.world_size))

    def real_samples(self, rank: int) -> int:
        return min(max(-(-(self._left - rank) // self.world_size), 0), self.samples_per_rank())

    def rank_positions(self, rank: int, start: int, stop: int) -> np.ndarray:
        kept = np.arange(start, stop, dtype=np.int64) * self.world_size + rank
        if not kept.size or int(kept[-1]) < self._left:  # no tail padding in this chunk (the common case)
            return self.skips.nth(self.cursor, kept, ascending=True)
        positions = np.empty_like(kept)
        inside = kept < self._left
        positions[inside] = self.skips.nth(self.cursor, kept[inside], ascending=True)
        if not inside.all():  # tail padding: the epoch's first kept positions, in order
            positions[~inside] = self.skips.nth(0, (kept[~inside] - self._left) % self.skips.remaining(0))
        return positions

    def world_positions(self, start: int, stop: int) -> np.ndarray:
        """``rank_positions(rank, start, stop)`` of every rank at once, one row a rank (``which``)."""
        kept = (np.arange(start, stop, dtype=np.int64)[None, :] * self.world_size
                + np.arange(self.world_size, dtype=np.int64)[:, None]).reshape(-1)
        positions = np.empty_like(kept)
        inside = kept < self._left
        positions[inside] = self.skips.nth(self.cursor, kept[inside])
        if not inside.all():  # tail padding: the epoch's first kept positions, in order
            positions[~inside] = self.skips.nth(0, (kept[~inside] - self._left) % self.skips.remaining(0))
        return positions.reshape(self.world_size, max(stop - start, 0))

    def after(self, received: int) -> tuple[int, Segments]:
        """(cursor, segments) once every rank has received ``received`` more samples: the position
        after the last kept position handed out (``n`` once the kept positions are all out)."""
        handed = self.world_size * min(received, self.samples_per_rank())
        if handed == 0:
            return self.cursor, Segments()
        if handed >= self._left:
            return self.layout.n, Segments()
        return int(self.skips.nth(self.cursor, np.array([handed - 1]))[0]) + 1, Segments()

