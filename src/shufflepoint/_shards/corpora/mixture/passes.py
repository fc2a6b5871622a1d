"""A source of a ``Mixture`` under the ``spans`` deal, read in whole passes on any world (orders 5 and 6).

A source of L rows is read pass after pass: the mixture's slots of the source, counted over the run in its
order (global batch after global batch, and in one the parts in turn: ``stretches.py``), are its
*stream*, and slot q is row ``x = q - p * L`` of pass ``p = q // L``. Which row that is depends on
(seed, source, p, x) only, never on the world; the world decides who reads it:

- the *arrangement*: the source's rows in one fixed order (a ``Shards`` source's shards in the seed's order,
  a ``Packed`` source's rows, any other dataset's rows in a keyed order), cut into *blocks* of b rows
  (``shuffle_block``), the last one shorter;
- pass p reads its K blocks in a spread order, the last block last: rank i < K - 1 is block
  ``(o_p + i * g) mod (K - 1)``, g the stride nearest (K - 1) / golden ratio that is prime to K - 1 and o_p
  keyed per pass, so that any first m blocks of a pass lie about evenly along the arrangement; each block's
  rows in a keyed order of the pass. Row x of pass p is row ``x - i * b`` of rank ``i = min(x // b, K - 1)``;
- an epoch reads the slots ``[Q0, Q0 + count)`` of the stream (Q0: the slots of the epochs before), so of
  pass p the rows ``[x0, x1)``: its *portion*, the same on any world. Every pass is read whole: the rows of a
  pass before any row of the next, exactly at each global batch edge of a loader on its grid and at each
  epoch's end, whatever the worlds that read them;
- the epoch's *parts* (``stretches.py``) share each portion. Its blocks are laid in the
  arrangement's order, end to end (a block the portion reads whole by its rows in the arrangement's order,
  one it reads in part by those rows in their pass order), and part r takes the next ``P_r`` of them (its
  slots of the source in that pass, ``share``): about its own stretch of the arrangement, every epoch, since
  its slots are about the same share each epoch and the portion's blocks are spread (an epoch that reads a
  source once reads every block whole: each part the same rows every epoch). It reads its share block by
  block, in a keyed order of its blocks, a whole block's rows in a keyed order of its piece.

Worked, 10 rows in blocks of 3 (K = 4: blocks of 3, 3, 3 and 1 rows), g = 2 (the stride for K - 1 = 3), a
pass whose rotation is 1: ranks 0-3 are blocks 1, 0, 2, 3, so pass positions 0-2 are block 1's rows (in the
pass's order inside it), 3-5 block 0's, 6-8 block 2's, 9 block 3's. An epoch reading positions [2, 7) of it
reads the last row of block 1, all of block 0 and the first of block 2: laid in the arrangement's order,
block 0 (3 rows), block 1 (1), block 2 (1); two parts of 3 and 2 slots take block 0, and blocks 1 and 2
(seed 1, pass 4: ``tests/shards/test_passes.py`` pins these values).

A part's share touches its edge blocks and those of its neighbours' shares that the portion's edges fall in:
the spread puts a few different blocks at a part's edges from epoch to epoch, where the order before (each
part its own fixed stretch, pass after pass) kept them; it did not keep the passes (a part's stretch of a
source is never exactly its share of the slots, and another world began the parts' streams anew).

Words: docs/glossary.md (source, pass, block, stretch order).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shufflepoint._order.blocks import _M64, _sub_seed
from shufflepoint._order.feistel import FeistelOrder
from shufflepoint._order.feistel_many import sub_seeds, take_many

_ROTATION_TAG, _ROWS_TAG, _SHARE_TAG = 0x524F5441, 0x524F5753, 0x53484152
_GOLDEN = (math.sqrt(5) - 1) / 2
_CACHED = 64
_WIDEST = 1 << 32  # take_many's largest block; a longer one is taken alone


def stride(count: int) -> int:
    """The stride of a pass's spread order over ``count`` blocks: the integer nearest ``count`` / golden ratio
    that is prime to ``count`` (1 for one block or two).

    >>> stride(3), stride(10), stride(100)
    (2, 7, 61)
    """
    if count <= 2:
        return 1
    target = round(count * _GOLDEN)
    for distance in range(count):
        for found in (target - distance, target + distance):
            if 1 <= found < count and math.gcd(found, count) == 1:
                return found
    return 1


@dataclass(frozen=True)
class Portion:
    """The rows an epoch reads of one pass, block by block in the arrangement's order: block ``blocks[j]``'s rows
    ``first[j] .. first[j] + rows[j] - 1`` in the pass's order inside it, at ``starts[j]`` of the portion."""

    blocks: np.ndarray
    first: np.ndarray
    rows: np.ndarray
    starts: np.ndarray


@dataclass(frozen=True)
class Share:
    """A part's share of a portion, in the order it reads it: pieces from ``starts`` on, each a block's rows
    ``first .. first + rows - 1``: of the arrangement where the portion reads the block ``whole``, else of the
    block's pass order."""

    blocks: np.ndarray
    first: np.ndarray
    rows: np.ndarray
    whole: np.ndarray
    starts: np.ndarray


class SourcePasses:
    """One source's passes: its blocks, each pass's order of them, an epoch's portion of a pass and a part's
    share of it, as arrangement positions (the caller maps those to the source's rows)."""

    def __init__(self, length: int, block: int, seed: int) -> None:
        self.length, self.block, self.seed = length, block, seed & _M64
        self.blocks = -(-length // block)
        self._stride = stride(self.blocks - 1)
        self._portions: dict[tuple[int, int, int], Portion] = {}
        self._shares: dict[tuple[int, int, int, int, int, int], Share] = {}

    def _rotation(self, p: int) -> int:
        return _sub_seed(self.seed, _ROTATION_TAG, p) % max(self.blocks - 1, 1)

    def block_of_rank(self, p: int, ranks: np.ndarray) -> np.ndarray:
        """The blocks pass p reads i-th, for each rank i: the spread order, the last block last."""
        ranks = np.asarray(ranks, dtype=np.int64)
        spread = self.blocks - 1
        if spread <= 0:
            return np.zeros_like(ranks)
        found: np.ndarray = np.where(ranks >= spread, spread,
                                     (self._rotation(p) + ranks % spread * self._stride) % spread)
        return found

    def _block_rows(self, blocks: np.ndarray) -> np.ndarray:
        found: np.ndarray = np.minimum(self.block, self.length - blocks * self.block)
        return found

    def portion(self, p: int, x0: int, x1: int) -> Portion:
        """Rows ``[x0, x1)`` of pass p (0 <= x0 < x1 <= length), laid block by block in the arrangement's order."""
        key = (p, x0, x1)
        found = self._portions.get(key)
        if found is None:
            if len(self._portions) >= _CACHED:
                self._portions.pop(next(iter(self._portions)))
            last = self.blocks - 1
            ranks = np.arange(min(x0 // self.block, last), min((x1 - 1) // self.block, last) + 1, dtype=np.int64)
            opens = ranks * self.block
            closes = np.where(ranks == last, self.length, opens + self.block)
            first = np.maximum(opens, x0) - opens
            rows = np.minimum(closes, x1) - opens - first
            blocks = self.block_of_rank(p, ranks)
            laid = np.argsort(blocks, kind="stable")
            rows = rows[laid]
            starts = np.concatenate(([0], np.cumsum(rows)[:-1])).astype(np.int64)
            found = self._portions[key] = Portion(blocks[laid], first[laid], rows, starts)
        return found

    def share(self, p: int, x0: int, x1: int, start: int, size: int, part: int) -> Share:
        """Part ``part``'s share of the portion ``[x0, x1)`` of pass p: its rows ``start .. start + size - 1``
        (size >= 1), its blocks in a keyed order."""
        key = (p, x0, x1, start, size, part)
        found = self._shares.get(key)
        if found is None:
            if len(self._shares) >= _CACHED:
                self._shares.pop(next(iter(self._shares)))
            portion = self.portion(p, x0, x1)
            lo = int(np.searchsorted(portion.starts, start, side="right")) - 1
            hi = int(np.searchsorted(portion.starts, start + size - 1, side="right"))
            starts, rows, blocks = portion.starts[lo:hi], portion.rows[lo:hi], portion.blocks[lo:hi]
            skipped = np.maximum(start - starts, 0)
            kept = np.minimum(starts + rows, start + size) - starts - skipped
            whole = rows == self._block_rows(blocks)  # then first is 0: the part's rows of it in the arrangement
            key_of = _sub_seed(_sub_seed(_sub_seed(self.seed, _SHARE_TAG, p), _SHARE_TAG, part), _SHARE_TAG, x0)
            order = FeistelOrder(hi - lo, key_of, 0).take(np.arange(hi - lo, dtype=np.int64))
            kept = kept[order]
            read_from = np.concatenate(([0], np.cumsum(kept)[:-1])).astype(np.int64)
            found = self._shares[key] = Share(blocks[order], (portion.first[lo:hi] + skipped)[order], kept,
                                              whole[order], read_from)
        return found

    def positions(self, p: int, share: Share, slots: np.ndarray, part: int) -> np.ndarray:
        """Arrangement positions of part's share's ``slots`` (each in [0, its size)), read in its order: a piece
        of a whole block in a keyed order of the piece, a piece of a block read in part in the pass's order."""
        piece = np.searchsorted(share.starts, slots, side="right") - 1
        into = slots - share.starts[piece]
        whole = share.whole[piece]
        block_keys = sub_seeds(self.seed, _ROWS_TAG, share.blocks.astype(np.uint64))
        offsets = np.empty_like(slots)
        if whole.any():  # the piece's own rows, in a keyed order of them
            keys = sub_seeds(block_keys, _SHARE_TAG, np.full(share.blocks.size, part, dtype=np.uint64))
            offsets[whole] = share.first[piece[whole]] + self._take(into[whole], piece[whole], share.rows, keys, p)
        if not whole.all():  # the rows of the block's pass order the portion reads
            part_of = ~whole
            offsets[part_of] = self._take(share.first[piece[part_of]] + into[part_of], piece[part_of],
                                          self._block_rows(share.blocks), block_keys, p)
        found: np.ndarray = share.blocks[piece] * self.block + offsets
        return found

    @staticmethod
    def _take(offsets: np.ndarray, pieces: np.ndarray, sizes: np.ndarray, keys: np.ndarray, p: int) -> np.ndarray:
        """``FeistelOrder(sizes[j], keys[j], p).take(offsets)`` with j = pieces[i], element by element."""
        if int(sizes.max()) <= _WIDEST:
            found: np.ndarray = take_many(offsets, pieces, sizes, keys, p)
            return found
        found = np.empty_like(offsets)  # a piece past 2**32 rows: its own order
        for j in np.unique(pieces).tolist():
            where = pieces == j
            found[where] = FeistelOrder(int(sizes[j]), int(keys[j]), p).take(offsets[where])
        return found
