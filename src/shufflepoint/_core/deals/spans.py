"""The ``spans`` deal: each rank reads one contiguous stretch of the epoch, and a new world re-deals what
remains. The default for a corpus (``blocks``, a ``Mixture``'s or ``Packed``'s own order).

What sets it apart from the other deals, answered here for the loader, the history and the state (the
questions: ``_core/cut.py``; the arithmetic: ``spans.py``, ``global_batch.py`` and, with samples excluded,
``spanskips.py``):

- the consumed set is W intervals, not a prefix: the position is the epoch's ``Segments`` (one
  ``(world_size, taken)`` per world size it was read at, ``spans.py``), which the state keeps as
  ``segments`` and a history entry as its start; the cursor follows from them;
- while the global batch stays the same, the first world's stretches stay the canonical parts
  (``global_batch.py``: ``parts``, from the run's history);
- an exclusion mid-epoch re-deals what is left, from what the epoch had handed out (the state's ``handed``,
  ``spanskips.py``), and the segments count again from there;
- a corpus's order is laid along the stretches of the epoch's first world (``stretched``);
- under a grid (``on_grid``: a scheduled ``Mixture`` read by a loader, its phases on the run's global batches) an
  epoch read as one segment of its first world keeps those parts across a change of global batch too, when that
  world size divides the new one (``global_batch.grid_parts``), so a phase starts at the global batch it names on
  any data-parallel degree; after a global batch it does not divide, the epoch is read interleaved
  (``global_batch.InterleavedCut``: every part advancing together, ``[[W0, taken], [0, handed]]``);
- a state dealt ``strided`` (a corpus read by shufflepoint 0.2, which had no other deal) is read on strided.

Words: docs/glossary.md (spans, stretch, world segment, fold, handed, grid).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from shufflepoint._core import spans as _spans
from shufflepoint._core.cut import Cut, SkipsOf, Where
from shufflepoint._core.deals import strided
from shufflepoint._core.exclusion import Exclusion
from shufflepoint._core.global_batch import GlobalBatchCut, InterleavedCut, grid_parts, interleaved, keeps_global_batch
from shufflepoint._core.plan import STRIDED, Layout
from shufflepoint._core.segments import Pairs, Segments, is_folded
from shufflepoint._core.spans import MAX_SEGMENTS, NAME, SpanCut
from shufflepoint._core.spanskips import FilteredSpanCut, Handed
from shufflepoint._errors import DAMAGED, Refused, field_error

_MAX_INT = 2**63 - 1


class SpanDeal:
    """The ``spans`` deal (module docstring); ``DEAL`` is the instance, ``GRIDDED`` the one whose global batches
    follow a grid (``on_grid``)."""

    name = NAME
    stretched = True
    redeals = True
    keys_fingerprint: str | None = None

    def __init__(self, follows_grid: bool = False) -> None:
        self.follows_grid = follows_grid  # an epoch keeps its parts across a change of global batch (grid_parts)

    def __repr__(self) -> str:
        return "SpanDeal(follows_grid=True)" if self.follows_grid else "SpanDeal()"

    def on_grid(self) -> SpanDeal:
        """This deal for a run whose global batches follow a grid: ``GRIDDED``."""
        return GRIDDED

    def cut(self, layout: Layout, cursor: int, segments: Sequence[Sequence[int]] = (), parts: int | None = None, *,
            epoch: int = 0, handed: Handed | None = None, skips: SkipsOf | None = None) -> Cut:
        """At ``segments`` (the cursor follows from them); the parts' global batches where ``parts`` are another
        world's (``keeps_global_batch``), else the rest re-dealt; with samples excluded or handed out before an
        exclusion, the space they leave re-dealt (``parts`` then apply no more). Under a grid (``follows_grid``) an
        epoch read as one segment of its first world stays that world's global batches across a change of global
        batch (``grid_parts``)."""
        if skips is None and handed is None:
            if self.follows_grid:
                found = interleaved(segments, layout.world_size, layout.batch_size)
                if found is not None:
                    return InterleavedCut(layout.n, *found, layout.world_size, layout.batch_size, layout.drop_last)
                parts = grid_parts(segments, parts, layout.world_size, layout.batch_size)
            if parts is not None and keeps_global_batch(segments, parts, layout.world_size, layout.batch_size):
                taken = int(segments[0][1]) if segments else 0
                return GlobalBatchCut(layout.n, parts, taken, layout.world_size, layout.batch_size, layout.drop_last)
            return SpanCut(layout.n, segments, layout.world_size, layout.batch_size, layout.drop_last)
        first = handed.first_world_size if handed is not None else (segments[0][0] if segments else layout.world_size)
        positions = skips(first).ranges() if skips is not None else Exclusion.empty(layout.n)
        return FilteredSpanCut(layout.n, handed, positions, segments, layout.world_size, layout.batch_size,
                               layout.drop_last)

    def segments(self, pairs: Sequence[Sequence[int]]) -> Segments:
        return Segments(pairs)

    def check_state(self, state: Mapping[str, Any]) -> None:
        """The segments replay (a fold only in a version 5 state) and leave the cursor, unless samples are
        excluded (the loader checks that: it needs the order)."""
        n, segments = state["n"], state["segments"]
        try:
            cursor = n - _left(n, segments, folds=state["version"] >= 5)
        except Refused as error:
            raise field_error("segments", error.where(), error.expected, DAMAGED, why=error.why) from None
        if state["cursor"] != cursor and not state["excluded"]:
            raise field_error("cursor", state["cursor"], f"{cursor} (what segments={segments} leave of n={n})",
                              DAMAGED)

    def start_entry(self, cursor: int, segments: Pairs) -> list[list[int]]:
        return segments.to_state()

    def parse_start(self, n: int, field: str, start: object) -> tuple[int, Segments]:
        """The positions a stored start's segments leave (a folded epoch's included: ``spans.py``)."""
        if not (isinstance(start, list) and len(start) <= MAX_SEGMENTS + is_folded(start)
                and all(isinstance(p, list) and len(p) == 2 and all(_is_int(v) for v in p) for p in start)):
            raise Refused(f"{field} start", start, f"the epoch's segments, at most {MAX_SEGMENTS} "
                          "[world_size, taken] pairs and a fold (deal 'spans')", DAMAGED)
        try:
            left = _spans.remaining(n, start)
        except Refused as error:
            raise Refused(f"{field} start {error.subject}", error.found, error.expected, error.fix,
                          why=error.why) from None
        return n - left, Segments(start)

    def epoch_layout(self, layout: Layout, whole: Layout) -> Layout:
        return whole

    def check_exclusion(self) -> None:
        """Any sample may be excluded (what is left is re-dealt)."""

    def for_state(self, recorded: object) -> SpanDeal | strided.StridedDeal:
        """This deal; ``strided`` for a state dealt so (a corpus read by 0.2, which had no other deal, and every
        state of that run since), so that an upgrade reads a run on as it began."""
        return strided.DEAL if recorded == STRIDED else self

    def handed(self, cut: Cut) -> Handed | None:
        return cut.handed if isinstance(cut, FilteredSpanCut) else None

    def exclusion_start(self, current: Cut, done: int, layout: Layout, segments: Pairs,
                        handed: Handed | None) -> tuple[Segments, Handed | None]:
        """What the epoch has handed out, as ranges, with the segments counting afresh from here."""
        if not isinstance(current, FilteredSpanCut):  # nothing excluded yet: what it read, as segments
            current, done = _as_handed_out(current, done, layout), 0
        return Segments(), current.handed_after(done)

    def same_place(self, found: Where, place: Where) -> bool:
        """The segments place it: a stored leg's cursor is rebuilt from them without the gone positions, which
        the cuts count again."""
        return (found.epoch, found.segments) == (place.epoch, place.segments)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_INT


def _left(n: int, segments: list[list[int]], *, folds: bool) -> int:
    """Positions the epoch's segments leave. A fold (any number of resizes: ``spans.py``) only in a version 5
    state: in an older one its pair is a world size 0, refused as such."""
    if folds:
        return _spans.remaining(n, segments)
    built = _spans.check_segments(n, segments)
    return built[-1].remaining() if built else n


def _as_handed_out(current: Cut, done: int, layout: Layout) -> FilteredSpanCut:
    """``current`` (the rest of the epoch, nothing excluded yet, ``done`` samples per rank read) as an exclusion
    re-deal's starting point: the cut whose ``handed_after(0)`` is what the epoch handed out."""
    assert isinstance(current, SpanCut)
    _, read = current.after(done)  # what it read, as segments (a fixed global batch's position is one segment
    handed = Handed(current.first_world_size, Exclusion.empty(layout.n))  # of its parts)
    return FilteredSpanCut(layout.n, handed, np.zeros(0, np.int64), read, layout.world_size, layout.batch_size,
                           layout.drop_last)


DEAL = SpanDeal()
GRIDDED = SpanDeal(follows_grid=True)
