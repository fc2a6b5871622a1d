"""A *cut*: the rest of one epoch as a deal gives it to the current world.

Every deal answers the same few questions through a cut, so the loader, the history and ``which``
never ask which deal they read: ``StridedCut`` (``plan.py``), ``SpanCut`` and ``GlobalBatchCut``
(``spans.py``, ``global_batch.py``), and the same two with samples excluded (``FilteredStridedCut``
in ``exclusion.py``, ``FilteredSpanCut`` in ``spanskips.py``), and ``BucketCut`` (``buckets.py``, whose
cuts need the epoch and the keys: the loader hands them to the history). Positions are positions of the
epoch's global stream; ``t`` counts a rank's samples from the cut's start.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class Cut(Protocol):
    """The rest of an epoch dealt to ``world_size`` ranks."""

    name: str  # the deal: "strided" or "spans"

    @property
    def world_size(self) -> int:
        """Ranks reading this cut."""

    @property
    def first_world_size(self) -> int:
        """The world size the epoch began on (a ``spans`` order lays its blocks along its stretches)."""

    def samples_per_rank(self) -> int:
        """Samples every rank still reads, tail padding included (the same on every rank)."""

    def real_samples(self, rank: int) -> int:
        """Of ``rank``'s samples, how many are not tail padding."""

    def rank_positions(self, rank: int, start: int, stop: int) -> np.ndarray:
        """Epoch positions of ``rank``'s samples ``start`` to ``stop`` (t counted from the cut's start)."""

    def after(self, received: int) -> tuple[int, list[list[int]]]:
        """(cursor, segments) once every rank has received ``received`` more samples."""
