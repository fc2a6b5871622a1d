"""A *deal* and its *cuts*: the questions every deal answers, so that no caller asks which deal it reads.

A *deal* says who reads which positions of an epoch; a *cut* is the rest of one epoch as a deal gives it
to the current world. The loader's position model (``_loading/position.py``), the run's history
(``history.py``), the state's checks (``state_fields.py``) and ``which`` ask a deal and its cuts these
questions and nothing else: one module per deal answers them (``_core/deals/``: ``strided.py``,
``spans.py``, ``buckets.py``), and ``_core/deals/__init__.py`` finds a deal by the name a state records.

The cuts (the arithmetic): ``StridedCut`` (``plan.py``), ``SpanCut`` and ``GlobalBatchCut`` (``spans.py``,
``global_batch.py``), the same two with samples excluded (``FilteredStridedCut`` in ``exclusion.py``,
``FilteredSpanCut`` in ``spanskips.py``), and ``BucketCut`` (``buckets.py``). Positions are positions of the
epoch's global stream; ``t`` counts a rank's samples from the cut's start.

Words: docs/glossary.md (deal, cut, place, cursor, tail).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from shufflepoint._core.exclusion import Skips
from shufflepoint._core.plan import Layout
from shufflepoint._core.segments import Pairs
from shufflepoint._core.spanskips import Handed

# The excluded positions of the cut's epoch, in the epoch's order laid along the stretches of the given world size
# (None: not laid), built once per epoch by the loader (``_loading/excluded.py``).
SkipsOf = Callable[[int | None], Skips]


class Cut(Protocol):
    """The rest of an epoch dealt to ``world_size`` ranks."""

    @property
    def world_size(self) -> int:
        """Ranks reading this cut."""

    @property
    def stretches(self) -> int | None:
        """The world size whose stretches the epoch's order is laid along (a corpus's order under ``spans``:
        the epoch's first world), or None where the deal reads no stretches."""

    def samples_per_rank(self) -> int:
        """Samples every rank still reads, tail padding included (the same on every rank)."""

    def real_samples(self, rank: int) -> int:
        """Of ``rank``'s samples, how many are not tail padding."""

    def rank_positions(self, rank: int, start: int, stop: int) -> np.ndarray:
        """Epoch positions of ``rank``'s samples ``start`` to ``stop`` (t counted from the cut's start)."""

    def world_positions(self, start: int, stop: int) -> np.ndarray:
        """``rank_positions(rank, start, stop)`` of every rank, one row a rank (``which``)."""

    def after(self, received: int) -> tuple[int, Pairs]:
        """(cursor, segments) once every rank has received ``received`` more samples."""


def rank_rows(cut: Cut, start: int, stop: int) -> np.ndarray:
    """``world_positions`` asked rank by rank: for a cut with no faster way to place its whole world."""
    rows = [cut.rank_positions(rank, start, stop) for rank in range(cut.world_size)]
    return np.stack(rows) if rows else np.zeros((0, max(stop - start, 0)), dtype=np.int64)


class Where(Protocol):
    """A place in a run (``history.Place``): an epoch, its cursor and the deal's segments."""

    @property
    def epoch(self) -> int: ...

    @property
    def cursor(self) -> int: ...

    @property
    def segments(self) -> Pairs: ...


class Deal(Protocol):
    """Who reads which positions of an epoch: everything that differs between the deals (module docstring)."""

    name: str  # in the state's ``deal``
    stretched: bool  # each rank reads a stretch of the epoch: a corpus's order is laid along the first world's
    redeals: bool  # an exclusion re-deals the rest of its epoch from what it handed out (the state's ``handed``)
    keys_fingerprint: str | None  # the bucket keys' (the state's ``buckets``); None for a deal without keys

    def cut(self, layout: Layout, cursor: int, segments: Sequence[Sequence[int]] = (), parts: int | None = None, *,
            epoch: int = 0, handed: Handed | None = None, skips: SkipsOf | None = None) -> Cut:
        """The rest of ``epoch`` at (cursor, segments) for ``layout``'s world. ``parts``: the world size whose
        stretches are the canonical parts at this global batch (``History.parts``; None: this world's own);
        ``skips``: the excluded positions to skip (None: nothing excluded); ``handed``: what the epoch handed
        out before its latest exclusion (a deal that ``redeals``)."""

    def segments(self, pairs: Sequence[Sequence[int]]) -> Pairs:
        """The deal's own kind of segments, from a state's ``[[a, b], ...]`` (checked by ``check_state``)."""

    def check_state(self, state: Mapping[str, Any]) -> None:
        """A state's ``segments`` and ``cursor`` agree under this deal; StateError naming the field."""

    def start_entry(self, cursor: int, segments: Pairs) -> int | list[list[int]]:
        """How a history entry stores a leg's start (``[step, W, B, D, epoch, start]``)."""

    def parse_start(self, n: int, field: str, start: object) -> tuple[int, Pairs]:
        """A stored history start as (cursor, segments); Refused naming ``field`` when malformed."""

    def epoch_layout(self, layout: Layout, whole: Layout) -> Layout:
        """A whole epoch's layout for ``len(loader)``: ``whole`` (the excluded samples taken out), or the deal's own."""

    def check_exclusion(self) -> None:
        """ValueError where this deal cannot skip samples."""

    def for_state(self, recorded: object) -> Deal:
        """The deal a state recording the deal ``recorded`` is read on with: this one, or an earlier default."""

    def on_grid(self) -> Deal:
        """This deal for a run whose global batches follow a grid (a scheduled ``Mixture``'s, read by a loader):
        under ``spans`` an epoch keeps its parts across a change of global batch (``global_batch.grid_parts``)."""

    def handed(self, cut: Cut) -> Handed | None:
        """What ``cut``'s epoch handed out before its latest exclusion (a deal that ``redeals``), else None."""

    def exclusion_start(self, current: Cut, done: int, layout: Layout, segments: Pairs,
                        handed: Handed | None) -> tuple[Pairs, Handed | None]:
        """(segments, handed) the rest of the epoch reads on from once samples are excluded after ``done`` samples
        per rank of ``current`` (``segments``, ``handed``: where it stands)."""

    def same_place(self, found: Where, place: Where) -> bool:
        """Whether a history arrives at ``place`` (with samples excluded: ``_loading/excluded.py``)."""
