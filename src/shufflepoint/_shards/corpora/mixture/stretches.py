"""The ``mixture`` order under the ``spans`` deal (versions 3 and 4): laid along the deal's stretches, so that
a node reads its share of every source, and the same share every epoch.

Under ``spans`` rank r of the epoch's first world reads its *part*, positions ``[a_r, a_r + n_r)`` of the
epoch (``spans.py``'s stretches of W parts). Each source's rows are cut into W stretches, along a layout
that depends on the seed only (``StretchBlockOrder`` for a sharded source, a fixed keyed permutation for
any other, a ``Packed`` source's rows of each pass, its documents laid along the parts: ``packed_layout``),
stretch r in proportion to part r's share of the source's
slots per epoch (without a schedule; with one, of the epoch's positions), and part r draws source s only
from its stretch r of s: its own stream of s, pass after pass, each pass in a new order inside the
stretch (a source read once an epoch is then read once, every row, by the parts together). A node
then reads about 1/nodes of every source, the same rows every epoch on an unchanged world, so a cache that
holds its share serves every later epoch (version 1 reads each source's stream across all the ranks, in a
new order each pass: no node keeps its shards).

Which source each position of a part holds comes from one count for the whole epoch, as in versions 1 and
2: ``C(g)``, how many of the first g run positions belong to each source (the epoch's ``counts`` by a chain
of floors, ``c(n) == counts``; or the schedule, phases on the loader's grid, counted by their chains of
floors; a phase starts on the first window edge at or after its start). A part's positions are cut into
windows of w positions (a loader's grid G: ``w = G / W``, its global batches; else ``shuffle_block // W``,
so that a phase a resume appends after the window a state reached never changes a window already dealt),
and window k of every part is one *virtual* stretch of the
epoch, the parts' pieces laid end to end (``kWw .. (k+1)Ww``: with ``w = G / W`` the global batch k). Part
r's window k holds ``C(end) - C(start)`` of its virtual piece, shuffled by a keyed Feistel permutation, so:

- every global batch holds exactly what ``C`` gives it (the parts' pieces tile it), and a schedule's phase,
  starting on a grid edge kG, starts at window k of every part: exact, and on resume (positions are fixed);
- the parts together hold exactly ``counts[s]`` of source s per epoch without a schedule;
- a part's count of source s is the sum of its pieces' counts before: a table of O(windows) per epoch
  (without a schedule each epoch is the same; with one, the epochs before are summed once per order).

The t-th slot of source s in a part is row ``q = t`` of the part's stream of s: pass ``q // len_r(s)``, row
``q % len_r(s)`` of its stretch. A part whose stretch of a source is empty (a source with fewer rows than
its share of slots) draws from the whole source instead.

Every position is one index, whatever world reads it (a resize re-deals positions, ``spans.py``). Not
kept: a part's streams restart from its counts when the next epoch begins on another world (its
stretches change), so a source's pass is then covered to within the rows the parts had left.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shufflepoint._core.capabilities import ShardedCorpus
from shufflepoint._core.schedule import Schedule
from shufflepoint._errors import Refused
from shufflepoint._order import Order, check_int
from shufflepoint._order.blocks import _M64, StretchBlockOrder, _sub_seed, checked_positions
from shufflepoint._order.distinct import distinct, distinct_inverse
from shufflepoint._order.feistel import FeistelOrder
from shufflepoint._order.feistel_many import sub_seeds, take_many
from shufflepoint._shards.corpora.mixture.order import _MAX_STREAM, _SOURCE_TAG, NAME, MixedSources, encode, offsets
from shufflepoint._shards.corpora.mixture.sources import is_packed
from shufflepoint._shards.corpora.packed.stretches import table_key

VERSION, SCHEDULED_VERSION = 3, 4
_PART_TAG, _LAYOUT_TAG, _STRETCH_TAG = 0x50415254, 0x4C415954, 0x53545245
_WINDOW_TAG = 0x57494E44
_CACHED_ORDERS = 32
_SUMMED = 1 << 16  # windows of earlier epochs a scheduled order sums exactly (_PartCounts._before)


def stretches(n: int, parts: int) -> tuple[np.ndarray, np.ndarray]:
    """(start, length) of each of ``parts`` near-equal stretches of n, the first ``n % parts`` one longer
    (``spans.py``'s formula)."""
    base, extra = divmod(n, parts)
    rank = np.arange(parts, dtype=np.int64)
    return rank * base + np.minimum(rank, extra), base + (rank < extra).astype(np.int64)


class _PartCounts:
    """How many of a part's positions before each of its window edges belong to each source (vectorised)."""

    def __init__(self, mixture: MixedSources, parts: int, window: int, schedule: Schedule | None) -> None:
        self.n, self.sources, self._parts, self._window = mixture.samples_per_epoch, len(mixture.lengths), parts, window
        self._base, self._extra = divmod(self.n, parts)
        self._scheduled = schedule is not None
        self._counts = schedule.chained() if schedule is not None else Schedule([(0, list(mixture.counts))],
                                                                               self.sources)
        self._tables: dict[tuple[int, int], np.ndarray] = {}
        self._totals: dict[tuple[int, int], np.ndarray] = {}

    def windows(self, part: int) -> int:
        return -(-(self._base + int(part < self._extra)) // self._window)

    def _pieces(self, part: int, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(virtual start, length) of part's window k: every part's windows before k, then the parts before
        it in window k, laid end to end (a full window: ``k * W * w + part * w``)."""
        w, base, extra = self._window, self._base, self._extra
        kw = k * w
        before = extra * np.minimum(base + 1, kw) + (self._parts - extra) * np.minimum(base, kw)
        long_piece, short_piece = np.clip(base + 1 - kw, 0, w), np.clip(base - kw, 0, w)
        longer = min(part, extra)
        start = before + longer * long_piece + (part - longer) * short_piece
        return start, long_piece if part < extra else short_piece

    def table(self, part: int, epoch: int) -> np.ndarray:
        """Counts of part's positions before each window edge of ``epoch``, windows + 1 rows x sources, from
        the run's start."""
        key = (part, epoch)
        found = self._tables.get(key)
        if found is None:
            if len(self._tables) >= _CACHED_ORDERS:
                self._tables.pop(next(iter(self._tables)))
            found = self._tables[key] = self._within(part, epoch) + self._before(part, epoch)
        return found

    def _within(self, part: int, epoch: int) -> np.ndarray:
        """Counts of part's positions before each of its window edges, from the epoch's start."""
        start, length = self._pieces(part, np.arange(self.windows(part), dtype=np.int64))
        origin = epoch * self.n if self._scheduled else 0  # without a schedule every epoch is the same
        grown = self._counts.counts_many(origin + start + length) - self._counts.counts_many(origin + start)
        return np.concatenate((np.zeros((1, self.sources), dtype=np.int64), np.cumsum(grown, axis=0)))

    def parts_before(self, part: int) -> np.ndarray:
        """Without a schedule: how many positions of each source the parts before ``part`` hold per epoch (in
        each window, the parts before it tile the window's virtual stretch up to its piece)."""
        found = self._totals.get((part, -1))
        if found is None:
            k = np.arange(self.windows(0), dtype=np.int64)
            start, _ = self._pieces(part, k)
            first, _ = self._pieces(0, k)
            found = (self._counts.counts_many(start) - self._counts.counts_many(first)).sum(axis=0)
            self._totals[(part, -1)] = found
        return found

    def _before(self, part: int, epoch: int) -> np.ndarray:
        """Counts of part's positions in the epochs before ``epoch``: exact without a schedule (every epoch is
        the same), and with one while the epochs before hold at most ``_SUMMED`` windows (each summed once);
        past that, the part's share of the schedule's counts at the epoch's start (a seek to a far epoch
        stays O(windows); the part's streams may then start a few rows off where the epoch before ended)."""
        if not self._scheduled:
            return epoch * self._total(part, 0)
        if epoch * self.windows(part) <= _SUMMED:
            return sum((self._total(part, e) for e in range(epoch)), np.zeros(self.sources, dtype=np.int64))
        counts = self._counts.counts_many(np.array([epoch * self.n]))[0].astype(object)
        share = self._base + int(part < self._extra)
        found: np.ndarray = (counts * share // self.n).astype(np.int64)
        return found

    def _total(self, part: int, epoch: int) -> np.ndarray:
        found = self._totals.get((part, epoch))
        if found is None:
            found = self._totals[(part, epoch)] = self._within(part, epoch)[-1]
        return found


class StretchedMixtureOrder:
    """The ``mixture`` order of one (seed, epoch) under ``spans`` with ``parts`` stretches (the epoch's first
    world size): positions -> indices into the concatenated sources, each part's from its own stretches."""

    name = NAME

    def __init__(self, mixture: MixedSources, seed: int, epoch: int, shuffle_block: int, parts: int,
                 grid: int | None = None) -> None:
        self.n, self.seed, self.epoch = mixture.samples_per_epoch, seed, epoch
        self._mixture = mixture
        self._block = check_int("shuffle_block", shuffle_block, 1, _MAX_STREAM)
        self._parts = check_int("parts", parts, 1, _MAX_STREAM)
        self.version = VERSION if mixture.schedule is None else SCHEDULED_VERSION
        self._starts, self._lengths = stretches(self.n, self._parts)
        self._window = max(1, (self._block if grid is None else check_int("grid", grid, 1, _MAX_STREAM))
                           // self._parts)  # a part's share of a global batch, or of a shuffle_block window
        schedule = mixture.schedule
        if schedule is not None:  # phases on the edges of the windows (a sampler's too: a resume may append
            # phases after the window reached, which then starts them on the next edge as the run did)
            schedule = mixture.schedule_on_grid(grid if grid is not None else self._window * self._parts)
        self._counts = _PartCounts(mixture, self._parts, self._window, schedule)
        self._offsets = offsets(mixture.lengths)
        self._packed = is_packed(mixture.sources[0])
        self._stretch_of: dict[tuple[int, int], tuple[int, int]] = {}
        self._orders: dict[tuple[int, ...], Any] = {}
        self._check_epoch(epoch)
        if self._packed:  # bind each Packed source to (seed, shuffle_block) before workers copy it
            for s in range(len(mixture.sources)):
                self._source_pass(s, 0)

    def _stretch(self, s: int, part: int) -> tuple[int, int]:
        """(first row, rows) of part's stretch of source s along the source's layout: the parts' shares of the
        source's slots per epoch (without a schedule; so a source read once an epoch is read once by the parts
        together), or of the epoch's positions (with one), of its rows."""
        found = self._stretch_of.get((s, part))
        if found is None:
            total = self._mixture.lengths[s]
            if self._mixture.schedule is None:
                count = self._mixture.counts[s]
                before = int(self._counts.parts_before(part)[s])
                held = int(self._counts.table(part, 0)[-1][s])
                edge, end = total * before // count, total * (before + held) // count
            else:
                start, length = int(self._starts[part]), int(self._lengths[part])
                edge, end = total * start // self.n, total * (start + length) // self.n
            found = self._stretch_of[(s, part)] = (edge, end - edge)
        return found

    def _check_epoch(self, epoch: int, passes: int | None = None) -> None:
        """Refuse an epoch whose indices pass 2**62: its positions, or a Packed source's pass, laid along the
        parts (its index's key): the epoch's own pass here, the passes a part reaches as they are read."""
        far = (epoch + 1) * self.n >= _MAX_STREAM
        if self._packed and not far:
            far = (table_key(epoch if passes is None else passes, self._parts) + 1) * int(self._offsets[-1]) \
                >= _MAX_STREAM
        if far:
            # LIMIT(stretched-mixture-last-epoch): docs/shards.md#limits
            raise Refused("epoch", epoch, "an epoch whose stream positions stay below 2**62",
                          "read an earlier epoch (set_epoch), or a larger dataset per epoch")

    def index(self, position: int) -> int:
        return int(self.take(np.array([position], dtype=np.int64))[0])

    def take(self, positions: np.ndarray) -> np.ndarray:
        """Indices into the concatenated sources at these epoch positions (int64)."""
        positions, flat = checked_positions(positions, self.n)
        part = np.searchsorted(self._starts, flat, side="right") - 1
        found = np.empty_like(flat)
        for r in distinct(part).tolist():
            where = part == r
            found[where] = self._take_part(r, flat[where] - int(self._starts[r]))
        return found.reshape(positions.shape)

    def _take_part(self, part: int, local: np.ndarray) -> np.ndarray:
        """Indices at positions ``local`` of part ``part``: its window's slots shuffled, each source's slots
        read from the part's stream of that source at its count."""
        windows, at = distinct_inverse(local // self._window)
        table = self._counts.table(part, self.epoch)
        before, sizes = table[windows], table[windows + 1] - table[windows]
        cumulative = np.cumsum(sizes, axis=1)
        keyed = sub_seeds(self.seed & _M64, _PART_TAG, np.full(windows.size, part, dtype=np.uint64))
        keys = sub_seeds(keyed, _WINDOW_TAG, windows.astype(np.uint64))
        shuffled = take_many(local - windows[at] * self._window, at, sizes.sum(axis=1), keys, self.epoch)
        source = (shuffled[:, None] >= cumulative[at]).sum(axis=1)
        stream = before[at, source] + shuffled - (cumulative[at, source] - sizes[at, source])
        found = np.empty_like(local)
        for s in distinct(source).tolist():
            where = source == s
            found[where] = self._from_stream(s, part, stream[where])
        return found

    def _from_stream(self, s: int, part: int, stream: np.ndarray) -> np.ndarray:
        """Mixture indices of rows ``stream`` of part ``part``'s own stream of source s."""
        edge, length = self._stretch(s, part)
        if length == 0:  # fewer rows than parts: this part draws from the whole source
            edge, length = 0, self._mixture.lengths[s]
        passes, rows = np.divmod(stream, length)
        if self._packed and passes.size:
            self._check_epoch(self.epoch, int(passes.max()))
        found = np.empty_like(stream)
        for p in distinct(passes).tolist():
            where = passes == p
            found[where] = self._in_pass(s, part, p, edge, length, rows[where])
        return encode(self._offsets, self._mixture.lengths, s, found)

    def _in_pass(self, s: int, part: int, p: int, edge: int, length: int, rows: np.ndarray) -> np.ndarray:
        """Indices of source s (``p * len + row`` for a Packed source) of rows of its stretch in pass p."""
        dataset = self._mixture.sources[s]
        if self._packed:
            found: np.ndarray = self._source_pass(s, p).take(edge + rows)
            return found
        if isinstance(dataset, ShardedCorpus):  # the shards laid out by the seed, cut at this part's stretch
            within: np.ndarray = self._source_pass(s, p, part, edge).take(edge + rows)
            return within
        inside = self._source_pass(s, p, part, length).take(rows)  # a new order inside the stretch each pass
        laid: np.ndarray = self._source_pass(s, -1).take(edge + inside)  # the seed's layout, the same every pass
        return laid

    def _source_pass(self, s: int, p: int, part: int = -1, length: int = 0) -> Order | Any:
        """Source s's pass p: a Packed source's packed epoch; a sharded one's ``StretchBlockOrder`` cut at
        part's stretch (``length`` is then its first row); any other's order inside part's stretch of
        ``length`` rows (p = -1: the seed's layout of the source)."""
        key = (s, p) if part < 0 else (s, p, part)
        found = self._orders.get(key)
        if found is None:
            if len(self._orders) >= _CACHED_ORDERS:
                self._orders.pop(next(iter(self._orders)))
            dataset, seed = self._mixture.sources[s], _sub_seed(self.seed, _SOURCE_TAG, s)
            if self._packed:  # its own packed epoch p laid along the parts' stretches (packed_layout), so a part's
                found = dataset.epoch_order(seed, p, self._block, stretches=self._parts)  # rows are its shards
            elif isinstance(dataset, ShardedCorpus):
                edge, rows = self._stretch(s, part)
                found = StretchBlockOrder(dataset.shard_rows, seed, p, self._block, 3,
                                          edges=np.array([0, edge, edge + rows, self._mixture.lengths[s]]))
            elif p < 0:
                found = FeistelOrder(self._mixture.lengths[s], _sub_seed(seed, _LAYOUT_TAG), 0)
            else:
                found = FeistelOrder(length, _sub_seed(_sub_seed(seed, _STRETCH_TAG, part), _STRETCH_TAG, p), 0)
            self._orders[key] = found
        return found
