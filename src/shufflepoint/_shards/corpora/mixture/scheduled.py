"""The ``mixture`` order (version 2) of a ``Mixture`` with a schedule (``_core/schedule.py``).

Version 1 gives each source a fixed count per epoch. Under a schedule the counts follow the run's
position ``g = epoch * samples_per_epoch + position`` instead, and the windows of ``shuffle_block``
positions are also cut where a phase starts, so no window mixes two phases::

    samples_per_epoch 10, shuffle_block 4, schedule [(0, [3, 1]), (14, [1, 1])]
    epoch 1 (g = 10..19):  window 0 = g 10..13 (phase 0) | window 1 = g 14..17 (phase 1) | window 2 = g 18, 19
    piece (window k, phase i) holds counts(end) - counts(start) slots of each source, shuffled by a keyed
    Feistel permutation of (seed, k, i, epoch); source s's slots read its stream rows counts_s(start) on.

A ``DataLoader`` reads it on a grid: its global batch G (world size x batch size when the run began,
kept in the fingerprint as ``:grid=G`` and adopted by every resume). The windows are then the global
batches (positions ``kG .. kG + G - 1`` of an epoch, the last one short), and each phase starts at the
first edge at or after the start it names (``Schedule.on_grid``), so every global batch follows the
phase of its first sample and holds counts(end) - counts(start) of each source: within one row of
weight x G for two sources, over any run of global batches of one phase, within two for more
(``_core/schedule.py``, ``GridSchedule``). A ``ResumableSampler`` (its
batches unknown) reads the ``shuffle_block`` windows above, phases starting at the row they name.

Position -> (source, row of its stream) is then one binary search over the phase starts and one per
window, whatever the epoch. Under the ``strided`` deal ``g`` is what training consumed; a phase
appended by a resume after the window it reached changes nothing before it. Under ``spans`` a scheduled
mixture is read in the order laid along the deal's stretches instead (version 6, ``mixture_stretches.py``),
whose global batches are window k of every rank's stretch.

Words: docs/glossary.md (schedule, phase, grid, window, slot).
"""

from __future__ import annotations

import numpy as np

from shufflepoint._core.schedule import Schedule, windows
from shufflepoint._errors import Plain, Refused, refusal, warn_user
from shufflepoint._order import check_int
from shufflepoint._order.blocks import _M64, checked_positions
from shufflepoint._order.distinct import distinct_inverse
from shufflepoint._order.feistel_many import sub_seeds, take_many
from shufflepoint._shards.corpora.mixture.order import _MAX_STREAM, MixedSources, MixtureOrder

VERSION = 2
_PIECE_TAG, _PHASE_TAG = 0x50494543, 0x50484153


class ScheduledMixtureOrder(MixtureOrder):
    """The scheduled ``mixture`` order of one (seed, epoch): positions -> indices into the sources."""

    version = VERSION

    def __init__(self, mixture: MixedSources, seed: int, epoch: int, shuffle_block: int,
                 grid: int | None = None) -> None:
        self._read_mixture(mixture, seed, epoch)
        self._block = check_int("shuffle_block", shuffle_block, 1, _MAX_STREAM)  # the sources' blocks
        if mixture.schedule is None:
            raise ValueError(refusal("mixture", Plain("a Mixture without a schedule"), "a scheduled Mixture",
                                     "use MixtureOrder for it"))
        self._schedule: Schedule = mixture.schedule
        self._window = self._block
        if grid is not None:  # a loader's: windows are its global batches, phases start on their edges
            self._window = check_int("grid", grid, 1, _MAX_STREAM)
            self._schedule = mixture.schedule_on_grid(self._window)
        self._windows = windows(self.n, self._window, grid is not None)
        far = (epoch + 1) * self.n >= _MAX_STREAM
        if not far and self._packed:  # a Packed source's index is pass * rows + row
            ends = self._schedule.counts((epoch + 1) * self.n)
            far = max(c // n + 1 for c, n in zip(ends, mixture.lengths, strict=True)) * self._rows >= _MAX_STREAM
        if far:
            # LIMIT(scheduled-mixture-last-epoch): docs/shards.md#limits
            raise Refused("epoch", epoch, "an epoch whose stream positions stay below 2**62",
                          "read an earlier epoch (set_epoch), or a larger dataset per epoch")
        self._origin = epoch * self.n
        self._starts = np.asarray(self._schedule.starts, dtype=np.int64)
        self._bind_sources()

    def take(self, positions: np.ndarray) -> np.ndarray:
        """Indices into the concatenated sources at these epoch positions (int64). Every piece (window,
        phase) the positions fall in is computed at once, in arrays (``feistel_many``): a chunk may span
        thousands of small global batches."""
        positions, flat = checked_positions(positions, self.n)
        window = np.minimum(flat // self._window, self._windows - 1)
        phase = np.searchsorted(self._starts, self._origin + flat, side="right") - 1
        pieces, at = distinct_inverse(window * len(self._starts) + phase)
        k, i = np.divmod(pieces, len(self._starts))
        start = k * self._window
        stop = np.where(k == self._windows - 1, self.n, start + self._window)
        following = np.append(self._starts[1:], np.int64(_MAX_STREAM))
        a = np.maximum(self._origin + start, self._starts[i])
        b = np.minimum(self._origin + stop, following[i])
        before = self._schedule.counts_many(a)
        sizes = self._schedule.counts_many(b) - before
        ends = np.cumsum(sizes, axis=1)
        keys = sub_seeds(sub_seeds(self.seed & _M64, _PIECE_TAG, k.astype(np.uint64)), _PHASE_TAG, i.astype(np.uint64))
        shuffled = take_many(self._origin + flat - a[at], at, b - a, keys, self.epoch)
        source = (shuffled[:, None] >= ends[at]).sum(axis=1)
        stream = before[at, source] + shuffled - (ends[at, source] - sizes[at, source])
        return self._from_sources(source, stream).reshape(positions.shape)


def check_global_batch(grid: int, global_batch: int) -> None:
    """Warn when a loader reads on in global batches that are not whole windows of the run's grid (its first
    global batch, which the schedule's phases and shares follow): after a resize to another global batch,
    or a ``set_batch_size`` that is not a multiple of it."""
    if global_batch % grid:
        # LIMIT(shares-inside-a-window): docs/shards.md#limits
        warn_user(
            f"global batch: found {global_batch} rows (world size x batch size), but this run's schedule follows "
            f"its global batch of {grid} (its phases start on those edges, its shares hold per {grid} rows): a "
            f"global batch of {global_batch} may straddle two phases and holds its shares only to within a few "
            f"rows (under 'spans', 1-3 on a few ranks, 5-7 on hundreds). Every row is still served once, "
            f"and each source's passes stay whole. Use a multiple of {grid} to keep both")
