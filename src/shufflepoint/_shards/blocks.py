"""The ``blocks`` order: a seekable, locality-aware permutation of a corpus stored in shards.

A fully random order over a sharded corpus turns every sample into a read of a random shard. This
order keeps each stretch of the epoch inside a few shards, and is still a pure function of
(seed, epoch, position), so a resume is a seek and no world size, batch size or ``num_workers``
enters it. Per epoch:

1. the shards are permuted (a keyed Feistel permutation of ``range(S)``);
2. the shuffled shards, laid end to end, are cut into *blocks* at shard boundaries: a block is the
   run of shards whose first row falls in the same window ``[k*B, (k+1)*B)`` of the epoch stream
   (``B = shuffle_block``), so a block holds about ``B`` rows, or one shard larger than ``B``;
3. the rows inside each block are permuted (keyed by seed, epoch and block).

Worked, with 4 shards of 3, 5, 2 and 4 rows and B = 6 (seed 0, epoch 0): the shard order
[1, 0, 3, 2] puts the shards at stream offsets 0, 5, 8, 12; shards 1 and 0 start in [0, 6), shard 3
in [6, 12), shard 2 in [12, 18), so the blocks are positions [0, 8), [8, 12) and [12, 14), each
shuffled within itself (``tests/shards/test_blocks.py`` pins these values).

Position -> block by binary search over the block table, then -> (shard, row) by binary search
over the shard table: O(log S) per position after an O(S) table per epoch; memory O(S), never O(N).
"""

from __future__ import annotations

import numpy as np

from shufflepoint._order.feistel import FeistelOrder, _splitmix64

NAME = "blocks"
VERSION = 1
DEFAULT_SHUFFLE_BLOCK = 1 << 16
_M64 = (1 << 64) - 1
_SHARDS_TAG, _BLOCK_TAG = 0x5A4D5348, 0xB10C5EED  # keep the shard and in-block keys apart
_CACHED_BLOCKS = 8  # in-block permutations kept: a chunk of positions touches one or two blocks


def _sub_seed(seed: int, tag: int, index: int = 0) -> int:
    return _splitmix64((_splitmix64(seed & _M64) ^ tag ^ _splitmix64(index & _M64)) & _M64)


def checked_positions(positions: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Epoch positions as int64 (and flattened); IndexError naming the field when one is outside [0, n)."""
    positions = np.asarray(positions, dtype=np.int64)
    flat = positions.reshape(-1)
    if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= n):
        raise IndexError(f"positions: expected each in [0, {n}), found {int(flat.min())}..{int(flat.max())}")
    return positions, flat


class BlockOrder:
    """A permutation of range(sum(rows)) for one (seed, epoch), built from rows per shard.

    ``rows[s]`` is the number of rows of shard s in the dataset's own order; the dataset index
    of row r of shard s is ``sum(rows[:s]) + r``. ``take`` maps epoch positions to dataset indices.

    >>> order = BlockOrder([3, 5, 2, 4], seed=0, epoch=0, shuffle_block=6)
    >>> sorted(order.take(np.arange(14)).tolist()) == list(range(14))
    True
    """

    name = NAME
    version = VERSION

    def __init__(self, rows: np.ndarray | list[int], seed: int, epoch: int, shuffle_block: int) -> None:
        rows = np.asarray(rows, dtype=np.int64)
        if rows.ndim != 1 or (rows < 0).any():
            raise ValueError("rows: expected a 1-D array of row counts >= 0, one per shard")
        if shuffle_block < 1:
            raise ValueError(f"shuffle_block: found {shuffle_block}, expected an int >= 1")
        self.n = int(rows.sum())
        self.seed, self.epoch, self.shuffle_block = seed, epoch, shuffle_block
        dataset_start = np.concatenate(([0], np.cumsum(rows)[:-1])) if rows.size else rows
        shard_order = FeistelOrder(int(rows.size), _sub_seed(seed, _SHARDS_TAG), epoch)
        shuffled = shard_order.take(np.arange(rows.size, dtype=np.int64)) if rows.size else rows
        kept = shuffled[rows[shuffled] > 0]  # empty shards take no place in the stream
        lengths = rows[kept]
        # Per shard in stream order: where it starts in the epoch stream and in the dataset.
        self._stream_start = np.concatenate(([0], np.cumsum(lengths)[:-1])) if kept.size else kept
        self._dataset_start = dataset_start[kept] if kept.size else kept
        window = self._stream_start // shuffle_block
        first = np.flatnonzero(np.concatenate(([True], window[1:] != window[:-1]))) if kept.size else kept
        self._block_start = self._stream_start[first]
        self._block_length = np.diff(np.concatenate((self._block_start, [self.n])))
        self._blocks: dict[int, FeistelOrder] = {}

    @property
    def blocks(self) -> int:
        """The number of blocks this epoch."""
        return int(self._block_start.size)

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
            found = FeistelOrder(length, _sub_seed(self.seed, _BLOCK_TAG, block), self.epoch)
            self._blocks[block] = found
        return found

    def index(self, position: int) -> int:
        return int(self.take(np.array([position], dtype=np.int64))[0])

    def take(self, positions: np.ndarray) -> np.ndarray:
        """Dataset indices (int64) at the given epoch positions (int64, each in [0, n))."""
        positions, flat = checked_positions(positions, self.n)
        block = np.searchsorted(self._block_start, flat, side="right") - 1
        stream = np.empty_like(flat)
        for b in np.unique(block).tolist():
            where = block == b
            start = self._block_start[b]
            stream[where] = start + self._block_order(b).take(flat[where] - start)
        shard = np.searchsorted(self._stream_start, stream, side="right") - 1
        found: np.ndarray = (self._dataset_start[shard] + (stream - self._stream_start[shard])).reshape(positions.shape)
        return found
