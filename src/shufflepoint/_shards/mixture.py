"""``shufflepoint.Mixture``: several corpora mixed by weight, with an order that is still a pure function.

An epoch of the mixture has ``samples_per_epoch`` positions; source s owns exactly ``count[s]`` of
them (its weight's share, by largest remainder). The source of a position, and which of the
source's samples it is, are arithmetic on (seed, epoch, position), so a resume is a seek, across
epoch boundaries too, and no world size enters it:

1. The epoch is cut into windows of about ``shuffle_block`` positions. Window k gives source s
   the slots between its cumulative quotas ``c_s(kB)`` and ``c_s((k+1)B)``, where
   ``c_s(x) = floor(x * count[s] / L)`` for every source but the largest, which takes the rest;
   the quotas only grow, because each window holds at least ``S - 1`` slots of the largest source
   (checked). The slots of a window are shuffled (a keyed Feistel permutation per window).
2. The t-th slot of source s in epoch e is position ``q = e * count[s] + t`` of the source's own
   endless stream: pass ``q // len(s)``, row ``q % len(s)`` of that pass's order (the ``blocks``
   order for a sharded source, ``feistel`` for any other map-style dataset), keyed per source and
   per pass. A source smaller than its share repeats, each pass in a new order; a larger one is
   covered across mixture epochs before any of its samples repeats: the case a mixture resumed
   past one epoch gets wrong elsewhere (MosaicML Streaming #869). A ``Packed`` source's pass p is
   its own ``packed`` epoch p, so its stream position q is exactly its index q.

With ``schedule=`` the weights follow the run's position instead of a count per epoch (order
version 2, ``scheduled_mixture.py``); everything below 2. is the same.

The loader sees ``len(mixture) == samples_per_epoch`` and dataset indices into the concatenation
of the sources (``mixture[i]`` is row ``i - offset[s]`` of source s), so a mixed epoch keeps the
locality of each source's own order.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch.utils.data

from shufflepoint._core.schedule import Schedule, changed_phase, unweighted
from shufflepoint._order import Order, check_int
from shufflepoint._order.distinct import distinct
from shufflepoint._order.feistel import FeistelOrder
from shufflepoint._shards.batch import Batch, Columnar, Rows, checked_indices, gather
from shufflepoint._shards.blocks import BlockOrder, _sub_seed, checked_positions
from shufflepoint._shards.locate import mixture_location
from shufflepoint._shards.mixture_sources import check_sources, is_packed

NAME = "mixture"
VERSION = 1
FINGERPRINT_PREFIX = "mixture:"
_SOURCE_TAG, _WINDOW_TAG = 0x4D495853, 0x57494E44
_MAX_STREAM = 2**62  # source stream positions stay int64
SCHEDULED = 2  # the order's version with a schedule (scheduled_mixture.py)


def _apportion(weights: list[float], total: int) -> list[int]:
    """Integers proportional to ``weights`` that sum to ``total`` (largest remainder, ties by index)."""
    scale = sum(weights)
    exact = [w * total / scale for w in weights]
    counts = [math.floor(e) for e in exact]
    by_remainder = sorted(range(len(weights)), key=lambda s: (-(exact[s] - counts[s]), s))
    for s in by_remainder[: total - sum(counts)]:
        counts[s] += 1
    return counts


def _read_source(dataset: Any, rows: np.ndarray) -> Batch:
    read_batch = getattr(dataset, "read_batch", None)
    if callable(read_batch):
        found: Batch = read_batch(rows)
        return found
    getitems = getattr(dataset, "__getitems__", None)
    if callable(getitems):
        return Rows(list(getitems(rows.tolist())))
    return Rows([dataset[row] for row in rows.tolist()])


class Mixture(torch.utils.data.Dataset[Any]):
    """Several datasets mixed by weight: ``Mixture([(web, 0.7), (code, 0.3)])``.

    ``samples_per_epoch`` (default: the sources' total length) is the length of a mixed epoch; each
    source gets its weight's share of it, repeating when it is smaller than that share. Use it with
    ``shufflepoint.DataLoader``, which then takes the ``mixture`` order; ``shuffle_block`` is the
    window and block size of that order.

    Packed sources (``Mixture([(Packed(web, L), 0.7), (Packed(code, L), 0.3)])``, one ``seq_len``)
    mix rows of equal token counts, so the weights are shares of tokens; each source's pass p is its
    own ``packed`` epoch p (keyed by the loader's seed per source, its blocks of ``shuffle_block``
    documents), so its rows come in its own packing order and resume with it.

    >>> mixture = Mixture([(list(range(10)), 3), (list(range(100, 104)), 1)], samples_per_epoch=8)
    >>> mixture.counts
    [6, 2]

    ``schedule=[(start, weights), ...]`` (the sources then given alone, without weights) changes the
    weights as training goes: ``start`` counts the samples consumed since the run began, all ranks
    together (tokens for ``Packed`` sources), the first phase starting at 0; ``(start, weights, k)`` ramps
    linearly to the next phase's weights in k steps. It needs the ``strided``
    deal (the loader's default for it). ``counts`` is then the first epoch's. See docs/shards.md.

    >>> annealed = Mixture([list(range(10)), list(range(100, 104))], samples_per_epoch=8,
    ...                    schedule=[(0, [3, 1]), (6, [0, 1])])
    >>> annealed.counts
    [5, 3]
    """

    order_name = NAME
    order_version = VERSION

    def __init__(self, sources: Sequence[Any], *, samples_per_epoch: int | None = None,
                 schedule: Sequence[tuple[int, Sequence[float]] | tuple[int, Sequence[float], int]] | None = None,
                 ) -> None:
        pairs = check_sources(sources if schedule is None else [(dataset, 1.0) for dataset in unweighted(sources)])
        self.sources = [dataset for dataset, _ in pairs]
        self.weights = [weight for _, weight in pairs]
        self.lengths = [len(dataset) for dataset in self.sources]
        self._offsets = np.concatenate(([0], np.cumsum(self.lengths))).astype(np.int64)
        total = int(self._offsets[-1])
        length = total if samples_per_epoch is None else check_int("samples_per_epoch", samples_per_epoch,
                                                                     1, _MAX_STREAM)
        self.samples_per_epoch = length
        self._packed = is_packed(self.sources[0])
        self.schedule = None if schedule is None else Schedule(
            schedule, len(self.sources), unit=self.sources[0].seq_len if self._packed else 1)
        if self.schedule is not None:
            self.order_version = SCHEDULED
            self.weights = [float(share) for share in self.schedule.shares[0]]
        self.counts = _apportion(self.weights, length) if self.schedule is None else self.schedule.counts(length)
        empty = [s for s, count in enumerate(self.counts) if count == 0]
        if empty and self.schedule is None:
            raise ValueError(f"weights: source {empty[0]} gets 0 of the {length} samples per epoch; raise its "
                             "weight or samples_per_epoch")
        self._largest = max(range(len(self.counts)), key=lambda s: (self.counts[s], -s))
        self._index_limit = _MAX_STREAM if self._packed else total  # Packed: pass * rows + offset + row

    def __len__(self) -> int:
        return self.samples_per_epoch

    @property
    def rows(self) -> int:
        """The sources' rows, end to end: the range of the indices the mixture order yields (of
        ``index % rows`` for Packed sources: the index is ``pass * rows + offset[s] + row``)."""
        return int(self._offsets[-1])

    def __getitem__(self, index: int) -> Any:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < self._index_limit:
            raise IndexError(f"Mixture index: found {index!r}, expected an int in [0, {self._index_limit})")
        source, row = self.source_of(int(index))
        return self.sources[source][row]

    def _decode(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(source, index into that source) of mixture indices: ``pass * rows + offset[s] + row`` is
        source s's index ``pass * len(s) + row`` (pass 0 but for Packed sources)."""
        passes, local = np.divmod(flat, self.rows)
        source = np.searchsorted(self._offsets, local, side="right") - 1
        lengths = np.asarray(self.lengths, dtype=np.int64)
        return source, passes * lengths[source] + local - self._offsets[source]

    def _encode(self, source: int, source_indices: np.ndarray) -> np.ndarray:
        """Mixture indices of these indices into source ``source`` (``_decode``'s inverse)."""
        passes, rows = np.divmod(source_indices, self.lengths[source])
        found: np.ndarray = passes * self.rows + self._offsets[source] + rows
        return found

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        """``[self[i] for i in indices]``, each source's samples read as one batch."""
        return self.read_batch(indices).samples()

    def read_batch(self, indices: Sequence[int] | np.ndarray) -> Batch:
        """The samples at ``indices``, in that order, read source by source: a source's own
        ``read_batch`` or ``__getitems__`` when it has one, else one ``[i]`` at a time."""
        source, within = self._decode(checked_indices("Mixture", indices, self._index_limit))
        return gather(source, lambda s, where: _read_source(self.sources[s], within[where]))

    def columnar(self) -> Columnar:
        """This mixture with batches kept as read, for ``shufflepoint.collate`` (see ``Columnar``)."""
        return Columnar(self)

    def source_of(self, index: int) -> tuple[int, int]:
        """(source, index into that source) of a mixture index."""
        source, within = self._decode(np.array([index], dtype=np.int64))
        return int(source[0]), int(within[0])

    def locate(self, index: int) -> dict[str, Any]:
        """Where mixture index ``index`` lives: ``{"index", "source", "source_index"}``, plus the
        source's own ``locate`` under ``"where"`` when it has one (``Shards``, ``Packed``)."""
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < self._index_limit:
            raise IndexError(f"Mixture index: found {index!r}, expected an int in [0, {self._index_limit})")
        source, within = self.source_of(int(index))
        return mixture_location(int(index), source, within, self.sources[source])

    @property
    def fingerprint(self) -> str:
        """The sources (their own fingerprints, else their lengths), weights and epoch length."""
        return self._fingerprint("fingerprint")

    @property
    def legacy_fingerprint(self) -> str:
        """As shufflepoint 0.2 computed it, from its sources' 0.2 fingerprints (``Shards.legacy_fingerprint``)."""
        return self._fingerprint("legacy_fingerprint")

    def _fingerprint(self, attribute: str) -> str:
        parts = [getattr(d, attribute, None) or getattr(d, "fingerprint", None) or f"len={n}"
                 for d, n in zip(self.sources, self.lengths, strict=True)]
        if self.schedule is None:
            text = json.dumps({"sources": parts, "counts": self.counts})
            return FINGERPRINT_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:32]
        # the phases are the state's own field (``phases``), so that a resume may append phases (phase_changed)
        text = json.dumps({"sources": parts, "samples_per_epoch": self.samples_per_epoch, "scheduled": True})
        return FINGERPRINT_PREFIX + hashlib.sha256(text.encode()).hexdigest()[:32]

    @property
    def phases(self) -> tuple[tuple[int, str], ...]:
        """The schedule's phases as ``(start, hash)`` pairs, recorded in a state (``()`` without a schedule)."""
        return tuple(self.schedule.identities()) if self.schedule is not None else ()

    def explain_fingerprint(self, saved: str) -> str:
        return ("the mixture changed (a source, its weight or samples_per_epoch); each source's own fingerprint "
                "is part of the mixture's")

    def explain_order_version(self, saved: int) -> str | None:
        """Why a state of another order version is refused, where it is this mixture's other kind."""
        if {saved, self.order_version} != {VERSION, SCHEDULED}:
            return None
        was, now = ("with", "without") if saved == SCHEDULED else ("without", "with")
        return (f"The state was written by a Mixture {was} a schedule, and this one is built {now}: build the "
                "Mixture as the run did (its sources and their weights or schedule) to resume it, or start fresh.")

    def phase_changed(self, saved: list[list[Any]], epoch: int, cursor: int, grid: int | None,
                      shuffle_block: int) -> int | None:
        """The first of a state's ``saved`` phases this schedule changed before the end of the window a state at
        (epoch, cursor) had reached (the global batch of ``grid`` rows, else the ``shuffle_block`` window), or
        None: the same schedule there, phases appended after it."""
        return changed_phase(saved, self.phases, self.samples_per_epoch, shuffle_block, epoch, cursor, grid)

    def check_global_batch(self, global_batch: int, grid: int) -> None:
        """Warn when global batches of ``global_batch`` rows are not whole windows of the run's ``grid``."""
        if self.schedule is not None:
            from shufflepoint._shards.scheduled_mixture import check_global_batch

            check_global_batch(grid, global_batch)

    def schedule_on_grid(self, grid: int) -> Schedule:
        """The schedule with its phases on the edges of global batches of ``grid`` rows (kept per grid)."""
        assert self.schedule is not None
        kept = self.__dict__.setdefault("_on_grid", {})
        if grid not in kept:
            kept[grid] = self.schedule.on_grid(grid, self.samples_per_epoch)
        found: Schedule = kept[grid]
        return found

    @property
    def required_deal(self) -> str | None:
        """The deal this dataset needs, if any: ``strided`` with a schedule (a phase's start is then the
        samples consumed; ``spans`` reads a stretch of the epoch per rank)."""
        return "strided" if self.schedule is not None else None

    def epoch_order(self, seed: int, epoch: int, shuffle_block: int, grid: int | None = None) -> MixtureOrder:
        """The order of one epoch; ``grid`` (a loader's global batch) places a schedule's phases and shares on
        its global batches (``scheduled_mixture.py``); without a schedule it changes nothing."""
        if self.schedule is not None:
            from shufflepoint._shards.scheduled_mixture import ScheduledMixtureOrder  # it subclasses MixtureOrder

            return ScheduledMixtureOrder(self, seed, epoch, shuffle_block, grid)
        return MixtureOrder(self, seed, epoch, shuffle_block)

    def prefetch(self, indices: Sequence[int] | np.ndarray) -> None:
        """Pass upcoming indices on to the sources that read ahead (``Shards``)."""
        source, within = self._decode(np.asarray(indices, dtype=np.int64))
        for s in distinct(source).tolist():
            hook = getattr(self.sources[s], "prefetch", None)
            if callable(hook):
                hook(within[source == s])


class MixtureOrder:
    """The ``mixture`` order of one (seed, epoch): positions -> indices into the concatenated sources."""

    name = NAME
    version = VERSION

    def __init__(self, mixture: Mixture, seed: int, epoch: int, shuffle_block: int) -> None:
        self.n = mixture.samples_per_epoch
        self._mixture, self.seed, self.epoch = mixture, seed, epoch
        self._block = check_int("shuffle_block", shuffle_block, 1, _MAX_STREAM)
        self._windows = max(1, self.n // self._block)  # the last window takes the remainder
        sources = len(mixture.counts)
        smallest_window = min(self._block, self.n)
        if sources > 1 and smallest_window * mixture.counts[mixture._largest] // self.n < sources - 1:
            raise ValueError(f"shuffle_block: found {shuffle_block}, too small to mix {sources} sources with "
                             f"these weights; use at least "
                             f"{math.ceil((sources - 1) * self.n / mixture.counts[mixture._largest])}")
        passes = max((epoch + 1) * c // n + 1 for c, n in zip(mixture.counts, mixture.lengths, strict=True))
        if (epoch + 1) * max(mixture.counts) >= _MAX_STREAM or mixture._packed and passes * mixture.rows >= _MAX_STREAM:
            raise ValueError(f"epoch: found {epoch}, too far for this mixture (stream positions pass 2**62)")
        self._bind_sources()

    def _bind_sources(self) -> None:
        """Start the cache of the sources' own orders; each Packed source is bound to its (seed,
        shuffle_block) now, before workers copy it."""
        self._source_orders: dict[tuple[int, int], Order] = {}
        if self._mixture._packed:
            for s in range(len(self._mixture.sources)):
                self._source_order(s, 0)

    def _quotas(self, x: int) -> list[int]:
        """c_s(x): how many of the first x positions belong to each source."""
        counts, largest = self._mixture.counts, self._mixture._largest
        quotas = [x * count // self.n for count in counts]
        quotas[largest] = x - (sum(quotas) - quotas[largest])
        return quotas

    def _source_order(self, source: int, passes: int) -> Order:
        key = (source, passes)
        found = self._source_orders.get(key)
        if found is None:
            if len(self._source_orders) >= 16:
                self._source_orders.pop(next(iter(self._source_orders)))
            dataset = self._mixture.sources[source]
            seed = _sub_seed(self.seed, _SOURCE_TAG, source)
            rows = getattr(dataset, "shard_rows", None)
            if self._mixture._packed:  # its own packed epoch `passes`: indices passes * len + row
                found = dataset.epoch_order(seed, passes, self._block)
            elif rows is not None:
                found = BlockOrder(rows, seed, passes, self._block)
            else:
                found = FeistelOrder(self._mixture.lengths[source], seed, passes)
            self._source_orders[key] = found
        return found

    def index(self, position: int) -> int:
        return int(self.take(np.array([position], dtype=np.int64))[0])

    def take(self, positions: np.ndarray) -> np.ndarray:
        """Indices into the concatenated sources at these epoch positions (int64, each in [0, n))."""
        positions, flat = checked_positions(positions, self.n)
        source = np.empty_like(flat)
        stream = np.empty_like(flat)
        window = np.minimum(flat // self._block, self._windows - 1)
        for k in distinct(window).tolist():
            where = window == k
            self._fill_window(k, flat[where], source, stream, where)
        return self._from_sources(source, stream).reshape(positions.shape)

    def _from_sources(self, source: np.ndarray, stream: np.ndarray) -> np.ndarray:
        """Mixture indices of (source, position in its stream) pairs, read source by source."""
        found = np.empty_like(stream)
        for s in distinct(source).tolist():
            where = source == s
            found[where] = self._from_source(s, stream[where])
        return found

    def _fill_window(self, k: int, positions: np.ndarray, source: np.ndarray, stream: np.ndarray,
                     where: np.ndarray) -> None:
        start = k * self._block
        stop = self.n if k == self._windows - 1 else start + self._block
        before, after = self._quotas(start), self._quotas(stop)
        ends = np.cumsum(np.subtract(after, before), dtype=np.int64)
        shuffled = FeistelOrder(stop - start, _sub_seed(self.seed, _WINDOW_TAG, k), self.epoch).take(
            positions - start)
        owner = np.searchsorted(ends, shuffled, side="right")
        slot_start = ends[owner] - (np.asarray(after, dtype=np.int64) - before)[owner]
        source[where] = owner
        counts = np.asarray(self._mixture.counts, dtype=np.int64)
        stream[where] = self.epoch * counts[owner] + np.asarray(before, dtype=np.int64)[owner] + (shuffled - slot_start)

    def _from_source(self, s: int, stream: np.ndarray) -> np.ndarray:
        length = self._mixture.lengths[s]
        passes, rows = np.divmod(stream, length)
        found = np.empty_like(stream)
        for p in distinct(passes).tolist():
            where = passes == p
            found[where] = self._source_order(s, p).take(rows[where])
        return self._mixture._encode(s, found)
