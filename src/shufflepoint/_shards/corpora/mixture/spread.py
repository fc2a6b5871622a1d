"""How order version 7 places a window's sources among a part's positions: spread evenly, each part turned.

A part's piece of a window holds ``c_s`` slots of each source s (``stretches.py``'s counts; L in all). Version 6
shuffles them (a keyed Feistel permutation of the piece), so a global batch edge inside a window (a restart on a
global batch that is not a multiple of the grid, read interleaved: ``global_batch.py``) reads each part's share of
the window only to within a random few rows, and the parts' errors add up: about 2 x sqrt(parts) rows off a
source's share (issue 43, item 0). Version 7 lays the piece's slots in a *spread*: element e of source s is due at
``(2e + 1) L / (2 c_s)``, floored (the Sainte-Lague order: every prefix of the spread holds each source within a
row of its share for two sources, two for more), and part r reads it from offset ``(h_k + floor(v(r) L)) mod L``
on, round (h_k keyed per epoch and window, the same for every part; v(r) the base-2 radical inverse of r,
``radical_inverse``). The parts' starting points lie evenly over the piece, for the first m parts whatever m (an
edge inside a round of the interleave) and for all of them, so where one part has read a source's element early
others read theirs later: the parts' errors cancel rather than add. The 2 x 2 -> 1 x 3 resize of issue 43 (global
batch 16 -> 12): each source within 1 row of the schedule's count at every global batch, where version 6 was up to
4 off; at every prefix of the interleave, 2-4 sources: 2-3 rows on 2-8 ranks, 5-7 on 16-256, where version 6 grew as
2 x sqrt(ranks) (9 on 16, 29 on 256). The slots stay the part's own, and so its rows: a part reads its element e
as its slot ``held + e`` of the source.

Worked: a piece of 4 slots, 3 of source 0 and 1 of source 1: due times 2/3, 2, 10/3 for source 0 and 2 for source 1
(floored: 0, 2, 3 and 2), so the spread is 0, 0, 1, 0 (a tie at 2: the lower source first), elements (0, 0),
(0, 1), (1, 0), (0, 2); part 1 (v = 1/2) with h = 0 starts at offset 2: sources 1, 0, 0, 0.

Words: docs/glossary.md (spread, window, part, slot, interleave).
"""

from __future__ import annotations

import numpy as np

_KEPT = 256  # spreads kept per order: one per distinct count vector (a few per run of windows)


def spread(counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(source, element) at each offset of a piece holding ``counts[s]`` slots of each source s, in the Sainte-Lague
    order: element e of s due at ``(2e + 1) L / (2 counts[s])``, ties to the lower source (integers: exact).

    >>> [a.tolist() for a in spread(np.array([3, 1]))]
    [[0, 0, 1, 0], [0, 1, 0, 2]]
    """
    counts = np.asarray(counts, dtype=np.int64)
    length = int(counts.sum())
    source = np.repeat(np.arange(counts.size, dtype=np.int64), counts)
    element = np.arange(length, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    due = ((2 * element + 1) * length) // (2 * counts[source])  # floor: exact, and ties go to the lower source
    order = np.lexsort((source, due))
    return source[order], element[order]


class Spreads:
    """The spreads of the count vectors an order meets, kept (``_KEPT`` at most)."""

    def __init__(self) -> None:
        self._kept: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}

    def of(self, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        key = np.asarray(counts, dtype=np.int64).tobytes()
        found = self._kept.get(key)
        if found is None:
            if len(self._kept) >= _KEPT:
                self._kept.pop(next(iter(self._kept)))
            found = self._kept[key] = spread(counts)
        return found

    def at(self, sizes: np.ndarray, turns: np.ndarray, into: np.ndarray, piece: np.ndarray) -> tuple[np.ndarray,
                                                                                                   np.ndarray]:
        """(source, element) at offset ``into[i]`` of piece ``piece[i]``, whose counts are ``sizes[piece[i]]`` and
        which is read from offset ``turns[piece[i]]`` of its spread on, round."""
        lengths = sizes.sum(axis=1)
        vectors, which = np.unique(sizes, axis=0, return_inverse=True)
        which = which.reshape(-1)
        offset = (into + turns[piece]) % lengths[piece]
        source, element = np.empty_like(into), np.empty_like(into)
        for v in range(vectors.shape[0]):
            where = which[piece] == v
            laid, elements = self.of(vectors[v])
            source[where], element[where] = laid[offset[where]], elements[offset[where]]
        return source, element


def radical_inverse(parts: np.ndarray) -> np.ndarray:
    """Each part's place in [0, 1): its number's 32 bits reversed, over 2**32 (van der Corput's base-2 sequence):
    the first m parts' places lie evenly over [0, 1) for every m, and all of W0 = 2**j parts' exactly at i / W0.

    >>> (radical_inverse(np.arange(4)) * 4).tolist()
    [0.0, 2.0, 1.0, 3.0]
    """
    parts = np.asarray(parts, dtype=np.uint64) & np.uint64(0xFFFFFFFF)
    found = np.zeros_like(parts)
    for bit in range(32):
        found |= ((parts >> np.uint64(bit)) & np.uint64(1)) << np.uint64(31 - bit)
    placed: np.ndarray = found.astype(np.float64) / 2.0**32  # exact: 32 bits in a float64
    return placed


def turns(keys: np.ndarray, parts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Where each piece's part starts reading its spread: ``(h + floor(v(r) L)) mod L`` with h = ``keys mod L`` (a
    window's key, the same for its parts), v(r) the part's ``radical_inverse`` and L the piece's length."""
    lengths = np.maximum(np.asarray(lengths, dtype=np.int64), 1)
    h = (np.asarray(keys, dtype=np.uint64) % lengths.astype(np.uint64)).astype(np.int64)
    found: np.ndarray = (h + np.floor(radical_inverse(parts) * lengths).astype(np.int64)) % lengths
    return found
