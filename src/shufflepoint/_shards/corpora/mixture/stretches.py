"""The ``mixture`` order under the ``spans`` deal (versions 5, 6 and 7): laid along the deal's stretches, so that
a node reads its share of every source, and each source read in whole passes on any world.

Under ``spans`` rank r of the epoch's first world reads its *part*, positions ``[a_r, a_r + n_r)`` of the
epoch (``spans.py``'s stretches of W parts). Which source each position of a part holds comes from one count
for the whole epoch, as in versions 1 and 2: ``C(g)``, how many of the first g run positions belong to each
source (the epoch's ``counts`` by a chain of floors, ``c(n) == counts``; or the schedule, phases on the
loader's grid, counted by their chains of floors; a phase starts on the first global batch edge at or after its
start; a sampler's, without a grid, at the row it names). A part's positions are cut into windows of w
positions (a loader's grid G: ``w = G / W``, its global batches; else ``shuffle_block // W``), and window k of
every part is one *virtual* stretch of the epoch, the parts' pieces laid end to end (``kWw .. (k+1)Ww``: with
``w = G / W`` the global batch k). Part r's window k holds ``C(end) - C(start)`` of its virtual piece, shuffled
by a keyed Feistel permutation, so:

- every global batch holds exactly what ``C`` gives it (the parts' pieces tile it), and a schedule's phase,
  starting on a grid edge kG, starts at window k of every part: exact, and on resume (positions are fixed);
- the parts together hold exactly ``counts[s]`` of source s per epoch without a schedule.

Source s's slots in that virtual order (window after window, the parts in turn in each), counted over the
run, are its stream, and ``passes.py`` says what each reads: an epoch reads the same rows of each of
the source's passes on any world, and part r its share of them, which lies about in its own stretch of the
source's arrangement (a node reads about 1/nodes of every source, about the same rows every epoch). So a
source's passes are whole however the world changes: a resize re-deals positions (``spans.py``), and an epoch
that begins on another world reads on where the epoch before left each pass. The count of slots the epochs
before an epoch read is arithmetic (``e * counts``, or the schedule's count at the epoch's start).

A weight changed inside an epoch (a live phase) changes the counts of the rest of it: the rows laid out when
it began keep their places and the rest is laid anew, in *lays* (``lays.py``); without one, the order is as
above.

Source s's slots in a window are numbered part after part above (version 6, as 0.5 read a scheduled Mixture; the
torchft loader's, whose steps read whole windows of parts in turn). A loader's global batch edge falls on a prefix
of the epoch's interleave order instead (position j of every part before j + 1 of any), which cuts a window where
the global batch is not the grid's; version 7 (a loader's, and a sampler's) numbers a window where a source's pass
ends in that order (``pass_edges.py``), so every edge reads whole passes. A state records which.

Versions 3 and 4 (0.5's development: each part read its own stream of a source in its own stretch, so a
source's passes drifted apart across the parts, and another world began them anew) are refused by name.

Words: docs/glossary.md (mixture, source, pass, stretch order, stretch, window).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from shufflepoint._core.capabilities import ShardedCorpus
from shufflepoint._core.schedule import Schedule
from shufflepoint._errors import Refused, ResumeWarning, refusal, warn_user
from shufflepoint._order import Order, check_int
from shufflepoint._order.blocks import _M64, _sub_seed, checked_positions, laid_shards
from shufflepoint._order.distinct import distinct, distinct_inverse
from shufflepoint._order.feistel import FeistelOrder
from shufflepoint._order.feistel_many import sub_seeds, take_many
from shufflepoint._shards.corpora.mixture.lays import Lay, plan
from shufflepoint._shards.corpora.mixture.order import _MAX_STREAM, _SOURCE_TAG, NAME, MixedSources, encode, offsets
from shufflepoint._shards.corpora.mixture.pass_edges import interleave_ranks, pass_edges
from shufflepoint._shards.corpora.mixture.passes import SourcePasses
from shufflepoint._shards.corpora.mixture.sources import is_packed
from shufflepoint._shards.corpora.mixture.spread import Spreads, turns
from shufflepoint._shards.corpora.packed.stretches import EVERY_RUN, table_key

VERSION, SCHEDULED_VERSION = 5, 7
PARTS_IN_TURN_VERSION = 6  # scheduled, every window's slots numbered part after part (0.5; the torchft loader's)
UNKEPT_VERSIONS = (3, 4)  # each part its own stream of a source: refused by name (``Mixture._explain_order_version``)
_PART_TAG, _LAYOUT_TAG, _SPREAD_TAG = 0x50415254, 0x4C415954, 0x53505244
_WINDOW_TAG = 0x57494E44
_CACHED_ORDERS = 32
_TABLE_BUDGET = 1 << 24  # int64s of part tables kept: every part's, where they fit (a lay's owners ask any part's)
_WINDOWS_RANKED = 4  # pass-edge windows whose positions' interleave ranks are kept (``pass_edges.py``)


def part_lengths(n: int, parts: int, lot: int | None = None) -> tuple[int, int, int]:
    """(m, first, rest): the first m parts hold ``first`` positions each, the others ``rest``. Near-equal stretches of
    n, the first ``n % parts`` one longer (``spans.py``'s formula); with ``lot`` (the torchft loader's), stretches
    of whole lots, as its replica groups read them (``membership.stretch_lot``), the last taking the rest.

    >>> part_lengths(10, 3), part_lengths(240, 3, 9)
    ((1, 4, 3), (2, 81, 78))
    """
    if lot is None:
        base, extra = divmod(n, parts)
        return extra, base + 1, base
    whole = (-(-n // lot)) // parts if parts > 1 else 0
    return parts - 1, whole * lot, n - (parts - 1) * whole * lot


def stretches(n: int, parts: int, lot: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(start, length) of each part (``part_lengths``)."""
    m, first, rest = part_lengths(n, parts, lot)
    rank = np.arange(parts, dtype=np.int64)
    return rank * rest + np.minimum(rank, m) * (first - rest), np.where(rank < m, first, rest).astype(np.int64)


class _PartCounts:
    """How many slots of each source a part's windows hold, and where they sit in the epoch's virtual order
    (vectorised, O(windows) per part and epoch)."""

    def __init__(self, mixture: MixedSources, parts: int, window: int, schedule: Schedule | None,
                 lot: int | None = None) -> None:
        self.n, self.sources, self._parts, self._window = mixture.samples_per_epoch, len(mixture.lengths), parts, window
        self._m, self._first, self._rest = part_lengths(self.n, parts, lot)
        self._scheduled = schedule is not None
        self._counts = schedule.chained() if schedule is not None else Schedule([(0, list(mixture.counts))],
                                                                               self.sources)
        longest = max(self._first if self._m else 0, self._rest if self._m < parts else 0)
        self.windows = -(-longest // window)  # the longest part's
        self._tables: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._edges: dict[int, np.ndarray] = {}

    def _pieces(self, part: int, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(virtual start, length) of part's window k: every part's windows before k, then the parts before it
        in window k, laid end to end (a full window: ``k * W * w + part * w``)."""
        w, m, first, rest = self._window, self._m, self._first, self._rest
        kw = k * w
        before = m * np.minimum(first, kw) + (self._parts - m) * np.minimum(rest, kw)
        first_piece, rest_piece = np.clip(first - kw, 0, w), np.clip(rest - kw, 0, w)
        ahead = min(part, m)
        start = before + ahead * first_piece + (part - ahead) * rest_piece
        return start, first_piece if part < m else rest_piece

    def _origin(self, epoch: int) -> int:
        return epoch * self.n if self._scheduled else 0  # without a schedule every epoch is the same

    def _key(self, epoch: int) -> int:
        return epoch if self._scheduled else 0

    def before_epoch(self, epoch: int) -> np.ndarray:
        """Slots of each source in the epochs before ``epoch`` (over the run: the parts of those epochs together)."""
        found: np.ndarray = self._counts.counts_many(np.array([epoch * self.n if self._scheduled else self.n]))[0]
        return found if self._scheduled else epoch * found

    def edges(self, epoch: int) -> np.ndarray:
        """Slots of each source, all parts together, before each window edge of ``epoch`` (windows + 1 rows x
        sources): the virtual order's, window k of every part before window k + 1's."""
        key = self._key(epoch)
        found = self._edges.get(key)
        if found is None:
            if len(self._edges) >= _CACHED_ORDERS:
                self._edges.pop(next(iter(self._edges)))
            origin = self._origin(epoch)
            starts, _ = self._pieces(0, np.arange(self.windows, dtype=np.int64))
            ends = np.append(starts, self.n)
            found = self._edges[key] = self._counts.counts_many(origin + ends) - self._counts.counts_many(
                np.array([origin]))
        return found

    def below(self, part: int, epoch: int, s: int, slots: int) -> tuple[int, int]:
        """Of ``epoch``'s first ``slots`` slots of source s (the virtual order): (how many are part's, how many
        the parts' before it)."""
        held, ahead, before = self.part(part, epoch)
        edges = self.edges(epoch)[:, s]
        k = min(int(np.searchsorted(edges, slots, side="right")) - 1, edges.size - 2)
        into = slots - int(edges[k])
        mine = int(held[k + 1, s] - held[k, s])
        return int(held[k, s]) + min(max(into - int(ahead[k, s]), 0), mine), int(before[k, s]) + min(into,
                                                                                                     int(ahead[k, s]))

    def owners(self, epoch: int, s: int, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(part, the part's own slot of source s) of each of ``epoch``'s virtual slots ``slots`` of source s:
        the window it is in, then the part whose piece of the window holds it (the parts in turn)."""
        edges = self.edges(epoch)[:, s]
        k = np.minimum(np.searchsorted(edges, slots, side="right") - 1, self.windows - 1)
        origin, every = self._origin(epoch), np.arange(self._parts, dtype=np.int64)
        part, mine = np.empty_like(slots), np.empty_like(slots)
        for window in distinct(k).tolist():
            where = k == window
            starts = self._piece_starts(every, window)
            counted = self._counts.counts_many(np.append(origin + starts, origin + int(self._pieces(0, np.array(
                [window], dtype=np.int64))[0][0])))[:, s]
            ahead = counted[:-1] - counted[-1]
            into = slots[where] - int(edges[window])
            owner = np.searchsorted(ahead, into, side="right") - 1
            part[where] = owner
            held = np.empty_like(owner)
            for r in distinct(owner).tolist():
                held[owner == r] = self.part(r, epoch)[0][window, s]
            mine[where] = held + into - ahead[owner]
        return part, mine

    def _piece_starts(self, parts: np.ndarray, k: int) -> np.ndarray:
        """Virtual start of window k of each of ``parts`` (``_pieces`` for many parts of one window)."""
        w, m, first, rest = self._window, self._m, self._first, self._rest
        kw = k * w
        before = m * min(first, kw) + (self._parts - m) * min(rest, kw)
        first_piece, rest_piece = int(np.clip(first - kw, 0, w)), int(np.clip(rest - kw, 0, w))
        ahead = np.minimum(parts, m)
        found: np.ndarray = before + ahead * first_piece + (parts - ahead) * rest_piece
        return found

    def window(self, epoch: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(length, slots of each source) of every part's piece of ``epoch``'s window k (one row a part): the
        columns of ``part``'s tables at window k, for all parts at once."""
        parts = np.arange(self._parts, dtype=np.int64)
        w, kw = self._window, k * self._window
        lengths = np.where(parts < self._m, np.clip(self._first - kw, 0, w), np.clip(self._rest - kw, 0, w))
        starts = self._origin(epoch) + self._piece_starts(parts, k)
        found = self._counts.counts_many(starts + lengths) - self._counts.counts_many(starts)
        return lengths, found

    def part(self, part: int, epoch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(held, ahead, before) of part's windows in ``epoch``: the slots of each source it holds before each
        window edge (windows + 1 rows), the slots of the parts before it in each window (windows rows), and
        those summed over the windows before each edge (windows + 1 rows): part's slot j of source s in window k
        is the virtual order's slot ``edges[k] + ahead[k] + j - held[k]`` of the epoch."""
        key = (part, self._key(epoch))
        found = self._tables.get(key)
        if found is None:
            if len(self._tables) >= max(_CACHED_ORDERS, min(self._parts + 1, _TABLE_BUDGET // (
                    3 * (self.windows + 1) * self.sources))):
                self._tables.pop(next(iter(self._tables)))
            origin = self._origin(epoch)
            k = np.arange(self.windows, dtype=np.int64)
            start, length = self._pieces(part, k)
            window_start, _ = self._pieces(0, k)
            at_start = self._counts.counts_many(origin + start)
            grown = self._counts.counts_many(origin + start + length) - at_start
            ahead = at_start - self._counts.counts_many(origin + window_start)
            zero = np.zeros((1, self.sources), dtype=np.int64)
            found = (np.concatenate((zero, np.cumsum(grown, axis=0))), ahead,
                     np.concatenate((zero, np.cumsum(ahead, axis=0))))
            self._tables[key] = found
        return found


class StretchedMixtureOrder:
    """The ``mixture`` order of one (seed, epoch) under ``spans`` with ``parts`` stretches (the epoch's first
    world size): positions -> indices into the concatenated sources, each source read in whole passes."""

    name = NAME

    def __init__(self, mixture: MixedSources, seed: int, epoch: int, shuffle_block: int, parts: int,
                 grid: int | None = None, epoch_parts: Callable[[int], int | None] | None = None,
                 version: int | None = None, lot: int | None = None) -> None:
        self.n, self.seed, self.epoch = mixture.samples_per_epoch, seed, epoch
        self._mixture = mixture
        self._block = check_int("shuffle_block", shuffle_block, 1, _MAX_STREAM)
        self._parts = check_int("parts", parts, 1, _MAX_STREAM)
        self.version = VERSION if mixture.schedule is None else SCHEDULED_VERSION if version is None else version
        if self.version not in ((VERSION,) if mixture.schedule is None else (PARTS_IN_TURN_VERSION, SCHEDULED_VERSION)):
            raise ValueError(refusal("version", version, f"{PARTS_IN_TURN_VERSION} or {SCHEDULED_VERSION} (None: "
                                     f"{SCHEDULED_VERSION}) for a scheduled Mixture, None for one without",
                                     "leave version unset"))
        self._lot = lot  # the torchft loader's: parts of whole lots, as its groups read them (``part_lengths``)
        self._starts, self._lengths = stretches(self.n, self._parts, lot)
        self._window = max(1, (self._block if grid is None else check_int("grid", grid, 1, _MAX_STREAM))
                           // self._parts)  # a part's share of a global batch, or of a shuffle_block window
        schedule = mixture.schedule
        if schedule is not None and grid is not None:  # phases on the edges of a loader's global batches; a
            # sampler's (no grid) start at the row they name, on any world
            schedule = mixture.schedule_on_grid(grid)
        self._check_epoch(epoch)
        self._counts = _PartCounts(mixture, self._parts, self._window, schedule, lot)
        self._offsets = offsets(mixture.lengths)
        self._packed = is_packed(mixture.sources[0])
        self._before = self._counts.before_epoch(epoch)  # each source's slots in the epochs before
        self._edges = self._counts.edges(epoch)
        self._passes = [SourcePasses(length, self._block, _sub_seed(seed, _SOURCE_TAG, s))
                        for s, length in enumerate(mixture.lengths)]
        self._grid, self._epoch_parts = grid, epoch_parts
        self._lays = self._plan_lays()
        # version 7: the windows where a source's pass ends, numbered in the interleave order (``pass_edges.py``)
        self._pass_edges = pass_edges(self._before, self._edges, mixture.lengths) \
            if self.version == SCHEDULED_VERSION else None
        self._ranked: dict[int, np.ndarray] = {}
        self._spreads = Spreads()  # version 7: a window's sources spread among a part's positions (spread.py)
        self._lay_counts: dict[tuple[int, int], _PartCounts] = {}
        self._orders: dict[tuple[int, int], Any] = {}
        self._arranged: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        if self._packed:  # bind each Packed source to (seed, shuffle_block) before workers copy it
            for s in range(len(mixture.sources)):
                self._source_pass(s, 0)
                self._check_epoch(epoch, self._last_pass(s))

    def _plan_lays(self) -> list[Lay] | None:
        """The lays that map this epoch's slots (``lays.py``), or None: this epoch's own alone (no live phase
        starts inside an epoch, or none leaves its mark here)."""
        mixture = self._mixture
        live = mixture.live_starts(self._grid)
        if mixture.schedule is None or not live:
            return None
        built = len(mixture.schedule.identities()) - len(live)
        return plan(live, built, self.n, self.epoch,
                    lambda phases, g: mixture.known_schedule(phases, self._grid).counts_many(np.array([g]))[0])

    def _counts_of(self, lay: Lay) -> _PartCounts:
        """The virtual order ``lay`` was laid along: its epoch's, with the phases known then, on that epoch's
        first world (the run's history says which; this epoch's where it does not know)."""
        everything = len(self._mixture.schedule.identities()) if self._mixture.schedule is not None else 1
        if lay.epoch == self.epoch and lay.phases == everything:
            return self._counts
        key = (lay.epoch, lay.phases)
        found = self._lay_counts.get(key)
        if found is None:
            parts = self._epoch_parts(lay.epoch) if self._epoch_parts is not None else None
            if parts is None and self._epoch_parts is not None and lay.epoch != self.epoch:
                # LIMIT(lay-beyond-history): docs/shards.md#limits
                warn_user(f"Mixture: epoch {self.epoch} reads rows that epoch {lay.epoch} laid when a weight changed "
                          f"inside it, but the run's layout history no longer reaches back to epoch {lay.epoch}'s "
                          "world (more than 32 layout changes since): they are taken as laid on this epoch's world, "
                          "so rows of that source's pass may be read twice or not at all until its pass ends. "
                          "Nothing else changes", ResumeWarning)
            parts = self._parts if parts is None or lay.epoch == self.epoch else int(parts)
            window = max(1, (self._block if self._grid is None else self._grid) // parts)
            found = self._lay_counts[key] = _PartCounts(self._mixture, parts, window,
                                                        self._mixture.known_schedule(lay.phases, self._grid), self._lot)
        return found

    def _last_pass(self, s: int) -> int:
        """The last pass of source s this epoch reads (or the one before its first, reading none)."""
        return max(int(self._before[s] + self._edges[-1, s]) - 1, 0) // self._mixture.lengths[s]

    def _laid(self, s: int) -> int:
        """How a Packed source's passes are laid: along every shard (runs of documents) of a sharded one, so its
        rows keep their shards in every pass; one stretch otherwise (the same rows on any world either way)."""
        return EVERY_RUN if isinstance(self._mixture.sources[s].dataset, ShardedCorpus) else 1

    def _check_epoch(self, epoch: int, passes: int | None = None) -> None:
        """Refuse an epoch whose indices pass 2**62: its positions, or a Packed source's last pass (its index's
        key)."""
        far = (epoch + 1) * self.n >= _MAX_STREAM
        if passes is not None and not far:
            rows = int(offsets(self._mixture.lengths)[-1])
            far = (table_key(passes, EVERY_RUN) + 1) * rows >= _MAX_STREAM
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
        local = flat - self._starts[part]
        source, slot, window = (np.empty_like(flat) for _ in range(3))
        for r in distinct(part).tolist():  # the source at each position, and the part's slot of it
            where = part == r
            source[where], slot[where], window[where] = self._slots_of_part(r, local[where])
        if self._pass_edges is not None:  # version 7: a pass-edge window's slots in the interleave order
            edge = self._pass_edges[window, source]
            if edge.any():
                part[edge], slot[edge] = self._interleaved(part[edge], local[edge], source[edge], window[edge])
        found = np.empty_like(flat)
        if self._lays is None:
            for r in distinct(part).tolist():
                where = part == r
                found[where] = self._from_parts_slots(r, source[where], slot[where])
            return found.reshape(positions.shape)
        stream = np.empty_like(flat)
        for r in distinct(part).tolist():  # each slot's place in its source's stream, then source by source
            where = part == r
            held, ahead, _ = self._counts.part(r, self.epoch)
            s, k = source[where], window[where]
            stream[where] = self._before[s] + self._edges[k, s] + ahead[k, s] + slot[where] - held[k, s]
        for s in distinct(source).tolist():
            where = source == s
            found[where] = self._from_stream(s, stream[where], part[where], slot[where], window[where])
        return found.reshape(positions.shape)

    def _interleaved(self, part: np.ndarray, local: np.ndarray, source: np.ndarray,
                     window: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(the part that holds the slot in version 6's numbering, and its slot of the source) of positions ``local``
        of parts ``part`` in pass-edge windows: each takes the slot of its rank among the window's positions of its
        source in the interleave order (``pass_edges.py``)."""
        owner, mine = np.empty_like(part), np.empty_like(part)
        for k in distinct(window).tolist():
            at = np.flatnonzero(window == k)
            ranks = self._window_ranks(k)
            j = local[at] - k * self._window
            for s in distinct(source[at]).tolist():
                mine_s = source[at] == s
                slots = self._edges[k, s] + ranks[j[mine_s], part[at[mine_s]]]
                where = at[mine_s]
                owner[where], mine[where] = self._counts.owners(self.epoch, s, slots)
        return owner, mine

    def _window_ranks(self, k: int) -> np.ndarray:
        """Each position of window k of every part (offset in the window x part; -1 past a part's end): its rank
        among the window's positions of its source (``_slots_of_part`` gives the source) in the interleave order."""
        found = self._ranked.get(k)
        if found is None:  # LIMIT(pass-edge-window-cost): docs/shards.md#limits
            if len(self._ranked) >= _WINDOWS_RANKED:
                self._ranked.pop(next(iter(self._ranked)))
            lengths, sizes = self._counts.window(self.epoch, k)
            parts = np.flatnonzero(lengths > 0)
            pieces = np.repeat(np.arange(parts.size, dtype=np.int64), lengths[parts])
            into = np.arange(pieces.size, dtype=np.int64) - np.repeat(np.cumsum(lengths[parts]) - lengths[parts],
                                                                    lengths[parts])
            sources = np.full((self._window, self._parts), -1, dtype=np.int64)
            sources[into, parts[pieces]] = self._spread(np.full(parts.size, k), parts, sizes[parts], into, pieces)[0]
            ranks = np.full(sources.shape, -1, dtype=np.int64)
            for s in distinct(sources[sources >= 0]).tolist():
                ranks = np.where(sources == s, interleave_ranks(sources == s), ranks)
            found = self._ranked[k] = ranks
        return found

    def _spread(self, windows: np.ndarray, parts: np.ndarray, sizes: np.ndarray, into: np.ndarray,
                piece: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(source, its element) at offset ``into[i]`` of piece ``piece[i]``: part ``parts[p]``'s piece of window
        ``windows[p]``, holding ``sizes[p]`` of each source, spread and turned (``spread.py``)."""
        keys = sub_seeds(_sub_seed(self.seed, _SPREAD_TAG, self.epoch), _WINDOW_TAG, windows.astype(np.uint64))
        return self._spreads.at(sizes, turns(keys, parts, sizes.sum(axis=1)), into, piece)

    def _slots_of_part(self, part: int, local: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(source, the part's slot of it this epoch, window) at positions ``local`` of part ``part``: its
        window's slots spread (version 7, ``spread.py``) or shuffled (6 and 5)."""
        windows, at = distinct_inverse(local // self._window)
        held = self._counts.part(part, self.epoch)[0]
        before, sizes = held[windows], held[windows + 1] - held[windows]
        if self.version == SCHEDULED_VERSION:
            source, element = self._spread(windows, np.full(windows.size, part), sizes,
                                           local - windows[at] * self._window, at)
            return source, before[at, source] + element, windows[at]
        cumulative = np.cumsum(sizes, axis=1)
        keyed = sub_seeds(self.seed & _M64, _PART_TAG, np.full(windows.size, part, dtype=np.uint64))
        keys = sub_seeds(keyed, _WINDOW_TAG, windows.astype(np.uint64))
        shuffled = take_many(local - windows[at] * self._window, at, sizes.sum(axis=1), keys, self.epoch)
        source = (shuffled[:, None] >= cumulative[at]).sum(axis=1)
        slot = before[at, source] + shuffled - (cumulative[at, source] - sizes[at, source])
        return source, slot, windows[at]

    def _from_parts_slots(self, part: int, source: np.ndarray, slot: np.ndarray) -> np.ndarray:
        """Indices of part's slots ``slot`` of sources ``source`` this epoch (``_from_slots``, source by source)."""
        found = np.empty_like(slot)
        for s in distinct(source).tolist():
            where = source == s
            found[where] = self._from_slots(s, part, slot[where])
        return found

    def _from_stream(self, s: int, slots: np.ndarray, part: np.ndarray, mine: np.ndarray,
                     window: np.ndarray) -> np.ndarray:
        """Mixture indices of source s's stream slots ``slots`` (read by parts ``part`` as their slots ``mine`` of
        the source, in their windows ``window``): each mapped by the lay that covers it."""
        lays = [lay for lay in self._lays or () if lay.hi[s] > lay.lo[s]]
        starts = np.array([int(lay.lo[s]) for lay in lays], dtype=np.int64)
        which = np.searchsorted(starts, slots, side="right") - 1
        found = np.empty_like(slots)
        for i in distinct(which).tolist():
            where = which == i
            found[where] = self._from_lay(s, lays[i], slots[where], part[where], mine[where], window[where])
        return encode(self._offsets, self._mixture.lengths, s, found)

    def _alike(self, lay: Lay) -> int:
        """How many of this epoch's first windows ``lay``'s virtual order holds as this one does (its phases'
        counts the same up to the next live phase's start): a slot read there is its reader's in the lay too."""
        schedule = self._mixture.schedule
        if lay.epoch != self.epoch or schedule is None:
            return 0
        live, everything = self._mixture.live_starts(self._grid), len(schedule.identities())
        if lay.phases == everything:
            return self._counts.windows
        diverges = live[lay.phases - (everything - len(live))] - self.epoch * self.n
        ends = np.append(self._counts._pieces(0, np.arange(1, self._counts.windows, dtype=np.int64))[0], self.n)
        return int(np.searchsorted(ends, diverges, side="right"))

    def _from_lay(self, s: int, lay: Lay, slots: np.ndarray, reader: np.ndarray, read: np.ndarray,
                  window: np.ndarray) -> np.ndarray:
        """Source s's indices of stream slots ``slots`` of ``lay``: each slot's part in the lay's virtual order
        (its reader's where the lay's windows are this epoch's), and its row of that part's share of what the
        lay reads of its pass (``_from_slots``, for any lay)."""
        counts, epoch, length = self._counts_of(lay), lay.epoch, self._mixture.lengths[s]
        origin, lo_s, hi_s = int(counts.before_epoch(epoch)[s]), int(lay.lo[s]), int(lay.hi[s])
        alike = window < self._alike(lay)
        part, mine = reader.copy(), read.copy()
        if not alike.all():
            part[~alike], mine[~alike] = counts.owners(epoch, s, slots[~alike] - origin)
        passes, sources = slots // length, self._passes[s]
        found = np.empty_like(slots)
        for p, r in np.unique(np.stack((passes, part), axis=1), axis=0).tolist():
            where = (passes == p) & (part == r)
            lo, hi = max(p * length, lo_s), min((p + 1) * length, hi_s)
            mine_lo, ahead_lo = counts.below(r, epoch, s, lo - origin)
            mine_hi, ahead_hi = counts.below(r, epoch, s, hi - origin)
            x0 = lo - p * length
            share = sources.share(p, x0, x0 + hi - lo, ahead_hi - ahead_lo, mine_hi - mine_lo, r)
            found[where] = self._rows(s, p, sources.positions(p, share, mine[where] - mine_lo, r))
        return found

    def _from_slots(self, s: int, part: int, slots: np.ndarray) -> np.ndarray:
        """Mixture indices of part's slots ``slots`` of source s this epoch: each slot's pass, and its row of
        part's share of what the epoch reads of that pass (``passes.py``)."""
        held, ahead, _ = self._counts.part(part, self.epoch)
        edges, length, first = self._edges[:, s], self._mixture.lengths[s], int(self._before[s])
        k = np.searchsorted(held[:, s], slots, side="right") - 1
        passes = (first + edges[k] + ahead[k, s] + slots - held[k, s]) // length
        count, sources = int(edges[-1]), self._passes[s]
        found = np.empty_like(slots)
        for p in distinct(passes).tolist():
            where = passes == p
            lo, hi = max(p * length - first, 0), min((p + 1) * length - first, count)  # its slots this epoch
            mine_lo, ahead_lo = self._counts.below(part, self.epoch, s, lo)
            mine_hi, ahead_hi = self._counts.below(part, self.epoch, s, hi)
            x0 = lo + first - p * length
            share = sources.share(p, x0, x0 + hi - lo, ahead_hi - ahead_lo, mine_hi - mine_lo, part)
            found[where] = self._rows(s, p, sources.positions(p, share, slots[where] - mine_lo, part))
        return encode(self._offsets, self._mixture.lengths, s, found)

    def _rows(self, s: int, p: int, arranged: np.ndarray) -> np.ndarray:
        """Source s's indices (``p * len + row`` for a Packed source) of positions ``arranged`` of its
        arrangement in pass p."""
        dataset = self._mixture.sources[s]
        if self._packed:
            if p > 0:
                self._check_epoch(self.epoch, p)
            found: np.ndarray = self._source_pass(s, p).take(arranged)
            return found
        if isinstance(dataset, ShardedCorpus):  # the shards laid out by the seed, the same in every pass
            starts, dataset_starts = self._arrangement(s)
            piece = np.searchsorted(starts, arranged, side="right") - 1
            within: np.ndarray = dataset_starts[piece] + arranged - starts[piece]
            return within
        laid: np.ndarray = self._source_pass(s, -1).take(arranged)  # the seed's arrangement of its rows
        return laid

    def _arrangement(self, s: int) -> tuple[np.ndarray, np.ndarray]:
        """A sharded source's shards laid out by the seed: where each starts in the arrangement and in the source."""
        found = self._arranged.get(s)
        if found is None:
            rows = np.asarray(self._mixture.sources[s].shard_rows, dtype=np.int64)
            laid = laid_shards(rows, _sub_seed(self.seed, _SOURCE_TAG, s))
            dataset_starts = np.concatenate(([0], np.cumsum(rows)[:-1])).astype(np.int64)
            starts = np.concatenate(([0], np.cumsum(rows[laid])[:-1])).astype(np.int64)
            found = self._arranged[s] = (starts, dataset_starts[laid])
        return found

    def _source_pass(self, s: int, p: int) -> Order | Any:
        """A Packed source's pass p (its own packed epoch p, laid: ``_laid``); any other's arrangement (p = -1)."""
        key = (s, p)
        found = self._orders.get(key)
        if found is None:
            if len(self._orders) >= _CACHED_ORDERS:
                self._orders.pop(next(iter(self._orders)))
            dataset, seed = self._mixture.sources[s], _sub_seed(self.seed, _SOURCE_TAG, s)
            if self._packed:
                found = dataset.epoch_order(seed, p, self._block, stretches=self._laid(s))
            else:
                found = FeistelOrder(self._mixture.lengths[s], _sub_seed(seed, _LAYOUT_TAG), 0)
            self._orders[key] = found
        return found
