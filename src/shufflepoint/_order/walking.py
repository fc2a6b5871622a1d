"""Cycle walking, shared by the keyed orders (Black & Rogaway, 2002).

An order encrypts positions into a domain [0, D) with D >= n; re-encrypting each value that lands
in [n, D) until it falls below n restricts the bijection of [0, D) to one of [0, n). Small domains
are encrypted whole once and walked by table lookups; larger ones chunk by chunk, by vectorised
passes while many values are outside and then one by one through the order's scalar path.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

CHUNK = 1 << 16  # elements per vectorised pass: keeps the working set in L2
SCALAR_WALK = 8  # this few walkers left in a chunk: walk them one by one (a numpy pass costs ~50 calls)

Encrypt = Callable[[np.ndarray], np.ndarray]  # uint64 values of the domain -> their encryption (uint64)


def walk_table(step: np.ndarray, n: int) -> np.ndarray:
    """The order of [0, n) from ``step`` (int64), the encryption of every value of the domain."""
    values: np.ndarray = step[:n].copy()
    outside = np.flatnonzero(values >= n)
    while outside.size:
        walked = step[values[outside]]
        values[outside] = walked
        outside = outside[walked >= n]
    return values


def walked_take(positions: np.ndarray, n: int, encrypt: Encrypt, walk_one: Callable[[int], int],
                finish: Callable[[np.ndarray, np.ndarray], None]) -> np.ndarray:
    """Each position (int64, in [0, n)) encrypted and walked into [0, n); ``walk_one(x)`` walks one
    value x >= n in plain integers; ``finish(values, out)`` writes a chunk's values (int64) to ``out``."""
    out: np.ndarray = np.empty(positions.shape, dtype=np.int64)
    flat_in, flat_out = positions.reshape(-1), out.reshape(-1)
    bound = np.uint64(n)
    for start in range(0, flat_in.size, CHUNK):
        values = encrypt(flat_in[start : start + CHUNK].view(np.uint64))
        outside = np.flatnonzero(values >= bound)
        while outside.size > SCALAR_WALK:
            walked = encrypt(values[outside])
            values[outside] = walked
            outside = outside[walked >= bound]
        for i in outside.tolist():  # the last few walkers: the scalar path, the same arithmetic
            values[i] = walk_one(int(values[i]))
        finish(values.view(np.int64), flat_out[start : start + CHUNK])
    return out


def table_inverse(table: np.ndarray) -> np.ndarray:
    """The inverse of a whole order held as a table: ``inverse[table[p]] == p``."""
    inverse = np.empty_like(table)
    inverse[table] = np.arange(table.size, dtype=np.int64)
    return inverse


def walked_positions(indices: np.ndarray, n: int, decrypt: Encrypt) -> np.ndarray:
    """The inverse of ``walked_take`` before its ``finish``: each value (int64, in [0, n)) decrypted
    and walked back into [0, n). Cycle walking is undone by walking the other way: the values met
    between a position and its index are all >= n, in both directions."""
    values = decrypt(np.asarray(indices, dtype=np.int64).reshape(-1).view(np.uint64))
    bound = np.uint64(n)
    outside = np.flatnonzero(values >= bound)
    while outside.size:
        walked = decrypt(values[outside])
        values[outside] = walked
        outside = outside[walked >= bound]
    found: np.ndarray = values.view(np.int64).reshape(np.shape(indices))
    return found


class WalkedInverse:
    """``positions_of`` for an order made by cycle walking: from its inverse table once the order was
    read whole (small domains), else each index decrypted and walked back (``walked_positions``).

    >>> from shufflepoint._order.radix_feistel import RadixFeistelOrder
    >>> order = RadixFeistelOrder(100_000, seed=1, epoch=2)
    >>> int(order.positions_of(order.take(np.array([12_345])))[0])
    12345
    """

    n: int
    _table: np.ndarray | None
    _inverse: np.ndarray | None

    def _small_table(self) -> np.ndarray:
        raise NotImplementedError

    def _decrypt(self, values: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _unwalked(self, indices: np.ndarray) -> np.ndarray:
        """What is walked back: the indices, unless the order adds a round outside the walk."""
        return indices

    def positions_of(self, indices: np.ndarray) -> np.ndarray:
        """The inverse of ``take``: the position (int64) of each sample index (int64, in [0, n))."""
        indices = np.asarray(indices, dtype=np.int64)
        if self._table is not None:  # the order was read whole already: invert its table
            if self._inverse is None:
                self._inverse = table_inverse(self._small_table())
            found: np.ndarray = self._inverse[indices]
            return found
        return walked_positions(self._unwalked(indices), self.n, self._decrypt)
