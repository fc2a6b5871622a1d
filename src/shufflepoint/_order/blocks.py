"""The ``blocks`` order: a seekable, locality-aware permutation of a corpus stored in shards.

A fully random order over a sharded corpus turns every sample into a read of a random shard. This
order keeps each stretch of the epoch inside a few shards, and is still a pure function of
(seed, epoch, position), so a resume is a seek and no world size, batch size or ``num_workers``
enters it. Per epoch:

1. the shards are permuted (a keyed Feistel permutation of ``range(S)``);
2. the shuffled shards, laid end to end, are cut into *blocks* at shard boundaries: a block is the
   run of shards whose first row falls in the same interval ``[k*B, (k+1)*B)`` of the epoch stream
   (``B = shuffle_block``), so a block holds about ``B`` rows, or one shard larger than ``B``;
3. the rows inside each block are permuted (keyed by seed, epoch and block).

Worked, with 4 shards of 3, 5, 2 and 4 rows and B = 6 (seed 0, epoch 0): the shard order
[1, 0, 3, 2] puts the shards at stream offsets 0, 5, 8, 12; shards 1 and 0 start in [0, 6), shard 3
in [6, 12), shard 2 in [12, 18), so the blocks are positions [0, 8), [8, 12) and [12, 14), each
shuffled within itself (``tests/shards/test_blocks.py`` pins these values).

Position -> block by binary search over the block table, then -> (shard, row) by binary search
over the shard table: O(log S) per position after an O(S) table per epoch; memory O(S), never O(N).

Words: docs/glossary.md (block, shard, extent, stretch order, shuffle block, position, stream, stretch).
"""

from __future__ import annotations

import numpy as np

from shufflepoint._errors import Plain, refusal
from shufflepoint._order.distinct import distinct, distinct_inverse
from shufflepoint._order.feistel import FeistelOrder, _splitmix64
from shufflepoint._order.feistel_many import sub_seeds, take_many

NAME = "blocks"
VERSION = 1
DEFAULT_SHUFFLE_BLOCK = 1 << 16
_M64 = (1 << 64) - 1
_SHARDS_TAG, _BLOCK_TAG = 0x5A4D5348, 0xB10C5EED  # keep the shard and in-block keys apart
_LAY_TAG, _EXTENTS_TAG, _STRETCH_BLOCK_TAG = 0x4C41594F, 0x50494543, 0x5354424B  # the stretch order's keys
_CACHED_BLOCKS = 8  # in-block permutations kept: a chunk of positions touches one or two blocks
_MANY_BLOCKS = 32  # past this many blocks in one ``take``, every block's order at once (``_take_many``)


def _sub_seed(seed: int, tag: int, index: int = 0) -> int:
    return _splitmix64((_splitmix64(seed & _M64) ^ tag ^ _splitmix64(index & _M64)) & _M64)


def checked_positions(positions: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Epoch positions as int64 (and flattened); IndexError naming the field when one is outside [0, n)."""
    positions = np.asarray(positions, dtype=np.int64)
    flat = positions.reshape(-1)
    if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= n):
        raise IndexError(refusal("positions", Plain(f"{int(flat.min())}..{int(flat.max())}"), f"each in [0, {n})",
                                 "pass positions of this epoch"))
    return positions, flat


class _BlockTable:
    """Positions -> dataset indices through a table of extents (consecutive rows of one shard) laid end
    to end in the epoch stream, cut into blocks whose positions are permuted within themselves."""

    name = NAME
    version = VERSION
    _block_tag = _BLOCK_TAG

    def _set_table(self, n: int, stream_start: np.ndarray, dataset_start: np.ndarray, block_first: np.ndarray,
                   seed: int, epoch: int) -> None:
        """``block_first``: indices of the extents that open a block."""
        self.n, self.seed, self.epoch = n, seed, epoch
        self._stream_start, self._dataset_start = stream_start, dataset_start
        self._block_start = stream_start[block_first]
        self._block_length = np.diff(np.concatenate((self._block_start, [n])))
        self._blocks: dict[int, FeistelOrder] = {}

    @property
    def blocks(self) -> int:
        """The number of blocks this epoch."""
        return int(self._block_start.size)

    def table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The epoch's table: where each piece (a run of one shard's rows) starts in the epoch stream and in the
        dataset, in stream order, and where each block starts in the stream (``Packed`` lays tokens on it)."""
        return self._stream_start, self._dataset_start, self._block_start

    def block_bounds(self, block: int) -> tuple[int, int]:
        """Epoch positions [start, stop) of a block."""
        start = int(self._block_start[block])
        return start, start + int(self._block_length[block])

    def _block_order(self, block: int) -> FeistelOrder:
        found = self._blocks.get(block)
        if found is None:
            if len(self._blocks) >= _CACHED_BLOCKS:
                self._blocks.pop(next(iter(self._blocks)))
            length = int(self._block_length[block])
            found = FeistelOrder(length, _sub_seed(self.seed, self._block_tag, block), self.epoch)
            self._blocks[block] = found
        return found

    def index(self, position: int) -> int:
        return int(self.take(np.array([position], dtype=np.int64))[0])

    def take(self, positions: np.ndarray) -> np.ndarray:
        """Dataset indices (int64) at the given epoch positions (int64, each in [0, n))."""
        positions, flat = checked_positions(positions, self.n)
        block = np.searchsorted(self._block_start, flat, side="right") - 1
        runs = _runs(block)
        if runs is None:  # many blocks (``which`` of a whole world): their orders at once, one pass per width
            stream = self._take_many(flat, block)
        else:
            stream = np.empty_like(flat)
            for b, where in runs:
                start = self._block_start[b]
                stream[where] = start + self._block_order(b).take(flat[where] - start)
        extent = np.searchsorted(self._stream_start, stream, side="right") - 1
        found: np.ndarray = self._dataset_start[extent] + (stream - self._stream_start[extent])
        found = found.reshape(positions.shape)
        return found

    def _take_many(self, flat: np.ndarray, block: np.ndarray) -> np.ndarray:
        """Stream positions of ``flat`` (in blocks ``block``) through every block's order at once
        (``feistel_many``: the same values as ``_block_order(b).take``), no object or mask per block."""
        used, local = distinct_inverse(block)
        sizes = self._block_length[used]
        if int(sizes.max()) > 1 << 32:  # a block of one shard past 2**32 rows: the orders' own path
            stream = np.empty_like(flat)
            for number, b in enumerate(used.tolist()):
                where = np.flatnonzero(local == number)
                stream[where] = self._block_start[b] + self._block_order(b).take(flat[where] - self._block_start[b])
            return stream
        keys = sub_seeds(self.seed & _M64, self._block_tag, used.astype(np.uint64))
        starts = self._block_start[block]
        found: np.ndarray = starts + take_many(flat - starts, local, sizes, keys, self.epoch)
        return found

    def positions_of(self, indices: np.ndarray) -> np.ndarray:
        """The inverse of ``take``: the epoch position (int64) of each dataset index (int64, in [0, n)).

        Index -> extent by binary search over the extents sorted by their first dataset index, -> its
        stream position, -> block by binary search, -> position inside the block by the block's inverse.
        """
        indices = np.asarray(indices, dtype=np.int64)
        flat = indices.reshape(-1)
        if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= self.n):
            raise IndexError(refusal("indices", Plain(f"{int(flat.min())}..{int(flat.max())}"),
                                     f"each in [0, {self.n})", "pass indices of the dataset"))
        by_dataset = np.argsort(self._dataset_start, kind="stable")
        extent = by_dataset[np.searchsorted(self._dataset_start[by_dataset], flat, side="right") - 1]
        stream = self._stream_start[extent] + (flat - self._dataset_start[extent])
        block = np.searchsorted(self._block_start, stream, side="right") - 1
        found = np.empty_like(flat)
        for b in distinct(block).tolist():
            where = block == b
            start = self._block_start[b]
            inside = FeistelOrder(int(self._block_length[b]), _sub_seed(self.seed, self._block_tag, b), self.epoch)
            found[where] = start + inside.positions_of(stream[where] - start)
        return found.reshape(indices.shape)


def _runs(block: np.ndarray) -> list[tuple[int, slice | np.ndarray]] | None:
    """(block, where its positions are) for each block in ``block``. A rank's chunk of positions is
    ascending (both deals), so its blocks are runs of slices; otherwise a mask per block. None past
    ``_MANY_BLOCKS`` blocks (``which`` of a whole world: an order object, or a mask, per block would cost
    O(blocks) objects or O(blocks x positions) memory): ``_take_many`` takes them at once. Not
    ``np.unique``: its first call imports ``numpy.ma`` (6 ms, and a full garbage collection of
    torch's objects when it lands on one: 80 ms), in a resume's first batch."""
    if not block.size:
        return []
    edges = np.flatnonzero(block[1:] != block[:-1]) + 1
    if edges.size >= _MANY_BLOCKS and distinct(block).size > _MANY_BLOCKS:
        return None
    heads = block[np.concatenate(([0], edges))].tolist()
    if all(a < b for a, b in zip(heads, heads[1:], strict=False)):  # ascending: each block once, as one run
        bounds = [0, *edges.tolist(), block.size]
        return [(b, slice(lo, hi)) for b, lo, hi in zip(heads, bounds[:-1], bounds[1:], strict=True)]
    return [(b, block == b) for b in sorted(set(heads))]


class BlockOrder(_BlockTable):
    """A permutation of range(sum(rows)) for one (seed, epoch), built from rows per shard.

    ``rows[s]`` is the number of rows of shard s in the dataset's own order; the dataset index
    of row r of shard s is ``sum(rows[:s]) + r``. ``take`` maps epoch positions to dataset indices.

    >>> order = BlockOrder([3, 5, 2, 4], seed=0, epoch=0, shuffle_block=6)
    >>> sorted(order.take(np.arange(14)).tolist()) == list(range(14))
    True
    """

    def __init__(self, rows: np.ndarray | list[int], seed: int, epoch: int, shuffle_block: int) -> None:
        rows = _checked_rows(rows, shuffle_block)
        self.shuffle_block = shuffle_block
        dataset_start = np.concatenate(([0], np.cumsum(rows)[:-1])) if rows.size else rows
        shard_order = FeistelOrder(int(rows.size), _sub_seed(seed, _SHARDS_TAG), epoch)
        shuffled = shard_order.take(np.arange(rows.size, dtype=np.int64)) if rows.size else rows
        kept = shuffled[rows[shuffled] > 0]  # empty shards take no place in the stream
        lengths = rows[kept]
        # Per shard in stream order: where it starts in the epoch stream and in the dataset.
        stream_start = np.concatenate(([0], np.cumsum(lengths)[:-1])) if kept.size else kept
        interval = stream_start // shuffle_block
        first = np.flatnonzero(np.concatenate(([True], interval[1:] != interval[:-1]))) if kept.size else kept
        self._set_table(int(rows.sum()), stream_start, dataset_start[kept] if kept.size else kept, first, seed, epoch)


def laid_shards(rows: np.ndarray, seed: int) -> np.ndarray:
    """The non-empty shards in the order ``StretchBlockOrder`` lays them out for ``seed``, every epoch alike."""
    lay = FeistelOrder(int(rows.size), _sub_seed(seed, _LAY_TAG), 0)
    laid = lay.take(np.arange(rows.size, dtype=np.int64)) if rows.size else rows
    found: np.ndarray = laid[rows[laid] > 0]
    return found


def _checked_rows(rows: np.ndarray | list[int], shuffle_block: int) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.int64)
    if rows.ndim != 1 or (rows < 0).any():
        raise ValueError(refusal("rows", Plain(f"an array of shape {rows.shape}, min {rows.min(initial=0)}"),
                                 "a 1-D array of row counts >= 0, one per shard", "pass each shard's rows"))
    if shuffle_block < 1:
        raise ValueError(refusal("shuffle_block", shuffle_block, "an int >= 1", "pass shuffle_block >= 1"))
    return rows


def _mix64(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, vectorised over uint64 (wrapping arithmetic)."""
    x = values.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    found: np.ndarray = x ^ (x >> np.uint64(31))
    return found


class StretchBlockOrder(_BlockTable):
    """The ``blocks`` order laid along the stretches of the ``spans`` deal, for a node to keep its shards.

    The shards are laid end to end in one order that depends on the seed only (not the epoch), and
    that stream is cut into the ``stretches`` near-equal stretches the spans deal gives the ranks
    of the epoch's first world (``spans.py``), a shard crossing an edge being split in two *extents*.
    Each epoch permutes the extents *inside* each stretch, cuts the stretch into blocks of about
    ``shuffle_block`` rows (never across a stretch edge) and permutes each block. So a rank reads
    the same rows every epoch on an unchanged world, in a new order, and a node's cache that holds
    its share serves every later epoch; rows still reach every rank in a fresh order.

    Worked, shards of 3, 5, 2 and 4 rows (dataset indices 0-2, 3-7, 8-9, 10-13), 2 stretches of 7,
    seed 0 (``tests/shards/test_blocks.py`` pins the values): the seed lays the shards out as
    [3, 1, 2, 0], so stretch 0 holds shard 3 and rows 0-2 of shard 1 (indices 10-13, 3-5) in every
    epoch, and stretch 1 rows 3-4 of shard 1 and shards 2 and 0 (6-7, 8-9, 0-2).
    """

    version = VERSION
    _block_tag = _STRETCH_BLOCK_TAG

    def __init__(self, rows: np.ndarray | list[int], seed: int, epoch: int, shuffle_block: int,
                 stretches: int, edges: np.ndarray | None = None, pinned_ends: bool = False,
                 keyed_layout: bool = True) -> None:
        """``edges``: the stretches' starts and the end (``stretches + 1`` of them, from 0 to the rows), where
        they are not the near-equal ones (a ``Mixture`` source cut in its ranks' shares of it). ``pinned_ends``:
        each stretch's first and last extent (as laid) stay first and last every epoch, each a block of
        its own, so a rank whose rows reach past its stretch's edge (``Packed``: stretches cut at shard
        boundaries, rows at token counts) reads the same shard there every epoch. ``keyed_layout=False``: the
        shards laid in their own order (``Packed``: a process counts the tokens of its stretch's shards before
        it knows the seed, ``count_share``)."""
        rows = _checked_rows(rows, shuffle_block)
        if stretches < 1:
            raise ValueError(refusal("stretches", stretches, "an int >= 1", "pass stretches >= 1"))
        self.shuffle_block, self.stretches = shuffle_block, stretches
        n = int(rows.sum())
        dataset_start = np.concatenate(([0], np.cumsum(rows)[:-1])) if rows.size else rows
        laid = laid_shards(rows, seed) if keyed_layout else np.flatnonzero(rows > 0)  # the same every epoch
        base_start = np.concatenate(([0], np.cumsum(rows[laid]))) if laid.size else np.zeros(1, np.int64)
        # Stretch edges (spans.py's formula) split the shards they fall inside into two extents.
        if edges is None:
            base, extra = divmod(n, stretches)
            ranks = np.arange(stretches + 1, dtype=np.int64)
            edges = ranks * base + np.minimum(ranks, extra)
        edges = distinct(np.asarray(edges, dtype=np.int64))
        cuts = distinct(np.concatenate((base_start, edges)))
        cuts = cuts[cuts < n] if n else cuts[:0]
        shard_at = np.searchsorted(base_start, cuts, side="right") - 1
        extent_dataset = dataset_start[laid[shard_at]] + (cuts - base_start[shard_at]) if cuts.size else cuts
        extent_length = np.diff(np.concatenate((cuts, [n]))) if cuts.size else cuts
        stretch = np.searchsorted(edges, cuts, side="right") - 1
        # Each epoch: the extents of each stretch in a keyed random order, laid from the stretch's start.
        key = _mix64(np.arange(cuts.size, dtype=np.uint64) ^ np.uint64(_sub_seed(seed, _EXTENTS_TAG, epoch)))
        ends = np.zeros((2, cuts.size), dtype=bool)  # each stretch's first and last extent, where pinned
        if pinned_ends and cuts.size:
            ends[0] = np.concatenate(([True], stretch[1:] != stretch[:-1]))
            ends[1] = np.concatenate((stretch[1:] != stretch[:-1], [True]))
            key[ends[0]], key[ends[1] & ~ends[0]] = np.uint64(0), np.uint64(2**64 - 1)
        order = np.lexsort((key, stretch))
        extent_dataset, extent_length, stretch = extent_dataset[order], extent_length[order], stretch[order]
        ends = ends[:, order]
        stream_start = np.concatenate(([0], np.cumsum(extent_length)[:-1])) if cuts.size else cuts
        offset = stream_start - edges[stretch] if cuts.size else cuts
        interval = offset // shuffle_block
        opens = np.concatenate(([True], (interval[1:] != interval[:-1]) | (stretch[1:] != stretch[:-1])
                                | ends[0][:-1] | ends[1][1:]))  # a pinned extent is a block of its own
        first = np.flatnonzero(opens) if cuts.size else cuts
        self._set_table(n, stream_start, extent_dataset, first, seed, epoch)
