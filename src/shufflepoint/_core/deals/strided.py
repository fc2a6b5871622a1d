"""The ``strided`` deal (``DistributedSampler``'s): rank r reads positions r, r + W, r + 2W, ... of what is
left of the epoch. The default for a map-style dataset.

What sets it apart from the other deals, answered here for the loader, the history and the state (the
questions: ``_core/cut.py``; the arithmetic: ``plan.py`` and, with samples excluded, ``exclusion.py``):

- the consumed set is a prefix of the epoch stream, so the position is the cursor alone: the state's
  ``segments`` are ``[]`` and a history entry stores its start as the cursor;
- an exclusion skips the excluded positions after the cursor and needs nothing else: no re-deal, no ``handed``;
- its order is laid along no stretches, and a global batch holds the same samples at any world size.

Words: docs/glossary.md (strided, deal, cut, cursor).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from shufflepoint._core.cut import Cut, SkipsOf, Where
from shufflepoint._core.exclusion import FilteredStridedCut
from shufflepoint._core.plan import MAX_N, STRIDED, Layout, StridedCut
from shufflepoint._core.segments import Pairs, Segments
from shufflepoint._core.spanskips import Handed
from shufflepoint._errors import DAMAGED, Refused, field_error


class StridedDeal:
    """The ``strided`` deal (module docstring); ``DEAL`` is the one instance."""

    name = STRIDED
    stretched = False
    redeals = False
    keys_fingerprint: str | None = None

    def __repr__(self) -> str:
        return "StridedDeal()"

    def cut(self, layout: Layout, cursor: int, segments: Sequence[Sequence[int]] = (), parts: int | None = None, *,
            epoch: int = 0, handed: Handed | None = None, skips: SkipsOf | None = None) -> Cut:
        """From ``cursor`` on (a strided cut depends on no segments, parts, epoch or handed-out positions)."""
        if skips is None:
            return StridedCut(layout, cursor)
        return FilteredStridedCut(layout, cursor, skips(None))

    def segments(self, pairs: Sequence[Sequence[int]]) -> Segments:
        return Segments(pairs)

    def check_state(self, state: Mapping[str, Any]) -> None:
        if state["segments"]:
            raise field_error("segments", state["segments"], "[] under the strided deal", DAMAGED)

    def start_entry(self, cursor: int, segments: Pairs) -> int:
        return cursor

    def parse_start(self, n: int, field: str, start: object) -> tuple[int, Segments]:
        if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start <= min(n, MAX_N):
            raise Refused(f"{field} start", start, f"a cursor in [0, n={n}] (deal 'strided')", DAMAGED)
        return start, Segments()

    def epoch_layout(self, layout: Layout, whole: Layout) -> Layout:
        return whole

    def check_exclusion(self) -> None:
        """Any sample may be excluded."""

    def for_state(self, recorded: object) -> StridedDeal:
        return self

    def on_grid(self) -> StridedDeal:
        """This deal: a grid changes nothing of how it deals."""
        return self

    def handed(self, cut: Cut) -> None:
        return None

    def exclusion_start(self, current: Cut, done: int, layout: Layout, segments: Pairs,
                        handed: Handed | None) -> tuple[Pairs, Handed | None]:
        """Where it stands: the cursor goes on, skipping."""
        return segments, handed

    def same_place(self, found: Where, place: Where) -> bool:
        return (found.epoch, found.cursor, found.segments) == (place.epoch, place.cursor, place.segments)


DEAL = StridedDeal()
