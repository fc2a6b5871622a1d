"""What a deal records of an epoch beyond its cursor: a few pairs of ints, as one immutable value.

- ``Segments``, the ``spans`` deal's (``spans.py``): one ``Segment(world_size, taken)`` per world size the
  epoch was read at, ``taken`` samples per rank; an epoch folded after 64 world sizes ends with
  ``Segment(0, handed)`` (``FOLD``). Empty at an epoch's start, and always under ``strided``.
- ``BucketSegments``, the bucket deal's (``buckets.py``): one ``BucketSegment(batch_size, slots)`` per batch
  size the epoch was read at, ``slots`` the interleave's slots handed out at it.

Both share the state's ``segments`` field and nothing else: each is built by its deal (``_core/deals/``),
from the state's JSON (``[[a, b], ...]``) or from a cut's ``after``, and written back by ``to_state``, the
same lists as ever. They are tuples (hashable, indexable, unpacked as ``for w, t in segments``) and equal
to their state form too, so a position compares with what a state holds.

>>> Segments([[2, 2], [3, 1]]) == [[2, 2], [3, 1]], Segments([[2, 2]])[0].taken, Segments().to_state()
(True, 2, [])

Words: docs/glossary.md (world segment, bucket segment, fold).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple, cast

FOLD = 0  # the world size of the last pair of a folded epoch's segments: (FOLD, handed), ``spans.py``


def is_folded(pairs: Sequence[Sequence[int]]) -> bool:
    """Whether an epoch's segments in a state's form end with the fold (a state written with one is version 5).

    >>> is_folded([[2, 3], [0, 5]]), is_folded([[2, 3]]), is_folded([[False, 5]])
    (True, False, False)
    """
    last = pairs[-1] if pairs else None
    return isinstance(last, (list, tuple)) and len(last) == 2 and last[0] == FOLD and not isinstance(last[0], bool)


class Segment(NamedTuple):
    """One stretch of an epoch read at one world size: ``taken`` samples per rank (``spans.py``)."""

    world_size: int
    taken: int


class BucketSegment(NamedTuple):
    """One stretch of an epoch read at one batch size: ``slots`` of its interleave handed out (``buckets.py``)."""

    batch_size: int
    slots: int


class _Pairs:
    """What both kinds of segments share: their state form, and equality with it."""

    __slots__ = ()

    def to_state(self) -> list[list[int]]:
        """The state's form: ``[[a, b], ...]``."""
        return [[a, b] for a, b in cast(tuple[tuple[int, int], ...], self)]

    def __eq__(self, other: object) -> bool:
        mine = cast(tuple[tuple[int, int], ...], self)
        if isinstance(other, list):  # the state's JSON form
            return len(mine) == len(other) and all(isinstance(q, (list, tuple)) and tuple(q) == p
                                                   for p, q in zip(mine, other, strict=True))
        return tuple.__eq__(mine, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __hash__(self) -> int:
        return tuple.__hash__(cast(tuple[int, ...], self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_state()})"


class Segments(_Pairs, tuple[Segment, ...]):
    """An epoch's ``spans`` segments (module docstring)."""

    __slots__ = ()

    def __new__(cls, pairs: Iterable[Iterable[int]] = ()) -> Segments:
        return super().__new__(cls, (Segment(int(w), int(t)) for w, t in pairs))

    @property
    def folded(self) -> bool:
        """Whether the epoch was folded (its last pair ``(FOLD, handed)``): a state holding one is version 5."""
        return bool(self) and self[-1].world_size == FOLD


class BucketSegments(_Pairs, tuple[BucketSegment, ...]):
    """An epoch's bucket-deal segments (module docstring)."""

    __slots__ = ()

    def __new__(cls, pairs: Iterable[Iterable[int]] = ()) -> BucketSegments:
        return super().__new__(cls, (BucketSegment(int(b), int(s)) for b, s in pairs))

    @property
    def cursor(self) -> int:
        """Samples the epoch handed out over all ranks: the sum of batch_size x slots (padding included)."""
        return sum(b * s for b, s in self)

    def cursor_of(self, n: int) -> int:
        """The state's ``cursor`` of an epoch of ``n`` samples: ``cursor``, at most n (padded units,
        ``drop_last=False``, may hand out more than n; a cursor stays in [0, n] under every deal)."""
        return min(self.cursor, n)


Pairs = Segments | BucketSegments  # what a place records beyond its cursor: the deal's own kind of segments
