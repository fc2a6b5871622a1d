"""Many small ``feistel`` orders at once: element i is ``FeistelOrder(sizes[i], keys[i], epoch).take(offsets[i])``.

A scheduled ``Mixture`` read by a loader shuffles every global batch by its own keyed Feistel order
(``_shards/corpora/mixture/scheduled.py``). A rank's chunk of 8,192 positions spans thousands of global batches
when they are small (8 rows: one rank, batch 8), and an order object per global batch costs ~20 us of
Python each; here the same arithmetic runs on arrays of per-element round keys instead, in one pass per
distinct size (a global batch, and an epoch's short last one): the same values as ``FeistelOrder``
(tested element by element), at numpy speed.

Words: docs/glossary.md (order, block, chunk, global batch).
"""

from __future__ import annotations

import numpy as np

from shufflepoint._order.distinct import distinct
from shufflepoint._order.feistel import _C1, _C2, MIN_WIDTH, ROUNDS

_U64 = np.uint64
_SPLITMIX = (_U64(0x9E3779B97F4A7C15), _U64(0xBF58476D1CE4E5B9), _U64(0x94D049BB133111EB))
_M32 = _U64((1 << 32) - 1)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """``feistel._splitmix64`` on a uint64 array (numpy's uint64 arithmetic wraps like the mask)."""
    with np.errstate(over="ignore"):
        x = x + _SPLITMIX[0]
        x = (x ^ (x >> _U64(30))) * _SPLITMIX[1]
        x = (x ^ (x >> _U64(27))) * _SPLITMIX[2]
    found: np.ndarray = x ^ (x >> _U64(31))
    return found


def sub_seeds(seed: np.ndarray | int, tag: int, index: np.ndarray) -> np.ndarray:
    """``blocks._sub_seed(seed, tag, index)`` element by element (uint64 arrays; ``seed`` may be one int)."""
    mixed = splitmix64(np.asarray(seed, dtype=np.uint64))
    return splitmix64(mixed ^ _U64(tag) ^ splitmix64(index))


def take_many(offsets: np.ndarray, pieces: np.ndarray, sizes: np.ndarray, keys: np.ndarray, epoch: int) -> np.ndarray:
    """``FeistelOrder(sizes[p], keys[p], epoch).take(offsets[i])`` with ``p = pieces[i]``, for every i (int64
    out). ``sizes`` and ``keys`` are per piece (each size in [1, 2**32]): the round keys are derived once a
    piece, and one pass runs per Feistel *width* (at most 33), not per size: a ``blocks`` epoch's thousands
    of blocks of different lengths (``which`` at 16,384 ranks) are a handful of passes."""
    offsets, pieces = np.asarray(offsets, dtype=np.int64), np.asarray(pieces, dtype=np.int64)
    sizes, keys = np.asarray(sizes, dtype=np.int64), np.asarray(keys, dtype=np.uint64)
    out = np.empty(offsets.shape, dtype=np.int64)
    widths = _widths(sizes)
    per_element = widths[pieces]
    for width in distinct(widths).tolist():
        where = per_element == width
        same = np.flatnonzero(widths == width)  # the pieces of this width, renumbered 0..
        local = np.searchsorted(same, pieces[where])
        out[where] = _take_one_width(offsets[where], local, int(width), sizes[same], keys[same], epoch)
    return out


def _widths(sizes: np.ndarray) -> np.ndarray:
    """``FeistelOrder``'s domain width per size: ``max(MIN_WIDTH, (n - 1).bit_length())``, exactly (integers)."""
    below = np.maximum(sizes - 1, 0)
    width = np.zeros(sizes.shape, dtype=np.int64)
    for bit in range(33):
        width += below >= (1 << bit)
    return np.maximum(width, MIN_WIDTH)


def _take_one_width(offsets: np.ndarray, pieces: np.ndarray, width: int, sizes: np.ndarray, keys: np.ndarray,
                    epoch: int) -> np.ndarray:
    first_high, first_low = width - width // 2, width // 2
    splits = [(first_high, first_low) if i % 2 == 0 else (first_low, first_high) for i in range(ROUNDS)]
    base = splitmix64(splitmix64(keys) ^ _U64(epoch & ((1 << 64) - 1)))  # one per piece
    with np.errstate(over="ignore"):
        round_keys = [(splitmix64(base + _U64(i)) & _M32).astype(np.uint32) for i in range(ROUNDS + 1)]
    pivots = (splitmix64(base ^ _U64(0x5EED)) % sizes.astype(np.uint64)).astype(np.int64)
    bound = sizes.astype(np.uint64)[pieces]  # each element's own size

    def encrypt(values: np.ndarray, at: np.ndarray) -> np.ndarray:
        right = (values & _U64((1 << first_low) - 1)).astype(np.uint32)
        left = (values >> _U64(first_low)).astype(np.uint32)
        with np.errstate(over="ignore"):
            for (high, _low), key in zip(splits, round_keys[:ROUNDS], strict=True):
                h = right ^ key[at]
                h = h * np.uint32(_C1)
                h ^= h >> np.uint32(15)
                h = h * np.uint32(_C2)
                h >>= np.uint32(32 - high)
                left, right = right, h ^ left
        found: np.ndarray = (left.astype(np.uint64) << _U64(splits[-1][0])) | right
        return found

    values = encrypt(offsets.astype(np.uint64), pieces)
    outside = np.flatnonzero(values >= bound)
    while outside.size:  # cycle walking, each element with its piece's keys and size
        values[outside] = encrypt(values[outside], pieces[outside])
        outside = outside[values[outside] >= bound[outside]]
    x = values.astype(np.int64)
    n = bound.astype(np.int64)
    partner = pivots[pieces] - x
    partner[partner < 0] += n[partner < 0]
    m = np.maximum(x, partner).astype(np.uint32)  # n <= 2**32: the high half is 0
    with np.errstate(over="ignore"):
        h = m ^ round_keys[ROUNDS][pieces]
        h = h * np.uint32(_C1)
        h ^= h >> np.uint32(15)
        h = h * np.uint32(_C2)
    found: np.ndarray = np.where(h >= np.uint32(1 << 31), partner, x)
    return found
