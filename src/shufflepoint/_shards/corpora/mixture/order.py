"""The ``mixture`` order (version 1) of a ``Mixture`` without a schedule, and what every mixture order reads
of its mixture (``MixedSources``), the scheduled one (``scheduled_mixture.py``) included.

How a position becomes (source, row of that source's stream) is told in ``mixture.py``; here it is done.
A mixture index is ``pass * rows + offset[s] + row`` (pass 0 but for ``Packed`` sources, whose pass is
their own ``packed`` epoch): ``encode`` and ``decode`` are that arithmetic, both ways.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import numpy as np

from shufflepoint._core.capabilities import ShardedCorpus
from shufflepoint._core.schedule import Schedule
from shufflepoint._errors import Refused, refusal
from shufflepoint._order import Order, check_int
from shufflepoint._order.blocks import BlockOrder, _sub_seed, checked_positions
from shufflepoint._order.distinct import distinct
from shufflepoint._order.feistel import FeistelOrder
from shufflepoint._shards.corpora.mixture.sources import is_packed

NAME = "mixture"
VERSION = 1
_SOURCE_TAG, _WINDOW_TAG = 0x4D495853, 0x57494E44
_MAX_STREAM = 2**62  # source stream positions stay int64


class MixedSources(Protocol):
    """What a mixture order reads of its ``Mixture``: its sources, their lengths, an epoch's length and
    counts, and its schedule (``None`` without one)."""

    sources: list[Any]
    lengths: list[int]
    counts: list[int]
    samples_per_epoch: int
    schedule: Schedule | None

    def schedule_on_grid(self, grid: int) -> Schedule:
        """The schedule with its phases on the edges of global batches of ``grid`` rows."""
        ...

    def live_starts(self, grid: int | None) -> list[int]:
        """Where the live phases start, sorted, as an order on ``grid`` places them."""
        ...

    def known_schedule(self, phases: int, grid: int | None) -> Schedule:
        """The schedule's first ``phases`` phases on ``grid``, counted by their chains of floors."""
        ...


def offsets(lengths: list[int]) -> np.ndarray:
    """Where each source starts among the sources end to end, and (last) their total rows."""
    found: np.ndarray = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    return found


def decode(starts: np.ndarray, lengths: list[int], flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(source, index into that source) of mixture indices: ``pass * rows + offset[s] + row`` is
    source s's index ``pass * len(s) + row``. ``starts`` is ``offsets(lengths)``."""
    passes, local = np.divmod(flat, starts[-1])
    source = np.searchsorted(starts, local, side="right") - 1
    sizes = np.asarray(lengths, dtype=np.int64)
    return source, passes * sizes[source] + local - starts[source]


def encode(starts: np.ndarray, lengths: list[int], source: int, source_indices: np.ndarray) -> np.ndarray:
    """Mixture indices of these indices into source ``source`` (``decode``'s inverse)."""
    passes, rows = np.divmod(source_indices, lengths[source])
    found: np.ndarray = passes * starts[-1] + starts[source] + rows
    return found


def largest(counts: list[int]) -> int:
    """The source with the most positions per epoch (the first of equals): it takes each window's rest."""
    return max(range(len(counts)), key=lambda s: (counts[s], -s))


class MixtureOrder:
    """The ``mixture`` order of one (seed, epoch): positions -> indices into the concatenated sources."""

    name = NAME
    version = VERSION

    def __init__(self, mixture: MixedSources, seed: int, epoch: int, shuffle_block: int) -> None:
        self._read_mixture(mixture, seed, epoch)
        self._block = check_int("shuffle_block", shuffle_block, 1, _MAX_STREAM)
        self._windows = max(1, self.n // self._block)  # the last window takes the remainder
        sources = len(mixture.counts)
        smallest_window = min(self._block, self.n)
        if sources > 1 and smallest_window * mixture.counts[self._largest] // self.n < sources - 1:
            # LIMIT(mixture-block-too-small): docs/shards.md#limits
            least = math.ceil((sources - 1) * self.n / mixture.counts[self._largest])
            raise ValueError(refusal("shuffle_block", shuffle_block, f"at least {least}", f"pass shuffle_block={least} "
                                     "or more", why=f"each window must hold every one of the {sources} sources"))
        passes = max((epoch + 1) * c // n + 1 for c, n in zip(mixture.counts, mixture.lengths, strict=True))
        if (epoch + 1) * max(mixture.counts) >= _MAX_STREAM or self._packed and passes * self._rows >= _MAX_STREAM:
            # LIMIT(mixture-last-epoch): docs/shards.md#limits
            raise Refused("epoch", epoch, "an epoch whose stream positions stay below 2**62",
                          "read an earlier epoch (set_epoch), or a larger dataset per epoch")
        self._bind_sources()

    def _read_mixture(self, mixture: MixedSources, seed: int, epoch: int) -> None:
        """Keep what the order reads of its mixture: a few integers and the sources' offsets (O(sources))."""
        self.n = mixture.samples_per_epoch
        self._mixture, self.seed, self.epoch = mixture, seed, epoch
        self._offsets = offsets(mixture.lengths)
        self._rows = int(self._offsets[-1])
        self._packed = is_packed(mixture.sources[0])  # then every source is Packed (check_packed)
        self._largest = largest(mixture.counts)

    def _bind_sources(self) -> None:
        """Start the cache of the sources' own orders; each Packed source is bound to its (seed,
        shuffle_block) now, before workers copy it."""
        self._source_orders: dict[tuple[int, int], Order] = {}
        if self._packed:
            for s in range(len(self._mixture.sources)):
                self._source_order(s, 0)

    def _quotas(self, x: int) -> list[int]:
        """c_s(x): how many of the first x positions belong to each source."""
        counts, largest = self._mixture.counts, self._largest
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
            rows = dataset.shard_rows if isinstance(dataset, ShardedCorpus) else None
            if self._packed:  # its own packed epoch `passes`: indices passes * len + row
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
        return encode(self._offsets, self._mixture.lengths, s, found)
